"""Worker sessions (session.lua, quiet.lua, the sweep's lapses, the lease's quiet check,
release-worker's end of a session, workers.lua) and max_stalls: every reply code and the keys
each transition leaves."""

from __future__ import annotations

import json

from echomq_http.core.errors import ScriptCode
from tests.lua.conftest import PAST_MS, ack_lease_args, decoded, decoded_dict

NO_SESSION = ScriptCode.NO_SESSION.value
TTL_MS = 10_000


async def session(q, worker: str = "w1", ttl_ms: int = TTL_MS, info: str = "") -> list:
    """[session_expires_at, state]."""
    return decoded(await q.call("session", worker, ttl_ms, info))


async def quiet(q, worker: str = "w1") -> int:
    return await q.call("quiet", worker)


async def stored_session(q, worker: str = "w1") -> dict[str, str]:
    return decoded_dict(await q.redis.hgetall(q.keys.session(worker)))


async def lapse(q, worker: str = "w1") -> None:
    """The session's time ran out (the sweep has not run yet)."""
    await q.redis.hset(q.keys.session(worker), "expires_at", PAST_MS)
    await q.redis.zadd(q.keys.sessions, {worker: PAST_MS})


async def sweep_step(q, batch: int = 100) -> list[int]:
    """[reclaimed, dead_lettered, promoted, deleted, more, stale, offset, schedules_due, outbox,
    flows_due]."""
    return await q.call("sweep", batch, 0)


async def end_session(q, worker: str = "w1") -> list:
    """[bound, more, stale, offset, released...] of release-worker's first step, ending the session."""
    return decoded(await q.call("release-worker", worker, "", 1000, 0, "1"))


# --- session.lua ----------------------------------------------------------------------------


async def test_a_heartbeat_starts_a_session(q):
    before = await q.now_ms()
    expires_at, state = await session(q, info='{"host":"h1","pid":7}')
    after = await q.now_ms()

    assert state == "running"
    assert before + TTL_MS <= expires_at <= after + TTL_MS
    stored = await stored_session(q)
    assert stored["state"] == "running"
    assert before <= int(stored["started_at"]) == int(stored["last_seen_at"]) <= after
    assert int(stored["expires_at"]) == expires_at
    assert stored["ttl_ms"] == str(TTL_MS)
    assert json.loads(stored["info"]) == {"host": "h1", "pid": 7}
    assert await q.zset(q.keys.sessions) == {"w1": expires_at}
    assert (await q.zset(q.keys.due))[q.keys.queue] <= expires_at


async def test_a_renewal_keeps_start_state_and_info_unless_given(q):
    await session(q, info='{"v":1}')
    started_at = (await stored_session(q))["started_at"]
    assert await quiet(q) == 1
    await q.next_ms()

    expires_at, state = await session(q, ttl_ms=20_000)
    stored = await stored_session(q)
    assert state == "quiet"
    assert stored["started_at"] == started_at
    assert int(stored["last_seen_at"]) > int(started_at)
    assert json.loads(stored["info"]) == {"v": 1}
    assert await q.zset(q.keys.sessions) == {"w1": expires_at}

    await session(q, info='{"v":2}')
    assert json.loads((await stored_session(q))["info"]) == {"v": 2}


async def test_a_heartbeat_after_a_lapse_starts_a_new_session_and_bounds_the_lapse(q):
    await q.add("a")
    await session(q, info='{"v":1}')
    job = await q.lease_one()
    await q.call("quiet", "w1")
    await lapse(q)

    expires_at, state = await session(q)
    stored = await stored_session(q)
    assert state == "running"  # a new session: not quiet
    assert "info" not in stored
    assert stored["lapsed_fence"] == str(job.fence)
    assert (await q.zset(q.keys.sessions))["w1"] < expires_at  # the lapse is due now

    assert (await sweep_step(q))[:2] == [1, 0]
    assert await q.lock("a") is None
    stored = await stored_session(q)
    assert "lapsed_fence" not in stored and stored["state"] == "running"  # the new session goes on
    assert await q.zset(q.keys.sessions) == {"w1": expires_at}


