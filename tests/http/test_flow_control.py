"""Queue settings and flow control through HTTP: the settings' round trip, defaults and checks;
max_in_flight exact under 8 concurrent workers; the rate limit's sliding window, burst and
retry_after_ms; long polls woken when room appears; per-queue retention; events off."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from echomq_http.core import limits
from echomq_http.store.keys import keys_of
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.support import (
    assert_problem,
    enqueue,
    eventually,
    get_job,
    job_call,
    lease,
    lease_one,
    long_poll,
    wait_for_long_polls,
    woken,
)

DEFAULTS = {
    "max_in_flight": None,
    "group_max_in_flight": None,
    "rate_limit": None,
    "max_stalls": None,
    "events": True,
    "completed_retention_s": None,
    "failed_retention_s": None,
}
FULL = {
    "max_in_flight": 7,
    "group_max_in_flight": 2,
    "rate_limit": {"max": 100, "per_ms": 60_000},
    "max_stalls": 0,
    "events": False,
    "completed_retention_s": 60,
    "failed_retention_s": 0,
}
WORKERS = 8
LEASE_MS = 60_000


def settings_url(queue: str) -> str:
    return f"/v1/queues/{queue}/settings"


async def put_settings(client: httpx.AsyncClient, queue: str, **settings: Any) -> dict[str, Any]:
    response = await client.put(settings_url(queue), json=settings)
    assert response.status_code == 200, response.text
    return response.json()


async def enqueue_many(client: httpx.AsyncClient, queue: str, count: int) -> None:
    for first in range(0, count, limits.MAX_BATCH):
        jobs = [{"payload": i} for i in range(first, min(count, first + limits.MAX_BATCH))]
        response = await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
        assert response.status_code == 200, response.text


def leased_at(job: dict[str, Any], lease_ms: int = LEASE_MS) -> int:
    """When the job was leased, by Redis's clock (the lease answer's expiry less its length)."""
    return job["lease_expires_at"] - lease_ms


# --- the settings themselves -------------------------------------------------------------------


async def test_a_queue_never_configured_reads_the_defaults(client: httpx.AsyncClient, queue: str) -> None:
    response = await client.get(settings_url(queue))
    assert response.status_code == 200
    assert response.json() == DEFAULTS
    names = [view["name"] for view in (await client.get("/v1/queues")).json()["queues"]]
    assert queue not in names  # reading creates nothing


async def test_settings_round_trip_and_omitted_fields_return_to_defaults(
    client: httpx.AsyncClient, queue: str
) -> None:
    assert await put_settings(client, queue, **FULL) == FULL
    assert (await client.get(settings_url(queue))).json() == FULL
    # The whole object: what is left out goes back to its default.
    assert await put_settings(client, queue, max_in_flight=3) == {**DEFAULTS, "max_in_flight": 3}
    assert (await client.get(settings_url(queue))).json() == {**DEFAULTS, "max_in_flight": 3}
    assert await put_settings(client, queue) == DEFAULTS
    assert (await client.get(settings_url(queue))).json() == DEFAULTS


async def test_a_queue_configured_before_its_first_job_is_listed(
    client: httpx.AsyncClient, queue: str
) -> None:
    await put_settings(client, queue, max_in_flight=2)
    names = [view["name"] for view in (await client.get("/v1/queues")).json()["queues"]]
    assert queue in names
    await enqueue(client, queue, id="a")
    assert (await client.get(settings_url(queue))).json()["max_in_flight"] == 2  # the job kept them


async def test_deleting_a_queue_drops_its_settings(client: httpx.AsyncClient, queue: str) -> None:
    await put_settings(client, queue, **FULL)
    await enqueue(client, queue, id="a")
    assert (await client.delete(f"/v1/queues/{queue}")).status_code == 204
    assert (await client.get(settings_url(queue))).json() == DEFAULTS


@pytest.mark.parametrize(
    "body",
    [
        {"max_in_flight": 0},
        {"max_in_flight": -1},
        {"max_in_flight": limits.MAX_IN_FLIGHT_CAP + 1},
        {"max_in_flight": 1.5},
        {"max_in_flight": "3"},
        {"group_max_in_flight": 0},
        {"rate_limit": {"max": 0, "per_ms": 1000}},
        {"rate_limit": {"max": 1, "per_ms": 999}},
        {"rate_limit": {"max": 1, "per_ms": limits.MAX_RATE_PER_MS + 1}},
        {"rate_limit": {"max": limits.MAX_RATE_JOBS + 1, "per_ms": 1000}},
        {"rate_limit": {"max": 1}},
        {"rate_limit": {"per_ms": 1000}},
        {"rate_limit": {"max": 1, "per_ms": 1000, "burst": 3}},
        {"rate_limit": 5},
        {"max_stalls": -1},
        {"events": "off"},
        {"events": None},
        {"completed_retention_s": -1},
        {"failed_retention_s": -1},
        {"failed_retention_s": limits.MAX_RETENTION_S + 1},
        {"max_inflight": 3},
    ],
)
async def test_nonsense_settings_are_400_and_change_nothing(
    client: httpx.AsyncClient, queue: str, body: dict[str, Any]
) -> None:
    await put_settings(client, queue, max_in_flight=4)
    problem = assert_problem(await client.put(settings_url(queue), json=body), 400, "invalid_request")
    assert problem["detail"]
    assert (await client.get(settings_url(queue))).json()["max_in_flight"] == 4


# --- max_in_flight ------------------------------------------------------------------------------


async def test_max_in_flight_holds_under_eight_concurrent_workers(
    client: httpx.AsyncClient, queue: str, redis_client: Redis
) -> None:
    cap, jobs = 5, 160
    await put_settings(client, queue, max_in_flight=cap)
    await enqueue_many(client, queue, jobs)
    ledger = keys_of(queue).active
    seen: list[int] = []
    leased: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            seen.append(await redis_client.llen(ledger))
            await asyncio.sleep(0.001)

    async def work(worker: str) -> None:
        while len(leased) < jobs:
            answer = await lease(client, queue, worker, max_jobs=3, lease_ms=LEASE_MS)
            assert len(answer) <= cap
            leased.extend(answer)
            for job in answer:
                response = await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"])
                assert response.status_code == 200, response.text
            if not answer:
                await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    await asyncio.wait_for(asyncio.gather(*(work(f"w{i}") for i in range(WORKERS))), 120)
    done.set()
    await sampler
    assert len(leased) == jobs and len({job["id"] for job in leased}) == jobs
    assert max(seen) <= cap, f"the ledger held {max(seen)} jobs"
    assert max(seen) == cap  # the cap was reached: the test did test something
    # From the answers, by Redis's clock: no instant had more than cap jobs between their lease
    # and their completion.
    spans = []
    for job in leased:
        finished_at = (await get_job(client, queue, job["id"]))["finished_at"]
        spans += [(leased_at(job), 1), (finished_at, -1)]
    held = 0
    for _, step in sorted(spans, key=lambda span: (span[0], span[1])):  # ends first within a ms
        held += step
        assert held <= cap


async def test_a_lease_under_a_full_cap_gets_nothing_and_no_retry_after(
    client: httpx.AsyncClient, queue: str
) -> None:
    await put_settings(client, queue, max_in_flight=2)
    await enqueue_many(client, queue, 5)
    response = await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1", "max_jobs": 5})
    assert len(response.json()["jobs"]) == 2
    response = await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1", "max_jobs": 5})
    assert response.json() == {"jobs": []}  # no time to give: a long poll is woken instead


async def test_a_long_poll_under_a_cap_is_woken_by_an_ack(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None
) -> None:
    await put_settings(client, queue, max_in_flight=1)
    await enqueue_many(client, queue, 2)
    held = await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    assert (await job_call(client, queue, held["id"], "ack", lease_id=held["lease_id"])).status_code == 200
    assert len(await woken(poll)) == 1


@pytest.mark.parametrize("exit_path", ["fail", "release"])
async def test_a_long_poll_under_a_cap_is_woken_by_any_exit(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None, exit_path: str
) -> None:
    await put_settings(client, queue, max_in_flight=1)
    await enqueue_many(client, queue, 2)
    held = await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    body = {"lease_id": held["lease_id"], **({"error": "x", "retry": False} if exit_path == "fail" else {})}
    assert (await job_call(client, queue, held["id"], exit_path, **body)).status_code == 200
    assert len(await woken(poll)) == 1


async def test_raising_a_cap_wakes_the_long_polls(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None
) -> None:
    await put_settings(client, queue, max_in_flight=1)
    await enqueue_many(client, queue, 2)
    await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    await put_settings(client, queue, max_in_flight=2)
    assert len(await woken(poll)) == 1


# --- rate_limit ---------------------------------------------------------------------------------


def assert_no_window_exceeds(times: list[int], per_ms: int, most: int) -> None:
    """No interval [t, t + per_ms) of Redis time holds more than `most` lease times."""
    times = sorted(times)
    end = 0
    for start in range(len(times)):
        while end < len(times) and times[end] < times[start] + per_ms:
            end += 1
        assert end - start <= most, f"{end - start} leases within {per_ms} ms from {times[start]}"


async def test_no_window_of_the_rate_leases_more_than_max(client: httpx.AsyncClient, queue: str) -> None:
    most, per_ms, run_s = 7, 1000, 3.5
    await put_settings(client, queue, rate_limit={"max": most, "per_ms": per_ms})
    await enqueue_many(client, queue, 200)
    times: list[int] = []
    deadline = time.monotonic() + run_s

    async def work(worker: str) -> None:
        while time.monotonic() < deadline:
            response = await client.post(
                f"/v1/queues/{queue}/lease", json={"worker": worker, "max_jobs": 3, "lease_ms": LEASE_MS}
            )
            answer = response.json()
            times.extend(leased_at(job) for job in answer["jobs"])
            for job in answer["jobs"]:
                await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"])
            if not answer["jobs"]:
                await asyncio.sleep(0.005)

    await asyncio.gather(*(work(f"w{i}") for i in range(WORKERS)))
    assert_no_window_exceeds(times, per_ms, most)
    # It did lease at the rate: the first window's burst and then each window's worth.
    assert len(times) >= most * 3, times


async def test_a_burst_of_max_then_retry_after_ms_says_when_room_comes(
    client: httpx.AsyncClient, queue: str
) -> None:
    per_ms = 1500
    await put_settings(client, queue, rate_limit={"max": 5, "per_ms": per_ms})
    await enqueue_many(client, queue, 20)
    burst = (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1", "max_jobs": 10})).json()
    assert len(burst["jobs"]) == 5  # a burst of max at once, and no more
    assert 0 < burst["retry_after_ms"] <= per_ms  # it held the lease back (5 of 10)
    empty = (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1"})).json()
    assert empty["jobs"] == []
    retry_after_ms = empty["retry_after_ms"]
    assert 0 < retry_after_ms <= per_ms
    first = leased_at(burst["jobs"][0])
    # Honest: room comes when the burst leaves the window, not before...
    await asyncio.sleep(max(retry_after_ms - 300, 0) / 1000)
    assert (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1"})).json()["jobs"] == []
    # ...and it is there once that time has passed.
    await asyncio.sleep(0.4)
    [job] = (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1"})).json()["jobs"]
    assert leased_at(job) - first >= per_ms


async def test_lease_next_answers_retry_after_ms(client: httpx.AsyncClient, queue: str) -> None:
    await put_settings(client, queue, rate_limit={"max": 1, "per_ms": 60_000})
    await enqueue_many(client, queue, 2)
    held = await lease_one(client, queue)
    response = await job_call(
        client, queue, held["id"], "ack", lease_id=held["lease_id"], lease_next={"worker": "w1"}
    )
    answer = response.json()
    # At most a window and one grain of it (the log stamps entries at the end of their grain).
    assert answer["jobs"] == [] and 0 < answer["retry_after_ms"] <= 60_000 + 60


async def test_no_retry_after_ms_without_a_limit_or_when_nothing_waits(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue_many(client, queue, 1)
    assert (
        "retry_after_ms" not in (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w"})).json()
    )
    await put_settings(client, queue, rate_limit={"max": 5, "per_ms": 60_000})
    await enqueue_many(client, queue, 1)
    answer = (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w", "max_jobs": 3})).json()
    assert len(answer["jobs"]) == 1 and "retry_after_ms" not in answer  # fewer waited: not held back


async def test_a_long_poll_is_served_when_the_rate_window_opens(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None
) -> None:
    per_ms = 2000
    await put_settings(client, queue, rate_limit={"max": 1, "per_ms": per_ms})
    await enqueue_many(client, queue, 2)
    first = await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    [job] = await woken(poll)  # no message announces the window: the wait's own timer
    assert leased_at(job) - leased_at(first) >= per_ms
    assert leased_at(job) - leased_at(first) < per_ms + 3000


async def test_removing_the_rate_limit_wakes_the_long_polls(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None
) -> None:
    await put_settings(client, queue, rate_limit={"max": 1, "per_ms": 3_600_000})
    await enqueue_many(client, queue, 2)
    await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    await put_settings(client, queue)
    assert len(await woken(poll)) == 1


# --- retention and events -------------------------------------------------------------------------


async def test_per_queue_retention_deletes_at_its_own_time(client: httpx.AsyncClient, queue: str) -> None:
    await put_settings(client, queue, completed_retention_s=1, failed_retention_s=2)
    await enqueue(client, queue, id="done")
    await enqueue(client, queue, id="dead", max_attempts=1)
    finishing = {}  # job -> a time just before it finished: its retention runs from after it
    for _ in range(2):
        job = await lease_one(client, queue)
        finishing[job["id"]] = time.monotonic()
        if job["id"] == "done":
            await job_call(client, queue, "done", "ack", lease_id=job["lease_id"])
        else:
            await job_call(client, queue, "dead", "fail", lease_id=job["lease_id"], error="x")

    async def gone(job_id: str) -> bool:
        return (await client.get(f"/v1/queues/{queue}/jobs/{job_id}")).status_code == 404

    await eventually(lambda: gone("done"), "the completed job deleted", 10)
    assert time.monotonic() - finishing["done"] >= 0.9
    assert not await gone("dead")  # its own, longer retention
    await eventually(lambda: gone("dead"), "the dead letter deleted", 10)
    assert time.monotonic() - finishing["dead"] >= 1.9


async def test_shortening_retention_brings_the_deletion_forward(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, id="done")
    job = await lease_one(client, queue)
    await job_call(client, queue, "done", "ack", lease_id=job["lease_id"])
    await asyncio.sleep(5 * TEST_SWEEP_INTERVAL_MS / 1000)
    assert (await client.get(f"/v1/queues/{queue}/jobs/done")).status_code == 200  # an hour by default
    await put_settings(client, queue, completed_retention_s=0)

    async def gone() -> bool:
        return (await client.get(f"/v1/queues/{queue}/jobs/done")).status_code == 404

    await eventually(gone, "the completed job deleted by its queue's new retention", 10)


async def test_events_off_writes_no_events_and_an_outcome_wait_still_answers(
    client: httpx.AsyncClient, queue: str, redis_client: Redis
) -> None:
    await put_settings(client, queue, events=False)
    await enqueue(client, queue, id="a")
    job = await lease_one(client, queue)
    waiting = asyncio.create_task(
        client.get(f"/v1/queues/{queue}/jobs/a", params={"wait_ms": 20_000}, timeout=60)
    )
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await job_call(client, queue, "a", "ack", lease_id=job["lease_id"])
    response = await waiting
    assert response.json()["state"] == "completed"
    assert time.monotonic() - started < 5  # promptly, not at the end of its wait
    assert await redis_client.xlen(keys_of(queue).events) == 0
    history = (await client.get(f"/v1/queues/{queue}/history", params={"minutes": 2})).json()["minutes"]
    assert sum(minute["completed"] for minute in history) == 1  # the history still counts
    await put_settings(client, queue)  # back on: events flow again
    await enqueue(client, queue, id="b")
    assert await redis_client.xlen(keys_of(queue).events) == 1


async def test_an_outcome_wait_follows_events_turned_off_meanwhile(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, id="a")
    job = await lease_one(client, queue)
    waiting = asyncio.create_task(
        client.get(f"/v1/queues/{queue}/jobs/a", params={"wait_ms": 20_000}, timeout=60)
    )
    await asyncio.sleep(0.3)
    await put_settings(client, queue, events=False)
    await job_call(client, queue, "a", "ack", lease_id=job["lease_id"])
    started = time.monotonic()
    assert (await waiting).json()["state"] == "completed"
    assert time.monotonic() - started < 5
