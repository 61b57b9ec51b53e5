"""Waiting for a job's outcome (GET .../jobs/{id}?wait_ms=N) and the per-minute history, through
HTTP: no missed outcome however close the finish is to the wait's start, 404 when deleted
meanwhile, the same history on two replicas."""

from __future__ import annotations

import asyncio
import time

import httpx

from echomq_http.config import Settings
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.support import assert_problem, enqueue, job_call, lease_one
from tests.support.service import running_service

LONG_WAIT_MS = 20_000


async def wait(client: httpx.AsyncClient, queue: str, job_id: str, wait_ms: int) -> httpx.Response:
    return await client.get(f"/v1/queues/{queue}/jobs/{job_id}", params={"wait_ms": wait_ms}, timeout=90)


async def test_a_wait_answers_when_the_job_completes(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="a")
    job = await lease_one(client, queue)
    waiting = asyncio.create_task(wait(client, queue, "a", LONG_WAIT_MS))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    started = time.monotonic()
    await job_call(client, queue, "a", "ack", lease_id=job["lease_id"], result={"ok": True})
    response = await waiting
    assert response.status_code == 200
    assert response.json()["state"] == "completed" and response.json()["result"] == {"ok": True}
    assert time.monotonic() - started < LONG_WAIT_MS / 2000  # woken, not timed out


async def test_no_outcome_is_missed_when_it_happens_as_the_wait_starts(
    client: httpx.AsyncClient, queue: str
) -> None:
    for round_ in range(30):
        job_id = f"r{round_}"
        await enqueue(client, queue, id=job_id)
        job = await lease_one(client, queue)
        started = time.monotonic()
        response, acked = await asyncio.gather(
            wait(client, queue, job_id, LONG_WAIT_MS),
            job_call(client, queue, job_id, "ack", lease_id=job["lease_id"]),
        )
        assert acked.status_code == 200
        assert response.json()["state"] == "completed"
        assert time.monotonic() - started < LONG_WAIT_MS / 2000, f"round {round_} waited out its wait_ms"


async def test_a_final_job_answers_at_once_and_a_missing_one_is_404(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, id="d", max_attempts=1)
    job = await lease_one(client, queue)
    await job_call(client, queue, "d", "fail", lease_id=job["lease_id"], error="x")
    started = time.monotonic()
    assert (await wait(client, queue, "d", LONG_WAIT_MS)).json()["state"] == "failed"
    assert time.monotonic() - started < 5
    assert_problem(await wait(client, queue, "nope", LONG_WAIT_MS), 404, "job_not_found")
    for bad in ("-1", "60001", "x"):
        response = await client.get(f"/v1/queues/{queue}/jobs/d", params={"wait_ms": bad})
        assert_problem(response, 400, "invalid_request")


async def test_a_wait_ends_with_404_when_the_job_is_deleted(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="x")
    waiting = asyncio.create_task(wait(client, queue, "x", LONG_WAIT_MS))
    await asyncio.sleep(0.3)
    assert (await client.delete(f"/v1/queues/{queue}/jobs/x")).status_code == 204
    assert_problem(await waiting, 404, "job_not_found")


async def test_a_wait_that_runs_out_answers_the_state_then(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="w")
    started = time.monotonic()
    response = await wait(client, queue, "w", 300)
    assert response.status_code == 200 and response.json()["state"] == "waiting"
    assert time.monotonic() - started >= 0.3


async def test_a_cancel_ends_a_wait(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="c", delay_ms=60_000)
    waiting = asyncio.create_task(wait(client, queue, "c", LONG_WAIT_MS))
    await asyncio.sleep(0.3)
    await client.post(f"/v1/queues/{queue}/jobs/c/cancel", json={})
    assert (await waiting).json()["state"] == "cancelled"


async def test_waits_work_without_events(redis_url: str, queue: str) -> None:
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS, events_maxlen=0)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            await enqueue(client, queue, id="a")
            job = await lease_one(client, queue)
            waiting = asyncio.create_task(wait(client, queue, "a", LONG_WAIT_MS))
            await asyncio.sleep(0.3)
            await job_call(client, queue, "a", "ack", lease_id=job["lease_id"])
            assert (await waiting).json()["state"] == "completed"


async def test_history_counts_in_redis_are_the_same_on_two_replicas(redis_url: str, queue: str) -> None:
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
    with running_service(settings) as url_a, running_service(settings) as url_b:
        async with httpx.AsyncClient(base_url=url_a) as a, httpx.AsyncClient(base_url=url_b) as b:
            jobs = [{"payload": i} for i in range(5)]
            assert (await a.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).status_code == 200
            for _ in range(3):
                job = await lease_one(b, queue)
                await job_call(b, queue, job["id"], "ack", lease_id=job["lease_id"])
            job = await lease_one(a, queue)
            await job_call(a, queue, job["id"], "fail", lease_id=job["lease_id"], error="x", retry=False)
            await lease_one(b, queue, lease_ms=1000)  # its lease expires: reclaimed

            async def history(client: httpx.AsyncClient) -> list[dict[str, int]]:
                response = await client.get(f"/v1/queues/{queue}/history", params={"minutes": 3})
                assert response.status_code == 200
                return response.json()["minutes"]

            deadline = time.monotonic() + 30
            while True:
                from_a, from_b = await history(a), await history(b)
                totals = {
                    kind: sum(m[kind] for m in from_a)
                    for kind in ("enqueued", "completed", "failed", "reclaimed")
                }
                if totals["reclaimed"] == 1 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert totals == {"enqueued": 5, "completed": 3, "failed": 1, "reclaimed": 1}
            assert from_a == from_b or [m["at"] for m in from_a] != [
                m["at"] for m in from_b
            ]  # a minute turned
            assert len(from_a) == 3 and [m["at"] for m in from_a] == sorted(m["at"] for m in from_a)
            assert all(m["at"] % 60_000 == 0 for m in from_a)
            assert from_a[1]["at"] - from_a[0]["at"] == 60_000
            assert_problem(
                await a.get(f"/v1/queues/{queue}/history", params={"minutes": 1441}), 400, "invalid_request"
            )
            assert_problem(
                await a.get(f"/v1/queues/{queue}/history", params={"minutes": 0}), 400, "invalid_request"
            )
            default = (await a.get(f"/v1/queues/{queue}/history")).json()["minutes"]
            assert len(default) == 60
