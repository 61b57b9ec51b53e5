"""/metrics: what has been counted (by every process of the replica when they share their
totals), the queue gauges read from Redis now, cut down to the queues the token covers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from echomq_http.exposition import render
from echomq_http.queue import JobQueues
from echomq_http.replica_totals import ReplicaTotals
from echomq_http.telemetry import Telemetry, queue_gauges
from echomq_http.totals import only_queues


async def scrape(
    queues: JobQueues,
    telemetry: Telemetry,
    replica: ReplicaTotals | None = None,
    covers: Callable[[str], bool] | None = None,
) -> str:
    """``replica``: the processes' shared totals (None: this process is the replica);
    ``covers``: which queues the token may see (None: every queue)."""
    names = await queues.queue_names()
    views = await asyncio.gather(*(queues.queue_view(name) for name in names))
    telemetry.queue_counts = {
        view.name: {
            "waiting": view.counts.waiting,
            "delayed": view.counts.delayed,
            "active": view.counts.active,
            "completed": view.counts.completed,
            "failed": view.counts.failed,
        }
        for view in views
    }
    totals = replica.read() if replica is not None else telemetry.totals()
    totals.gauges.update(queue_gauges(telemetry.queue_counts))  # the same in every process: not added up
    if covers is not None:
        totals = only_queues(totals, covers)
    return render(telemetry.families, totals)
