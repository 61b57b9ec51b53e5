"""The stalled sweep loop: every interval, one bounded sweep of every known queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from redis.exceptions import RedisError

from service.background import stop_task
from service.queue import JobQueues, SweepReport
from service.scripts import WriteNotConfirmed

log = logging.getLogger(__name__)

MAX_BATCHES_PER_QUEUE = 10  # per tick, so one huge backlog cannot starve the other queues


class Sweeper:
    def __init__(self, queues: JobQueues, interval_ms: int) -> None:
        self._queues = queues
        self._interval_s = interval_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.runs = 0
        self.totals = SweepReport()
        self.last_duration_s = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="emq-sweeper")

    async def stop(self) -> None:
        await stop_task(self._task, self._stopping)

    async def sweep_once(self) -> SweepReport:
        started = time.perf_counter()
        report = SweepReport()
        for queue in await self._queues.queue_names():
            report += await self._queues.sweep_queue(queue, MAX_BATCHES_PER_QUEUE)
        self.runs += 1
        self.totals += report
        self.last_duration_s = time.perf_counter() - started
        self._queues.telemetry.sweep_duration.record(self.last_duration_s)
        return report

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                report = await self.sweep_once()
                if report.reclaimed or report.dead_lettered:
                    log.info(
                        "sweep reclaimed %d expired leases, dead-lettered %d",
                        report.reclaimed,
                        report.dead_lettered,
                    )
            except (RedisError, OSError, WriteNotConfirmed) as error:
                log.warning("sweep skipped: %s", error)
            except Exception:
                # The loop must outlive any surprise: without it expired leases stay in the ledger.
                log.exception("sweep failed; trying again next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval_s)
