"""The job lifecycle through HTTP, as a client sees it."""

from __future__ import annotations

import asyncio

import pytest
from httpx import AsyncClient

from tests.support import assert_problem, counts, enqueue, get_job, job_call, lease, lease_one


async def test_enqueue_lease_heartbeat_ack(client: AsyncClient, queue: str) -> None:
    created = await enqueue(client, queue, {"to": "ada"}, name="email")
    assert created == {"id": created["id"], "queue": queue, "state": "waiting", "created": True}

    job = await lease_one(client, queue, "w1", lease_ms=5000)
    assert job["id"] == created["id"] and job["name"] == "email" and job["payload"] == {"to": "ada"}
    assert job["attempt"] == 1 and job["max_attempts"] == 3 and job["fence"] == 1
    assert len(job["lease_id"]) == 32 and job["lease_expires_at"] > job["enqueued_at"]
    assert (await get_job(client, queue, job["id"]))["state"] == "active"

    beat = await job_call(client, queue, job["id"], "heartbeat", lease_id=job["lease_id"], lease_ms=60_000)
    assert beat.status_code == 200
    assert beat.json()["lease_expires_at"] >= job["lease_expires_at"] + 50_000

    done = await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"], result={"sent": True})
    assert done.status_code == 200 and done.json() == {"id": job["id"], "state": "completed"}
    view = await get_job(client, queue, job["id"])
    assert view["state"] == "completed" and view["result"] == {"sent": True}
    assert view["worker"] is None and view["lease_expires_at"] is None
    assert await counts(client, queue) == {
        "waiting": 0,
        "delayed": 0,
        "active": 0,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }


async def test_enqueue_is_idempotent_by_id(client: AsyncClient, queue: str) -> None:
    first = await client.post(f"/v1/queues/{queue}/jobs", json={"id": "order-7", "payload": 1})
    again = await client.post(f"/v1/queues/{queue}/jobs", json={"id": "order-7", "payload": 2})
    assert first.status_code == 201 and first.json()["created"] is True
    assert again.status_code == 200 and again.json() == {
        "id": "order-7",
        "queue": queue,
        "state": "waiting",
        "created": False,
    }
    job = await lease_one(client, queue)
    assert job["payload"] == 1
    again = await client.post(f"/v1/queues/{queue}/jobs", json={"id": "order-7", "payload": 3})
    assert again.status_code == 200 and again.json()["state"] == "active"


async def test_enqueue_many_answers_in_order(client: AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 0, id="dup")
    jobs = [{"payload": i} for i in range(5)] + [
        {"id": "dup", "payload": "x"},
        {"payload": 9, "delay_ms": 60_000},
    ]
    response = await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
    assert response.status_code == 200
    answers = response.json()["jobs"]
    assert [a["created"] for a in answers] == [True] * 5 + [False, True]
    assert answers[-1]["state"] == "delayed"
    assert len({a["id"] for a in answers}) == 7
    leased = await lease(client, queue, max_jobs=100)
    assert [job["payload"] for job in leased] == [0, 0, 1, 2, 3, 4]


async def test_ack_retry_with_same_lease_is_idempotent(client: AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "x")
    job = await lease_one(client, queue)
    for _ in range(2):
        response = await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"])
        assert response.status_code == 200
    assert_problem(await job_call(client, queue, job["id"], "ack", lease_id="f" * 32), 409, "lease_lost")


async def test_ack_many_reports_each_item(client: AsyncClient, queue: str) -> None:
    for i in range(3):
        await enqueue(client, queue, i)
    jobs = await lease(client, queue, max_jobs=3)
    acks = [{"id": job["id"], "lease_id": job["lease_id"], "result": job["payload"]} for job in jobs]
    acks[1]["lease_id"] = "0" * 32
    acks.append({"id": "missing", "lease_id": "0" * 32})
    response = await client.post(f"/v1/queues/{queue}/ack", json={"acks": acks})
    assert response.status_code == 200
    assert response.json()["results"] == [
        {"id": jobs[0]["id"], "ok": True, "state": "completed"},
        {"id": jobs[1]["id"], "ok": False, "code": "lease_lost"},
        {"id": jobs[2]["id"], "ok": True, "state": "completed"},
        {"id": "missing", "ok": False, "code": "job_not_found"},
    ]
    assert (await counts(client, queue))["active"] == 1


async def test_priorities_then_fifo(client: AsyncClient, queue: str) -> None:
    for payload, priority in [("a0", 0), ("b5", 5), ("c0", 0), ("d9", 9), ("e5", 5), ("f1000", 1000)]:
        await enqueue(client, queue, payload, priority=priority)
    leased = await lease(client, queue, max_jobs=10)
    assert [job["payload"] for job in leased] == ["f1000", "d9", "b5", "e5", "a0", "c0"]


