"""The holder's scripts (heartbeat, ack, fail, release) and release-worker: every reply code and
the keys each transition leaves."""

from __future__ import annotations

from echomq_http.core import limits
from echomq_http.core.errors import ScriptCode
from tests.lua.conftest import LEASE_MS

NOT_FOUND, LEASE_LOST = ScriptCode.JOB_NOT_FOUND.value, ScriptCode.LEASE_LOST.value
OTHER_LEASE = "f" * 32
LEASE_FIELDS = ("worker", "lease_id", "leased_at", "lease_expires_at", "lease_ms")


async def assert_out_of_the_ledger(q, job_id: str, worker: str = "w1") -> None:
    """Nothing attributes the job to a worker or a lease any more."""
    assert job_id not in await q.active()
    assert await q.lock(job_id) is None
    assert job_id not in await q.zset(q.keys.deadlines)
    assert job_id not in await q.members(q.keys.held(worker))
    assert not set(LEASE_FIELDS) & set(await q.job(job_id))


# --- heartbeat -----------------------------------------------------------------------------


async def test_heartbeat_renews_the_lock_and_the_deadline(q):
    await q.add("a")
    job = await q.lease_one(lease_ms=5000)

    before = await q.now_ms()
    code, expires_at = await q.heartbeat("a", job.lease_id, 60_000)
    after = await q.now_ms()

    assert code == 1
    assert before + 60_000 <= expires_at <= after + 60_000
    assert 59_000 < await q.lock_pttl("a") <= 60_000
    assert await q.lock("a") == f"{job.lease_id}:w1"
    assert await q.zset(q.keys.deadlines) == {"a": expires_at}
    stored = await q.job("a")
    assert int(stored["lease_expires_at"]) == expires_at
    assert int(stored["updated_at"]) == expires_at - 60_000
    assert stored["state"] == "active"
    assert await q.active() == ["a"]


async def test_heartbeat_defaults_to_the_lease_own_length(q):
    await q.add("a")
    job = await q.lease_one(lease_ms=5000)
    await q.heartbeat("a", job.lease_id, 60_000)

    before = await q.now_ms()
    code, expires_at = await q.heartbeat("a", job.lease_id)  # lease_ms 0
    after = await q.now_ms()

    assert code == 1
    assert before + 5000 <= expires_at <= after + 5000
    assert 4000 < await q.lock_pttl("a") <= 5000
    assert await q.zset(q.keys.deadlines) == {"a": expires_at}


async def test_heartbeat_of_a_missing_job(q):
    assert await q.heartbeat("nope", OTHER_LEASE, 5000) == [NOT_FOUND, 0]
    assert await q.job("nope") == {}


async def test_heartbeat_with_another_lease_id_is_lease_lost(q):
    await q.add("a")
    job = await q.lease_one(lease_ms=5000)
    stored = await q.job("a")

    assert await q.heartbeat("a", OTHER_LEASE, 60_000) == [LEASE_LOST, 0]
    assert await q.lock_pttl("a") <= 5000
    assert await q.zset(q.keys.deadlines) == {"a": job.lease_expires_at}
    assert await q.job("a") == stored


async def test_heartbeat_after_the_lock_expired_is_lease_lost_before_any_sweep(q):
    await q.add("a")
    job = await q.lease_one()
    await q.expire_lock("a")

    assert await q.heartbeat("a", job.lease_id, 60_000) == [LEASE_LOST, 0]
    assert await q.lock("a") is None  # not recreated
    assert await q.active() == ["a"]  # still in the ledger until the sweep returns it
    assert (await q.job("a"))["state"] == "active"
    assert await q.zset(q.keys.deadlines) == {"a": job.lease_expires_at}


async def test_heartbeat_after_a_real_lock_expiry(q):
    await q.add("a")
    job = await q.lease_one(lease_ms=20)  # below the API minimum: the script does not care
    await q.wait_for_expiry(job)
    assert await q.heartbeat("a", job.lease_id, 5000) == [LEASE_LOST, 0]


