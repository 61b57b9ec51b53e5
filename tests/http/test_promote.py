"""Delayed jobs through HTTP: the job view's run_at and delay_reason (a read and the listing of
delayed jobs), and POST .../jobs/{id}/promote (200, 404, 409, the promoted event, a long poll
woken). Who may promote: tests/http/test_auth.py."""

from __future__ import annotations

import json
from typing import Any

import httpx

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
    woken,
)

HOUR_MS = 3600 * 1000
EVENT_READ_TIMEOUT_S = 10.0


async def promote(client: httpx.AsyncClient, queue: str, job_id: str, **kwargs: Any) -> httpx.Response:
    return await client.post(f"/v1/queues/{queue}/jobs/{job_id}/promote", **kwargs)


async def delayed_listing(client: httpx.AsyncClient, queue: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/queues/{queue}/jobs", params={"state": "delayed"})
    assert response.status_code == 200, response.text
    return response.json()["jobs"]


async def first_event(client: httpx.AsyncClient, queue: str, kind: str, job_id: str) -> dict[str, Any]:
    """The first kept event of this type for the job, read from the oldest kept event."""
    params = {"after": 0, "types": kind, "job": job_id}
    async with client.stream(
        "GET", f"/v1/queues/{queue}/events", params=params, timeout=EVENT_READ_TIMEOUT_S
    ) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                return json.loads(line.removeprefix("data: "))
    raise AssertionError(f"the stream ended before a {kind} event")


async def test_a_delayed_job_shows_when_it_runs_and_promote_makes_it_waiting_now(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, {"n": 1}, id="later", delay_ms=HOUR_MS)
    view = await get_job(client, queue, "later")
    assert (view["state"], view["delay_reason"]) == ("delayed", "delay")
    assert view["run_at"] == view["created_at"] + HOUR_MS
    [listed] = await delayed_listing(client, queue)
    assert (listed["id"], listed["run_at"], listed["delay_reason"]) == ("later", view["run_at"], "delay")

    poll = long_poll(client, queue)
    await wait_for_long_polls(client, 1)
    response = await promote(client, queue, "later")
    assert response.status_code == 200
    assert response.json() == {"id": "later", "state": "waiting"}
    assert [job["id"] for job in await woken(poll)] == ["later"]

    view = await get_job(client, queue, "later")
    assert (view["state"], view["run_at"], view["delay_reason"]) == ("active", None, None)
    assert await delayed_listing(client, queue) == []
    event = await first_event(client, queue, "promoted", "later")
    assert event["type"] == "promoted" and event["queue"] == queue and event["id"] == "later"
    assert isinstance(event["at"], int)


async def test_a_retry_waiting_out_its_backoff_is_marked_and_can_be_promoted(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, id="flaky")
    job = await lease_one(client, queue)
    failed = await job_call(
        client, queue, "flaky", "fail", lease_id=job["lease_id"], error="busy", retry_after_ms=HOUR_MS
    )
    assert failed.json()["state"] == "delayed"
    view = await get_job(client, queue, "flaky")
    assert (view["delay_reason"], view["run_at"]) == ("retry", view["updated_at"] + HOUR_MS)
    assert [job["delay_reason"] for job in await delayed_listing(client, queue)] == ["retry"]

    assert (await promote(client, queue, "flaky", json={})).json() == {"id": "flaky", "state": "waiting"}
    assert (await lease_one(client, queue))["attempt"] == 2


async def test_promote_of_a_job_that_is_not_delayed_is_409_and_changes_nothing(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, id="running")
    await enqueue(client, queue, id="waiting")
    await lease_one(client, queue)
    for job_id in ("running", "waiting"):
        before = await get_job(client, queue, job_id)
        assert_problem(await promote(client, queue, job_id), 409, "not_delayed")
        assert await get_job(client, queue, job_id) == before
    assert (await counts(client, queue))["waiting"] == 1


async def test_promote_of_a_missing_job_is_404(client: httpx.AsyncClient, queue: str) -> None:
    assert_problem(await promote(client, queue, "nothing-here"), 404, "job_not_found")
    assert await lease(client, queue) == []
