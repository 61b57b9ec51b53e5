"""Stopping a background task for sure: redis-py can swallow a cancellation that lands in the
middle of a command, so a task is asked to stop, cancelled, and waited for with a deadline."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

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


async def cancel_within(tasks: Iterable[asyncio.Task[None]], timeout_s: float) -> set[asyncio.Task[None]]:
    """Cancel the tasks and wait for them at most timeout_s (cancelling again midway): the ones
    still running then, whose cancellation redis-py swallowed. Never waits longer."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(2):
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=timeout_s / 2)
    return pending
