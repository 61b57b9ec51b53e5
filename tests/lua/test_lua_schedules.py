"""Schedules in the scripts: the PUT's compare-and-set on the version, a run's compare-and-set on
its run time (a re-sent or concurrent fire makes nothing more), overlap skips, the run limit,
triggers, deletion, the due read, the sweep's report and due index, and queue deletion."""

from __future__ import annotations

import json

from tests.lua.conftest import LuaQueue, decoded, decoded_dict

SCHEDULE_NOT_FOUND, SCHEDULE_MOVED = -5, -6
LEFT_ALONE, FIRED, SKIPPED = 0, 1, 2
JOB = json.dumps(
    {"name": "", "priority": 0, "delay_ms": 0, "max_attempts": 3, "backoff_type": "fixed", "backoff_ms": 5}
)


async def put(
    q: LuaQueue,
    name: str,
    next_run: int | str,
    version: str = "0",
    absent: tuple[str, ...] = (),
    **fields: str,
) -> list:
    values = {
        "spec": "{}",
        "job": JOB,
        "payload": '{"n":1}',
        "clock": '{"every_ms":1000}',
        "timing": "t",
        **fields,
    }
    pairs = [item for pair in values.items() for item in pair]
    now = await q.now_ms()
    return decoded(await q.call("put-schedule", name, version, next_run, now, len(values), *pairs, *absent))


async def schedule(q: LuaQueue, name: str) -> dict[str, str]:
    return decoded_dict(await q.redis.hgetall(q.keys.schedule(name)))


async def fire(q: LuaQueue, *runs: tuple[str, int, int | str, str]) -> list[int]:
    flat = [item for run in runs for item in run]
    return await q.call("fire-schedules", len(runs), *flat)


async def timetable(q: LuaQueue) -> dict[str, int]:
    return {
        name.decode(): int(score)
        for name, score in await q.redis.zrange(q.keys.timetable, 0, -1, withscores=True)
    }


async def test_put_creates_then_replaces_only_against_the_version_it_read(q):
    created, *flat = await put(q, "s", 5000)
    assert created == 1
    stored = dict(zip(flat[::2], flat[1::2], strict=True))
    assert stored["version"] == "1" and stored["runs"] == "0" and stored["next_run_at"] == "5000"
    assert await timetable(q) == {"s": 5000}
    assert await q.redis.zscore(q.keys.due, q.keys.queue) == 5000  # the sweep comes at the run
    assert await put(q, "s", 6000, version="0") == SCHEDULE_MOVED  # a second create loses
    assert await put(q, "s", 6000, version="7") == SCHEDULE_MOVED
    created, *_ = await put(q, "s", 6000, version="1", overlap="skip")
    assert created == 0
    assert (await schedule(q, "s"))["overlap"] == "skip"
    # Paused (no next run): out of the timetable; an option not given any more is deleted.
    await put(q, "s", "", version="2", absent=("overlap",))
    assert "overlap" not in await schedule(q, "s") and "next_run_at" not in await schedule(q, "s")
    assert await timetable(q) == {}
    assert await q.redis.zrange(q.keys.schedules, 0, -1) == [b"s"]


async def test_a_run_makes_one_job_and_a_resent_or_concurrent_fire_makes_none(q):
    await put(q, "s", 1000)
    run = ("s", "1000", 2000, "s-r1000")
    assert await fire(q, run) == [FIRED]
    assert await fire(q, run) == [LEFT_ALONE]  # re-sent after a lost reply, or another process
    job = await q.job("s-r1000")
    assert job["schedule"] == "s" and job["state"] == "waiting" and job["payload"] == '{"n":1}'
    assert job["backoff_type"] == "fixed"
    assert await q.wait_list() == ["s-r1000"]
    s = await schedule(q, "s")
    assert (s["runs"], s["last_run_at"], s["last_job_id"], s["next_run_at"]) == (
        "1",
        "1000",
        "s-r1000",
        "2000",
    )
    assert await timetable(q) == {"s": 2000}
    # A run time that is not the schedule's next run any more is left alone.
    assert await fire(q, ("s", "1500", 3000, "s-r1500")) == [LEFT_ALONE]
    assert not await q.redis.exists(q.keys.job("s-r1500"))


async def test_the_enqueued_event_names_the_schedule(q):
    await put(q, "s", 1000)
    await fire(q, ("s", "1000", 2000, "s-r1000"))
    [(_, entry)] = await q.redis.xrange(q.keys.events)
    assert entry[b"e"].decode() == 'enqueued s-r1000 "state":"waiting","schedule":"s"'


