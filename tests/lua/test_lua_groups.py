"""Groups in the scripts: round-robin leasing across groups (the ungrouped jobs as one more),
priority and first-in-first-out within a group, caps (queue-wide and per group) that take a
group out of the ring until one of its jobs leaves the ledger by any path, stale entries, counts,
the job listing's group cursors, the group listing and queue deletion."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lua.conftest import LuaQueue, ack_lease_args, decoded, decoded_dict

UNGROUPED = "-"  # how these tests name the jobs without a group


async def group_of(q: LuaQueue, job_id: str) -> str:
    group = await q.redis.hget(q.keys.job(job_id), "group")
    return UNGROUPED if group is None else group.decode()


async def lease_groups(q: LuaQueue, count: int, **options: Any) -> list[str]:
    """The groups of `count` jobs leased one lease call each."""
    groups = []
    for _ in range(count):
        [job] = await q.lease(**options)
        groups.append(await group_of(q, job.id))
    return groups


async def fill(q: LuaQueue, group: str | None, count: int, **options: Any) -> list[str]:
    prefix = group or "u"
    ids = [f"{prefix}-{i}" for i in range(count)]
    await q.enqueue(*[q.spec(job_id, group=group, **options) for job_id in ids])
    return ids


async def set_queue_cap(q: LuaQueue, cap: int) -> None:
    # Until the settings endpoint exists (another branch), the field is set on META directly.
    await q.redis.hset(q.keys.meta, "group_max_in_flight", cap)


async def group_hash(q: LuaQueue, group: str) -> dict[str, str]:
    return decoded_dict(await q.redis.hgetall(q.keys.group(group)))


async def counts(q: LuaQueue) -> list[int]:
    return await q.call("counts")


def rounds(groups: list[str], members: int) -> list[set[str]]:
    return [set(groups[i : i + members]) for i in range(0, len(groups), members)]


async def test_a_queue_without_groups_keeps_no_ring(q):
    await fill(q, None, 3)
    await q.lease(max_jobs=3)
    assert not await q.redis.exists(q.keys.ring, q.keys.groups)
    assert "grouped" not in await q.meta()


async def test_successive_leases_take_from_successive_groups(q):
    await fill(q, "a", 6)
    await fill(q, "b", 2)
    await fill(q, "c", 1)
    groups = await lease_groups(q, 9)
    # Each round takes one job of every group that still has waiting jobs.
    assert rounds(groups[:3], 3) == [{"a", "b", "c"}]
    assert set(groups[3:5]) == {"a", "b"}
    assert groups[5:] == ["a"] * 4


async def test_one_lease_of_many_jobs_goes_round_robin_too(q):
    await fill(q, "a", 5)
    await fill(q, "b", 5)
    jobs = await q.lease(max_jobs=6)
    groups = [await group_of(q, job.id) for job in jobs]
    assert rounds(groups, 2) == [{"a", "b"}] * 3


async def test_ungrouped_jobs_are_one_more_member_of_the_round(q):
    await fill(q, None, 4)  # before any group: the round begins with the first group
    await fill(q, "a", 4)
    await q.enqueue(q.spec("urgent", priority=5))
    groups = await lease_groups(q, 8)
    assert rounds(groups, 2) == [{UNGROUPED, "a"}] * 4
    assert await q.lease() != []  # the last ungrouped job
    assert await q.lease() == []


async def test_within_a_group_priority_then_fifo_and_handed_back_jobs_first(q):
    await q.enqueue(
        q.spec("low1", group="g"), q.spec("high", group="g", priority=9), q.spec("low2", group="g")
    )
    first = await q.lease_one()
    assert first.id == "high"
    second = await q.lease_one()
    assert second.id == "low1"
    assert await q.release("low1", second.lease_id) == 1  # back to the front of its priority
    assert [job.id for job in await q.lease(max_jobs=2)] == ["low1", "low2"]


async def test_a_group_at_its_cap_is_skipped_until_a_job_of_it_is_acked(q):
    await set_queue_cap(q, 1)
    await fill(q, "a", 3)
    await fill(q, "b", 3)
    jobs = await q.lease(max_jobs=10)
    assert sorted(job.id for job in jobs) == ["a-0", "b-0"]
    assert await q.lease(max_jobs=10) == []
    assert await q.redis.lrange(q.keys.ring, 0, -1) == [b":"]  # capped groups are out of the ring
    a = next(job for job in jobs if job.id == "a-0")
    async with q.wake() as wake:
        assert await q.ack(("a-0", a.lease_id)) == [1]
        assert await wake.messages() == ["1"]  # room appeared: long polls are woken
    assert [job.id for job in await q.lease(max_jobs=10)] == ["a-1"]
    assert (await group_hash(q, "a"))["active"] == "1"


async def test_a_group_cap_of_its_own_overrides_the_queue_cap(q):
    await set_queue_cap(q, 1)
    assert await q.set_group("a", 2) == 1
    await fill(q, "a", 3)
    await fill(q, "b", 3)
    assert sorted(job.id for job in await q.lease(max_jobs=10)) == ["a-0", "a-1", "b-0"]
    async with q.wake() as wake:
        assert await q.set_group("a", 3) == 1  # more room now: back in the ring, polls woken
        assert await wake.messages() == ["1"]
    assert [job.id for job in await q.lease(max_jobs=10)] == ["a-2"]
    assert await q.set_group("a", None) == 1
    assert "max" not in await group_hash(q, "a")


async def test_raising_the_queue_cap_reaches_groups_parked_at_the_old_one(q):
    await set_queue_cap(q, 1)
    for group in ("a", "b", "c"):
        await fill(q, group, 3)
    assert len(await q.lease(max_jobs=10)) == 3
    assert await q.lease(max_jobs=10) == []
    assert await q.redis.zrange(q.keys.parked, 0, -1) == [b"a", b"b", b"c"]
    # The settings endpoint (another branch) changes META alone: the next lease sees the change.
    await set_queue_cap(q, 2)
    assert sorted(job.id for job in await q.lease(max_jobs=10)) == ["a-1", "b-1", "c-1"]
    assert (await q.meta())["parked_cap"] == "2"
    await q.redis.hdel(q.keys.meta, "group_max_in_flight")  # no cap at all
    assert sorted(job.id for job in await q.lease(max_jobs=10)) == ["a-2", "b-2", "c-2"]
    assert await q.redis.zcard(q.keys.parked) == 0


async def test_unparking_goes_in_bounded_steps(q):
    await set_queue_cap(q, 1)
    groups = [f"g{i:04d}" for i in range(600)]
    await q.enqueue(*[q.spec(f"{group}-{n}", group=group) for group in groups for n in range(2)])
    for _ in range(6):
        await q.lease(max_jobs=100)
    assert await q.redis.zcard(q.keys.parked) == 600
    await set_queue_cap(q, 2)
    leased = 0
    for _ in range(4):  # 256 groups a step: the third lease call completes the pass
        leased += len(await q.lease(max_jobs=100))
    assert "unpark_after" not in await q.meta() and (await q.meta())["parked_cap"] == "2"
    while jobs := await q.lease(max_jobs=100):
        leased += len(jobs)
    assert leased == 600


async def test_lowering_a_cap_stops_leases_of_that_group(q):
    await fill(q, "a", 4)
    await q.lease(max_jobs=2)
    await q.set_group("a", 1)
    assert await q.lease(max_jobs=10) == []
    assert "ring" not in await group_hash(q, "a")


async def lease_capped(q: LuaQueue, **options: Any) -> Any:
    """A queue capped at 1 per group, group a with two jobs, the first leased."""
    await set_queue_cap(q, 1)
    await fill(q, "a", 2, **options)
    job = await q.lease_one(**({"lease_ms": options["lease_ms"]} if "lease_ms" in options else {}))
    assert await q.lease() == []
    return job


async def ack_path(q, job):
    assert await q.ack((job.id, job.lease_id)) == [1]


async def ack_lease_path(q, job):
    reply = await q.call(
        "ack-lease", *ack_lease_args([(job.id, job.lease_id)], "w2", lease_ms=30_000, request_id="rq")
    )
    assert reply[0] == 1
    assert decoded(reply[4]) == "a-1"  # the group room is used by the same call


async def fail_retry_path(q, job):
    assert (await q.fail(job.id, job.lease_id, retry_after_ms=0))[:2] == [1, "waiting"]


async def fail_delayed_path(q, job):
    assert (await q.fail(job.id, job.lease_id, retry_after_ms=60_000))[:2] == [1, "delayed"]


async def fail_dead_letter_path(q, job):
    assert (await q.fail(job.id, job.lease_id, retry=False))[:2] == [1, "failed"]


async def release_path(q, job):
    assert await q.release(job.id, job.lease_id) == 1


async def release_worker_path(q, job):
    assert await q.release_worker("w1") == [job.id]


async def sweep_path(q, job):
    await q.expire_lease(job.id)
    assert (await q.sweep())[0] == 1


async def sweep_dead_letter_path(q, job):
    await q.redis.hset(q.keys.job(job.id), "max_attempts", 1)
    await q.expire_lease(job.id)
    assert (await q.sweep())[1] == 1


async def cancel_then_release_path(q, job):
    assert decoded(await q.call("cancel", job.id, "")) == ["active", 1]
    assert await q.release(job.id, job.lease_id) == 3


async def cancel_then_sweep_path(q, job):
    await q.call("cancel", job.id, "")
    await q.expire_lease(job.id)
    await q.sweep()
    assert (await q.job(job.id))["state"] == "cancelled"


async def cancel_then_fail_path(q, job):
    await q.call("cancel", job.id, "")
    assert (await q.fail(job.id, job.lease_id))[:2] == [1, "cancelled"]


PATHS = [
    ack_path,
    ack_lease_path,
    fail_retry_path,
    fail_delayed_path,
    fail_dead_letter_path,
    release_path,
    release_worker_path,
    sweep_path,
    sweep_dead_letter_path,
    cancel_then_release_path,
    cancel_then_sweep_path,
    cancel_then_fail_path,
]


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
async def test_every_way_out_of_the_ledger_frees_the_group_slot(q, path):
    job = await lease_capped(q)
    await path(q, job)
    active = 1 if path is ack_lease_path else 0
    assert int((await group_hash(q, "a")).get("active", 0)) == active
    if path is not ack_lease_path:
        leased = await q.lease()
        assert len(leased) == 1  # the other job (or the same one, back at the front)
        assert await group_of(q, leased[0].id) == "a"


async def test_promoted_and_redriven_jobs_join_their_group(q):
    await q.enqueue(q.spec("later", group="a", delay_ms=60_000), q.spec("dead", group="a", max_attempts=1))
    job = await q.lease_one()
    assert job.id == "dead"
    await q.fail("dead", job.lease_id)
    assert await q.redrive(["dead"]) == ["dead"]
    await q.make_due("later")
    assert (await q.sweep())[2] == 1
    assert await q.zset(q.keys.group_wait("a")) != {}
    assert sorted(job.id for job in await q.lease(max_jobs=5)) == ["dead", "later"]


async def test_cancel_and_delete_take_a_waiting_job_out_of_its_group(q):
    await fill(q, "a", 3)
    assert (await counts(q))[1] == 3
    assert decoded(await q.call("cancel", "a-0", "")) == ["cancelled", 1]
    assert await q.delete("a-1") == 1
    assert (await counts(q))[1] == 1
    assert list(await q.zset(q.keys.group_wait("a"))) == ["a-2"]
    assert await q.delete("a-2") == 1
    # Nothing waiting, nothing active, no cap of its own: forgotten once the next lease meets
    # its ring entry (taking it out of the ring at once would cost an LREM over the ring).
    assert await q.lease() == []
    assert not await q.redis.exists(q.keys.group("a"), q.keys.group_wait("a"))
    assert await q.redis.zcard(q.keys.groups) == 0
    assert (await counts(q))[1] == 0


async def test_counts_include_grouped_waiting_jobs_exactly(q):
    await fill(q, None, 2)
    await fill(q, "a", 3)
    await fill(q, "b", 1, priority=4)
    assert (await counts(q))[1:4] == [6, 0, 0]
    await q.lease(max_jobs=4)
    assert (await counts(q))[1:4] == [2, 0, 4]


async def test_stale_entries_in_a_group_line_and_in_the_ring_are_dropped(q):
    await fill(q, "a", 1)
    # An entry whose job is gone (deleted behind the scripts' back), counted as waiting...
    await q.redis.zadd(q.keys.group_wait("a"), {"ghost": 0})
    await q.redis.hincrby(q.keys.meta, "group_waiting", 1)
    # ... and a ring entry of a group that is not in the ring.
    await q.redis.lpush(q.keys.ring, "nobody")
    jobs = await q.lease(max_jobs=5, expect_stale=2)
    assert [job.id for job in jobs] == ["a-0"]
    assert (await counts(q))[1] == 0
    assert b"nobody" not in await q.redis.lrange(q.keys.ring, 0, -1)


async def test_ten_thousand_capped_groups_stay_out_of_the_ring(q):
    await set_queue_cap(q, 1)
    groups = [f"g{i:05d}" for i in range(2000)]
    await q.enqueue(*[q.spec(f"{group}-{n}", group=group) for group in groups for n in range(2)])
    for _ in range(20):
        await q.lease(max_jobs=100)
    assert await q.redis.llen(q.keys.ring) == 1  # only the ungrouped member: all capped
    await q.enqueue(q.spec("free", group="fresh"))
    assert [job.id for job in await q.lease(max_jobs=100)] == ["free"]


async def test_group_listing_pages_by_name(q):
    await set_queue_cap(q, 5)
    await fill(q, "b", 2)
    await fill(q, "a", 1)
    await q.set_group("c", 1)
    await q.lease()
    cap, more, page = await q.groups(limit=2)
    assert (cap, more) == ("5", 1)
    assert [row[0] for row in page] == ["a", "b"]
    assert sum(row[2] for row in page) == 1 and sum(row[1] for row in page) == 2
    _, more, rest = await q.groups(after="b", limit=2)
    assert (more, rest) == (0, [("c", 0, 0, "1")])


async def listing(q: LuaQueue, limit: int) -> list[str]:
    ids: list[str] = []
    cursor: list[Any] = []
    while True:
        after = [str(field) for field in cursor] if cursor else [""]
        page, cursor = decoded(await q.call("list-jobs", "waiting", limit, *after))
        ids += page[::2]
        if not cursor:
            return ids


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
async def test_waiting_listing_goes_on_through_the_groups_by_name(q, limit):
    await q.enqueue(q.spec("p", priority=3), q.spec("w1"), q.spec("w2"))
    await fill(q, "b", 2)
    await fill(q, "a", 3)
    await q.enqueue(q.spec("a-top", group="a", priority=7))
    assert await listing(q, limit) == ["p", "w1", "w2", "a-top", "a-0", "a-1", "a-2", "b-0", "b-1"]


async def test_waiting_cursor_in_a_group_survives_changes_around_it(q):
    await fill(q, "a", 4)
    await fill(q, "b", 2)
    page, cursor = decoded(await q.call("list-jobs", "waiting", 2, ""))
    assert page[::2] == ["a-0", "a-1"] and cursor[0] == "g"
    await q.delete("a-1")  # the anchor itself
    await q.delete("a-0")
    await q.enqueue(q.spec("a-late", group="a"))
    page, cursor = decoded(await q.call("list-jobs", "waiting", 3, *[str(f) for f in cursor]))
    assert page[::2] == ["a-2", "a-3", "a-late"]
    page, cursor = decoded(await q.call("list-jobs", "waiting", 3, *[str(f) for f in cursor]))
    assert page[::2] == ["b-0", "b-1"] and cursor == []


async def test_deleting_the_queue_deletes_every_group_key(q):
    await set_queue_cap(q, 1)
    await fill(q, "a", 3)
    await fill(q, "b", 1)
    await q.set_group("c", 2)
    await q.lease()
    step = 0
    while await q.call("delete-queue", "1", "1" if step == 0 else "0", 2) == 0:
        step += 1
    assert step > 1  # bounded steps
    left = await q.redis.keys(q.keys.prefix + "*")
    assert [key for key in left if not key.endswith(b":req")] == []  # lease records expire alone
