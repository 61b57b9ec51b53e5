"""Redis going away and coming back: 503 backend_unavailable meanwhile, then it recovers by itself."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from redis.asyncio import Redis

from echomq_http.config import Settings
from tests.support import (
    assert_problem,
    enqueue,
    long_poll,
    wait_for_long_polls,
    wait_for_wake_subscription,
    woken,
)
from tests.support.servers import RedisServer
from tests.support.service import running_service

RECOVERY_DEADLINE_S = 20.0


@pytest.mark.usefixtures("wake_ups_only")
async def test_redis_outage_gives_503_and_service_recovers(private_valkey: RedisServer, queue: str) -> None:
    settings = Settings(redis_url=private_valkey.url, sweep_interval_ms=100, redis_timeout_s=1.0)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            await enqueue(http, queue, "before")
            private_valkey.kill()

            down = await http.post(f"/v1/queues/{queue}/jobs", json={"payload": "during"})
            assert_problem(down, 503, "backend_unavailable")
            assert int(down.headers["retry-after"]) >= 1
            assert_problem(
                await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w"}), 503, "backend_unavailable"
            )
            assert_problem(await http.get("/readyz"), 503, "backend_unavailable")
            assert (await http.get("/healthz")).status_code == 200
            # A new event subscriber or outcome wait answers 503 too, not a request left hanging.
            assert_problem(await http.get(f"/v1/queues/{queue}/events"), 503, "backend_unavailable")
            waited = await http.get(f"/v1/queues/{queue}/jobs/x", params={"wait_ms": 1000})
            assert_problem(waited, 503, "backend_unavailable")

            private_valkey.start()  # same port, empty (it kept nothing on disk)
            deadline = time.monotonic() + RECOVERY_DEADLINE_S
            while (await http.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "never became ready again"
                await asyncio.sleep(0.1)
            # The wake-up subscription is back too: a long poll is woken by an enqueue.
            waiter = long_poll(http, queue)
            await wait_for_long_polls(http, 1)
            async with Redis.from_url(private_valkey.url) as server:  # only this service subscribes there
                await wait_for_wake_subscription(server, queue)
            created = await enqueue(http, queue, "after")
            assert [job["id"] for job in await woken(waiter)] == [created["id"]]