async def test_release_puts_job_first_without_spending_an_attempt(client: AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "first")
    await enqueue(client, queue, "second")
    job = await lease_one(client, queue)
    released = await job_call(client, queue, job["id"], "release", lease_id=job["lease_id"])
    assert released.status_code == 200 and released.json() == {"id": job["id"], "state": "waiting"}
    again = await lease_one(client, queue, "w2")
    assert again["id"] == job["id"] and again["attempt"] == 1 and again["fence"] == 2
    assert again["lease_id"] != job["lease_id"]
    assert_problem(
        await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"]), 409, "lease_lost"
    )


async def test_fail_retries_with_backoff_then_dead_letters(client: AsyncClient, queue: str) -> None:
    created = await enqueue(client, queue, "x", max_attempts=2, backoff={"type": "fixed", "delay_ms": 0})
    job = await lease_one(client, queue)
    failed = await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="boom")
    assert failed.json() == {"id": created["id"], "state": "waiting", "attempt": 1}
    job = await lease_one(client, queue)
    assert job["attempt"] == 2
    failed = await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="boom again")
    assert failed.json() == {"id": created["id"], "state": "failed", "attempt": 2}
    view = await get_job(client, queue, job["id"])
    assert view["state"] == "failed" and view["error"] == "boom again"
    page = (await client.get(f"/v1/queues/{queue}/failed")).json()
    assert page["total"] == 1 and page["jobs"][0]["id"] == job["id"]


async def test_fail_default_backoff_delays_and_retry_false_dead_letters(
    client: AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, "x")
    job = await lease_one(client, queue)
    failed = await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e")
    assert failed.json()["state"] == "delayed"
    assert await lease(client, queue) == []
    await enqueue(client, queue, "y")
    job = await lease_one(client, queue)
    failed = await job_call(
        client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e", retry=False
    )
    assert failed.json()["state"] == "failed"
    assert (await counts(client, queue))["failed"] == 1


async def test_retry_after_ms_schedules_the_retry(client: AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "x")
    job = await lease_one(client, queue)
    failed = await job_call(
        client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e", retry_after_ms=300
    )
    assert failed.json()["state"] == "delayed"
    again = await lease_one(client, queue, wait_ms=5000)
    assert again["id"] == job["id"] and again["attempt"] == 2


async def test_delayed_job_becomes_leasable(client: AsyncClient, queue: str) -> None:
    created = await enqueue(client, queue, "later", delay_ms=300)
    assert created["state"] == "delayed"
    assert await lease(client, queue) == []
    job = await lease_one(client, queue, wait_ms=5000)
    assert job["id"] == created["id"]


async def test_pause_and_resume(client: AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "x")
    paused = await client.post(f"/v1/queues/{queue}/pause")
    assert paused.json() == {"name": queue, "paused": True}
    assert await lease(client, queue) == []
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is True
    waiter = asyncio.create_task(lease(client, queue, wait_ms=5000))
    await asyncio.sleep(0.2)
    resumed = await client.post(f"/v1/queues/{queue}/resume")
    assert resumed.json() == {"name": queue, "paused": False}
    assert len(await waiter) == 1


async def test_redrive_resets_attempts(client: AsyncClient, queue: str) -> None:
    ids = []
    for i in range(3):
        ids.append((await enqueue(client, queue, i, max_attempts=1))["id"])
        job = await lease_one(client, queue)
        await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e")
    assert (await counts(client, queue))["failed"] == 3
    one = await client.post(f"/v1/queues/{queue}/failed/retry", json={"ids": [ids[0], "nope"]})
    assert one.json() == {"retried": [ids[0]]}
    rest = await client.post(f"/v1/queues/{queue}/failed/retry")
    assert sorted(rest.json()["retried"]) == sorted(ids[1:])
    jobs = await lease(client, queue, max_jobs=10)
    assert [job["attempt"] for job in jobs] == [1, 1, 1]


async def dead_letter(client: AsyncClient, queue: str, ids: list[str]) -> None:
    for job_id in ids:
        await enqueue(client, queue, job_id, id=job_id, max_attempts=1)
        job = await lease_one(client, queue)
        failed = await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e")
        assert failed.json()["state"] == "failed"


