"""/metrics: refresh the gauges' snapshot of every queue's counts, then render the text."""

from __future__ import annotations

import asyncio

from service.queue import JobQueues
from service.telemetry import Telemetry


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
    return telemetry.prometheus_text()