# --- quiet.lua and the lease's quiet check --------------------------------------------------


async def test_quiet_without_a_live_session_is_no_session(q):
    assert await quiet(q) == NO_SESSION
    await session(q)
    await lapse(q)
    assert await quiet(q) == NO_SESSION
    assert (await stored_session(q))["state"] == "running"


async def test_a_quiet_worker_leases_nothing_others_do(q):
    await q.add("a")
    await session(q)
    assert await quiet(q) == 1
    assert await quiet(q) == 1  # idempotent
    assert (await stored_session(q))["state"] == "quiet"

    assert await q.lease("w1") == []
    assert [job.id for job in await q.lease("w2")] == ["a"]


async def test_a_quiet_worker_acks_but_lease_next_leases_nothing(q):
    await q.add("a")
    await q.add("b")
    await session(q)
    job = await q.lease_one()
    await quiet(q)

    reply = await q.call("ack-lease", *ack_lease_args([("a", job.lease_id)], "w1", request_id="r-next"))
    assert reply[0] == 1  # acked
    assert reply[2:] == [0, 0]  # leased nothing (stale, retry_after_ms)
    assert (await q.job("a"))["state"] == "completed"
    assert (await q.job("b"))["state"] == "waiting"


async def test_a_quiet_session_that_lapsed_no_longer_holds_leases_back(q):
    await q.add("a")
    await session(q)
    await quiet(q)
    await lapse(q)
    assert [job.id for job in await q.lease("w1")] == ["a"]


# --- the sweep: lapses --------------------------------------------------------------------------


async def test_a_lapse_takes_all_the_workers_jobs_as_expired_leases(q):
    for job_id in ("a", "b", "c"):
        await q.add(job_id)
    await q.add("last", max_attempts=1)
    await q.add("gone")
    await session(q)
    jobs = await q.lease("w1", max_jobs=5)
    await q.call("cancel", "gone", "stop")
    await q.add("other")
    other = await q.lease_one("w2")
    await lapse(q)

    reclaimed, dead, _, _, more, stale, _, _, _, _ = await sweep_step(q)

    assert (reclaimed, dead, more, stale) == (3, 1, 0, 0)
    for job in jobs:
        assert await q.lock(job.id) is None
        assert job.id not in await q.active()
    for job_id in ("a", "b", "c"):
        stored = await q.job(job_id)
        assert stored["state"] == "waiting" and stored["stalls"] == "1"
        assert stored["error"] == "session lapsed: worker w1 stopped heartbeating"
    assert (await q.job("last"))["state"] == "failed"
    assert (await q.job("gone"))["state"] == "cancelled"
    assert await q.active() == [other.id]  # another worker's lease stays
    assert await q.redis.exists(q.keys.session("w1"), q.keys.held("w1")) == 0
    assert await q.zset(q.keys.sessions) == {}
    assert "w1" not in await q.members(q.keys.workers)
    assert await q.heartbeat("a", jobs[0].lease_id) == [ScriptCode.LEASE_LOST.value, 0]


async def test_a_lease_after_the_lapse_is_not_taken_by_it(q):
    await q.add("before")
    await q.add("after")
    await session(q)
    first = await q.lease_one()
    await lapse(q)
    second = await q.lease_one()  # leased after the lapse, before the sweep
    assert (await stored_session(q))["lapsed_fence"] == str(first.fence)

    assert (await sweep_step(q))[:2] == [1, 0]
    assert (await q.job("before"))["state"] == "waiting"
    assert await q.lock("after") == f"{second.lease_id}:w1"
    assert await q.redis.exists(q.keys.session("w1")) == 0


async def test_a_renewed_session_is_not_taken(q):
    await q.add("a")
    await session(q)
    job = await q.lease_one()
    await q.redis.zadd(q.keys.sessions, {"w1": PAST_MS})  # its entry is behind its renewal
    assert (await sweep_step(q))[:2] == [0, 0]
    assert await q.lock("a") == f"{job.lease_id}:w1"
    assert await q.zset(q.keys.sessions) == {"w1": int((await stored_session(q))["expires_at"])}


