"""enqueue.lua, lease.lua and ack_lease.lua: every reply and the keys each call leaves."""

from __future__ import annotations

import re

import msgspec

from echomq_http.core import limits
from tests.lua.conftest import ack_lease_args

LEASE_ID = re.compile(r"^[0-9a-f]{32}$")
PAYLOAD = b'{"to":  "a@example.com",\n "n": [1, 2.50, null], "s": "\\u00e9"}'  # odd spacing on purpose


# --- enqueue -------------------------------------------------------------------------------


async def test_enqueue_stores_a_waiting_job(q):
    before = await q.now_ms()
    reply = await q.enqueue(
        q.spec("a", name="email", max_attempts=5, backoff_type="fixed", backoff_ms=250, payload=PAYLOAD)
    )
    after = await q.now_ms()

    assert reply == [("a", "waiting", 1)]
    job = await q.job("a")
    assert before <= int(job.pop("created_at")) <= after
    assert job == {  # priority 0, attempt 0 and updated_at = created_at are left out: defaults
        "name": "email",
        "payload": PAYLOAD.decode(),
        "max_attempts": "5",
        "backoff_type": "fixed",
        "backoff_ms": "250",
        "state": "waiting",
    }
    assert await q.field("a", "payload") == PAYLOAD  # the bytes exactly
    assert await q.wait_list() == ["a"]
    assert await q.prio() == []
    assert await q.zset(q.keys.delayed) == {}


async def test_enqueue_leaves_fields_holding_their_default_out_of_the_hash(q):
    await q.enqueue(
        q.spec(
            "a",
            name="",
            priority=0,
            max_attempts=limits.DEFAULT_MAX_ATTEMPTS,
            backoff_type="exponential",
            backoff_ms=limits.DEFAULT_BACKOFF_MS,
            payload=PAYLOAD,
        )
    )
    assert set(await q.job("a")) == {"payload", "state", "created_at"}  # memory per queued job

    job = await q.lease_one()
    assert (job.name, job.attempt, job.max_attempts) == (None, 1, limits.DEFAULT_MAX_ATTEMPTS)


async def test_enqueue_existing_id_keeps_the_stored_job(q):
    await q.enqueue(q.spec("a", payload=PAYLOAD))
    stored = await q.job("a")

    reply = await q.enqueue(q.spec("a", name="other", priority=9, delay_ms=60_000, payload=b'{"new":1}'))

    assert reply == [("a", "waiting", 0)]
    assert await q.job("a") == stored
    assert await q.field("a", "payload") == PAYLOAD
    assert await q.wait_list() == ["a"]  # not queued twice
    assert await q.prio() == []
    assert await q.zset(q.keys.delayed) == {}


async def test_enqueue_existing_id_answers_the_stored_state(q):
    await q.add("a")
    job = await q.lease_one()
    assert await q.enqueue(q.spec("a")) == [("a", "active", 0)]
    assert await q.ack(("a", job.lease_id)) == [1]
    assert await q.enqueue(q.spec("a")) == [("a", "completed", 0)]
    assert await q.active() == []
    assert await q.wait_list() == []


async def test_fence_is_queue_wide_and_never_goes_back_when_an_id_is_reused(q):
    await q.add("a")
    first = await q.lease_one()
    assert await q.ack(("a", first.lease_id)) == [1]
    assert await q.delete("a") == 1
    await q.add("a")
    again = await q.lease_one()
    assert (first.fence, again.fence) == (1, 2)
    assert (await q.meta())["fence"] == "2"


async def test_enqueue_batch_answers_in_order_and_reports_each_id(q):
    await q.add("old")
    reply = await q.enqueue(q.spec("x"), q.spec("old"), q.spec("d", delay_ms=5000), q.spec("p", priority=3))
    assert reply == [("x", "waiting", 1), ("old", "waiting", 0), ("d", "delayed", 1), ("p", "waiting", 1)]


async def test_enqueue_delayed_job_goes_to_the_delayed_zset(q):
    reply = await q.enqueue(q.spec("d", delay_ms=60_000, priority=4))

    assert reply == [("d", "delayed", 1)]
    job = await q.job("d")
    assert job["state"] == "delayed"
    assert await q.zset(q.keys.delayed) == {"d": int(job["created_at"]) + 60_000}
    assert await q.wait_list() == []
    assert await q.prio() == []


