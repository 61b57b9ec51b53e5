"""The stalled sweep loop: every interval, a bounded sweep of each queue the due index names,
the runs of its schedules that are due (echomq_http.core.schedules), and the outcomes in its
outbox for flows' parents in other slots (echomq_http.core.flows).

Queues are visited only when their entry in the due index (echomq_http.store.due_index) says a sweep has
work to do, so quiet queues cost nothing. Once per process start, if the index was never
filled (a deployment from before it existed), every registered queue is swept once, which
puts each into the index.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

from echomq_http.core.flows import Flows
from echomq_http.core.queue import JobQueues, SweepReport
from echomq_http.core.schedules import Schedules
from echomq_http.runtime.background import stop_task
from echomq_http.store.backends import WriteNotConfirmed
from echomq_http.store.keys import DUE_INDEX_FILLED

log = logging.getLogger(__name__)
T = TypeVar("T")

# Per queue per tick, so one huge backlog cannot starve the other queues: steps are short (one
# window of the ledger each), a backlog takes as many as fit in the budget.
MAX_STEPS_PER_QUEUE = 200
QUEUE_BUDGET_S = 0.25
DUE_PAGE = 1000  # queues read from the index at a time
MAX_PAGES_PER_TICK = 10


class Sweeper:
    def __init__(self, queues: JobQueues, schedules: Schedules, interval_ms: int) -> None:
        self._queues = queues
        self._schedules = schedules
        self._flows = Flows(queues)
        self._index = queues.due_index
        self._interval_s = interval_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._index_filled = False
        self.runs = 0
        self.totals = SweepReport()
        self.last_duration_s = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="emq-sweeper")

    async def stop(self) -> None:
        await stop_task(self._task, self._stopping)

    async def sweep_once(self) -> SweepReport:
        started = time.perf_counter()
        if not self._index_filled:
            await self._fill_index()
        report = SweepReport()
        for _ in range(MAX_PAGES_PER_TICK):
            # Earliest first; a swept queue leaves the page (or comes back due "now", behind the
            # others), so a next page holds the queues this one had no room for.
            due = await self._index.due(DUE_PAGE)
            for queue in due:
                swept = await self._queues.sweep_queue(queue, MAX_STEPS_PER_QUEUE, QUEUE_BUDGET_S)
                if swept.schedules_due:
                    fired = await self._after_sweep(queue, "schedules fired", self._schedules.fire_due)
                    swept += fired or SweepReport()
                if swept.outbox:
                    await self._after_sweep(queue, "outbox delivered", self._flows.deliver_outbox)
                if swept.flows_due:
                    await self._after_sweep(queue, "flows cut short finished", self._flows.finish_cut_short)
                report += swept
            if len(due) < DUE_PAGE:
                break
        self.runs += 1
        self.totals += report
        self.last_duration_s = time.perf_counter() - started
        self._queues.telemetry.sweep_duration.record(self.last_duration_s)
        return report

    async def _after_sweep(self, queue: str, what: str, work: Callable[[str], Awaitable[T]]) -> T | None:
        """The work the queue's sweep asked for: its due schedule runs, its outbox for flows'
        parents elsewhere, its flows cut short. A failure is logged and left for the next tick
        (the queue stays due while the work is there), never in the way of other queues' sweeps."""
        try:
            return await work(queue)
        except (RedisError, OSError, WriteNotConfirmed) as error:
            log.warning("queue %r: not %s: %s", queue, what, error)
        except Exception:
            log.exception("queue %r: not %s", queue, what)
        return None

    async def _fill_index(self) -> None:
        """Sweep every registered queue once, unless some process has done so already."""
        client = self._queues.client
        if not await client.exists(DUE_INDEX_FILLED):
            for queue in await self._queues.queue_names():
                await self._queues.sweep_queue(queue, 1)
            await client.set(DUE_INDEX_FILLED, 1)
        self._index_filled = True

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