async def test_a_lapse_goes_on_in_bounded_steps(q):
    for i in range(5):
        await q.add(f"j{i}")
    await session(q)
    await q.lease("w1", max_jobs=5)
    await lapse(q)

    assert (await sweep_step(q, batch=2))[:5] == [2, 0, 0, 0, 1]
    assert await q.redis.exists(q.keys.session("w1")) == 1
    assert (await sweep_step(q, batch=2))[:5] == [2, 0, 0, 0, 1]
    assert (await sweep_step(q, batch=2))[:5] == [1, 0, 0, 0, 0]
    assert await q.redis.exists(q.keys.session("w1")) == 0
    assert await q.active() == []


async def test_a_session_entry_without_a_session_is_stale(q):
    await q.redis.zadd(q.keys.sessions, {"ghost": PAST_MS})
    assert (await sweep_step(q))[5] == 1
    assert await q.zset(q.keys.sessions) == {}


async def test_the_due_index_names_the_earliest_session_lapse(q):
    expires_at, _ = await session(q)
    await sweep_step(q)  # nothing to do now: the next visit is at the lapse
    assert (await q.zset(q.keys.due))[q.keys.queue] == expires_at


# --- max_stalls -------------------------------------------------------------------------------


async def test_past_max_stalls_an_expired_lease_dead_letters_as_stalled(q):
    await q.redis.hset(q.keys.meta, "max_stalls", 1)
    await q.add("a", max_attempts=10)
    await q.lease_one()
    await q.expire_lease("a")
    assert (await q.sweep())[:2] == [1, 0]
    assert (await q.job("a"))["stalls"] == "1"

    await q.lease_one()
    await q.expire_lease("a")
    assert (await q.sweep())[:2] == [0, 1]
    stored = await q.job("a")
    assert stored["state"] == "failed" and stored["stalls"] == "2"
    assert "2 stalls" in stored["error"]


async def test_max_stalls_zero_dead_letters_a_lapsed_session_job_as_stalled(q):
    await q.redis.hset(q.keys.meta, "max_stalls", 0)
    await q.add("a", max_attempts=10)
    await session(q)
    await q.lease_one()
    await lapse(q)
    assert (await sweep_step(q))[:2] == [0, 1]
    assert (await q.job("a"))["state"] == "failed"


# --- release-worker ending the session, workers.lua, delete-queue -------------------------


async def test_ending_a_session_gives_back_its_jobs_unspent(q):
    await q.add("a")
    await session(q)
    job = await q.lease_one()
    _, more, _, _, *released = await end_session(q)
    assert (more, released) == (0, ["a"])
    assert await q.redis.exists(q.keys.session("w1")) == 0
    assert await q.zset(q.keys.sessions) == {}
    stored = await q.job("a")
    assert stored["state"] == "waiting" and stored["attempt"] == "1"
    assert (await q.lease_one()).attempt == job.attempt  # the attempt was not spent


async def test_an_operator_release_keeps_the_session(q):
    await session(q)
    await q.release_worker("w1")
    assert await q.redis.exists(q.keys.session("w1")) == 1


async def test_workers_lists_holders_and_live_sessions(q):
    await q.add("a")
    await q.lease_one("holder")
    await session(q, "idle", info='{"pid":1}')
    await session(q, "lapsed")
    await lapse(q, "lapsed")

    listed = await q.workers()
    assert [entry[0] for entry in listed] == ["holder", "idle"]
    assert listed[0][1:] == [["a"], []]
    _, ids, (state, started_at, last_seen_at, expires_at, info) = listed[1]
    assert (ids, state, json.loads(info)) == ([], "running", {"pid": 1})
    assert started_at == last_seen_at < expires_at


async def test_deleting_the_queue_deletes_its_sessions(q):
    await session(q)
    await session(q, "w2")
    for first in ("1", "0"):
        if await q.call("delete-queue", "1", first, 1000) == 1:
            break
    assert await q.redis.exists(q.keys.sessions, q.keys.session("w1"), q.keys.session("w2")) == 0
