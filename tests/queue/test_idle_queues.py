"""Idle queues cost nothing: the sweeper visits only the queues the due index names."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from echomq_http.config import Settings
from echomq_http.keys import DUE_INDEX
from tests.conftest import ValkeyProcess
from tests.server import running_service
from tests.support import lease_one

IDLE_QUEUES = 200
SWEEP_INTERVAL_MS = 50
WINDOW_S = 1.0  # twenty sweeps


async def script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    commands = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")
    return sum(stats.get(name, {}).get("calls", 0) for name in commands)


async def test_idle_queues_cost_the_sweep_no_script_calls(private_valkey: ValkeyProcess) -> None:
    settings = Settings(redis_url=private_valkey.url, sweep_interval_ms=SWEEP_INTERVAL_MS)
    redis = Redis.from_url(private_valkey.url)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for n in range(IDLE_QUEUES):
                assert (await http.post(f"/v1/queues/idle-{n}/jobs", json={"payload": n})).status_code == 201
            busy = await lease_one(http, "idle-0", lease_ms=60_000)  # one queue has a lease running
            await asyncio.sleep(3 * SWEEP_INTERVAL_MS / 1000)
            before = await script_calls(redis)
            await asyncio.sleep(WINDOW_S)
            during = await script_calls(redis) - before
            # Nothing is due in the window: no sweep runs at all (it was 20 x 200 calls).
            assert during == 0
            # The queue with the lease is in the index, due when the lease expires.
            assert await redis.zscore(DUE_INDEX, "idle-0") == busy["lease_expires_at"]
            assert await redis.zcard(DUE_INDEX) == 1
    await redis.aclose()