# --- heartbeat of many leases ----------------------------------------------------------------


async def test_heartbeat_many_renews_each_live_lease_and_reports_the_others_in_order(q):
    for job_id in ("a", "b", "c", "d"):
        await q.add(job_id)
    a, b, c, d = await q.lease(max_jobs=4)
    assert [job.id for job in (a, b, c, d)] == ["a", "b", "c", "d"]
    await q.expire_lock("c")
    before = await q.now_ms()

    reply = await q.heartbeat_many(
        ("a", a.lease_id, 60_000),
        ("nope", OTHER_LEASE, 60_000),
        ("b", b.lease_id, 0),  # its own length (LEASE_MS)
        ("c", c.lease_id, 60_000),  # its lock expired: not renewed
        ("d", OTHER_LEASE, 60_000),
    )
    after = await q.now_ms()

    codes, expiries = reply[::2], reply[1::2]
    assert codes == [1, NOT_FOUND, 1, LEASE_LOST, LEASE_LOST]
    assert expiries[1] == expiries[3] == expiries[4] == 0
    assert before + 60_000 <= expiries[0] <= after + 60_000
    assert before + LEASE_MS <= expiries[2] <= after + LEASE_MS
    assert 59_000 < await q.lock_pttl("a") <= 60_000
    assert LEASE_MS - 1000 < await q.lock_pttl("b") <= LEASE_MS
    assert await q.lock("c") is None  # an expired lease is not brought back
    assert await q.lock_pttl("d") <= LEASE_MS and await q.lock("d") == f"{d.lease_id}:w1"
    assert await q.zset(q.keys.deadlines) == {
        "a": expiries[0],
        "b": expiries[2],
        "c": c.lease_expires_at,
        "d": d.lease_expires_at,
    }
    assert int((await q.job("a"))["lease_expires_at"]) == expiries[0]
    assert int((await q.job("b"))["lease_expires_at"]) == expiries[2]
    assert int((await q.job("b"))["lease_ms"]) == LEASE_MS  # the lease's own length is kept
    assert (await q.job("d"))["lease_expires_at"] == str(d.lease_expires_at)
    assert await q.job("nope") == {}
    assert sorted(await q.active()) == ["a", "b", "c", "d"]


async def test_heartbeat_many_brings_the_sweep_forward_to_the_soonest_new_expiry(q):
    for job_id in ("a", "b"):
        await q.add(job_id)
    a, b = await q.lease(max_jobs=2, lease_ms=60_000)
    reply = await q.heartbeat_many(("a", a.lease_id, 120_000), ("b", b.lease_id, 5_000))
    assert reply[::2] == [1, 1]
    assert await q.redis.zscore(q.keys.due, q.keys.queue) == reply[3]  # b's, the soonest


async def test_heartbeat_many_of_only_lost_leases_changes_nothing(q):
    await q.add("a")
    job = await q.lease_one()
    due = await q.redis.zscore(q.keys.due, q.keys.queue)
    stored = await q.job("a")
    assert await q.heartbeat_many(("a", OTHER_LEASE, 5000), ("x", OTHER_LEASE, 0)) == [
        LEASE_LOST,
        0,
        NOT_FOUND,
        0,
    ]
    assert await q.job("a") == stored
    assert await q.zset(q.keys.deadlines) == {"a": job.lease_expires_at}
    assert await q.redis.zscore(q.keys.due, q.keys.queue) == due


async def test_heartbeat_many_of_one_job_twice_renews_it_by_the_last(q):
    await q.add("a")
    job = await q.lease_one()
    reply = await q.heartbeat_many(("a", job.lease_id, 60_000), ("a", job.lease_id, 5_000))
    assert reply[::2] == [1, 1]
    assert await q.zset(q.keys.deadlines) == {"a": reply[3]}
    assert await q.lock_pttl("a") <= 5_000
    assert int((await q.job("a"))["lease_expires_at"]) == reply[3]