async def test_enqueue_priority_goes_to_the_prio_zset_and_zero_to_the_wait_list(q):
    await q.enqueue(q.spec("zero"), q.spec("five", priority=5), q.spec("top", priority=limits.MAX_PRIORITY))

    assert await q.wait_list() == ["zero"]
    assert await q.prio() == ["top", "five"]


async def test_enqueue_publishes_once_with_the_number_of_leasable_jobs(q):
    await q.add("existing")
    async with q.wake() as wake:
        await q.enqueue(
            q.spec("a"), q.spec("b", priority=3), q.spec("c", delay_ms=60_000), q.spec("existing")
        )
        assert await wake.messages() == ["2"]

        await q.enqueue(q.spec("d", delay_ms=60_000))
        await q.enqueue(q.spec("a"))
        assert await wake.messages() == []  # nothing became leasable: no publish at all


# --- lease ---------------------------------------------------------------------------------


async def test_lease_answers_empty_when_nothing_waits(q):
    assert await q.lease(max_jobs=5) == []
    assert await q.redis.exists(q.keys.active, q.keys.workers, q.keys.held("w1")) == 0


async def test_lease_answers_empty_when_paused(q):
    await q.add("a")
    assert await q.set_paused(True) == 1

    assert await q.lease() == []
    assert await q.wait_list() == ["a"]
    assert (await q.job("a"))["state"] == "waiting"
    assert await q.redis.exists(q.keys.active, q.keys.workers, q.keys.held("w1")) == 0


async def test_lease_moves_the_job_into_the_ledger_under_its_lock(q):
    await q.enqueue(q.spec("a", name="email", max_attempts=4, payload=PAYLOAD))
    created_at = int((await q.job("a"))["created_at"])
    lease_id = "0123456789abcdef0123456789abcdef"

    before = await q.now_ms()
    [job] = await q.lease("w1", lease_ms=5000, lease_ids=[lease_id])
    after = await q.now_ms()

    assert before + 5000 <= job.lease_expires_at <= after + 5000
    assert {**msgspec.structs.asdict(job), "payload": bytes(job.payload)} == {
        "id": "a",
        "queue": q.name,
        "name": "email",
        "payload": PAYLOAD,
        "attempt": 1,
        "max_attempts": 4,
        "lease_id": lease_id,
        "lease_expires_at": job.lease_expires_at,
        "fence": 1,
        "enqueued_at": created_at,
        "traceparent": None,
    }
    assert await q.wait_list() == []
    assert await q.active() == ["a"]
    assert await q.lock("a") == f"{lease_id}:w1"
    assert 4000 < await q.lock_pttl("a") <= 5000
    assert await q.zset(q.keys.deadlines) == {"a": job.lease_expires_at}
    assert await q.members(q.keys.held("w1")) == {"a"}
    assert await q.members(q.keys.workers) == {"w1"}
    stored = await q.job("a")
    lease_fields = ("state", "worker", "lease_id", "lease_ms", "attempt", "fence")
    assert {name: stored[name] for name in lease_fields} == {
        "state": "active",
        "worker": "w1",
        "lease_id": lease_id,
        "lease_ms": "5000",
        "attempt": "1",
        "fence": "1",
    }
    assert int(stored["lease_expires_at"]) == job.lease_expires_at
    assert int(stored["leased_at"]) == job.lease_expires_at - 5000 == int(stored["updated_at"])


async def test_lease_of_a_job_without_name_answers_no_name(q):
    await q.add("a", name="")
    assert (await q.lease_one()).name is None


async def test_lease_puts_the_newest_lease_on_the_left_of_the_ledger(q):
    for job_id in "abcde":
        await q.add(job_id)
    await q.lease("w1")
    await q.lease("w2")
    assert await q.active() == ["b", "a"]

    leased = await q.lease("w3", max_jobs=3)

    assert [job.id for job in leased] == ["c", "d", "e"]
    assert await q.active() == ["e", "d", "c", "b", "a"]
    assert await q.members(q.keys.held("w3")) == {"c", "d", "e"}
    assert await q.members(q.keys.workers) == {"w1", "w2", "w3"}


