"""settings.lua and the lease's flow control (include/lease.lua): what each settings call
stores in META, its wake-ups and its reply; the lease reply's retry_after_ms, the rate log, and
the room_wanted flag that exits clear."""

from __future__ import annotations

import json
from typing import Any

from tests.lua.conftest import WakeListener

ALL = {
    "max_in_flight": 5,
    "group_max_in_flight": 2,
    "rate_max": 10,
    "rate_per_ms": 1000,
    "max_stalls": 0,
    "events_off": 1,
    "completed_retention_s": 60,
    "failed_retention_s": 0,
}


async def put(q, **settings: Any) -> int:
    return await q.call("settings", json.dumps(settings))


async def meta(q) -> dict[str, str]:
    fields = await q.redis.hgetall(q.keys.meta)
    return {key.decode(): value.decode() for key, value in fields.items()}


def rate_key(q) -> str:
    return q.keys.prefix + "rate"


async def test_settings_are_meta_fields_and_defaults_are_absent(q):
    assert await put(q, **ALL) == 0  # nothing was capped before: nothing raised
    assert await meta(q) == {field: str(value) for field, value in ALL.items()}
    assert await put(q, max_in_flight=3) == 1  # a cap of 5 lowered to 3, others removed
    assert await meta(q) == {"max_in_flight": "3"}
    assert await put(q) == 1
    assert await meta(q) == {}


async def test_raising_or_removing_a_cap_wakes_and_clears_room_wanted(q):
    await q.add("a")
    async with WakeListener(q.redis, q.keys.wake) as listener:
        assert await put(q, max_in_flight=2) == 0
        await q.redis.hset(q.keys.meta, "room_wanted", "1")
        assert await put(q, max_in_flight=1) == 0  # lowered: no wake
        assert await listener.messages() == []
        assert await put(q, max_in_flight=4) == 1
        assert await listener.messages() == ["1"]  # one job waits
        assert "room_wanted" not in await meta(q)
        assert await put(q, rate_max=5, rate_per_ms=2000, max_in_flight=4) == 0
        assert await put(q, rate_max=5, rate_per_ms=1000, max_in_flight=4) == 1  # a shorter window
        assert await put(q, max_in_flight=4) == 1  # the rate removed
        assert await listener.messages() == ["1", "1"]


async def test_a_retention_change_brings_the_sweep_forward(q):
    await q.redis.zadd(q.keys.due, {q.keys.queue: 10**13})
    await put(q, completed_retention_s=5)
    assert await q.redis.zscore(q.keys.due, q.keys.queue) <= await q.now_ms()


async def test_max_in_flight_leases_the_room_and_flags_room_wanted(q):
    for job_id in "abcd":
        await q.add(job_id)
    await put(q, max_in_flight=3)
    assert [job.id for job in await q.lease(max_jobs=2)] == ["a", "b"]
    assert "room_wanted" not in await meta(q) and q.retry_after_ms == 0
    assert [job.id for job in await q.lease(max_jobs=2)] == ["c"]  # one slot left
    assert (await meta(q))["room_wanted"] == "1" and q.retry_after_ms == 0  # no time to give
    assert await q.lease() == []


async def test_an_exit_wakes_only_when_a_lease_was_held_back(q):
    for job_id in "ab":
        await q.add(job_id)
    await put(q, max_in_flight=1)
    async with WakeListener(q.redis, q.keys.wake) as listener:
        first = await q.lease_one()
        assert await q.ack((first.id, first.lease_id)) == [1]
        assert await listener.messages() == []  # nobody was held back
        second = await q.lease_one()
        assert await q.lease() == []  # held back: the flag is set
        assert await q.release(second.id, second.lease_id) == 1
        assert await listener.messages() == ["1", "1"]  # the release's own wake, and the flag's
        assert "room_wanted" not in await meta(q)


async def test_the_rate_counts_jobs_and_answers_retry_after_ms(q):
    for i in range(8):
        await q.add(f"j{i}")
    await put(q, rate_max=3, rate_per_ms=60_000)
    before = await q.now_ms()
    assert len(await q.lease(max_jobs=2)) == 2
    assert q.retry_after_ms == 0
    assert len(await q.lease(max_jobs=5)) == 1  # held back: 3 in the window
    assert 59_000 < q.retry_after_ms <= 60_000 + 60  # a grain of 60 ms at most
    assert await q.lease(max_jobs=1) == []
    assert 0 < q.retry_after_ms <= 60_060
    assert (await meta(q))["rate_used"] == "3"
    entries = [entry.decode().split() for entry in await q.redis.lrange(rate_key(q), 0, -1)]
    assert sum(int(jobs) for _, jobs in entries) == 3
    assert all(int(at) >= before for at, _ in entries)


async def test_a_stale_rate_log_is_dropped_and_the_window_slides(q):
    for i in range(6):
        await q.add(f"j{i}")
    await put(q, rate_max=2, rate_per_ms=1000)
    now = await q.now_ms()
    # Entries that left the window long ago, and one still in it.
    await q.redis.rpush(rate_key(q), f"{now - 10} 1", f"{now - 5000} 1", f"{now - 6000} 3")
    await q.redis.hset(q.keys.meta, "rate_used", 5)
    assert len(await q.lease(max_jobs=5)) == 1  # the old entries trimmed: room for one
    assert (await meta(q))["rate_used"] == "2"
    assert await q.redis.llen(rate_key(q)) == 2
    # A log whose newest entry is out of the window goes whole.
    await q.redis.delete(rate_key(q))
    await q.redis.rpush(rate_key(q), f"{now - 2000} 1", f"{now - 3000} 1")
    await q.redis.hset(q.keys.meta, "rate_used", 2)
    assert len(await q.lease(max_jobs=5)) == 2
    assert await q.redis.llen(rate_key(q)) == 1 and (await meta(q))["rate_used"] == "2"


async def test_removing_the_rate_limit_drops_its_log(q):
    await q.add("a")
    await put(q, rate_max=2, rate_per_ms=1000)
    await q.lease()
    assert await q.redis.exists(rate_key(q)) == 1
    await put(q)
    assert await q.redis.exists(rate_key(q)) == 0 and "rate_used" not in await meta(q)


async def test_events_off_writes_no_stream_entry(q):
    await put(q, events_off=1)
    await q.add("a")
    await q.lease_one()
    assert await q.redis.exists(q.keys.events) == 0
    assert "event_seq" not in await meta(q)
