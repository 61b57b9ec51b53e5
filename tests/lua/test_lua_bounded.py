"""Issue 11 at the script level: no script stops halfway or trusts an index blindly, long work
goes in bounded steps, a repeated call acts once, quiet queues leave the due index, finished
jobs are capped by count."""

from __future__ import annotations

import json
import random
from typing import Any

from echomq_http.store.keys import REQUEST_SUFFIX, queue_prefix
from tests.lua.conftest import REQUEST_TTL_MS, LuaQueue

BATCH = 1000
LEASE_BATCH = 100


async def fill(q: LuaQueue, count: int, prefix: str = "j") -> list[str]:
    """count waiting jobs, enqueued in batches as the API allows, in order."""
    ids = [f"{prefix}{i:05d}" for i in range(count)]  # sorted as numbered: ties in a ZSET go by name
    for start in range(0, count, BATCH):
        await q.enqueue(*[q.spec(job_id) for job_id in ids[start : start + BATCH]])
    return ids


async def lease_all(q: LuaQueue, count: int, worker: str = "w1", **options) -> list:
    jobs = []
    while len(jobs) < count:
        jobs += await q.lease(worker, max_jobs=min(LEASE_BATCH, count - len(jobs)), **options)
    return jobs


# --- no script stops halfway ------------------------------------------------------------------


async def test_a_worker_holding_9000_jobs_is_released_whole_each_job_once(q):
    ids = await fill(q, 9000)
    jobs = await lease_all(q, 9000)
    assert [job.id for job in jobs] == ids

    released = await q.release_worker("w1")

    assert released == ids  # oldest lease first
    assert await q.redis.llen(q.keys.active) == 0
    assert await q.redis.exists(q.keys.deadlines, q.keys.held("w1"), q.keys.workers) == 0
    assert await q.line() == ids  # first in line in lease order, each once
    assert (await q.job("j08999"))["state"] == "waiting"
    # Released deliveries are not counted: the next lease is attempt 1 again.
    assert (await q.lease_one("w2")).attempt == 1


async def test_release_steps_stop_at_the_fence_of_the_first_step(q):
    ids = await fill(q, 30)
    await lease_all(q, 25)
    bound, more, stale, offset, *first = await q.release_worker_step("w1", step=10)
    assert (more, stale) == (1, 0) and first == ids[15:25]  # the newest ten, oldest first
    # The worker leases again meanwhile: later steps leave those leases alone.
    later = await q.lease("w1", max_jobs=5)
    steps = [first]
    while more:
        bound, more, _, offset, *released = await q.release_worker_step("w1", bound, step=10, offset=offset)
        steps.append(released)
    assert [job_id for step in reversed(steps) for job_id in step] == ids[:25]
    assert await q.members(q.keys.held("w1")) == {job.id for job in later}


async def test_lists_beyond_lua_unpack_limit_go_in_chunks(q):
    # A sweep batch of 5000 expired leases, each command built from it in chunks.
    ids = await fill(q, 5000)
    jobs = await lease_all(q, 5000)
    for start in range(0, 5000, 1000):
        await q.redis.delete(*[q.keys.lock(job.id) for job in jobs[start : start + 1000]])
    await q.redis.zadd(q.keys.deadlines, dict.fromkeys(ids, 1))
    assert await q.sweep(batch=5000) == [5000, 0, 0, 0, 1]
    assert await q.redis.llen(q.keys.active) == 0
    assert await q.redis.zcard(q.keys.deadlines) == 0


# --- one pass over the ledger for many jobs --------------------------------------------------


async def test_many_jobs_leave_the_ledger_in_one_pass_and_the_rest_keep_their_order(q):
    ids = await fill(q, 100)
    jobs = {job.id: job for job in await lease_all(q, 100)}
    chosen = random.Random(11).sample(ids, 60)
    for job_id in chosen:
        await q.expire_lease(job_id)
    assert (await q.sweep(batch=100))[0] == 60
    rest = [job_id for job_id in ids if job_id not in chosen]
    assert await q.active() == list(reversed(rest))

    acked = random.Random(12).sample(rest, 35)
    codes = await q.ack(*[(job_id, jobs[job_id].lease_id) for job_id in acked])
    assert codes == [1] * 35
    assert await q.active() == list(reversed([job_id for job_id in rest if job_id not in acked]))


# --- a repeated call acts once ----------------------------------------------------------------


