"""The job listing script (list-jobs): each state's order, its cursors, and paging while the
queue changes: every job that stays in the state is listed exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lua.conftest import LuaQueue, decoded

Cursor = list[Any]


async def page(q: LuaQueue, state: str, limit: int, cursor: Cursor | None = None) -> tuple[list[str], Cursor]:
    """(ids, the next cursor as the script gives it: [] on the last page)."""
    after = [str(field) for field in cursor] if cursor else [""]
    listing, next_cursor = decoded(await q.call("list-jobs", state, limit, *after))
    ids = listing[::2]
    assert all(isinstance(size, int) for size in listing[1::2])
    return ids, next_cursor


async def list_all(q: LuaQueue, state: str, limit: int) -> list[str]:
    ids, cursor = await page(q, state, limit)
    while cursor:
        more, cursor = await page(q, state, limit, cursor)
        ids += more
    return ids


async def fill(q: LuaQueue, count: int, prefix: str = "j", **options: Any) -> list[str]:
    ids = [f"{prefix}{i:03d}" for i in range(count)]
    await q.enqueue(*[q.spec(job_id, **options) for job_id in ids])
    return ids


async def cancelled(q: LuaQueue, scored: dict[str, int]) -> None:
    """Cancelled jobs as the coming cancel script will leave them: a hash and a ZSET entry."""
    for job_id in scored:
        await q.redis.hset(
            q.keys.job(job_id), mapping={"state": "cancelled", "payload": "{}", "created_at": 1}
        )
    await q.redis.zadd(q.keys.cancelled, scored)


# --- the orders -------------------------------------------------------------------------------


async def test_an_empty_queue_lists_nothing_in_any_state(q):
    for state in ("waiting", "delayed", "active", "completed", "failed", "cancelled"):
        assert await page(q, state, 10) == ([], [])


async def test_waiting_is_listed_in_leasing_order(q):
    plain = await fill(q, 5, "p")
    urgent = await fill(q, 3, "u", priority=9)
    low = await fill(q, 2, "l", priority=1)
    assert await q.line() == urgent + low + plain
    assert await list_all(q, "waiting", 100) == urgent + low + plain
    for limit in (1, 2, 3, 4, 10):
        assert await list_all(q, "waiting", limit) == urgent + low + plain
    # A released job goes first in line, and is listed there.
    [job] = await q.lease(max_jobs=1)
    assert await q.release(job.id, job.lease_id) == 1
    assert await list_all(q, "waiting", 3) == urgent + low + plain


async def test_delayed_by_due_time_and_finished_most_recent_first(q):
    for job_id, due in (("d2", 50), ("d1", 10), ("d3", 90)):
        await q.redis.hset(q.keys.job(job_id), mapping={"state": "delayed", "payload": "1", "created_at": 1})
        await q.redis.zadd(q.keys.delayed, {job_id: due})
    assert await list_all(q, "delayed", 1) == ["d1", "d2", "d3"]
    await cancelled(q, {"c1": 10, "c2": 30, "c3": 20})
    assert await list_all(q, "cancelled", 2) == ["c2", "c3", "c1"]


async def test_active_oldest_lease_first(q):
    ids = await fill(q, 7)
    for _ in ids:
        await q.lease_one()
    assert await list_all(q, "active", 2) == ids
    assert [entry[0] for entry in await q.ledger()] == ids


async def test_equal_scores_page_by_id_bytes(q):
    # Mixed case: byte order ("B" < "a"), which a locale's collation would not follow.
    ids = ["B", "a", "b-1", "b.2", "b1", "Z9", "z"]
    await cancelled(q, dict.fromkeys(ids, 5))
    await cancelled(q, {"later": 7, "earlier": 3})
    expected = ["later", *sorted(ids, reverse=True), "earlier"]
    for limit in (1, 2, 3, 100):
        assert await list_all(q, "cancelled", limit) == expected


async def test_a_cursor_whose_job_is_gone_continues_after_its_place(q):
    ids = ["a1", "a2", "a3", "a4", "a5", "a6"]
    await cancelled(q, dict.fromkeys(ids, 5))
    first, cursor = await page(q, "cancelled", 2)
    assert first == ["a6", "a5"] and cursor == ["z", "5", "a5"]
    await q.redis.zrem(q.keys.cancelled, "a5", "a6")
    await cancelled(q, {"a55": 5, "a0": 5})  # moved in: one before the cursor's place, one after
    rest, cursor = await page(q, "cancelled", 10, cursor)
    assert rest == ["a4", "a3", "a2", "a1", "a0"] and cursor == []


async def test_a_full_last_page_has_no_cursor_and_a_full_page_before_more_has_one(q):
    await fill(q, 4)
    ids, cursor = await page(q, "waiting", 4)
    assert len(ids) == 4 and cursor == []
    ids, cursor = await page(q, "waiting", 3)
    assert len(ids) == 3 and cursor[0] == "w"


async def test_stale_entries_are_passed_over(q):
    ids = await fill(q, 4)
    await q.redis.hset(q.keys.job(ids[1]), "state", "completed")  # an index entry of another state
    assert await list_all(q, "waiting", 1) == [ids[0], ids[2], ids[3]]


# --- paging while the queue changes: the WAIT cursor -------------------------------------------


async def test_waiting_pages_go_on_after_leases_and_enqueues(q):
    ids = await fill(q, 20)
    first, cursor = await page(q, "waiting", 5)
    assert first == ids[:5]
    await q.lease(max_jobs=3)  # three listed jobs leased
    newer = await fill(q, 3, "n")
    second, cursor = await page(q, "waiting", 5, cursor)
    assert second == ids[5:10]
    await q.lease(max_jobs=8)  # past the cursor's jobs: the rest starts at the right end
    rest = await list_all_from(q, cursor)
    assert rest == ids[11:] + newer


async def list_all_from(q: LuaQueue, cursor: Cursor) -> list[str]:
    ids: list[str] = []
    while cursor:
        more, cursor = await page(q, "waiting", 4, cursor)
        ids += more
    return ids


async def test_waiting_pages_go_on_after_deletions_and_releases(q):
    ids = await fill(q, 12)
    first, cursor = await page(q, "waiting", 4)
    assert first == ids[:4]
    held = await q.lease("w1", max_jobs=2)
    assert await q.delete(ids[3]) == 1  # the last listed (L)
    for job in held:
        assert await q.release(job.id, job.lease_id) == 1  # back at the right end
    assert await list_all_from(q, cursor) == ids[4:]
    # The next one (N) deleted: the page starts after L.
    first, cursor = await page(q, "waiting", 4)
    assert first == [ids[1], ids[0], ids[2], ids[4]]
    assert await q.delete(ids[5]) == 1
    assert await list_all_from(q, cursor) == ids[6:]


async def test_a_listed_job_retried_to_the_back_of_the_line_is_not_an_anchor(q):
    ids = await fill(q, 10)
    first, cursor = await page(q, "waiting", 3)
    assert first == ids[:3]
    jobs = await q.lease(max_jobs=4)  # the listed three and the next one (L and N)
    for job in jobs:
        assert (await q.fail(job.id, job.lease_id, retry=True, retry_after_ms=0))[1] == "waiting"
    # L and N are waiting again at the left end: the page goes on at the right end, not after them.
    assert await list_all_from(q, cursor) == ids[4:] + [job.id for job in jobs]


async def test_prio_then_wait_across_a_page_boundary(q):
    plain = await fill(q, 3, "p")
    urgent = await fill(q, 2, "u", priority=5)
    first, cursor = await page(q, "waiting", 2)
    assert first == urgent and cursor[0] == "w" and cursor[1:3] == ["", plain[0]]
    assert await list_all_from(q, cursor) == plain


# --- paging while the queue changes: the ledger ------------------------------------------------


async def test_active_pages_go_on_by_fence(q):
    ids = await fill(q, 12)
    jobs = [await q.lease_one() for _ in ids[:9]]
    first, cursor = await page(q, "active", 3)
    assert first == ids[:3] and cursor[0] == "a"
    # Acks of listed and unlisted jobs, and new leases, between the pages.
    assert await q.ack((jobs[1].id, jobs[1].lease_id), (jobs[4].id, jobs[4].lease_id)) == [1, 1]
    later = [await q.lease_one() for _ in range(3)]
    rest: list[str] = []
    while cursor:
        more, cursor = await page(q, "active", 3, cursor)
        rest += more
    assert rest == [ids[3], *ids[5:9], *(job.id for job in later)]


@pytest.mark.parametrize("how", ["delete", "cancel"])
async def test_both_anchors_taken_out_with_other_moves_the_page_goes_on_exactly(q, how):
    ids = await fill(q, 12)
    first, cursor = await page(q, "waiting", 4)
    assert first == ids[:4]  # L = ids[3], N = ids[4]
    held = await q.lease("w1", max_jobs=2)
    for job_id in (ids[2], ids[3], ids[4], ids[6]):  # a listed job, L, N and one after them
        if how == "delete":
            assert await q.delete(job_id) == 1
        else:
            assert decoded(await q.call("cancel", job_id, "")) == ["cancelled", 1]
    for job in held:
        assert await q.release(job.id, job.lease_id) == 1  # back at the right end
    # Their places are kept (tombstones), so the page goes on right after N: every job that
    # stayed waiting, once, whatever else moved.
    assert await list_all_from(q, cursor) == [ids[5], *ids[7:]]
    assert await q.wait_list() == [*reversed(ids[7:]), ids[5], ids[0], ids[1]]
    assert (await q.all_counts())[1] == 8
    # Leases drop the tombstones they pop, and count them off.
    leased = await q.lease("w2", max_jobs=12)
    assert [job.id for job in leased] == [ids[1], ids[0], ids[5], *ids[7:]]
    assert await q.wait_entries() == [] and (await q.all_counts())[1] == 0
    assert await q.redis.hget(q.keys.meta, "wait_tombstones") == b"0"


async def test_a_cursor_finds_its_anchor_after_many_releases_to_the_front(q):
    held = []
    for start in range(0, 1200, 100):  # leased before the paging begins
        await fill(q, 100, f"b{start:04d}-")
        held += await q.lease("w1", max_jobs=100)
    ids = await fill(q, 10)
    first, cursor = await page(q, "waiting", 2)
    assert first == ids[:2]
    for job in held:  # 1,200 pushed to the right end: far beyond one page's reach
        assert await q.release(job.id, job.lease_id) == 1
    # They went in front of the cursor (leased first): the page goes on at its anchor.
    assert await list_all_from(q, cursor) == ids[2:]


async def test_both_anchors_deleted_goes_on_where_only_leases_would_have_moved_the_next(q):
    ids = await fill(q, 12)
    first, cursor = await page(q, "waiting", 4)
    assert first == ids[:4]
    await q.lease(max_jobs=2)
    for job_id in ids[3:5]:  # L and N
        assert await q.delete(job_id) == 1
    assert await list_all_from(q, cursor) == ids[5:]


async def test_a_lease_passes_the_tombstones_of_deleted_jobs_to_the_next_waiting_one(q):
    ids = await fill(q, 8)
    for job_id in ids[:5]:  # the five at the leasing end
        assert await q.delete(job_id) == 1
    assert (await q.all_counts())[1] == 3 and len(await q.wait_entries()) == 8
    [job] = await q.lease(max_jobs=1)
    assert job.id == ids[5]
    assert await q.wait_entries() == [ids[7], ids[6]]
    assert await q.redis.hget(q.keys.meta, "wait_tombstones") == b"0"
    assert (await q.all_counts())[1] == 2
