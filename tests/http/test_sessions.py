"""Worker sessions through HTTP: heartbeat, lapse, quiet, end of a session, the workers listing,
and max_stalls."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from redis.asyncio import Redis

from echomq_http.store.keys import keys_of
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.http.test_events import subscribed
from tests.support import assert_problem, enqueue, eventually, get_job, job_call, lease, lease_one

SHORT_TTL_MS = 1000
LONG_LEASE_MS = 60_000  # a lease that never expires during a test: only a lapse takes its job
# On top of the contract's ttl + sweep interval + 1 s, which already allows for a late sweep. The
# test times from just after the last heartbeat's answer (the session's ttl began before) to the
# events' arrival on the feed, which is pushed (XREAD BLOCK), not polled: the margin only covers
# that delivery and the test's own scheduling on a loaded 2-core machine.
LAPSE_MARGIN_S = 0.5


def worker_url(queue: str, worker: str) -> str:
    return f"/v1/queues/{queue}/workers/{worker}"


async def heartbeat(client: httpx.AsyncClient, queue: str, worker: str = "w1", **body: Any) -> dict[str, Any]:
    response = await client.post(worker_url(queue, worker) + "/heartbeat", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def workers(client: httpx.AsyncClient, queue: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/queues/{queue}/workers")
    assert response.status_code == 200
    return response.json()["workers"]


async def server_ms(redis_client: Redis) -> int:
    seconds, micros = await redis_client.time()
    return seconds * 1000 + micros // 1000


async def test_a_heartbeat_starts_and_renews_a_session(
    client: httpx.AsyncClient, queue: str, redis_client: Redis
) -> None:
    before = await server_ms(redis_client)
    started = await heartbeat(client, queue, ttl_ms=5000, info={"host": "h1", "pid": 42})
    assert started == {
        "worker": "w1",
        "session_expires_at": started["session_expires_at"],
        "state": "running",
    }
    assert before + 5000 <= started["session_expires_at"] <= await server_ms(redis_client) + 5000

    renewed = await heartbeat(client, queue, ttl_ms=60_000)
    assert (
        renewed["state"] == "running"
        and renewed["session_expires_at"] >= started["session_expires_at"] + 50_000
    )

    default = await client.post(worker_url(queue, "w2") + "/heartbeat")  # no body: the defaults
    assert default.status_code == 200
    assert default.json()["session_expires_at"] >= await server_ms(redis_client) + 29_000

    [first, second] = await workers(client, queue)
    assert first["jobs"] == [] and first["session"]["info"] == {"host": "h1", "pid": 42}  # info kept
    assert first["session"]["state"] == "running"
    assert first["session"]["expires_at"] == renewed["session_expires_at"]
    assert first["session"]["started_at"] <= first["session"]["last_seen_at"] < first["session"]["expires_at"]
    assert second["worker"] == "w2" and second["session"]["info"] is None


async def test_a_lapse_returns_all_the_workers_jobs_in_time(
    client: httpx.AsyncClient, queue: str, redis_client: Redis
) -> None:
    for i in range(3):
        await enqueue(client, queue, i, id=f"j{i}")
    await enqueue(client, queue, 9, id="last", max_attempts=1)
    session = await heartbeat(client, queue, ttl_ms=SHORT_TTL_MS)
    started = time.monotonic()
    jobs = await lease(client, queue, "w1", max_jobs=4, lease_ms=LONG_LEASE_MS)
    other = await enqueue(client, queue, 5, id="other")
    held_by_other = await lease_one(client, queue, "w2", lease_ms=LONG_LEASE_MS)
    assert held_by_other["id"] == other["id"]

    async with subscribed(client, queue, types="failed,reclaimed", after=0) as feed:
        events = await feed.until("failed", "last")
        while len([event for event in events if event.event == "reclaimed"]) < 3:
            events.append(await feed.next())
    elapsed_s = time.monotonic() - started
    assert elapsed_s < (SHORT_TTL_MS + TEST_SWEEP_INTERVAL_MS + 1000) / 1000 + LAPSE_MARGIN_S
    # In time, and not before its time: by Redis's clock, no job was taken before the lapse.
    assert all(event.data["at"] >= session["session_expires_at"] for event in events)

    for i in range(3):
        view = await get_job(client, queue, f"j{i}")
        assert view["state"] == "waiting" and view["stalls"] == 1 and view["attempt"] == 1
        assert "session lapsed" in view["error"]
    [failed] = [event.data for event in events if event.event == "failed"]
    assert failed["reason"] == "lease_expired"
    assert (await get_job(client, queue, "last"))["state"] == "failed"
    # The leases are lost; another worker's lease is untouched; the lapsed worker is gone.
    for job in jobs:
        refused = await job_call(client, queue, job["id"], "heartbeat", lease_id=job["lease_id"])
        assert_problem(refused, 409, "lease_lost")
    assert (await get_job(client, queue, "other"))["state"] == "active"
    assert [entry["worker"] for entry in await workers(client, queue)] == ["w2"]
    assert await redis_client.exists(keys_of(queue).session("w1")) == 0


async def test_a_renewed_session_keeps_its_jobs(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 1, id="a")
    await heartbeat(client, queue, ttl_ms=SHORT_TTL_MS)
    job = await lease_one(client, queue, lease_ms=LONG_LEASE_MS)
    for _ in range(8):  # 2.4 s: past ttl + sweep interval + 1 s
        await asyncio.sleep(0.3)
        assert (await heartbeat(client, queue, ttl_ms=SHORT_TTL_MS))["state"] == "running"
    view = await get_job(client, queue, "a")
    assert view["state"] == "active" and view["stalls"] == 0
    done = await job_call(client, queue, "a", "ack", lease_id=job["lease_id"])
    assert done.status_code == 200


async def test_a_lease_made_after_the_lapse_stays(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 1, id="before")
    await heartbeat(client, queue, ttl_ms=SHORT_TTL_MS)
    await lease_one(client, queue, lease_ms=LONG_LEASE_MS)

    async def reclaimed() -> bool:
        return (await get_job(client, queue, "before"))["state"] == "waiting"

    await eventually(reclaimed, "the lapse to take the job")
    again = await lease_one(client, queue, lease_ms=LONG_LEASE_MS)  # after the lapse, no session
    await asyncio.sleep((SHORT_TTL_MS + TEST_SWEEP_INTERVAL_MS + 1000) / 1000)
    assert (await get_job(client, queue, "before"))["state"] == "active"
    assert (await job_call(client, queue, "before", "ack", lease_id=again["lease_id"])).status_code == 200


async def test_a_quiet_worker_leases_nothing_and_is_told(client: httpx.AsyncClient, queue: str) -> None:
    for job_id in ("a", "b"):
        await enqueue(client, queue, 1, id=job_id)
    assert_problem(await client.post(worker_url(queue, "w1") + "/quiet"), 409, "no_session")
    await heartbeat(client, queue)
    job = await lease_one(client, queue)

    quieted = await client.post(worker_url(queue, "w1") + "/quiet")
    assert quieted.status_code == 200 and quieted.json() == {"worker": "w1", "state": "quiet"}
    assert (await heartbeat(client, queue))["state"] == "quiet"
    assert await lease(client, queue, "w1") == []
    acked = await job_call(client, queue, "a", "ack", lease_id=job["lease_id"], lease_next={"worker": "w1"})
    assert acked.status_code == 200 and acked.json()["jobs"] == []
    assert (await get_job(client, queue, "a"))["state"] == "completed"
    assert [entry["session"]["state"] for entry in await workers(client, queue)] == ["quiet"]
    assert (await lease_one(client, queue, "w2"))["id"] == "b"  # others lease as before


async def test_ending_a_session_gives_back_its_jobs_unspent(client: httpx.AsyncClient, queue: str) -> None:
    for job_id in ("a", "b"):
        await enqueue(client, queue, 1, id=job_id)
    await heartbeat(client, queue)
    jobs = await lease(client, queue, "w1", max_jobs=2)

    ended = await client.delete(worker_url(queue, "w1"))
    assert ended.status_code == 200 and ended.json() == {"released": ["a", "b"]}
    assert await workers(client, queue) == []
    refused = await job_call(client, queue, "a", "ack", lease_id=jobs[0]["lease_id"])
    assert_problem(refused, 409, "lease_lost")
    again = await lease(client, queue, "w2", max_jobs=2)
    assert [(job["id"], job["attempt"]) for job in again] == [("a", 1), ("b", 1)]  # no attempt spent
    assert (await client.delete(worker_url(queue, "w1"))).json() == {"released": []}
    assert_problem(await client.post(worker_url(queue, "w1") + "/quiet"), 409, "no_session")


async def test_the_workers_listing_shows_holders_and_sessions(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 1, id="a")
    await lease_one(client, queue, "holder")
    await heartbeat(client, queue, "idle", info={"version": "1.2"})
    assert [
        (entry["worker"], entry["jobs"], entry["session"] and entry["session"]["info"])
        for entry in await workers(client, queue)
    ] == [("holder", ["a"], None), ("idle", [], {"version": "1.2"})]


async def test_past_max_stalls_a_job_is_dead_lettered_as_stalled(
    client: httpx.AsyncClient, queue: str
) -> None:
    assert (await client.put(f"/v1/queues/{queue}/settings", json={"max_stalls": 1})).status_code == 200
    await enqueue(client, queue, 1, id="a", max_attempts=10)
    async with subscribed(client, queue, types="failed,reclaimed", after=0) as feed:
        await lease_one(client, queue, lease_ms=1000)
        await feed.until("reclaimed", "a")
        await heartbeat(client, queue, ttl_ms=SHORT_TTL_MS)
        await lease_one(client, queue, lease_ms=LONG_LEASE_MS)  # its session lapses: a second stall
        [*_, failed] = await feed.until("failed", "a")
    assert failed.data["reason"] == "stalled" and failed.data["attempt"] == 2
    view = await get_job(client, queue, "a")
    assert view["state"] == "failed" and view["stalls"] == 2 and "stalls" in view["error"]
