"""What the overview shows of each queue: counts, pause, the last hour's throughput and failures,
its workers and the age of the job next in line. A few read calls per queue, run together."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from echomq_http.api.schemas.inspection import HistoryMinute, QueueView
from echomq_http.core.queue import JobQueues

HOUR_MINUTES = 60


@dataclass(frozen=True, slots=True)
class QueueSummary:
    view: QueueView
    minutes: list[HistoryMinute]  # the last hour, oldest first, the current minute last
    workers: int  # holding jobs or with a live session
    head_created_at: int | None  # when the job next in line was enqueued (None: none waits)

    @property
    def completed_per_minute(self) -> float:
        return sum(minute.completed for minute in self.minutes) / len(self.minutes)

    @property
    def failed_per_minute(self) -> float:
        return sum(minute.failed for minute in self.minutes) / len(self.minutes)


async def head_created_at(queues: JobQueues, queue: str) -> int | None:
    """The enqueue time of the first job in lease order (one bounded listing call)."""
    chunks, _ = await queues.list_jobs(queue, "waiting", 1, None)
    async for jobs in chunks:
        if jobs:
            return jobs[0].created_at
    return None


async def summarize(queues: JobQueues, queue: str) -> QueueSummary:
    view, minutes, workers, head = await asyncio.gather(
        queues.queue_view(queue),
        queues.history(queue, HOUR_MINUTES),
        queues.workers(queue),
        head_created_at(queues, queue),
    )
    return QueueSummary(view=view, minutes=minutes, workers=len(workers), head_created_at=head)


async def summaries(queues: JobQueues, names: list[str]) -> list[QueueSummary]:
    return list(await asyncio.gather(*(summarize(queues, name) for name in names)))
