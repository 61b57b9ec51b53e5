"""A Cluster's wake hub keeps only the channels long polls wait on lately: without a bound every
queue ever long-polled stayed subscribed, and each rebuild subscribed them all again."""

from __future__ import annotations

import asyncio

import pytest

from echomq_http.runtime import wakeups as longpoll
from echomq_http.runtime.wakeups import ShardedWakeHub

IDLE_S = 0.05


async def test_channels_nobody_waits_on_lately_are_forgotten_at_a_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(longpoll, "CHANNEL_IDLE_S", IDLE_S)
    hub = ShardedWakeHub(None, max_waiters=10)  # type: ignore[arg-type]  # the rule alone: no listener runs
    await hub.ensure_subscribed("idle")
    with hub.register("held"):
        await hub.ensure_subscribed("held")
        await asyncio.sleep(2 * IDLE_S)
        await hub.ensure_subscribed("recent")
        hub._forget_idle_channels()
        # "held" still has a waiter, "recent" was waited on just now; "idle" has neither.
        assert hub.channels == 2
    await asyncio.sleep(2 * IDLE_S)
    hub._forget_idle_channels()
    assert hub.channels == 0
