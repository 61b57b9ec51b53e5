"""Ack, then lease the next job, in one call: lease_next on ack and ack many (contract v1.1)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import httpx
import pytest

from echomq_http.config import Settings
from tests.support import assert_problem, counts, enqueue, get_job, lease, lease_one
from tests.support.service import running_service

WRONG_LEASE = "0" * 32


async def ack(client: httpx.AsyncClient, queue: str, job: dict[str, Any], **body: Any) -> httpx.Response:
    return await client.post(
        f"/v1/queues/{queue}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"], **body}
    )


async def ack_many(client: httpx.AsyncClient, queue: str, acks: list[dict[str, Any]], **body: Any) -> Any:
    return await client.post(f"/v1/queues/{queue}/ack", json={"acks": acks, **body})


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def test_an_ack_leases_the_next_job_in_the_same_call(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "first")
    second = await enqueue(client, queue, "second", name="mail")
    job = await lease_one(client, queue, "w1")

    answer = ok(
        await ack(client, queue, job, result={"n": 1}, lease_next={"worker": "w2", "lease_ms": 60_000})
    )

    (leased,) = answer.pop("jobs")
    assert answer == {"id": job["id"], "state": "completed"}
    assert (leased["id"], leased["name"], leased["payload"], leased["attempt"]) == (
        second["id"],
        "mail",
        "second",
        1,
    )
    assert leased["fence"] == job["fence"] + 1 and len(leased["lease_id"]) == 32
    # Leased for 60 s, a little after the first job's 30 s lease began.
    assert 30_000 <= leased["lease_expires_at"] - job["lease_expires_at"] < 45_000
    view = await get_job(client, queue, second["id"])
    assert (view["state"], view["worker"], view["lease_expires_at"]) == (
        "active",
        "w2",
        leased["lease_expires_at"],
    )
    done = await get_job(client, queue, job["id"])
    assert (done["state"], done["result"]) == ("completed", {"n": 1})


async def test_without_lease_next_the_answer_is_unchanged_byte_for_byte(
    client: httpx.AsyncClient, queue: str
) -> None:
    for n in range(3):
        await enqueue(client, queue, n)
    jobs = await lease(client, queue, max_jobs=3)
    single = await ack(client, queue, jobs[0])
    assert single.content == b'{"id":"%s","state":"completed"}' % jobs[0]["id"].encode()
    null = await ack(client, queue, jobs[1], lease_next=None)  # null: no lease, as when left out
    assert null.content == b'{"id":"%s","state":"completed"}' % jobs[1]["id"].encode()
    many = await ack_many(client, queue, [{"id": jobs[2]["id"], "lease_id": jobs[2]["lease_id"]}])
    assert many.content == b'{"results":[{"id":"%s","ok":true,"state":"completed"}]}' % jobs[2]["id"].encode()
    assert (await counts(client, queue))["completed"] == 3


async def test_lease_next_with_nothing_waiting_answers_no_jobs(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "only")
    job = await lease_one(client, queue)
    assert ok(await ack(client, queue, job, lease_next={"worker": "w1"})) == {
        "id": job["id"],
        "state": "completed",
        "jobs": [],
    }


async def test_lease_next_takes_up_to_max_jobs(client: httpx.AsyncClient, queue: str) -> None:
    for n in range(6):
        await enqueue(client, queue, n)
    job = await lease_one(client, queue)
    answer = ok(await ack(client, queue, job, lease_next={"worker": "w1", "max_jobs": 3}))
    assert [leased["payload"] for leased in answer["jobs"]] == [1, 2, 3]
    assert await counts(client, queue) == {
        "waiting": 2,
        "delayed": 0,
        "active": 3,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }


async def test_lease_next_waits_for_a_job_enqueued_meanwhile(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "now")
    job = await lease_one(client, queue)
    waiting = asyncio.create_task(ack(client, queue, job, lease_next={"worker": "w1", "wait_ms": 15_000}))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert (await get_job(client, queue, job["id"]))["state"] == "completed"  # acked before the wait
    enqueued_at = time.monotonic()
    later = await enqueue(client, queue, "later")
    answer = ok(await waiting)
    assert [leased["id"] for leased in answer["jobs"]] == [later["id"]]
    assert time.monotonic() - enqueued_at < 0.5  # woken, not the 1 s fallback poll


async def test_lease_next_answers_no_jobs_when_the_wait_is_over(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, "only")
    job = await lease_one(client, queue)
    started = time.monotonic()
    assert ok(await ack(client, queue, job, lease_next={"worker": "w1", "wait_ms": 600}))["jobs"] == []
    assert 0.55 <= time.monotonic() - started < 5


async def test_a_repeated_call_with_a_request_id_answers_the_same_jobs(
    client: httpx.AsyncClient, queue: str
) -> None:
    for n in range(5):
        await enqueue(client, queue, n)
    job = await lease_one(client, queue)
    next_ = {"worker": "w1", "max_jobs": 2, "request_id": "after-0"}
    first = ok(await ack(client, queue, job, lease_next=next_))
    again = ok(await ack(client, queue, job, lease_next=next_))  # the answer was lost: sent again
    assert again == first and len(first["jobs"]) == 2
    assert await counts(client, queue) == {
        "waiting": 2,
        "delayed": 0,
        "active": 2,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }


async def test_a_failed_ack_leases_nothing(client: httpx.AsyncClient, queue: str) -> None:
    for n in range(3):
        await enqueue(client, queue, n)
    job = await lease_one(client, queue)
    lost = await ack(client, queue, {**job, "lease_id": WRONG_LEASE}, lease_next={"worker": "w2"})
    assert "jobs" not in assert_problem(lost, 409, "lease_lost")
    missing = await ack(client, queue, {"id": "nope", "lease_id": WRONG_LEASE}, lease_next={"worker": "w2"})
    assert_problem(missing, 404, "job_not_found")
    waited = asyncio.create_task(
        ack(client, queue, {**job, "lease_id": WRONG_LEASE}, lease_next={"worker": "w2", "wait_ms": 5000})
    )
    assert_problem(await asyncio.wait_for(waited, 2), 409, "lease_lost")  # answered at once
    assert await counts(client, queue) == {
        "waiting": 2,
        "delayed": 0,
        "active": 1,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    assert (await get_job(client, queue, job["id"]))["worker"] == "w1"


async def test_ack_many_leases_after_the_batch_whatever_each_result(
    client: httpx.AsyncClient, queue: str
) -> None:
    for n in range(4):
        await enqueue(client, queue, n)
    a, b = await lease(client, queue, max_jobs=2)
    acks = [
        {"id": a["id"], "lease_id": a["lease_id"]},
        {"id": b["id"], "lease_id": WRONG_LEASE},
        {"id": "nope", "lease_id": WRONG_LEASE},
    ]
    answer = ok(await ack_many(client, queue, acks, lease_next={"worker": "w2", "max_jobs": 5}))
    assert answer["results"] == [
        {"id": a["id"], "ok": True, "state": "completed"},
        {"id": b["id"], "ok": False, "code": "lease_lost"},
        {"id": "nope", "ok": False, "code": "job_not_found"},
    ]
    assert [job["payload"] for job in answer["jobs"]] == [2, 3]
    # Every ack failing still leases: the batch answered 200.
    lost = [{"id": b["id"], "lease_id": WRONG_LEASE}]
    assert ok(await ack_many(client, queue, lost, lease_next={"worker": "w2"})) == {
        "results": [{"id": b["id"], "ok": False, "code": "lease_lost"}],
        "jobs": [],
    }
    assert (await counts(client, queue))["active"] == 3


async def test_ack_many_with_a_request_id_repeats_safely_and_waits(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, "a")
    (a,) = await lease(client, queue)
    acks = [{"id": a["id"], "lease_id": a["lease_id"]}]
    next_ = {"worker": "w1", "wait_ms": 15_000, "request_id": "batch-1"}
    waiting = asyncio.create_task(ack_many(client, queue, acks, lease_next=next_))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    later = await enqueue(client, queue, "b")
    first = ok(await waiting)
    assert [job["id"] for job in first["jobs"]] == [later["id"]]
    await enqueue(client, queue, "c")
    assert ok(await ack_many(client, queue, acks, lease_next=next_)) == first
    assert (await counts(client, queue))["waiting"] == 1


async def test_a_client_that_hangs_up_during_lease_next_keeps_its_ack_and_no_job(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, "done")
    job = await lease_one(client, queue)
    with pytest.raises(httpx.ReadTimeout):
        await client.post(
            f"/v1/queues/{queue}/jobs/{job['id']}/ack",
            json={"lease_id": job["lease_id"], "lease_next": {"worker": "gone", "wait_ms": 10_000}},
            timeout=0.5,
        )
    await asyncio.sleep(0.3)  # the service sees the disconnect
    assert (await get_job(client, queue, job["id"]))["state"] == "completed"
    created = await enqueue(client, queue, "for a live worker", max_attempts=1)
    await asyncio.sleep(0.5)
    view = await get_job(client, queue, created["id"])
    assert view["state"] == "waiting" and view["attempt"] == 0


async def test_a_lease_next_refused_for_too_many_waiters_is_429_after_the_ack(
    settings: Settings, queue: str
) -> None:
    with running_service(dataclasses.replace(settings, max_waiters=1)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            await enqueue(http, queue, "x")
            job = await lease_one(http, queue)
            waiter = asyncio.create_task(lease(http, queue, "other", wait_ms=3000))
            await asyncio.sleep(0.5)
            refused = await ack(http, queue, job, lease_next={"worker": "w1", "wait_ms": 3000})
            assert_problem(refused, 429, "too_many_requests")
            assert (await get_job(http, queue, job["id"]))["state"] == "completed"
            # Repeating is safe: the ack answers as it did, and a lease that need not wait is served.
            assert ok(await ack(http, queue, job, lease_next={"worker": "w1"})) == {
                "id": job["id"],
                "state": "completed",
                "jobs": [],
            }
            assert await waiter == []
