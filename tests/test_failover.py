"""Sentinel failover under load: the service follows the new primary by itself; with
EMQ_WAIT_REPLICAS=1 no acknowledged enqueue is lost. Prints the figures for docs/SCALING.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.config import Settings
from tests.sentinel import SentinelSet
from tests.server import running_service

JOBS = 400
RECOVERY_DEADLINE_S = 60.0


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path).start()
    try:
        yield servers
    finally:
        servers.stop()


async def run_failover(servers: SentinelSet, wait_replicas: int) -> dict[str, float]:
    settings = Settings(
        redis_url=servers.url,
        sweep_interval_ms=200,
        wait_replicas=wait_replicas,
        wait_timeout_ms=1000,
        redis_timeout_s=2.0,
    )
    acknowledged: set[str] = set()
    first_error_at: float | None = None
    recovered_at: float | None = None
    killed_at = 0.0
    queue = f"failover-{wait_replicas}"
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def produce() -> None:
                nonlocal first_error_at, recovered_at
                for i in range(JOBS):
                    while True:  # retry the same id until acknowledged: enqueue is idempotent by id
                        try:
                            answer = await http.post(
                                f"/v1/queues/{queue}/jobs", json={"id": f"j{i}", "payload": i}
                            )
                        except httpx.TransportError:
                            answer = None
                        if answer is not None and answer.status_code in (200, 201):
                            acknowledged.add(f"j{i}")
                            if killed_at and first_error_at and recovered_at is None:
                                recovered_at = time.monotonic()
                            break
                        if killed_at and first_error_at is None:
                            first_error_at = time.monotonic()
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(0.005)

            producer = asyncio.create_task(produce())
            await asyncio.sleep(0.8)
            killed_at = time.monotonic()
            old_primary = servers.primary()
            servers.kill(old_primary)
            # The old primary comes back and Sentinel turns it into a replica of the new one.
            await asyncio.sleep(3)
            await asyncio.to_thread(servers.start_server, old_primary)
            await asyncio.wait_for(producer, RECOVERY_DEADLINE_S)
            # Drain: every acknowledged job must still be there to be leased and acked.
            completed: set[str] = set()
            deadline = time.monotonic() + RECOVERY_DEADLINE_S
            while time.monotonic() < deadline:
                answer = await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w", "max_jobs": 100})
                jobs = answer.json().get("jobs", []) if answer.status_code == 200 else []
                if not jobs and answer.status_code == 200:
                    break
                for job in jobs:
                    acked = await http.post(
                        f"/v1/queues/{queue}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"]}
                    )
                    if acked.status_code == 200:
                        completed.add(job["id"])
    lost = acknowledged - completed
    return {
        "acknowledged": len(acknowledged),
        "lost": len(lost),
        "recovery_s": (recovered_at or time.monotonic()) - killed_at,
        "new_primary_differs": float(servers.primary() != old_primary),
    }


@pytest.mark.timeout(240)
@pytest.mark.parametrize("wait_replicas", [0, 1])
async def test_failover_under_load(sentinel_set: SentinelSet, wait_replicas: int) -> None:
    figures = await run_failover(sentinel_set, wait_replicas)
    print(f"\nfailover EMQ_WAIT_REPLICAS={wait_replicas}: {figures}")
    assert figures["new_primary_differs"] == 1.0
    assert figures["acknowledged"] == JOBS  # the producer got through: the service recovered by itself
    assert figures["recovery_s"] < RECOVERY_DEADLINE_S
    if wait_replicas:
        assert figures["lost"] == 0  # durable mode: nothing acknowledged is lost to a failover
