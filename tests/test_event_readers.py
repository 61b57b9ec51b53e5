"""The event readers against a real server that goes away: a feed that cannot read backs off,
and stops as soon as nobody follows it (none is left retrying for nobody)."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import RedisError

from echomq_http.config import Settings
from echomq_http.runtime.event_feeds import EventHub
from echomq_http.store.backends import backend_for
from echomq_http.store.connect import redis_client
from tests.support.servers import RedisServer

GONE_WITHIN_S = 1.0


def hub_of(url: str) -> EventHub:
    client = redis_client(Settings(redis_url=url, redis_timeout_s=1.0))
    return EventHub(
        backend_for(client),
        max_subscribers=10,
        buffer_events=100,
        buffer_bytes=64 * 1024,
        keepalive_s=1.0,
        max_queues=10,
        readers=1,
        block_ms=200,
    )


async def followed_within(hub: EventHub, count: int, timeout_s: float) -> int:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while hub.followed != count and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    return hub.followed


async def test_a_feed_that_cannot_read_stops_when_its_subscriber_leaves(
    private_valkey: RedisServer,
) -> None:
    hub = hub_of(private_valkey.url)
    try:
        async with hub.subscribe("q"):
            assert hub.followed == 1
            private_valkey.kill()
            await asyncio.sleep(0.5)  # its reads fail now: the reader backs off
            assert hub.followed == 1  # still followed while someone waits for it
        assert await followed_within(hub, 0, GONE_WITHIN_S) == 0
        # A queue whose start cannot be read is not followed either: 503 for its subscriber.
        with pytest.raises(RedisError):
            async with hub.subscribe("r"):
                pass
        assert hub.followed == 0
    finally:
        await hub.stop()
        await hub.client.aclose()
