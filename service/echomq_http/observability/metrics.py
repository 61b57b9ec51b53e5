"""/metrics: what has been counted (by every process of the replica when they share their
totals), the queue gauges read from Redis now, cut down to the queues the token covers and, of
those, to the first EMQ_METRICS_MAX_QUEUES by name: a scrape reads and renders a bounded number
of queues however many a producer made (emq_queues and emq_queues_listed say how many)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from echomq_http.config import DEFAULT_METRICS_MAX_QUEUES
from echomq_http.core.queue import JobQueues
from echomq_http.observability.exposition import render_in_steps
from echomq_http.observability.replica_totals import ReplicaTotals
from echomq_http.observability.telemetry import QUEUES, QUEUES_LISTED, Telemetry, queue_gauges
from echomq_http.observability.totals import only_queues


async def scrape(
    queues: JobQueues,
    telemetry: Telemetry,
    replica: ReplicaTotals | None = None,
    covers: Callable[[str], bool] | None = None,
    max_queues: int = DEFAULT_METRICS_MAX_QUEUES,
) -> str:
    """``replica``: the processes' shared totals (None: this process is the replica);
    ``covers``: which queues the token may see (None: every queue); ``max_queues``: how many
    of those have series of their own."""
    known = [name for name in await queues.queue_names() if covers is None or covers(name)]
    names = known[:max_queues]
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
    listed = frozenset(names)
    totals = only_queues(totals, listed.__contains__)  # the counters of other queues too
    totals.gauges[QUEUES] = {(): len(known)}
    totals.gauges[QUEUES_LISTED] = {(): len(names)}
    return await render_in_steps(telemetry.families, totals)
