"""Start-up checks of the Redis server."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis

from service.backend import UnsuitableServer, check_server, redis_client
from service.config import Settings
from tests.conftest import ValkeyProcess


async def test_a_server_that_may_evict_keys_is_refused(private_valkey: ValkeyProcess) -> None:
    client = redis_client(Settings(redis_url=private_valkey.url))
    try:
        await check_server(client)  # noeviction: accepted
        await client.config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(UnsuitableServer, match="noeviction"):
            await check_server(client)
    finally:
        await client.aclose()


async def test_an_unreachable_server_is_not_fatal_at_start_up(
    private_valkey: ValkeyProcess, caplog: pytest.LogCaptureFixture
) -> None:
    private_valkey.kill()
    client: Redis = redis_client(Settings(redis_url=private_valkey.url, redis_timeout_s=0.5))
    try:
        with caplog.at_level(logging.WARNING, logger="service.backend"):
            await check_server(client)  # no exception: the service starts anyway
    finally:
        await client.aclose()
    # ...and says why it will answer 503 for now, once.
    warnings = [r.getMessage() for r in caplog.records if r.name == "service.backend"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("Redis is not reachable at start-up") and "serving 503" in warnings[0]
