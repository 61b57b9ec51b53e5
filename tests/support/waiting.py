"""Polling a condition until it holds, with a clear failure when it never does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# Long enough for a loaded 2-core runner; a condition that holds returns at once anyway.
CONDITION_TIMEOUT_S = 30.0
POLL_S = 0.05


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float, poll_s: float = POLL_S) -> None:
    """Poll a condition of a server a fixture started; fail clearly if it never holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(poll_s)


async def eventually(
    condition: Callable[[], Awaitable[bool]],
    what: str,
    timeout_s: float = CONDITION_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> None:
    """Poll an async condition until it holds; fail clearly if it never does."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(poll_s)
