"""Issue 11 through HTTP: a release of 20,000 jobs, queue deletion, index entries without a job,
and durable mode's lease that no replica confirmed; issue 12: a redrive of all beyond one step."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from echomq_http.config import Settings
from echomq_http.core import limits
from echomq_http.core.queue import REDRIVE_STEP
from echomq_http.store.keys import QueueKeys, queue_prefix
from tests.support import assert_problem, counts, enqueue, get_job, job_call, lease, lease_one
from tests.support.servers import RedisServer
from tests.support.service import running_service

BIG_LEASE_MS = 600_000
SWEEP_DEADLINE_S = 60.0


async def fill(client: httpx.AsyncClient, queue: str, count: int) -> list[str]:
    ids = []
    for start in range(0, count, 1000):
        jobs = [{"payload": n} for n in range(start, min(count, start + 1000))]
        response = await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
        assert response.status_code == 200, response.text
        ids += [job["id"] for job in response.json()["jobs"]]
    return ids


async def lease_all(
    client: httpx.AsyncClient, queue: str, count: int, worker: str, lease_ms: int = BIG_LEASE_MS
) -> list[dict]:
    jobs: list[dict] = []
    while len(jobs) < count:
        jobs += await lease(client, queue, worker, max_jobs=100, lease_ms=lease_ms)
    return jobs


async def dead_letters(client: httpx.AsyncClient, queue: str, count: int) -> None:
    """count jobs on their last attempt, leased for the shortest lease: the service's sweep
    dead-letters them all once their leases run out (quicker than a fail call each)."""
    for start in range(0, count, limits.MAX_BATCH):
        jobs = [{"payload": n, "max_attempts": 1} for n in range(start, min(count, start + limits.MAX_BATCH))]
        response = await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
        assert response.status_code == 200, response.text
    await lease_all(client, queue, count, "short-lived", lease_ms=limits.MIN_LEASE_MS)
    deadline = time.monotonic() + SWEEP_DEADLINE_S
    while (await counts(client, queue))["failed"] < count:
        assert time.monotonic() < deadline, "the sweep did not dead-letter the expired leases"
        await asyncio.sleep(0.1)


@pytest.mark.timeout(300)
async def test_an_operator_release_of_20000_jobs_releases_each_once(client, queue) -> None:
    ids = await fill(client, queue, 20_000)
    held = await lease_all(client, queue, 20_000, "big")
    assert [job["id"] for job in held] == ids

    response = await client.post(f"/v1/queues/{queue}/workers/big/release")

    assert response.status_code == 200, response.text[:500]
    assert response.json()["released"] == ids  # each once, oldest lease first
    assert await counts(client, queue) == {
        "waiting": 20_000,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    assert (await client.get(f"/v1/queues/{queue}/workers")).json() == {"workers": []}
    again = await lease(client, queue, "next", max_jobs=3)
    assert [job["id"] for job in again] == ids[:3] and {job["attempt"] for job in again} == {1}


@pytest.mark.timeout(300)
async def test_a_redrive_of_all_2500_dead_letters_redrives_each_once(client, queue, redis_client) -> None:
    count = 2500  # three steps of REDRIVE_STEP, the last one short
    assert REDRIVE_STEP * 2 < count < REDRIVE_STEP * 3
    await dead_letters(client, queue, count)
    oldest_failure_first = [
        job_id.decode() for job_id in await redis_client.zrange(QueueKeys.for_queue(queue).failed, 0, -1)
    ]
    assert len(oldest_failure_first) == count

    response = await client.post(f"/v1/queues/{queue}/failed/retry")

    assert response.status_code == 200, response.text[:500]
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"retried": oldest_failure_first}  # each once, in the order they failed
    assert await counts(client, queue) == {
        "waiting": count,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    assert (await client.post(f"/v1/queues/{queue}/failed/retry")).json() == {"retried": []}
    again = await lease(client, queue, "next", max_jobs=3)
    assert [job["id"] for job in again] == oldest_failure_first[:3]  # redriven jobs join the back, in order
    assert {job["attempt"] for job in again} == {1}


async def test_a_queue_with_jobs_in_flight_is_deleted_only_with_force(client, queue, redis_client) -> None:
    await enqueue(client, queue, "waits")
    await enqueue(client, queue, "later", delay_ms=60_000)
    cancelled = await enqueue(client, queue, "cancelled", delay_ms=60_000)
    assert (await client.post(f"/v1/queues/{queue}/jobs/{cancelled['id']}/cancel")).status_code == 200
    done = await lease_one(client, queue)
    await job_call(client, queue, done["id"], "ack", lease_id=done["lease_id"])
    await enqueue(client, queue, "held")
    held = await lease_one(client, queue, request_id="kept-5-minutes")
    before = await counts(client, queue)

    assert_problem(await client.delete(f"/v1/queues/{queue}"), 409, "job_active")
    assert await counts(client, queue) == before

    assert (await client.delete(f"/v1/queues/{queue}?force=true")).status_code == 204
    assert await counts(client, queue) == {
        "waiting": 0,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    names = [view["name"] for view in (await client.get("/v1/queues")).json()["queues"]]
    assert queue not in names
    # Every key is gone, the lease requests' records too (a client's lasts 5 minutes otherwise).
    assert [key async for key in redis_client.scan_iter(match=queue_prefix(queue) + "*")] == []
    # The worker that held a job finds it gone; the queue can be used again from scratch.
    assert_problem(
        await job_call(client, queue, held["id"], "ack", lease_id=held["lease_id"]), 404, "job_not_found"
    )
    assert (await client.delete(f"/v1/queues/{queue}")).status_code == 204  # nothing to delete: fine
    await enqueue(client, queue, "anew")
    names = [view["name"] for view in (await client.get("/v1/queues")).json()["queues"]]
    assert queue in names


async def test_a_queue_without_jobs_in_flight_is_deleted_without_force(client, queue) -> None:
    await enqueue(client, queue, "waits")
    assert (await client.delete(f"/v1/queues/{queue}")).status_code == 204
    assert (await counts(client, queue))["waiting"] == 0


async def test_lease_skips_an_index_entry_without_its_job(client, queue, redis_client: Redis) -> None:
    keys = QueueKeys.for_queue(queue)
    created = await enqueue(client, queue, "real")
    await redis_client.rpush(keys.wait, "ghost")  # in front of the real job, with no job behind it

    [job] = await lease(client, queue, max_jobs=2)

    assert job["id"] == created["id"] and job["payload"] == "real"
    assert not await redis_client.exists(keys.job("ghost"))
    metrics = (await client.get("/metrics")).text
    assert f'emq_stale_index_entries_total{{queue="{queue}"}} 1' in metrics


@contextlib.asynccontextmanager
async def plain_and_durable(
    private_valkey: RedisServer,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Clients of two services on one Redis without replicas: a plain one, and a durable one
    (EMQ_WAIT_REPLICAS 1), none of whose writes a replica can confirm."""
    plain = Settings(redis_url=private_valkey.url, sweep_interval_ms=100)
    durable = Settings(redis_url=private_valkey.url, wait_replicas=1, wait_timeout_ms=100)
    with running_service(plain) as plain_url, running_service(durable) as durable_url:
        async with (
            httpx.AsyncClient(base_url=plain_url) as http,
            httpx.AsyncClient(base_url=durable_url) as sure,
        ):
            yield http, sure


