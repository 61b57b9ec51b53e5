"""A job's timeline: its events read back from the queue's event stream, newest entries first,
in bounded pages, until the job's enqueue (or the stream's start, or the bound) is reached.
Bounded in bytes as well as entries: a page asks for as many entries as the largest one seen so
far lets fit in READ_BUDGET_BYTES, and the whole read stops after MAX_BYTES_READ."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from echomq_http.core.queue import JobQueues
from echomq_http.runtime.event_feeds import parse_entry

ENTRIES_PER_READ = 500  # at most, for small entries
FIRST_READ_ENTRIES = 32
MAX_ENTRIES_READ = 5000  # the bound: a job older than this many script calls shows its last part
READ_BUDGET_BYTES = 256 * 1024  # per page, judged by the largest entry seen so far
MAX_BYTES_READ = 8 * 1024 * 1024  # per timeline: past this, it shows its last part


@dataclass(frozen=True, slots=True)
class Timeline:
    events: list[dict[str, Any]]  # StreamEvent fields, oldest first
    complete: bool  # the read reached the job's enqueue (else older events were not read)


def _data(frame: bytes) -> dict[str, Any]:
    """An SSE frame's data line, decoded (parse_entry frames every event once, for SSE)."""
    data = frame.split(b"\ndata: ", 1)[1].rstrip(b"\n")
    return msgspec.json.decode(data)  # type: ignore[no-any-return]


async def job_timeline(queues: JobQueues, queue: str, job_id: str, created_at: int) -> Timeline:
    found: list[dict[str, Any]] = []
    before: int | None = None
    read = bytes_read = 0
    largest = READ_BUDGET_BYTES // FIRST_READ_ENTRIES  # a guess, until entries are seen
    while read < MAX_ENTRIES_READ and bytes_read < MAX_BYTES_READ:
        count = max(1, min(ENTRIES_PER_READ, READ_BUDGET_BYTES // largest))
        entries = await queues.recent_events(queue, before, count)  # newest first
        if not entries:
            return Timeline(list(reversed(found)), complete=True)
        read += len(entries)
        reached_enqueue = False
        for entry_id, fields in entries:
            size = len(fields[b"e"])
            bytes_read += size
            largest = max(largest, size)
            events = parse_entry(queue, entry_id, fields)
            for event in reversed(events):
                if event.job_id == job_id:
                    found.append(_data(event.frame))
            before = int(entry_id.split(b"-", 1)[1])  # the next read starts below this entry
            if int(fields[b"at"]) < created_at:
                reached_enqueue = True
        if reached_enqueue or len(entries) < count:
            return Timeline(list(reversed(found)), complete=True)
    return Timeline(list(reversed(found)), complete=False)
