"""A long poll tries the lease script once at its start and once per wake-up or timer, never
twice in a row: its waiter is registered before the first try (core/leasing.py)."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from echomq_http.config import Settings
from tests.queue.test_idle_queues import script_calls
from tests.support import enqueue, lease_one
from tests.support.servers import RedisServer
from tests.support.service import running_service

SETTLE_S = 0.3
WAIT_MS = 300  # under the waiter's fallback timer (1 s): one try at the start, one at the end


async def test_a_long_poll_that_finds_nothing_tries_twice(private_valkey: RedisServer) -> None:
    redis = Redis.from_url(private_valkey.url)
    with running_service(Settings(redis_url=private_valkey.url)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for name in ("first", "second"):
                await enqueue(http, "polled", name)
            first = await lease_one(http, "polled", lease_ms=60_000)
            # An ack with lease_next first: each script is loaded on its first call, which that
            # call's count would include.
            body = {"lease_id": first["lease_id"], "lease_next": {"worker": "w1", "lease_ms": 60_000}}
            (held,) = (await http.post(f"/v1/queues/polled/jobs/{first['id']}/ack", json=body)).json()["jobs"]
            await asyncio.sleep(SETTLE_S)  # the queue's registration, after its first call, is done
            # A first long poll subscribes the queue's wake channel, whose confirmation makes its
            # waiter look once more (runtime/wakeups.py); the channel then stays subscribed a
            # moment (CHANNEL_LINGER_S), which the polls below are within.
            await http.post("/v1/queues/polled/lease", json={"worker": "w", "wait_ms": WAIT_MS})

            before = await script_calls(redis)
            answer = await http.post("/v1/queues/polled/lease", json={"worker": "w", "wait_ms": WAIT_MS})
            assert answer.json()["jobs"] == []
            # It was three: a try, a second at once after registering the waiter, one at the end.
            assert await script_calls(redis) - before == 2

            before = await script_calls(redis)
            body = {"lease_id": held["lease_id"], "lease_next": {"worker": "w", "wait_ms": WAIT_MS}}
            answer = await http.post(f"/v1/queues/polled/jobs/{held['id']}/ack", json=body)
            assert answer.json()["jobs"] == []
            # It was four: the ack with its first try, then the three of a long poll.
            assert await script_calls(redis) - before == 2
    await redis.aclose()