@pytest.mark.parametrize(
    "no_ids", [None, b"", b"{}", b'{"ids": null}'], ids=["no body", "empty body", "no ids", "null ids"]
)
async def test_redrive_of_no_ids_redrives_nothing_and_without_ids_everything(
    client: AsyncClient, queue: str, no_ids: bytes | None
) -> None:
    # Ids in the order they fail: the dead letters' order even when two fail in the same ms.
    ids = ["dead-0", "dead-1", "dead-2"]
    await dead_letter(client, queue, ids)
    path = f"/v1/queues/{queue}/failed/retry"

    nothing = await client.post(path, json={"ids": []})
    assert nothing.status_code == 200 and nothing.json() == {"retried": []}
    assert await counts(client, queue) == {
        "waiting": 0,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 3,
        "cancelled": 0,
        "waiting_children": 0,
    }

    if no_ids is None:
        everything = await client.post(path)
    else:
        everything = await client.post(path, content=no_ids, headers={"content-type": "application/json"})
    assert everything.status_code == 200 and everything.json() == {"retried": ids}  # oldest failure first
    assert await counts(client, queue) == {
        "waiting": 3,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    for job_id in ids:
        view = await get_job(client, queue, job_id)
        assert (view["state"], view["attempt"], view["error"]) == ("waiting", 0, None)


async def test_delete(client: AsyncClient, queue: str) -> None:
    waiting = await enqueue(client, queue, "w")
    delayed = await enqueue(client, queue, "d", delay_ms=60_000)
    for job_id in (waiting["id"], delayed["id"]):
        assert (await client.delete(f"/v1/queues/{queue}/jobs/{job_id}")).status_code == 204
        assert_problem(await client.get(f"/v1/queues/{queue}/jobs/{job_id}"), 404, "job_not_found")
    await enqueue(client, queue, "a")
    job = await lease_one(client, queue)
    assert_problem(await client.delete(f"/v1/queues/{queue}/jobs/{job['id']}"), 409, "job_active")
    assert_problem(await client.delete(f"/v1/queues/{queue}/jobs/nope"), 404, "job_not_found")
    assert await counts(client, queue) == {
        "waiting": 0,
        "delayed": 0,
        "active": 1,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }


async def test_ledger_and_workers_views(client: AsyncClient, queue: str) -> None:
    for i in range(4):
        await enqueue(client, queue, i)
    first = await lease_one(client, queue, "alpha")
    second = await lease(client, queue, "beta", max_jobs=2)
    third = await lease_one(client, queue, "alpha")
    ledger = (await client.get(f"/v1/queues/{queue}/active")).json()["jobs"]
    assert [entry["id"] for entry in ledger] == [first["id"], *(j["id"] for j in second), third["id"]]
    assert [entry["worker"] for entry in ledger] == ["alpha", "beta", "beta", "alpha"]
    assert all(entry["lease_expires_at"] > entry["leased_at"] for entry in ledger)
    alpha = (await client.get(f"/v1/queues/{queue}/active", params={"worker": "alpha"})).json()["jobs"]
    assert [entry["id"] for entry in alpha] == [first["id"], third["id"]]
    page = (await client.get(f"/v1/queues/{queue}/active", params={"offset": 1, "limit": 2})).json()["jobs"]
    assert [entry["id"] for entry in page] == [j["id"] for j in second]
    workers = (await client.get(f"/v1/queues/{queue}/workers")).json()["workers"]
    assert workers == [
        {"worker": "alpha", "jobs": sorted([first["id"], third["id"]]), "session": None},
        {"worker": "beta", "jobs": sorted(j["id"] for j in second), "session": None},
    ]


async def test_operator_releases_a_dead_workers_jobs(client: AsyncClient, queue: str) -> None:
    for i in range(3):
        await enqueue(client, queue, i)
    held = await lease(client, queue, "doomed", max_jobs=2)
    response = await client.post(f"/v1/queues/{queue}/workers/doomed/release")
    assert response.status_code == 200
    assert response.json() == {"released": [job["id"] for job in held]}
    for job in held:
        assert_problem(
            await job_call(client, queue, job["id"], "heartbeat", lease_id=job["lease_id"]), 409, "lease_lost"
        )
    again = await lease(client, queue, "healthy", max_jobs=3)
    assert [job["id"] for job in again[:2]] == [job["id"] for job in held]
    assert [job["attempt"] for job in again] == [1, 1, 1]
    assert (await client.get(f"/v1/queues/{queue}/workers")).json()["workers"] == [
        {"worker": "healthy", "jobs": sorted(job["id"] for job in again), "session": None}
    ]


async def test_queue_listing(client: AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 1)
    listing = (await client.get("/v1/queues")).json()["queues"]
    mine = [entry for entry in listing if entry["name"] == queue]
    assert mine == [
        {
            "name": queue,
            "paused": False,
            "counts": {
                "waiting": 1,
                "delayed": 0,
                "active": 0,
                "completed": 0,
                "failed": 0,
                "cancelled": 0,
                "waiting_children": 0,
            },
        }
    ]
    unknown = (await client.get("/v1/queues/never-used-queue")).json()
    assert unknown["counts"] == {
        "waiting": 0,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }


async def test_service_endpoints(client: AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200 and "emq_sweep_duration_seconds_count" in metrics.text
    assert metrics.headers["content-type"].startswith("text/plain")