async def test_a_durable_lease_no_replica_confirmed_gives_its_jobs_back(
    private_valkey: RedisServer, queue
) -> None:
    async with plain_and_durable(private_valkey) as (http, sure):
        created = await enqueue(http, queue, "work", max_attempts=1)
        response = await sure.post(f"/v1/queues/{queue}/lease", json={"worker": "w1"})
        assert_problem(response, 503, "backend_unavailable")
        view = await get_job(http, queue, created["id"])
        assert view["state"] == "waiting"  # given back at once, not left to expire
        assert (await http.get(f"/v1/queues/{queue}/active")).json() == {"jobs": []}
        job = await lease_one(http, queue)
        assert job["id"] == created["id"] and job["attempt"] == 1  # the give-back spent no attempt
        # An ack's lease_next (one script call with the ack) gives its jobs back the same way.
        second = await enqueue(http, queue, "more", max_attempts=1)
        response = await sure.post(
            f"/v1/queues/{queue}/jobs/{job['id']}/ack",
            json={"lease_id": job["lease_id"], "lease_next": {"worker": "w1"}},
        )
        assert_problem(response, 503, "backend_unavailable")
        assert (await get_job(http, queue, second["id"]))["state"] == "waiting"
        assert (await http.get(f"/v1/queues/{queue}/active")).json() == {"jobs": []}
        again = await lease_one(http, queue)
        assert again["id"] == second["id"] and again["attempt"] == 1


async def test_the_retry_of_an_unconfirmed_lease_request_leases_what_was_given_back(
    private_valkey: RedisServer, queue
) -> None:
    """The 503 tells the client to retry: with its request_id, the retry is the request's first
    delivery (the give-back forgot the request), not an answer of jobs no longer held."""
    async with plain_and_durable(private_valkey) as (http, sure):
        created = await enqueue(http, queue, "work")
        ask = {"worker": "w1", "request_id": "try-1"}
        assert_problem(await sure.post(f"/v1/queues/{queue}/lease", json=ask), 503, "backend_unavailable")
        job = await lease_one(http, queue, **ask)
        assert job["id"] == created["id"] and job["attempt"] == 1


async def test_a_wait_that_answers_an_error_is_an_unconfirmed_write(
    private_valkey: RedisServer, queue
) -> None:
    """WAIT itself can fail (here: a user denied it; in a failover: a primary turned replica).
    The write is then not known to be replicated: 503 and the lease's jobs given back, not a 500."""
    admin = Redis.from_url(private_valkey.url)
    await admin.execute_command("ACL", "SETUSER", "no-wait", "on", ">no-wait", "~*", "&*", "+@all", "-wait")
    await admin.aclose()
    no_wait_url = f"redis://no-wait:no-wait@127.0.0.1:{private_valkey.port}/0"
    plain = Settings(redis_url=private_valkey.url)
    durable = Settings(redis_url=no_wait_url, wait_replicas=1, wait_timeout_ms=100)
    with running_service(plain) as plain_url, running_service(durable) as durable_url:
        async with (
            httpx.AsyncClient(base_url=plain_url) as http,
            httpx.AsyncClient(base_url=durable_url) as sure,
        ):
            refused = await sure.post(f"/v1/queues/{queue}/jobs", json={"payload": 1})
            assert_problem(refused, 503, "backend_unavailable")
            created = await enqueue(http, queue, "work", max_attempts=1)
            response = await sure.post(f"/v1/queues/{queue}/lease", json={"worker": "w1"})
            assert_problem(response, 503, "backend_unavailable")
            assert (await get_job(http, queue, created["id"]))["state"] == "waiting"
            assert (await http.get(f"/v1/queues/{queue}/active")).json() == {"jobs": []}
