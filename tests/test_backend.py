"""Start-up checks of the Redis server."""

from __future__ import annotations

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


async def test_an_unreachable_server_is_not_fatal_at_start_up(private_valkey: ValkeyProcess) -> None:
    private_valkey.kill()
    client: Redis = redis_client(Settings(redis_url=private_valkey.url, redis_timeout_s=0.5))
    try:
        await check_server(client)
    finally:
        await client.aclose()
