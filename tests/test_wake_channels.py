"""A Cluster's wake hub keeps only the channels long polls wait on lately: without a bound every
queue ever long-polled stayed subscribed, and each rebuild subscribed them all again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from echomq_http.runtime import wakeups as longpoll
from echomq_http.runtime.background import cancel_within
from echomq_http.runtime.wakeups import ShardedWakeHub, WakeHub
from echomq_http.store.keys import keys_of
from tests.support.servers import RedisServer

IDLE_S = 0.05


async def test_channels_nobody_waits_on_lately_are_forgotten_at_a_rebuild() -> None:
    hub = ShardedWakeHub(None, max_waiters=10)  # type: ignore[arg-type]  # the rule alone: no listener runs
    await hub.ensure_subscribed("idle")
    with hub.register("held"):
        await hub.ensure_subscribed("held")
        await asyncio.sleep(2 * IDLE_S)
        await hub.ensure_subscribed("recent")
        hub._idle_channels(IDLE_S)
        # "held" still has a waiter, "recent" was waited on just now; "idle" has neither.
        assert hub.channels == 2
    await asyncio.sleep(2 * IDLE_S)
    hub._idle_channels(IDLE_S)
    assert hub.channels == 0


async def test_a_single_server_hub_hears_a_queue_only_while_it_has_waiters(
    private_valkey: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process nobody waits in gets no message per enqueue (it had one per enqueue, of every
    queue, from a pattern subscription); a waiter is woken by its subscription's confirmation,
    then by each wake-up, and the channel is left CHANNEL_LINGER_S after its last waiter."""
    monkeypatch.setattr(longpoll, "CHANNEL_LINGER_S", 0.2)
    client = Redis.from_url(private_valkey.url)
    hub = WakeHub(client, max_waiters=10)
    hub.start()
    channel = keys_of("q").wake

    async def subscribers() -> int:
        return int(dict(await client.pubsub_numsub(channel))[channel.encode()])

    try:
        await asyncio.sleep(0.2)  # the hub is connected
        assert await client.publish(channel, 1) == 0  # received by nobody
        with hub.register("q") as waiter:
            await hub.ensure_subscribed("q")
            await asyncio.wait_for(waiter.event.wait(), 2)  # the confirmation
            waiter.event.clear()
            assert await subscribers() == 1
            assert await client.publish(channel, 1) == 1
            await asyncio.wait_for(waiter.event.wait(), 2)
        assert await subscribers() == 1  # lingers a moment
        for _ in range(50):
            if await subscribers() == 0:
                break
            await asyncio.sleep(0.05)
        assert await subscribers() == 0
        assert hub.channels == 0
    finally:
        await hub.stop()
        await client.aclose()


async def test_cancel_within_gives_up_on_a_task_that_swallows_its_cancellation() -> None:
    release = asyncio.Event()

    async def swallows() -> None:  # as redis-py can, when a cancellation lands in a read
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    async def obeys() -> None:
        await asyncio.sleep(3600)

    stubborn, willing = asyncio.create_task(swallows()), asyncio.create_task(obeys())
    await asyncio.sleep(0)
    started = asyncio.get_running_loop().time()
    assert await cancel_within([stubborn, willing], 0.2) == {stubborn}
    assert asyncio.get_running_loop().time() - started < 1.0
    assert willing.cancelled()
    release.set()
    await stubborn


class _Node:
    host, port = "127.0.0.1", 1


class _Topology:
    """Where a channel lives, as a Cluster client says; the listeners below are the test's own."""

    class nodes_manager:
        @staticmethod
        async def initialize() -> None:
            return None

    @staticmethod
    def get_node_from_key(channel: str) -> _Node:
        return _Node()


class _Pool:
    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def disconnect(self) -> None:
        self.closed.set()


async def test_a_rebuild_goes_on_when_a_listener_swallows_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listener whose cancellation redis-py swallowed held the rebuild for ever: no channel
    was subscribed again (a Cluster's long polls then waited on their fallback poll alone)."""
    monkeypatch.setattr(longpoll, "LISTENER_STOP_S", 0.2, raising=False)
    hub = ShardedWakeHub(_Topology(), max_waiters=10)  # type: ignore[arg-type]
    rounds: list[list[str]] = []

    async def listen_node(host: str, port: int, channels: list[str]) -> None:
        pool = _Pool()
        task = asyncio.current_task()
        assert task is not None
        getattr(hub, "_pools", {})[task] = pool  # where the hub finds a listener's connection
        rounds.append(channels)
        while not pool.closed.is_set():  # a read that only a closed connection ends
            with contextlib.suppress(asyncio.CancelledError):
                await pool.closed.wait()
        # The connection closed under it: the listener ends, as the real one does on an error.

    hub._listen_node = listen_node  # type: ignore[method-assign]
    hub.start()
    try:
        await hub.ensure_subscribed("first")
        await eventually_true(lambda: len(rounds) == 1)
        await hub.ensure_subscribed("second")  # a new channel: the round is rebuilt
        await eventually_true(lambda: len(rounds) == 2)
        assert sorted(rounds[1]) == sorted(keys_of(queue).wake for queue in ("first", "second"))
    finally:
        await hub.stop()


async def eventually_true(condition: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within the time"
        await asyncio.sleep(0.01)