async def test_heartbeat_many_renews_a_full_batch_in_one_call(q):
    await q.enqueue(*(q.spec(f"j{i}") for i in range(limits.MAX_BATCH)))
    jobs = []
    for _ in range(limits.MAX_BATCH // limits.MAX_JOBS_PER_LEASE):
        jobs += await q.lease(max_jobs=limits.MAX_JOBS_PER_LEASE, lease_ms=5_000)
    reply = await q.heartbeat_many(*((job.id, job.lease_id, 60_000) for job in jobs))
    assert reply[::2] == [1] * limits.MAX_BATCH
    deadlines = await q.zset(q.keys.deadlines)
    assert deadlines == {job.id: expires_at for job, expires_at in zip(jobs, reply[1::2], strict=True)}
    assert min(deadlines.values()) > max(job.lease_expires_at for job in jobs)


# --- ack -----------------------------------------------------------------------------------


async def test_ack_completes_the_job_and_cleans_up_its_lease(q):
    await q.add("a")
    job = await q.lease_one()
    result = b'{"sent":  true, "ids": [3, 1]}'

    before = await q.now_ms()
    assert await q.ack(("a", job.lease_id, result)) == [1]
    after = await q.now_ms()

    stored = await q.job("a")
    finished_at = int(stored["finished_at"])
    assert before <= finished_at <= after
    assert stored["state"] == "completed"
    assert stored["done_lease"] == job.lease_id
    assert stored["updated_at"] == stored["finished_at"]
    assert await q.field("a", "result") == result
    await assert_out_of_the_ledger(q, "a")
    assert await q.redis.exists(q.keys.held("w1"), q.keys.workers) == 0
    assert await q.zset(q.keys.completed) == {"a": finished_at}


async def test_ack_twice_with_the_same_lease_is_idempotent(q):
    await q.add("a")
    job = await q.lease_one()
    assert await q.ack(("a", job.lease_id, b'"first"')) == [1]
    stored = await q.job("a")

    assert await q.ack(("a", job.lease_id, b'"second"')) == [2]
    assert await q.job("a") == stored
    assert await q.field("a", "result") == b'"first"'


async def test_ack_of_a_completed_job_with_another_lease_is_lease_lost(q):
    await q.add("a")
    job = await q.lease_one()
    await q.ack(("a", job.lease_id))
    assert await q.ack(("a", OTHER_LEASE)) == [LEASE_LOST]
    assert (await q.job("a"))["done_lease"] == job.lease_id


async def test_ack_of_a_missing_job(q):
    assert await q.ack(("nope", OTHER_LEASE)) == [NOT_FOUND]
    assert await q.job("nope") == {}
    assert await q.zset(q.keys.completed) == {}


async def test_ack_without_result_stores_none(q):
    await q.add("a")
    job = await q.lease_one()
    assert await q.ack(("a", job.lease_id)) == [1]
    assert "result" not in await q.job("a")


async def test_ack_after_the_lock_expired_is_lease_lost_and_leaves_the_ledger_alone(q):
    await q.add("a")
    job = await q.lease_one()
    await q.expire_lock("a")

    assert await q.ack(("a", job.lease_id)) == [LEASE_LOST]
    assert await q.active() == ["a"]
    assert (await q.job("a"))["state"] == "active"
    assert await q.zset(q.keys.completed) == {}


async def test_ack_keeps_the_worker_registered_while_it_holds_other_jobs(q):
    for job_id in "ab":
        await q.add(job_id)
    a, _ = await q.lease(max_jobs=2)
    assert await q.ack((a.id, a.lease_id)) == [1]
    assert await q.members(q.keys.workers) == {"w1"}
    assert await q.members(q.keys.held("w1")) == {"b"}
    assert await q.active() == ["b"]


async def test_ack_batch_answers_one_code_per_ack_in_order(q):
    for job_id in "abcd":
        await q.add(job_id)
    a, _, c, d = await q.lease(max_jobs=4)
    await q.ack((d.id, d.lease_id))

    codes = await q.ack(
        ("a", a.lease_id, b'{"r":"a"}'),
        ("missing", a.lease_id, b'{"r":"missing"}'),
        ("b", OTHER_LEASE, b'{"r":"b"}'),
        ("c", c.lease_id, b'{"r":"c"}'),
        ("a", a.lease_id, b'{"r":"a2"}'),
        ("d", d.lease_id),
    )

    assert codes == [1, NOT_FOUND, LEASE_LOST, 1, 2, 2]
    assert await q.field("a", "result") == b'{"r":"a"}'
    assert await q.field("c", "result") == b'{"r":"c"}'
    assert await q.field("b", "result") is None
    assert (await q.job("b"))["state"] == "active"
    assert await q.active() == ["b"]
    assert set(await q.zset(q.keys.completed)) == {"a", "c", "d"}


# --- fail ----------------------------------------------------------------------------------


async def fail_and_due(q, job_id: str, lease_id: str, **options) -> tuple[list, int]:
    """Fail the lease; answer the reply and the delay the job got (due - the fail's time)."""
    reply = await q.fail(job_id, lease_id, **options)
    due_ms = (await q.zset(q.keys.delayed))[job_id]
    return reply, due_ms - int((await q.job(job_id))["updated_at"])


async def test_fail_with_exponential_backoff_doubles_the_delay(q):
    await q.add("a", max_attempts=4, backoff_type="exponential", backoff_ms=1000)
    delays = []
    for attempt in (1, 2, 3):
        job = await q.lease_one()
        assert job.attempt == attempt
        reply, delay_ms = await fail_and_due(q, "a", job.lease_id, error=f"failure {attempt}")
        assert reply == [1, "delayed", attempt]
        stored = await q.job("a")
        assert stored["state"] == "delayed"
        assert stored["error"] == f"failure {attempt}"
        await assert_out_of_the_ledger(q, "a")
        delays.append(delay_ms)
        await q.make_due("a")
    assert delays == [1000, 2000, 4000]
    assert await q.redis.exists(q.keys.workers) == 0


async def test_fail_with_fixed_backoff_waits_the_same_delay(q):
    await q.add("a", max_attempts=3, backoff_type="fixed", backoff_ms=750)
    for attempt in (1, 2):
        job = await q.lease_one()
        reply, delay_ms = await fail_and_due(q, "a", job.lease_id)
        assert (reply, delay_ms) == ([1, "delayed", attempt], 750)
        await q.make_due("a")


async def test_fail_caps_exponential_backoff_at_an_hour(q):
    await q.add("a", max_attempts=50, backoff_ms=1000)
    await q.redis.hset(q.keys.job("a"), "attempt", 12)  # 1000 * 2^12 ms is more than an hour
    job = await q.lease_one()
    assert job.attempt == 13
    reply, delay_ms = await fail_and_due(q, "a", job.lease_id)
    assert (reply, delay_ms) == ([1, "delayed", 13], limits.MAX_EXPONENTIAL_BACKOFF_MS)


async def test_fail_retry_after_overrides_the_backoff(q):
    await q.add("a", backoff_type="fixed", backoff_ms=750)
    job = await q.lease_one()
    reply, delay_ms = await fail_and_due(q, "a", job.lease_id, retry_after_ms=5000)
    assert (reply, delay_ms) == ([1, "delayed", 1], 5000)


async def test_fail_with_zero_delay_waits_at_the_back_of_the_line(q):
    await q.enqueue(q.spec("a", priority=2), q.spec("b", priority=2), q.spec("z"))
    job = await q.lease_one()
    assert job.id == "a"

    async with q.wake() as wake:
        assert await q.fail("a", job.lease_id, retry_after_ms=0, error="later") == [1, "waiting", 1]
        assert await wake.messages() == ["1"]

    stored = await q.job("a")
    assert (stored["state"], stored["error"], stored["attempt"]) == ("waiting", "later", "1")
    assert "redeliver" not in stored
    await assert_out_of_the_ledger(q, "a")
    assert await q.line() == ["b", "a", "z"]
    assert await q.zset(q.keys.delayed) == {}


async def test_fail_with_zero_backoff_waits_at_the_back_of_the_line(q):
    await q.enqueue(q.spec("a", backoff_type="fixed", backoff_ms=0), q.spec("b"))
    job = await q.lease_one()
    assert await q.fail("a", job.lease_id) == [1, "waiting", 1]
    assert await q.line() == ["b", "a"]


async def test_fail_without_retry_dead_letters(q):
    await q.add("a", max_attempts=5)
    job = await q.lease_one()

    async with q.wake() as wake:
        assert await q.fail("a", job.lease_id, retry=False, error="fatal") == [1, "failed", 1]
        assert await wake.messages() == []

    stored = await q.job("a")
    assert (stored["state"], stored["error"]) == ("failed", "fatal")
    assert stored["finished_at"] == stored["updated_at"]
    assert await q.zset(q.keys.failed) == {"a": int(stored["finished_at"])}
    await assert_out_of_the_ledger(q, "a")
    assert await q.zset(q.keys.delayed) == {}
    assert await q.line() == []


async def test_fail_on_the_last_attempt_dead_letters(q):
    await q.add("a", max_attempts=2, backoff_type="fixed", backoff_ms=0)
    job = await q.lease_one()
    assert await q.fail("a", job.lease_id) == [1, "waiting", 1]
    job = await q.lease_one()
    assert await q.fail("a", job.lease_id, retry_after_ms=10) == [1, "failed", 2]
    assert (await q.job("a"))["state"] == "failed"
    assert set(await q.zset(q.keys.failed)) == {"a"}


async def test_fail_of_a_missing_job(q):
    assert await q.fail("nope", OTHER_LEASE) == [NOT_FOUND]
    assert await q.job("nope") == {}


async def test_fail_with_another_lease_id_changes_nothing(q):
    await q.add("a")
    job = await q.lease_one()
    stored = await q.job("a")

    assert await q.fail("a", OTHER_LEASE, retry=False) == [LEASE_LOST]
    assert await q.job("a") == stored
    assert await q.lock("a") == f"{job.lease_id}:w1"
    assert await q.active() == ["a"]


async def test_fail_after_the_lock_expired_is_lease_lost(q):
    await q.add("a")
    job = await q.lease_one()
    await q.expire_lock("a")
    assert await q.fail("a", job.lease_id) == [LEASE_LOST]
    assert await q.active() == ["a"]
    assert "error" not in await q.job("a")


# --- release -------------------------------------------------------------------------------


async def test_release_puts_the_job_first_in_line_without_spending_an_attempt(q):
    for job_id in "ab":
        await q.add(job_id)
    job = await q.lease_one()

    async with q.wake() as wake:
        assert await q.release("a", job.lease_id) == 1
        assert await wake.messages() == ["1"]

    stored = await q.job("a")
    assert (stored["state"], stored["redeliver"], stored["attempt"]) == ("waiting", "1", "1")
    await assert_out_of_the_ledger(q, "a")
    assert await q.redis.exists(q.keys.workers, q.keys.held("w1")) == 0
    assert await q.wait_list() == ["b", "a"]  # the right end is leased next
    again = await q.lease_one()
    assert (again.id, again.attempt, again.fence) == ("a", 1, 2)


async def test_release_of_a_missing_job(q):
    assert await q.release("nope", OTHER_LEASE) == NOT_FOUND


async def test_release_with_another_lease_id_is_lease_lost(q):
    await q.add("a")
    job = await q.lease_one()
    assert await q.release("a", OTHER_LEASE) == LEASE_LOST
    assert await q.lock("a") == f"{job.lease_id}:w1"
    assert (await q.job("a"))["state"] == "active"
    assert await q.line() == []


async def test_release_after_the_lock_expired_is_lease_lost(q):
    await q.add("a")
    job = await q.lease_one()
    await q.expire_lock("a")
    assert await q.release("a", job.lease_id) == LEASE_LOST
    assert await q.active() == ["a"]
    assert await q.line() == []


# --- release-worker ------------------------------------------------------------------------


async def test_release_worker_returns_all_its_jobs_oldest_lease_first(q):
    await q.enqueue(*[q.spec(job_id) for job_id in "abcd"], q.spec("p", priority=3), q.spec("later"))
    held = {}
    for worker in ("w1", "w1", "w2", "w1", "w1"):  # leases p, a, b, c, d in distinct milliseconds
        await q.next_ms()
        job = await q.lease_one(worker)
        held[job.id] = job
    assert list(held) == ["p", "a", "b", "c", "d"]
    await q.expire_lock("c")  # expired but not yet swept: released all the same

    async with q.wake() as wake:
        released = await q.release_worker("w1")
        assert await wake.messages() == ["4"]

    assert released == ["p", "a", "c", "d"]
    for job_id in released:
        stored = await q.job(job_id)
        assert (stored["state"], stored["redeliver"], stored["attempt"]) == ("waiting", "1", "1")
        await assert_out_of_the_ledger(q, job_id)
    assert await q.redis.exists(q.keys.held("w1")) == 0
    assert await q.members(q.keys.workers) == {"w2"}
    assert await q.active() == ["b"]
    assert await q.lock("b") == f"{held['b'].lease_id}:w2"
    assert await q.line() == ["p", "a", "c", "d", "later"]
    assert [job.attempt for job in await q.lease(max_jobs=5)] == [1, 1, 1, 1, 1]


async def test_release_worker_of_an_unknown_worker(q):
    await q.add("a")
    await q.lease_one("w1")
    async with q.wake() as wake:
        assert await q.release_worker("nobody") == []
        assert await wake.messages() == []
    assert await q.active() == ["a"]


# --- stale leases --------------------------------------------------------------------------


async def test_holder_calls_on_a_job_that_is_not_leased_are_lease_lost(q):
    await q.add("a")
    stored = await q.job("a")
    assert await q.heartbeat("a", OTHER_LEASE, 5000) == [LEASE_LOST, 0]
    assert await q.fail("a", OTHER_LEASE) == [LEASE_LOST]
    assert await q.release("a", OTHER_LEASE) == LEASE_LOST
    assert await q.ack(("a", OTHER_LEASE)) == [LEASE_LOST]
    assert await q.job("a") == stored
    assert await q.line() == ["a"]


async def test_an_old_lease_is_lost_once_the_job_is_leased_again(q):
    await q.add("a")
    old = await q.lease_one("w1")
    await q.expire_lease("a")
    assert await q.sweep() == [1, 0, 0, 0, 0]
    new = await q.lease_one("w2")
    assert (new.attempt, new.fence) == (2, 2)

    assert await q.heartbeat("a", old.lease_id, 5000) == [LEASE_LOST, 0]
    assert await q.fail("a", old.lease_id) == [LEASE_LOST]
    assert await q.release("a", old.lease_id) == LEASE_LOST
    assert await q.ack(("a", old.lease_id)) == [LEASE_LOST]
    assert await q.lock("a") == f"{new.lease_id}:w2"
    assert await q.members(q.keys.workers) == {"w2"}

    assert await q.ack(("a", new.lease_id)) == [1]
    assert await q.ack(("a", old.lease_id)) == [LEASE_LOST]