async def test_a_repeated_lease_request_answers_its_first_leases_and_leases_nothing(q):
    await fill(q, 5)
    first = await q.lease("w1", max_jobs=2, request_id="req-1")
    again = await q.lease("w1", max_jobs=2, request_id="req-1")
    assert again == first  # same ids, lease ids, fences, attempts and expiry
    assert await q.redis.llen(q.keys.active) == 2
    # Only what is still held under those leases: one acked, one left.
    assert await q.ack((first[0].id, first[0].lease_id)) == [1]
    assert await q.lease("w1", max_jobs=2, request_id="req-1") == first[1:]
    # Even while paused; another worker's request with that id is its own.
    await q.set_paused(True)
    assert await q.lease("w1", max_jobs=2, request_id="req-1") == first[1:]
    await q.set_paused(False)
    other = await q.lease("w2", max_jobs=2, request_id="req-1")
    assert [job.id for job in other] == ["j00002", "j00003"]


async def test_a_repeated_lease_request_that_leased_nothing_may_lease_now(q):
    assert await q.lease("w1", request_id="req-1") == []
    await q.add("a")
    assert [job.id for job in await q.lease("w1", request_id="req-1")] == ["a"]


async def give_back(q, worker: str, request_id: str, jobs) -> list[int]:
    """The service's give-back of a lease request's jobs whose answer never reached its client."""
    pairs = json.dumps([[job.id, job.lease_id] for job in jobs])
    return await q.call("release", pairs, worker, request_id)


async def test_a_given_back_lease_request_is_forgotten_so_its_retry_leases_anew(q):
    await fill(q, 3)
    first = await q.lease("w1", max_jobs=2, request_id="req-1")
    assert await give_back(q, "w1", "req-1", first) == [1, 1]
    assert await q.active() == []
    assert not await q.redis.exists(q.keys.request("w1", "req-1"))
    # The retry is the request's first delivery: it leases (the same jobs, first in line again).
    again = await q.lease("w1", max_jobs=2, request_id="req-1")
    assert [job.id for job in again] == [job.id for job in first]
    assert [job.attempt for job in again] == [1, 1]  # the give-back spent no attempt


async def test_a_give_back_leaves_the_jobs_to_a_retry_already_answered_them(q):
    await fill(q, 3)
    first = await q.lease("w1", max_jobs=2, request_id="req-1")
    retried = await q.lease("w1", max_jobs=2, request_id="req-1")  # the client's retry got them
    assert await give_back(q, "w1", "req-1", first) == [0, 0]  # so they stay leased, to it
    assert sorted(await q.active()) == sorted(job.id for job in first)
    assert await q.ack(*[(job.id, job.lease_id) for job in retried]) == [1, 1]
    # A marked record still answers a further retry, and still leases nothing new.
    await q.add("late")
    assert await q.lease("w1", max_jobs=2, request_id="req-1") == []
    assert await q.redis.llen(q.keys.active) == 0


async def test_a_repeated_fail_answers_as_the_first_and_changes_nothing(q):
    await q.add("a")
    job = await q.lease_one()
    assert await q.fail("a", job.lease_id, retry_after_ms=0) == [1, "waiting", 1]
    assert await q.fail("a", job.lease_id, retry_after_ms=0) == [1, "waiting", 1]
    assert await q.wait_list() == ["a"]
    # Leased again: the old lease's repeat still answers as its first did, and a release or an
    # ack with it is refused (that lease never made those).
    second = await q.lease_one("w2")
    assert await q.fail("a", job.lease_id) == [1, "waiting", 1]
    assert await q.release("a", job.lease_id) == -2
    assert await q.ack(("a", job.lease_id)) == [-2]
    assert await q.fail("a", second.lease_id, retry=False) == [1, "failed", 2]
    assert await q.fail("a", second.lease_id, retry=False) == [1, "failed", 2]
    assert await q.zset(q.keys.failed) == {"a": int((await q.job("a"))["finished_at"])}


async def test_a_repeated_release_answers_released_and_changes_nothing(q):
    await q.add("a")
    await q.add("b")
    job = await q.lease_one()
    assert await q.release_many(("a", job.lease_id), ("a", job.lease_id)) == [1, 2]
    assert await q.release("a", job.lease_id) == 2
    assert await q.line() == ["a", "b"]
    assert await q.fail("a", job.lease_id) == [-2]


async def test_releasing_many_puts_the_first_given_first_in_line(q):
    await fill(q, 4)
    jobs = await q.lease(max_jobs=3)
    assert await q.release_many(*[(job.id, job.lease_id) for job in jobs], ("nope", "x")) == [1, 1, 1, -1]
    assert await q.line() == ["j00000", "j00001", "j00002", "j00003"]


# --- no index is trusted blindly ---------------------------------------------------------------


