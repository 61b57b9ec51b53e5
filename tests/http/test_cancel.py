"""POST .../jobs/{id}/cancel in every state, and what each later call of an active job's worker
makes of a cancellation: ack completes, fail / release / operator release / an expired lease
cancel (never retried), heartbeats say so."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from echomq_http.core import limits
from tests.support import assert_problem, counts, enqueue, eventually, get_job, job_call, lease, lease_one


async def cancel(client: httpx.AsyncClient, queue: str, job_id: str, **body: Any) -> httpx.Response:
    return await client.post(f"/v1/queues/{queue}/jobs/{job_id}/cancel", json=body)


async def events_of(client: httpx.AsyncClient, queue: str, job_id: str) -> list[str]:
    """The job's event types so far, read from the oldest kept event (the stream is cut short by
    a read timeout once the kept events are sent)."""
    kinds: list[str] = []
    try:
        async with client.stream(
            "GET", f"/v1/queues/{queue}/events", params={"after": 0, "job": job_id}, timeout=1.0
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    kinds.append(line.removeprefix("event: "))
    except httpx.ReadTimeout:
        pass
    return kinds


@pytest.mark.parametrize("delayed", [False, True])
async def test_a_waiting_or_delayed_job_is_cancelled_at_once_and_never_leased(
    client: httpx.AsyncClient, queue: str, delayed: bool
) -> None:
    await enqueue(client, queue, {"n": 1}, id="c", delay_ms=60_000 if delayed else 0)
    await enqueue(client, queue, {"n": 2}, id="other")
    response = await cancel(client, queue, "c", reason="customer left")
    assert response.status_code == 200
    assert response.json() == {"id": "c", "state": "cancelled", "cancel_requested": True}
    view = await get_job(client, queue, "c")
    assert view["state"] == "cancelled" and view["error"] == "customer left" and view["cancel_requested"]
    assert view["finished_at"] is not None
    assert [job["id"] for job in await lease(client, queue, max_jobs=10)] == ["other"]
    assert (await counts(client, queue))["cancelled"] == 1
    assert await events_of(client, queue, "c") == ["enqueued", "cancelled"]
    # Again: nothing changes.
    assert (await cancel(client, queue, "c")).json() == {
        "id": "c",
        "state": "cancelled",
        "cancel_requested": True,
    }
    assert await events_of(client, queue, "c") == ["enqueued", "cancelled"]
    # A cancelled job can be deleted, and its id used again.
    assert (await client.delete(f"/v1/queues/{queue}/jobs/c")).status_code == 204
    assert (await counts(client, queue))["cancelled"] == 0


async def test_a_finished_job_is_left_as_it_is(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="done")
    job = await lease_one(client, queue)
    await job_call(client, queue, "done", "ack", lease_id=job["lease_id"])
    await enqueue(client, queue, id="dead", max_attempts=1)
    job = await lease_one(client, queue)
    await job_call(client, queue, "dead", "fail", lease_id=job["lease_id"], error="x")
    for job_id, state in (("done", "completed"), ("dead", "failed")):
        before = await get_job(client, queue, job_id)
        assert (await cancel(client, queue, job_id)).json() == {
            "id": job_id,
            "state": state,
            "cancel_requested": False,
        }
        assert await get_job(client, queue, job_id) == before


async def test_cancel_of_a_missing_job_and_bad_reasons(client: httpx.AsyncClient, queue: str) -> None:
    assert_problem(await cancel(client, queue, "nope"), 404, "job_not_found")
    await enqueue(client, queue, id="a")
    assert_problem(
        await cancel(client, queue, "a", reason="x" * (limits.MAX_CANCEL_REASON_BYTES + 1)),
        400,
        "invalid_request",
    )
    assert_problem(await cancel(client, queue, "a", reason=5), 400, "invalid_request")
    assert_problem(await cancel(client, queue, "a", extra=1), 400, "invalid_request")
    assert (await get_job(client, queue, "a"))["state"] == "waiting"
    # No body at all is a cancel without a reason.
    response = await client.post(f"/v1/queues/{queue}/jobs/a/cancel")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"


async def active_with_cancel_requested(
    client: httpx.AsyncClient, queue: str, **lease_fields: Any
) -> dict[str, Any]:
    await enqueue(client, queue, id="a", max_attempts=3)
    job = await lease_one(client, queue, "w1", **lease_fields)
    for _ in range(2):  # the second changes nothing
        response = await cancel(client, queue, "a", reason="stop it")
        assert response.json() == {"id": "a", "state": "active", "cancel_requested": True}
    beat = await job_call(client, queue, "a", "heartbeat", lease_id=job["lease_id"])
    assert beat.json()["cancel_requested"] is True
    view = await get_job(client, queue, "a")
    assert view["state"] == "active" and view["cancel_requested"] is True
    return job


async def test_an_active_job_acked_after_a_cancel_request_completes(
    client: httpx.AsyncClient, queue: str
) -> None:
    job = await active_with_cancel_requested(client, queue)
    assert (await job_call(client, queue, "a", "ack", lease_id=job["lease_id"], result=1)).status_code == 200
    view = await get_job(client, queue, "a")
    assert view["state"] == "completed" and view["result"] == 1
    assert await events_of(client, queue, "a") == ["enqueued", "leased", "cancel_requested", "completed"]


@pytest.mark.parametrize("retry", [True, False])
async def test_an_active_job_that_fails_after_a_cancel_request_is_cancelled(
    client: httpx.AsyncClient, queue: str, retry: bool
) -> None:
    job = await active_with_cancel_requested(client, queue)
    body = {"lease_id": job["lease_id"], "error": "interrupted", "retry": retry}
    for _ in range(2):  # a repeat answers as the first did
        response = await job_call(client, queue, "a", "fail", **body)
        assert response.json() == {"id": "a", "state": "cancelled", "attempt": 1}
    view = await get_job(client, queue, "a")
    assert view["state"] == "cancelled" and view["error"] == "stop it"
    assert await lease(client, queue) == []
    assert await events_of(client, queue, "a") == ["enqueued", "leased", "cancel_requested", "cancelled"]


async def test_an_active_job_released_after_a_cancel_request_is_cancelled(
    client: httpx.AsyncClient, queue: str
) -> None:
    job = await active_with_cancel_requested(client, queue)
    for _ in range(2):
        response = await job_call(client, queue, "a", "release", lease_id=job["lease_id"])
        assert response.json() == {"id": "a", "state": "cancelled"}
    assert (await get_job(client, queue, "a"))["state"] == "cancelled"
    assert await lease(client, queue) == []
    assert await events_of(client, queue, "a") == ["enqueued", "leased", "cancel_requested", "cancelled"]


async def test_an_operator_release_cancels_a_job_whose_cancel_was_requested(
    client: httpx.AsyncClient, queue: str
) -> None:
    await active_with_cancel_requested(client, queue)
    await enqueue(client, queue, id="b")
    await lease_one(client, queue, "w1")
    response = await client.post(f"/v1/queues/{queue}/workers/w1/release")
    assert response.json() == {"released": ["b"]}
    assert (await get_job(client, queue, "a"))["state"] == "cancelled"
    assert (await get_job(client, queue, "b"))["state"] == "waiting"
    assert await events_of(client, queue, "a") == ["enqueued", "leased", "cancel_requested", "cancelled"]


async def test_an_expired_lease_cancels_a_job_whose_cancel_was_requested(
    client: httpx.AsyncClient, queue: str
) -> None:
    await active_with_cancel_requested(client, queue, lease_ms=1000)

    async def cancelled() -> bool:
        return (await get_job(client, queue, "a"))["state"] == "cancelled"

    await eventually(cancelled, "the sweep to cancel the job")
    view = await get_job(client, queue, "a")
    assert view["attempt"] == 1 and view["stalls"] == 0
    assert await events_of(client, queue, "a") == ["enqueued", "leased", "cancel_requested", "cancelled"]
