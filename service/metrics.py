"""/metrics: what this process has counted, and the queue gauges read from Redis now."""

from __future__ import annotations

import asyncio

from service.exposition import render
from service.queue import JobQueues
from service.telemetry import Telemetry, queue_gauges


async def scrape(queues: JobQueues, telemetry: Telemetry) -> str:
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
    totals = telemetry.totals()
    totals.gauges.update(queue_gauges(telemetry.queue_counts))
    return render(telemetry.families, totals)