async def test_lease_drops_index_entries_naming_no_waiting_job(q):
    await q.add("done")
    await q.add("real")
    done = await q.lease_one()
    assert await q.ack(("done", done.lease_id)) == [1]
    # A waiting-list entry without a job, one for a completed job, a priority entry without a
    # job, and a due delayed entry without one.
    await q.redis.rpush(q.keys.wait, "ghost", "done")
    await q.redis.zadd(q.keys.prio, {"prio-ghost": 1})
    await q.redis.zadd(q.keys.delayed, {"delayed-ghost": 1})
    # Written by no script, so META's delayed_due ("" since the lease above: none) does not know
    # of it: made unknown, so that the lease looks.
    await q.redis.hdel(q.keys.meta, "delayed_due")

    [job] = await q.lease(max_jobs=5, expect_stale=4)

    assert job.id == "real" and bytes(job.payload) == b"{}"
    for ghost in ("ghost", "prio-ghost", "delayed-ghost"):
        assert await q.job(ghost) == {}  # no half-made hash
    assert (await q.job("done"))["state"] == "completed"
    assert await q.redis.exists(q.keys.wait, q.keys.prio, q.keys.delayed) == 0


async def test_sweep_and_redrive_and_release_drop_entries_naming_no_job(q):
    await q.redis.zadd(q.keys.deadlines, {"ghost": 1})
    await q.redis.lpush(q.keys.active, "ghost")
    assert await q.sweep(expect_stale=1) == [0, 0, 0, 0, 0]
    assert await q.redis.exists(q.keys.deadlines, q.keys.active) == 0

    await q.redis.zadd(q.keys.failed, {"dead-ghost": 1})
    assert await q.redrive() == []
    assert await q.job("dead-ghost") == {} and await q.redis.exists(q.keys.failed) == 0

    await q.redis.zadd(q.keys.held("w1"), {"held-ghost": 0})
    await q.redis.sadd(q.keys.workers, "w1")
    assert await q.release_worker_step("w1") == ["0", 0, 1, 0]
    assert await q.redis.exists(q.keys.held("w1"), q.keys.workers) == 0


# --- the due index ------------------------------------------------------------------------------


async def due(q: LuaQueue) -> int | None:
    score = await q.redis.zscore(q.keys.due, q.keys.queue)
    return None if score is None else int(score)


async def test_a_queue_is_in_the_due_index_only_while_a_sweep_has_work_ahead(q):
    await q.add("a")
    assert await due(q) is None  # waiting jobs need no sweep
    job = await q.lease_one(lease_ms=60_000)
    assert await due(q) == job.lease_expires_at
    # A shorter lease brings it forward; a longer one leaves it.
    await q.add("b")
    short = await q.lease_one(lease_ms=5_000)
    assert await due(q) == short.lease_expires_at
    code, renewed_until = await q.heartbeat("b", short.lease_id, 120_000)
    assert code == 1 and renewed_until > job.lease_expires_at
    assert await due(q) == short.lease_expires_at  # only the sweep sets a later time
    assert await q.sweep() == [0, 0, 0, 0, 0]
    assert await due(q) == job.lease_expires_at
    # Done: what is left ahead is the completed jobs' retention (an hour by default).
    assert await q.ack(("a", job.lease_id)) == [1]
    assert await q.release("b", short.lease_id) == 1
    await q.sweep()
    finished_at = int((await q.job("a"))["finished_at"])
    assert await due(q) == finished_at + 3600 * 1000
    await q.sweep(completed_retention_ms=0)
    assert await due(q) is None  # nothing ahead: not visited at all


async def test_a_delayed_job_puts_its_queue_in_the_due_index(q):
    await q.add("later", delay_ms=60_000)
    assert await due(q) == (await q.zset(q.keys.delayed))["later"]


# --- finished jobs are capped by count ----------------------------------------------------------


async def capped_calls(q: LuaQueue, **caps: int) -> Any:
    """call(operation, *args): the queue's scripts, loaded with other finished-job caps."""
    capped = await q.scripts_with(**caps)
    return lambda operation, *args: capped.call(operation, q.keys.script_keys, (q.keys.prefix, *args))


