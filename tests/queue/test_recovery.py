"""Crash recovery, zombie workers, concurrent leases, long-poll wake-ups and retention."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from echomq_http.config import Settings
from echomq_http.core import limits
from echomq_http.store.keys import QueueKeys
from tests.support import (
    assert_problem,
    counts,
    enqueue,
    get_job,
    job_call,
    lease,
    lease_one,
    long_poll,
    wait_for_long_polls,
    wait_for_wake_subscription,
    woken,
)
from tests.support.service import running_service

SHORT_LEASE_MS = 1000
HANG_UP_NOTICED_S = limits.MAX_WAIT_MS / 1000 - 5  # generous, yet before the long poll's wait ends
# The session service sweeps every 100 ms; lease + sweep + generous slack for a loaded machine.
RECLAIM_DEADLINE_S = 10.0


@pytest.fixture
async def lazy_client(private_redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A service whose sweep practically never runs, on a server no other replica sweeps."""
    lazy = Settings(redis_url=private_redis_url, sweep_interval_ms=600_000)
    with running_service(lazy) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield http


@pytest.fixture
async def own_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A service of the test's own, on the session's server."""
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield http


async def test_a_worker_that_never_acks_loses_its_job_to_the_next(
    client: httpx.AsyncClient, queue: str
) -> None:
    created = await enqueue(client, queue, "work")
    dead = await lease_one(client, queue, "dies", lease_ms=SHORT_LEASE_MS)
    assert (await client.get(f"/v1/queues/{queue}/active")).json()["jobs"][0]["worker"] == "dies"
    started = time.monotonic()
    again = await lease_one(client, queue, "survivor", wait_ms=int(RECLAIM_DEADLINE_S * 1000))
    assert again["id"] == created["id"] and again["attempt"] == 2 and again["fence"] == 2
    assert time.monotonic() - started < RECLAIM_DEADLINE_S
    # The dead worker's lease is gone for good: its late calls are refused and change nothing.
    for action in ("ack", "heartbeat", "release"):
        assert_problem(
            await job_call(client, queue, dead["id"], action, lease_id=dead["lease_id"]), 409, "lease_lost"
        )
    assert_problem(
        await job_call(client, queue, dead["id"], "fail", lease_id=dead["lease_id"], error="x"),
        409,
        "lease_lost",
    )
    view = await get_job(client, queue, dead["id"])
    assert view["state"] == "active" and view["worker"] == "survivor"
    assert (await job_call(client, queue, again["id"], "ack", lease_id=again["lease_id"])).status_code == 200


async def test_an_expired_lease_is_lost_even_before_the_sweep(
    lazy_client: httpx.AsyncClient, queue: str, private_redis_url: str
) -> None:
    await enqueue(lazy_client, queue, "work")
    zombie = await lease_one(lazy_client, queue, "zombie", lease_ms=SHORT_LEASE_MS)
    await asyncio.sleep(SHORT_LEASE_MS / 1000 + 0.5)
    assert_problem(
        await job_call(lazy_client, queue, zombie["id"], "ack", lease_id=zombie["lease_id"]),
        409,
        "lease_lost",
    )
    # Still in the ledger, attributed to the zombie, until a sweep returns it.
    ledger = (await lazy_client.get(f"/v1/queues/{queue}/active")).json()["jobs"]
    assert [(entry["id"], entry["worker"]) for entry in ledger] == [(zombie["id"], "zombie")]
    private = Redis.from_url(private_redis_url)
    assert await private.lrange(QueueKeys.for_queue(queue).active, 0, -1) == [zombie["id"].encode()]
    await private.aclose()


async def test_expiry_on_the_last_attempt_dead_letters(client: httpx.AsyncClient, queue: str) -> None:
    created = await enqueue(client, queue, "work", max_attempts=1)
    await lease_one(client, queue, "dies", lease_ms=SHORT_LEASE_MS)
    deadline = time.monotonic() + RECLAIM_DEADLINE_S
    while (await get_job(client, queue, created["id"]))["state"] != "failed":
        assert time.monotonic() < deadline, "the sweep never dead-lettered the job"
        await asyncio.sleep(0.1)
    view = await get_job(client, queue, created["id"])
    assert "lease expired" in view["error"] and view["attempt"] == 1
    assert await counts(client, queue) == {
        "waiting": 0,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 1,
        "cancelled": 0,
        "waiting_children": 0,
    }


async def test_concurrent_workers_never_share_a_job(client: httpx.AsyncClient, queue: str) -> None:
    total = 600
    for start in range(0, total, 200):
        batch = [{"payload": i} for i in range(start, start + 200)]
        assert (await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": batch})).status_code == 200
    leased: Counter[str] = Counter()

    async def worker(name: str, max_jobs: int) -> None:
        while True:
            jobs = await lease(client, queue, name, max_jobs=max_jobs)
            if not jobs:
                return
            leased.update(job["id"] for job in jobs)
            acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
            results = (await client.post(f"/v1/queues/{queue}/ack", json={"acks": acks})).json()["results"]
            assert all(result["ok"] for result in results)

    await asyncio.gather(*(worker(f"w{i}", 1 + i % 5) for i in range(25)))
    assert len(leased) == total and set(leased.values()) == {1}
    assert await counts(client, queue) == {
        "waiting": 0,
        "delayed": 0,
        "active": 0,
        "completed": total,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }


@pytest.mark.usefixtures("wake_ups_only")
async def test_long_poll_wakes_on_enqueue(client: httpx.AsyncClient, queue: str) -> None:
    waiter = long_poll(client, queue)
    await wait_for_long_polls(client, 1)
    created = await enqueue(client, queue, "now")
    assert [job["id"] for job in await woken(waiter)] == [created["id"]]


@pytest.mark.usefixtures("wake_ups_only")
async def test_long_polls_on_many_queues_are_each_woken(client: httpx.AsyncClient) -> None:
    # Four queues: on a 3-primary Cluster at least two share a node, whose sharded subscription
    # then holds channels of two slots (each needs an SSUBSCRIBE of its own).
    queues = [f"t-wake-{secrets.token_hex(4)}-{n}" for n in range(4)]
    waiters = [long_poll(client, name) for name in queues]
    await wait_for_long_polls(client, len(queues))
    for name, waiter in zip(queues, waiters, strict=True):
        created = await enqueue(client, name, "now")
        assert [job["id"] for job in await woken(waiter)] == [created["id"]]


async def test_long_poll_returns_empty_when_time_is_up(client: httpx.AsyncClient, queue: str) -> None:
    started = time.monotonic()
    assert await lease(client, queue, wait_ms=600) == []
    assert 0.55 <= time.monotonic() - started < 5


async def test_many_waiters_share_few_redis_connections(
    settings: Settings, queue: str, redis_client: Redis
) -> None:
    waiters, pool_size = 300, 8
    with running_service(dataclasses.replace(settings, redis_pool_size=pool_size)) as url:
        limits = httpx.Limits(max_connections=waiters + 10)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
            before = len(await redis_client.client_list())
            tasks = [asyncio.create_task(lease(http, queue, f"w{i}", wait_ms=15_000)) for i in range(waiters)]
            await wait_for_long_polls(http, waiters)  # every one of them parked
            during = len(await redis_client.client_list())
            assert during - before <= pool_size + 2  # the pool plus the one pub/sub connection
            jobs = [{"payload": i} for i in range(waiters)]
            assert (await http.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).status_code == 200
            results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    ids = [job["id"] for jobs in results for job in jobs]
    assert len(ids) == waiters and len(set(ids)) == waiters


async def test_finished_jobs_are_removed_after_retention(private_redis_url: str, queue: str) -> None:
    # A server of its own: retention is a service-wide setting, and the session's service (with
    # the default retention) would sweep these jobs on its own terms.
    short = Settings(
        redis_url=private_redis_url, sweep_interval_ms=100, completed_retention_s=1, failed_retention_s=1
    )
    redis_client = Redis.from_url(private_redis_url)
    with running_service(short) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            done = await enqueue(http, queue, "a", id="keep-me")
            job = await lease_one(http, queue)
            await job_call(http, queue, job["id"], "ack", lease_id=job["lease_id"])
            again = await http.post(f"/v1/queues/{queue}/jobs", json={"id": "keep-me", "payload": "b"})
            assert again.status_code == 200 and again.json()["state"] == "completed"
            dead = await enqueue(http, queue, "b", max_attempts=1)
            job = await lease_one(http, queue)
            await job_call(http, queue, job["id"], "fail", lease_id=job["lease_id"], error="e")
            deadline = time.monotonic() + RECLAIM_DEADLINE_S
            while (await counts(http, queue))["completed"] + (await counts(http, queue))["failed"]:
                assert time.monotonic() < deadline, "retention never removed the finished jobs"
                await asyncio.sleep(0.2)
            for job_id in (done["id"], dead["id"]):
                assert_problem(await http.get(f"/v1/queues/{queue}/jobs/{job_id}"), 404, "job_not_found")
                assert not await redis_client.exists(QueueKeys.for_queue(queue).job(job_id))
            # Once forgotten, the id can be used again.
            assert (
                await http.post(f"/v1/queues/{queue}/jobs", json={"id": "keep-me", "payload": 1})
            ).status_code == 201
    await redis_client.aclose()


async def test_waiters_beyond_the_cap_get_429(settings: Settings, queue: str) -> None:
    with running_service(dataclasses.replace(settings, max_waiters=2)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            waiting = [long_poll(http, queue, f"w{i}") for i in range(2)]
            await wait_for_long_polls(http, 2)  # the cap is reached
            body = {"worker": "w", "wait_ms": 3000}
            refused = await http.post(f"/v1/queues/{queue}/lease", json=body)
            assert_problem(refused, 429, "too_many_requests")
            assert int(refused.headers["retry-after"]) >= 1
            # A lease that need not wait is still served.
            assert (await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w"})).status_code == 200
            jobs = [{"payload": i} for i in range(2)]
            assert (await http.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).status_code == 200
            assert [len(jobs) for jobs, _ in await asyncio.gather(*waiting)] == [1, 1]  # served as usual


@pytest.mark.usefixtures("wake_ups_only")
async def test_a_foreign_message_on_the_wake_channel_breaks_nothing(
    client: httpx.AsyncClient, queue: str, redis_client: Redis
) -> None:
    waiter = long_poll(client, queue)
    await wait_for_long_polls(client, 1)
    await wait_for_wake_subscription(redis_client, queue)
    # Published the way the scripts publish (sharded on a Cluster), to the service's subscription.
    channel = QueueKeys.for_queue(queue).wake
    publish = redis_client.spublish if isinstance(redis_client, RedisCluster) else redis_client.publish
    assert await publish(channel, b"not a number") >= 1
    created = await enqueue(client, queue, "now")
    assert [job["id"] for job in await woken(waiter)] == [created["id"]]  # the subscription lives on


async def test_a_long_poll_whose_client_hung_up_leases_nothing(
    own_client: httpx.AsyncClient, queue: str
) -> None:
    client = own_client  # its waiter gauge counts this test's long polls only
    gone = long_poll(client, queue, "gone")
    await wait_for_long_polls(client, 1)
    gone.cancel()  # the client hangs up: its connection is closed mid-request
    with pytest.raises(asyncio.CancelledError):
        await gone
    # The service lets the long poll go as soon as it sees the hang-up, well before its wait would
    # run out (a long poll that missed it would wait on, and take the next job for nobody).
    await wait_for_long_polls(client, 0, timeout_s=HANG_UP_NOTICED_S)
    created = await enqueue(client, queue, "for a live worker", max_attempts=1)
    view = await get_job(client, queue, created["id"])
    assert view["state"] == "waiting" and view["attempt"] == 0
    assert (await lease_one(client, queue, "alive"))["id"] == created["id"]
