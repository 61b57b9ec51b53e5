"""Redis going away and coming back: 503 backend_unavailable meanwhile, then it recovers by itself."""

from __future__ import annotations

import asyncio
import time

import httpx

from service.config import Settings
from tests.conftest import ValkeyProcess
from tests.server import running_service
from tests.support import assert_problem, enqueue, lease

RECOVERY_DEADLINE_S = 20.0


async def test_redis_outage_gives_503_and_service_recovers(private_valkey: ValkeyProcess, queue: str) -> None:
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

            private_valkey.start()  # same port, empty (it kept nothing on disk)
            deadline = time.monotonic() + RECOVERY_DEADLINE_S
            while (await http.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "never became ready again"
                await asyncio.sleep(0.1)
            # The wake-up subscription is back too: a long poll is woken by an enqueue.
            await asyncio.sleep(1.0)
            waiter = asyncio.create_task(lease(http, queue, wait_ms=10_000))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            created = await enqueue(http, queue, "after")
            assert [job["id"] for job in await waiter] == [created["id"]]
            assert time.monotonic() - started < 0.9