async def test_lease_respects_max_jobs(q):
    for job_id in "abcde":
        await q.add(job_id)

    leased = await q.lease(max_jobs=3)

    assert [job.id for job in leased] == ["a", "b", "c"]
    assert await q.line() == ["d", "e"]
    assert len(await q.lease(max_jobs=limits.MAX_JOBS_PER_LEASE)) == 2


async def test_lease_hands_each_job_its_own_lease_id(q):
    for job_id in "abc":
        await q.add(job_id)
    lease_ids = ["a" * 32, "b" * 32, "c" * 32]

    leased = await q.lease(max_jobs=3, lease_ids=lease_ids)

    assert [job.lease_id for job in leased] == lease_ids
    assert [await q.lock(job.id) for job in leased] == [f"{lease_id}:w1" for lease_id in lease_ids]


async def test_lease_splits_random_tokens_into_distinct_32_hex_lease_ids(q):
    for _ in range(50):
        await q.add()
    leased = await q.lease(max_jobs=50)
    assert all(LEASE_ID.match(job.lease_id) for job in leased)
    assert len({job.lease_id for job in leased}) == 50


async def test_lease_counts_attempts_but_not_released_deliveries_and_fences_every_lease(q):
    await q.add("a", max_attempts=5)

    first = await q.lease_one()
    assert (first.attempt, first.fence) == (1, 1)
    assert await q.release("a", first.lease_id) == 1
    assert (await q.job("a"))["redeliver"] == "1"

    second = await q.lease_one()
    assert (second.attempt, second.fence) == (1, 2)
    assert "redeliver" not in await q.job("a")
    assert await q.fail("a", second.lease_id, retry_after_ms=0) == [1, "waiting", 1]

    third = await q.lease_one()
    assert (third.attempt, third.fence) == (2, 3)
    assert (await q.job("a"))["attempt"] == "2"
    assert len({first.lease_id, second.lease_id, third.lease_id}) == 3


async def test_lease_takes_higher_priority_first_and_fifo_among_equals(q):
    await q.enqueue(
        q.spec("a"),
        q.spec("b", priority=5),
        q.spec("c", priority=5),
        q.spec("d", priority=10),
        q.spec("e"),
        q.spec("f", priority=1),
    )

    leased = await q.lease(max_jobs=6)

    assert [job.id for job in leased] == ["d", "b", "c", "f", "a", "e"]


async def test_lease_takes_released_jobs_first_within_their_priority(q):
    await q.enqueue(q.spec("p1", priority=5), q.spec("p2", priority=5), q.spec("z1"), q.spec("z2"))
    first = await q.lease_one()
    assert first.id == "p1"
    [*_, z1] = await q.lease(max_jobs=2)
    assert z1.id == "z1"
    await q.add("top", priority=10)

    assert await q.release("p1", first.lease_id) == 1
    assert await q.release("z1", z1.lease_id) == 1

    assert await q.line() == ["top", "p1", "z1", "z2"]
    leased = await q.lease(max_jobs=4)
    assert [job.id for job in leased] == ["top", "p1", "z1", "z2"]


async def test_lease_promotes_due_delayed_jobs(q):
    await q.enqueue(q.spec("due", delay_ms=60_000), q.spec("later", delay_ms=60_000))
    await q.make_due("due")

    async with q.wake() as wake:
        [job] = await q.lease(max_jobs=5)
        assert await wake.messages() == []  # the promoted job was leased at once

    assert job.id == "due"
    assert job.attempt == 1
    assert (await q.job("due"))["state"] == "active"
    assert set(await q.zset(q.keys.delayed)) == {"later"}
    assert (await q.job("later"))["state"] == "delayed"


async def test_a_lease_promotes_at_most_max_jobs_due_delayed_jobs(q):
    await q.add("waiting")
    await q.enqueue(
        q.spec("d1", delay_ms=60_000),
        q.spec("d2", delay_ms=60_000),
        q.spec("urgent", delay_ms=60_000, priority=9),
        q.spec("d4", delay_ms=60_000),
    )
    for due_ms, job_id in enumerate(["d1", "d2", "urgent", "d4"], start=1):
        await q.make_due(job_id, due_ms)  # all due, the earliest first

    # Two promoted (the two due first: by due time, not priority); promoted jobs join the back
    # of the line, behind the job that was waiting already.
    assert [job.id for job in await q.lease(max_jobs=2)] == ["waiting", "d1"]
    assert await q.line() == ["d2"]
    assert await q.zset(q.keys.delayed) == {"urgent": 3, "d4": 4}
    assert (await q.job("urgent"))["state"] == "delayed"

    # The next lease promotes one more, which its priority puts ahead of d2.
    assert [job.id for job in await q.lease(max_jobs=1)] == ["urgent"]
    assert await q.line() == ["d2"]
    assert await q.zset(q.keys.delayed) == {"d4": 4}

    # What no lease promoted, the sweep does.
    assert await q.sweep() == [0, 0, 1, 0, 0]
    assert await q.line() == ["d2", "d4"]
    assert await q.zset(q.keys.delayed) == {}


