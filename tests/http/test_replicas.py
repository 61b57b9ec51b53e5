"""Two replicas against one Redis behave as one service."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from echomq_http.config import Settings
from echomq_http.store.keys import keys_of
from tests.http.test_flow_control import enqueue_many, put_settings
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
from tests.support.service import running_service


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


async def test_two_replicas_racing_one_request_id_lease_once(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    """The same (worker, request_id) sent to both replicas at once: one lease happens, and both
    answer it (same jobs, lease ids, fences, in the same order)."""
    a, b = replicas
    jobs = [{"payload": i} for i in range(60)]
    assert (await a.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).status_code == 200
    leased: set[str] = set()
    for round_ in range(20):
        ask = {"max_jobs": 3, "request_id": f"race-{round_}"}
        first, second = await asyncio.gather(lease(a, queue, "w1", **ask), lease(b, queue, "w1", **ask))
        assert len(first) == 3
        assert [(j["id"], j["lease_id"], j["fence"], j["attempt"]) for j in first] == [
            (j["id"], j["lease_id"], j["fence"], j["attempt"]) for j in second
        ]
        leased.update(job["id"] for job in first)
    assert len(leased) == 60
    assert (await counts(a, queue))["active"] == 60


async def test_a_long_poll_retried_on_the_other_replica_gets_the_lost_answer(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    """A long poll whose answer was lost (the client gave up) is retried on the other replica
    with the same request_id: it answers the jobs leased for the lost answer, nothing new."""
    a, b = replicas
    ask = {"worker": "w1", "max_jobs": 2, "wait_ms": 10_000, "request_id": "poll-1"}
    first = asyncio.create_task(a.post(f"/v1/queues/{queue}/lease", json=ask))
    await wait_for_long_polls(a, 1)
    await a.post(f"/v1/queues/{queue}/enqueue", json={"jobs": [{"payload": i} for i in range(4)]})
    lost = (await first).json()["jobs"]
    assert len(lost) == 2
    retried = await lease(b, queue, **ask)
    assert [(j["id"], j["lease_id"], j["fence"]) for j in retried] == [
        (j["id"], j["lease_id"], j["fence"]) for j in lost
    ]
    assert (await counts(b, queue))["waiting"] == 2


async def test_a_settings_change_through_one_replica_holds_at_once_through_the_other(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    """No replica keeps a queue's settings of its own: each lease reads them where they are."""
    a, b = replicas
    await enqueue_many(a, queue, 6)
    await put_settings(a, queue, max_in_flight=1)
    assert len(await lease(b, queue, "w1", max_jobs=5)) == 1
    assert await lease(b, queue, "w2", max_jobs=5) == []  # the cap is full
    await put_settings(b, queue, max_in_flight=None)
    assert len(await lease(a, queue, "w3", max_jobs=5)) == 5


async def test_a_client_request_id_is_remembered_for_five_minutes(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str, redis_client: Redis
) -> None:
    a, b = replicas
    await enqueue(a, queue, 1)
    sent_at = time.monotonic()
    [job] = await lease(a, queue, "w1", request_id="r-1")
    ttl_ms = await redis_client.pttl(keys_of(queue).request("w1", "r-1"))
    since_sent_ms = (time.monotonic() - sent_at) * 1000
    # The record was written after the request was sent: at most that long has run off its TTL
    # (and a millisecond of rounding).
    assert 5 * 60_000 - since_sent_ms - 1 <= ttl_ms <= 5 * 60_000
    assert [j["lease_id"] for j in await lease(b, queue, "w1", request_id="r-1")] == [job["lease_id"]]


async def test_a_lease_retried_after_a_heartbeat_answers_the_renewed_lease(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], queue: str
) -> None:
    """The retry answers the lease as it is now (its record names the lease; the job has its
    end), so a worker never takes a renewed lease's old end for its own."""
    a, b = replicas
    await enqueue(a, queue, 1)
    ask = {"request_id": "r-1", "lease_ms": 10_000}
    [job] = await lease(a, queue, "w1", **ask)
    beat = await job_call(b, queue, job["id"], "heartbeat", lease_id=job["lease_id"], lease_ms=60_000)
    assert beat.status_code == 200, beat.text
    renewed_until = beat.json()["lease_expires_at"]
    assert renewed_until > job["lease_expires_at"] + 40_000
    [again] = await lease(b, queue, "w1", **ask)
    assert (again["id"], again["lease_id"], again["fence"], again["attempt"]) == (
        job["id"],
        job["lease_id"],
        job["fence"],
        job["attempt"],
    )
    assert again["lease_expires_at"] == renewed_until