async def test_a_paused_or_deleted_schedule_makes_no_run(q):
    await put(q, "p", "", paused="1")
    await q.redis.hset(q.keys.schedule("p"), "next_run_at", "1000")  # as if read just before the pause
    assert await fire(q, ("p", "1000", 2000, "p-r1000")) == [LEFT_ALONE]
    await put(q, "d", 1000)
    assert await q.call("delete-schedule", "d") == 1
    assert await fire(q, ("d", "1000", 2000, "d-r1000")) == [LEFT_ALONE]
    assert await q.call("delete-schedule", "d") == SCHEDULE_NOT_FOUND
    assert not await q.redis.exists(q.keys.job("p-r1000"), q.keys.job("d-r1000"))
    assert await timetable(q) == {}


async def test_overlap_skip_skips_while_the_last_job_runs_and_counts_it(q):
    await put(q, "s", 1000, overlap="skip")
    assert await fire(q, ("s", "1000", 2000, "s-r1000")) == [FIRED]
    assert await fire(q, ("s", "2000", 3000, "s-r2000")) == [SKIPPED]  # s-r1000 still waiting
    leased = await q.lease_one()
    assert leased.id == "s-r1000"
    assert await fire(q, ("s", "3000", 4000, "s-r3000")) == [SKIPPED]  # active
    s = await schedule(q, "s")
    assert (s["skipped"], s["runs"], s["last_skipped_at"], s["next_run_at"]) == ("2", "1", "3000", "4000")
    await q.ack((leased.id, leased.lease_id))
    assert await fire(q, ("s", "4000", 5000, "s-r4000")) == [FIRED]
    assert not await q.redis.exists(q.keys.job("s-r2000"), q.keys.job("s-r3000"))


async def test_the_run_limit_ends_the_schedule_but_keeps_it(q):
    await put(q, "s", 1000, run_limit="2")
    assert await fire(q, ("s", "1000", 2000, "s-r1000")) == [FIRED]
    assert await fire(q, ("s", "2000", 3000, "s-r2000")) == [FIRED]
    s = await schedule(q, "s")
    assert s["runs"] == "2" and "next_run_at" not in s
    assert await timetable(q) == {}
    assert await q.redis.zrange(q.keys.schedules, 0, -1) == [b"s"]


async def test_a_run_moves_the_version_so_a_put_decided_before_it_loses(q):
    await put(q, "s", 1000)
    await fire(q, ("s", "1000", 2000, "s-r1000"))
    assert await put(q, "s", 1000, version="1") == SCHEDULE_MOVED
    assert (await put(q, "s", 2000, version="2"))[0] == 0


async def test_trigger_makes_a_job_now_without_moving_the_timetable(q):
    assert decoded(await q.call("trigger-schedule", "nope", "x1")) == SCHEDULE_NOT_FOUND
    await put(q, "s", 9000, run_limit="1")
    assert decoded(await q.call("trigger-schedule", "s", "x1")) == ["waiting", 1]
    assert decoded(await q.call("trigger-schedule", "s", "x1")) == ["waiting", 0]  # that id is kept
    s = await schedule(q, "s")
    assert (s["last_job_id"], s["runs"], s["next_run_at"]) == ("x1", "0", "9000")
    assert (await q.job("x1"))["schedule"] == "s"


async def test_the_due_read_names_due_schedules_earliest_first_up_to_its_limit(q):
    now = await q.now_ms()
    for name, at in (("late", now + 60_000), ("b", now - 10), ("a", now - 20), ("c", now - 5)):
        await put(q, name, at, clock=f'{{"every_ms":{1000 + len(name)}}}')
    reply = decoded(await q.call("due-schedules", 2))
    assert now <= reply[0] <= now + 5000
    assert reply[1:] == ["a", str(now - 20), '{"every_ms":1001}', "b", str(now - 10), '{"every_ms":1001}']


async def test_the_sweep_reports_due_schedules_and_keeps_the_queue_due_until_fired(q):
    now = await q.now_ms()
    await put(q, "s", now + 60_000)
    reply = await q.call("sweep", 100, 0)
    assert reply[7] == 0
    assert await q.redis.zscore(q.keys.due, q.keys.queue) == now + 60_000  # the run is the next work
    await put(q, "s", now - 1, version="1")
    assert (await q.call("sweep", 100, 0))[7] == 1
    assert await q.redis.zscore(q.keys.due, q.keys.queue) == now - 1  # due until a fire moves it


async def test_the_listing_pages_by_name(q):
    for name in ("c", "a", "b"):
        await put(q, name, 1000)
    more, *flat = decoded(await q.call("schedules", "", 2))
    assert more == 1
    assert [flat[0], flat[2 + flat[1]]] == ["a", "b"]
    more, *flat = decoded(await q.call("schedules", "b", 2))
    assert more == 0 and flat[0] == "c"


async def test_deleting_the_queue_deletes_its_schedules(q):
    await put(q, "s", 1000)
    await fire(q, ("s", "1000", 2000, "s-r1000"))
    while await q.call("delete-queue", "1", "1", 100) != 1:
        pass
    assert not await q.redis.exists(
        q.keys.schedule("s"), q.keys.schedules, q.keys.timetable, q.keys.job("s-r1000")
    )