async def test_completed_and_failed_jobs_never_exceed_their_caps(q):
    call = await capped_calls(q, COMPLETED_MAX=5, FAILED_MAX=3)
    ids = await fill(q, 20)
    jobs = await lease_all(q, 20)
    for start in range(0, 12, 4):
        pairs = [[job.id, job.lease_id] for job in jobs[start : start + 4]]
        await call("ack", json.dumps(pairs), *[b""] * len(pairs))
        assert await q.redis.zcard(q.keys.completed) <= 5
    assert set(await q.zset(q.keys.completed)) == set(ids[7:12])
    assert await q.job(ids[0]) == {}  # deleted with its hash
    for job in jobs[12:]:
        await call("fail", job.id, job.lease_id, json.dumps({"retry": False}), "e")
        assert await q.redis.zcard(q.keys.failed) <= 3
    assert set(await q.zset(q.keys.failed)) == set(ids[17:20])


async def test_a_queue_at_its_cap_trims_a_few_dozen_at_once_never_exceeding_it(q):
    """Past the cap a trim takes a 64th of the cap more than the excess (here 10 of 640), so the
    next acks skip the trim; the count never goes over the cap."""
    call = await capped_calls(q, COMPLETED_MAX=640)
    ids = await fill(q, 700)
    jobs = await lease_all(q, 700)
    for start in range(0, 640, 64):
        pairs = [[job.id, job.lease_id] for job in jobs[start : start + 64]]
        await call("ack", json.dumps(pairs), *[b""] * len(pairs))
    assert await q.redis.zcard(q.keys.completed) == 640  # at the cap: nothing trimmed yet
    trims = []
    for job in jobs[640:660]:
        await call("ack", json.dumps([[job.id, job.lease_id]]), b"")
        trims.append(await q.redis.zcard(q.keys.completed))
    # The 641st ack trims 11 (1 over, 10 more): 630; the next 10 fill up to 640; the 652nd trims again.
    assert trims[:11] == list(range(630, 641))
    assert trims[11] == 630 and max(trims) <= 640
    assert await q.job(ids[0]) == {}  # the oldest 22 went, with their hashes
    assert await q.job(ids[21]) == {} and await q.job(ids[22]) != {}


# --- deleting a queue ---------------------------------------------------------------------------


async def test_a_queue_is_deleted_in_bounded_steps_to_its_last_key(q):
    await fill(q, 40)
    await lease_all(q, 12)
    await q.add("later", delay_ms=60_000)
    assert await q.call("delete-queue", "0", "1", 10) == -3  # jobs in flight, no force
    steps = [await q.call("delete-queue", "1", "1", 10)]
    while steps[-1] == 0:
        steps.append(await q.call("delete-queue", "1", "0", 10))
    assert steps == [0, 0, 0, 0, 1]  # 41 jobs and a worker's held set, ten at a time
    # Every key is gone but the lease requests' records, which expire by themselves.
    left = [key async for key in q.redis.scan_iter(match=queue_prefix(q.keys.queue) + "*")]
    assert left and all(key.endswith(REQUEST_SUFFIX.encode()) for key in left)
    for key in left:
        assert 0 < await q.redis.pttl(key) <= REQUEST_TTL_MS
    assert await due(q) is None


# --- a long ledger is read one window per step ---------------------------------------------------

LONG_LEDGER = 20_000  # beyond one step's window (LEDGER_STEP_SCAN, 16384 entries)


async def test_a_sweep_of_a_long_ledger_goes_window_by_window_and_misses_nothing(q):
    ids = await fill(q, LONG_LEDGER)
    await lease_all(q, LONG_LEDGER, lease_ms=60_000)
    expired = random.Random(3).sample(ids, 600)
    await q.redis.delete(*[q.keys.lock(job_id) for job_id in expired])
    await q.redis.zadd(q.keys.deadlines, {job_id: await q.now_ms() - 1 for job_id in expired})

    offset, steps, reclaimed = 0, 0, 0
    while True:
        reply = await q.call("sweep", 1000, offset)
        reclaimed += reply[0]
        more, offset = reply[4], reply[6]
        steps += 1
        if not more:
            break
    assert reclaimed == 600 and steps >= 2  # the first window could not hold them all
    rest = [job_id for job_id in ids if job_id not in set(expired)]
    assert await q.active() == list(reversed(rest))
    assert sorted(await q.line()) == sorted(expired)


async def test_a_release_in_a_long_ledger_goes_window_by_window_and_misses_nothing(q):
    await fill(q, LONG_LEDGER)
    held: dict[str, list[str]] = {"w1": [], "w2": []}
    for n in range(LONG_LEDGER // LEASE_BATCH):  # the two workers' leases interleaved
        worker = "w1" if n % 2 else "w2"
        held[worker] += [job.id for job in await q.lease(worker, max_jobs=LEASE_BATCH)]

    assert await q.release_worker("w1") == held["w1"]

    assert await q.active() == list(reversed(held["w2"]))
    assert await q.line() == held["w1"]
