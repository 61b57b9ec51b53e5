"""Idle queues cost nothing: the sweeper visits only the queues the due index names."""

from __future__ import annotations

import asyncio
import secrets

import httpx
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from echomq_http.config import Settings
from echomq_http.store.keys import DUE_INDEX, QUEUE_REGISTRY, due_index_key, queue_prefix
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.support import enqueue, eventually, get_job, lease_one
from tests.support.servers import RedisServer
from tests.support.service import running_service

IDLE_QUEUES = 200
SWEEP_INTERVAL_MS = 50
WINDOW_S = 1.0  # twenty sweeps
DELAY_MS = 300
SWEPT_WITHIN_S = 5.0  # well within the registry's re-read (30 s), which was the only way before


async def script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    commands = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")
    return sum(stats.get(name, {}).get("calls", 0) for name in commands)


async def test_idle_queues_cost_the_sweep_no_script_calls(private_valkey: RedisServer) -> None:
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


async def queue_in_a_new_slot(redis_client: Redis | RedisCluster) -> str:
    """A fresh queue name whose due index no registered queue shares. A single server has one
    due index, shared by all: there any fresh name serves."""
    name = f"t-slot-{secrets.token_hex(6)}"
    if not isinstance(redis_client, RedisCluster):
        return name
    known = {due_index_key(known.decode(), True) for known in await redis_client.smembers(QUEUE_REGISTRY)}
    for _ in range(100_000):
        if due_index_key(name, True) not in known:
            return name
        name = f"t-slot-{secrets.token_hex(6)}"
    raise AssertionError(f"every slot already holds a registered queue ({len(known)} due indexes)")


async def test_a_queue_in_a_slot_new_to_the_service_is_swept_at_once(
    client: httpx.AsyncClient, redis_client: Redis | RedisCluster
) -> None:
    """On a Cluster the sweep reads the due index of each slot it knows; a queue the request
    path has just called is known to it at once, even when the registry's size has not changed
    (it was learned only from the registry's size, or after REGISTRY_REFRESH_S)."""
    queue = await queue_in_a_new_slot(redis_client)
    leaving = f"t-leaving-{secrets.token_hex(6)}"
    await redis_client.sadd(QUEUE_REGISTRY, leaving)
    await asyncio.sleep(3 * TEST_SWEEP_INTERVAL_MS / 1000)  # the sweep has read the registry
    try:
        # One queue leaves the registry as the new one joins: its size is what the sweep saw.
        await redis_client.srem(QUEUE_REGISTRY, leaving)
        await enqueue(client, queue, "soon", id="soon", delay_ms=DELAY_MS)

        async def promoted() -> bool:
            return (await get_job(client, queue, "soon"))["state"] == "waiting"

        await eventually(promoted, "the delayed job made waiting by the sweep", timeout_s=SWEPT_WITHIN_S)
    finally:
        keys = [key async for key in redis_client.scan_iter(match=queue_prefix(queue) + "*", count=1000)]
        for key in keys:
            await redis_client.delete(key)
        await redis_client.srem(QUEUE_REGISTRY, queue)
