"""Stopping a background task for sure: redis-py can swallow a cancellation that lands in the
middle of a command, so a task is asked to stop, cancelled, and waited for with a deadline."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


async def stop_task(task: asyncio.Task[None] | None, stopping: asyncio.Event) -> None:
    if task is None or task.done():
        return
    stopping.set()
    for _ in range(3):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT_S / 3)
        if done:
            return
    log.warning("background task %s did not stop within %.0f s", task.get_name(), STOP_TIMEOUT_S)