async def test_a_lease_looks_in_delayed_only_once_a_job_may_be_due(q):
    """META "delayed_due" (include/base.lua): no delayed job is due before it, "" when there is
    none; a lease reads DELAYED only once it has passed, and a job delayed sooner lowers it."""

    async def delayed_due() -> bytes | None:
        return await q.redis.hget(q.keys.meta, "delayed_due")

    await q.add("later", delay_ms=60_000)
    due_at = (await q.zset(q.keys.delayed))["later"]
    assert await delayed_due() is None  # a new queue's: not known yet, so the first lease looks
    assert await q.lease() == []
    assert await delayed_due() == str(due_at).encode()  # the next one due, found by that look
    await q.add("sooner", delay_ms=30_000)
    assert await delayed_due() == str((await q.zset(q.keys.delayed))["sooner"]).encode()

    # Moved to the past without a script, so no lease sees it due before delayed_due says so...
    await q.redis.zadd(q.keys.delayed, {"sooner": 1})
    assert await q.lease() == []
    # ...and once it says so, the lease promotes it and leases it at once.
    await q.make_due("sooner", 1)
    assert [job.id for job in await q.lease(max_jobs=2)] == ["sooner"]
    assert await delayed_due() == str(due_at).encode()  # all due ones promoted: the next one's
    await q.make_due("later", 2)
    assert [job.id for job in await q.lease(max_jobs=2)] == ["later"]
    assert await delayed_due() == b""  # none left


async def test_lease_does_not_promote_when_paused(q):
    await q.add("d", delay_ms=60_000)
    await q.make_due("d")
    await q.set_paused(True)

    assert await q.lease() == []
    assert set(await q.zset(q.keys.delayed)) == {"d"}


async def test_enqueue_keeps_the_producers_traceparent_and_lease_hands_it_on(q):
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await q.enqueue({"options": {**q.spec("t")["options"], "traceparent": parent}, "payload": b"1"})
    await q.add("plain")
    jobs = await q.lease(max_jobs=2)
    assert [(job.id, job.traceparent) for job in jobs] == [("t", parent), ("plain", None)]


async def test_ack_reports_how_long_the_lease_was_held(q):
    await q.add("a")
    job = await q.lease_one()
    await q.next_ms()
    code, held_ms = await q.ack_reply(("a", job.lease_id))
    assert code == 1 and held_ms >= 1
    assert await q.ack_reply(("a", job.lease_id)) == [2, 0]  # the repeat held nothing new
    assert await q.ack_reply(("a", "0" * 32), ("missing", "0" * 32)) == [-2, 0, -1, 0]


async def test_an_ack_with_lease_next_keeps_its_worker_listed_only_while_it_holds_jobs(q):
    """The acking worker's leaving WORKERS is decided after its lease (include/ledger.lua
    detach's staying): listed while it holds the next job, gone once it holds none."""
    await q.add("a")
    await q.add("b")
    a = await q.lease_one()
    await q.call("ack-lease", *ack_lease_args([("a", a.lease_id)]))
    assert (await q.job("b"))["state"] == "active"
    assert await q.members(q.keys.workers) == {"w1"}
    await q.call("ack-lease", *ack_lease_args([("b", (await q.job("b"))["lease_id"])]))  # none left
    assert (await q.job("b"))["state"] == "completed"
    assert await q.redis.exists(q.keys.workers, q.keys.held("w1")) == 0


async def test_a_lease_of_a_queue_without_keys_makes_none(q):
    """A lease must not start a queue: its first enqueue admits it to the registry (a queue with
    keys is taken as admitted), so a lease that found nothing writes nothing."""
    assert await q.lease() == []
    assert [key async for key in q.redis.scan_iter(match=q.keys.prefix + "*")] == []
