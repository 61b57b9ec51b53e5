"""A job's timeline: its events read back from the queue's event stream, newest entries first,
in bounded pages, until the job's enqueue (or the stream's start, or the bound) is reached."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from echomq_http.events import parse_entry
from echomq_http.queue import JobQueues

ENTRIES_PER_READ = 500
MAX_ENTRIES_READ = 5000  # the bound: a job older than this many script calls shows its last part


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
    read = 0
    while read < MAX_ENTRIES_READ:
        entries = await queues.recent_events(queue, before, ENTRIES_PER_READ)  # newest first
        if not entries:
            return Timeline(list(reversed(found)), complete=True)
        read += len(entries)
        reached_enqueue = False
        for entry_id, fields in entries:
            events = parse_entry(queue, entry_id, fields)
            for event in reversed(events):
                if event.job_id == job_id:
                    found.append(_data(event.frame))
            before = int(entry_id.split(b"-", 1)[1])  # the next read starts below this entry
            if int(fields[b"at"]) < created_at:
                reached_enqueue = True
        if reached_enqueue or len(entries) < ENTRIES_PER_READ:
            return Timeline(list(reversed(found)), complete=True)
    return Timeline(list(reversed(found)), complete=False)
