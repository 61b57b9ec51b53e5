"""Two replicas against one Redis behave as one service."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from service.config import Settings
from tests.server import running_service
from tests.support import (
    counts,
    enqueue,
    get_job,
    job_call,
    lease,
    lease_one,
    long_poll,
    wait_for_long_polls,
    woken,
)


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    settings = Settings(redis_url=redis_url, sweep_interval_ms=100)
    with running_service(settings) as url_a, running_service(settings) as url_b:
        async with (
            httpx.AsyncClient(base_url=url_a, timeout=60) as a,
            httpx.AsyncClient(base_url=url_b, timeout=60) as b,
        ):
            yield a, b


@pytest.mark.usefixtures("wake_ups_only")
async def test_a_waiter_on_one_replica_is_woken_by_an_enqueue_on_the_other(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    a, b = replicas
    waiter = long_poll(a, queue)
    await wait_for_long_polls(a, 1)
    created = await enqueue(b, queue, "cross")
    assert [job["id"] for job in await woken(waiter)] == [created["id"]]


async def test_a_lease_from_one_replica_is_worked_through_the_other(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    a, b = replicas
    await enqueue(a, queue, 1)
    job = await lease_one(a, queue, "w1")
    assert (await job_call(b, queue, job["id"], "heartbeat", lease_id=job["lease_id"])).status_code == 200
    assert (await job_call(b, queue, job["id"], "ack", lease_id=job["lease_id"])).status_code == 200
    assert (
        await job_call(a, queue, job["id"], "ack", lease_id=job["lease_id"])
    ).status_code == 200  # idempotent
    assert (await get_job(a, queue, job["id"]))["state"] == "completed"


async def test_two_sweeping_replicas_reclaim_each_expired_lease_once(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    a, b = replicas
    jobs = [{"payload": i, "max_attempts": 5} for i in range(50)]
    assert (await a.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).status_code == 200
    assert len(await lease(a, queue, "dies", max_jobs=50, lease_ms=1000)) == 50
    deadline = time.monotonic() + 15
    while (await counts(b, queue))["waiting"] < 50:
        assert time.monotonic() < deadline, "the sweeps never returned the jobs"
        await asyncio.sleep(0.1)
    again = await lease(b, queue, "survivor", max_jobs=100)
    assert len(again) == 50 and {job["attempt"] for job in again} == {2}  # each counted once
