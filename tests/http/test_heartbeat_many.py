"""Batch heartbeat: POST /v1/queues/{queue}/heartbeat renews many leases in one call (contract v1.1)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from echomq_http.core import limits
from tests.support import assert_problem, enqueue, get_job, lease, lease_one

WRONG_LEASE = "0" * 32


async def heartbeat_many(client: httpx.AsyncClient, queue: str, leases: list[dict[str, Any]]) -> Any:
    return await client.post(f"/v1/queues/{queue}/heartbeat", json={"leases": leases})


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def test_every_live_lease_is_renewed(client: httpx.AsyncClient, queue: str) -> None:
    for n in range(3):
        await enqueue(client, queue, n)
    jobs = await lease(client, queue, "w1", max_jobs=3, lease_ms=5000)
    leases = [{"id": job["id"], "lease_id": job["lease_id"], "lease_ms": 60_000} for job in jobs]
    del leases[2]["lease_ms"]  # renewed by its own length

    results = ok(await heartbeat_many(client, queue, leases))["results"]

    assert [set(result) for result in results] == [
        {"id", "ok", "lease_id", "lease_expires_at", "cancel_requested"}
    ] * 3
    for job, result in zip(jobs, results, strict=True):
        assert (result["id"], result["ok"], result["lease_id"]) == (job["id"], True, job["lease_id"])
        assert result["cancel_requested"] is False
        view = await get_job(client, queue, job["id"])
        assert (view["state"], view["lease_expires_at"]) == ("active", result["lease_expires_at"])
    for result, job in zip(results[:2], jobs[:2], strict=True):
        assert result["lease_expires_at"] >= job["lease_expires_at"] + 50_000
    assert 0 <= results[2]["lease_expires_at"] - jobs[2]["lease_expires_at"] < 5000


async def test_lost_leases_are_reported_each_in_order(client: httpx.AsyncClient, queue: str) -> None:
    for n in range(2):
        await enqueue(client, queue, n)
    held = await lease(client, queue, "w1", max_jobs=2)
    leases = [
        {"id": "nope", "lease_id": WRONG_LEASE},
        {"id": held[0]["id"], "lease_id": held[0]["lease_id"]},
        {"id": held[1]["id"], "lease_id": WRONG_LEASE},
        {"id": held[1]["id"], "lease_id": held[1]["lease_id"], "lease_ms": 20_000},
    ]
    results = ok(await heartbeat_many(client, queue, leases))["results"]
    assert [(r["id"], r["ok"], r.get("code")) for r in results] == [
        ("nope", False, "job_not_found"),
        (held[0]["id"], True, None),
        (held[1]["id"], False, "lease_lost"),
        (held[1]["id"], True, None),
    ]
    assert set(results[0]) == set(results[2]) == {"id", "ok", "code"}


async def test_an_expired_lease_is_not_renewed(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "short")
    await enqueue(client, queue, "long")
    short = await lease_one(client, queue, "w1", lease_ms=limits.MIN_LEASE_MS)
    long = await lease_one(client, queue, "w1", lease_ms=60_000)
    await asyncio.sleep(limits.MIN_LEASE_MS / 1000 + 0.3)
    leases = [{"id": job["id"], "lease_id": job["lease_id"]} for job in (short, long)]
    results = ok(await heartbeat_many(client, queue, leases))["results"]
    assert [(r["ok"], r.get("code")) for r in results] == [(False, "lease_lost"), (True, None)]
    view = await get_job(client, queue, short["id"])
    assert view["state"] != "active" or view["lease_expires_at"] == short["lease_expires_at"]


async def test_batch_size_is_1_to_1000(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, "x")
    job = await lease_one(client, queue)
    mine = {"id": job["id"], "lease_id": job["lease_id"]}
    for size in (0, limits.MAX_BATCH + 1):
        too_many = [mine] * size
        assert_problem(await heartbeat_many(client, queue, too_many), 400, "invalid_request")
    assert (await get_job(client, queue, job["id"]))["lease_expires_at"] == job["lease_expires_at"]
    full = ok(await heartbeat_many(client, queue, [mine] * limits.MAX_BATCH))["results"]
    assert len(full) == limits.MAX_BATCH and all(result["ok"] for result in full)


async def test_progress_is_stored_and_cancellation_reported_per_lease(
    client: httpx.AsyncClient, queue: str
) -> None:
    for n in range(2):
        await enqueue(client, queue, n)
    first, second = await lease(client, queue, "w1", max_jobs=2)
    cancelled = await client.post(f"/v1/queues/{queue}/jobs/{second['id']}/cancel", json={})
    assert cancelled.json() == {"id": second["id"], "state": "active", "cancel_requested": True}
    beats = [
        {"id": first["id"], "lease_id": first["lease_id"], "progress": {"done": 1, "of": 2}},
        {"id": second["id"], "lease_id": second["lease_id"]},
    ]
    results = ok(await heartbeat_many(client, queue, beats))["results"]
    assert [result["cancel_requested"] for result in results] == [False, True]
    assert (await get_job(client, queue, first["id"]))["progress"] == {"done": 1, "of": 2}
    assert (await get_job(client, queue, second["id"]))["progress"] is None
    # A later heartbeat without progress keeps the last one.
    ok(await heartbeat_many(client, queue, [{"id": first["id"], "lease_id": first["lease_id"]}]))
    assert (await get_job(client, queue, first["id"]))["progress"] == {"done": 1, "of": 2}
