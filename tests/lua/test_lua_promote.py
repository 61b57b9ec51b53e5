"""Delayed jobs in the scripts: promote.lua (a delayed job made waiting now, every return code)
and the due time and reason the job view shows while a job is delayed (run_at, delay_reason)."""

from __future__ import annotations

from echomq_http.api.schemas.jobs import JobView
from echomq_http.core.errors import ScriptCode
from echomq_http.core.views import job_view
from tests.lua.conftest import LuaQueue

HOUR_MS = 3600 * 1000
PROMOTED = 1  # promote.lua's answer for a job made waiting


async def last_events(q: LuaQueue) -> list[str]:
    """The lines of the stream's newest entry (one script call's events)."""
    [(_, entry)] = await q.redis.xrevrange(q.keys.events, count=1)
    return entry[b"e"].decode().split("\n")


async def view(q: LuaQueue, job_id: str) -> JobView:
    """The job as the API shows it (its hash as echomq_http.core.queue reads it)."""
    return job_view("any", job_id, await q.redis.hgetall(q.keys.job(job_id)))


async def test_promote_makes_a_delayed_job_waiting_at_the_back_of_the_line(q):
    await q.enqueue(q.spec("first"), q.spec("later", delay_ms=HOUR_MS), q.spec("second"))
    async with q.wake() as wake:
        assert await q.call("promote", "later") == PROMOTED
        assert await wake.messages() == ["1"]
    assert (await q.job("later"))["state"] == "waiting"
    assert await q.zset(q.keys.delayed) == {}
    assert await q.line() == ["first", "second", "later"]
    assert await last_events(q) == ["promoted later "]
    assert (await q.lease_one()).id == "first"


async def test_a_promoted_job_goes_after_the_waiting_jobs_of_its_priority_and_before_lower_ones(q):
    await q.enqueue(
        q.spec("low"), q.spec("high-1", priority=5), q.spec("high-2", priority=5), q.spec("top", priority=9)
    )
    await q.add("late-high", priority=5, delay_ms=HOUR_MS)
    assert await q.call("promote", "late-high") == PROMOTED
    assert await q.line() == ["top", "high-1", "high-2", "late-high", "low"]


async def test_a_promoted_grouped_job_joins_its_group_line(q):
    await q.enqueue(q.spec("g-1", group="g"), q.spec("g-late", group="g", delay_ms=HOUR_MS))
    assert await q.call("promote", "g-late") == PROMOTED
    assert list(await q.zset(q.keys.group_wait("g"))) == ["g-1", "g-late"]
    assert int((await q.meta())["group_waiting"]) == 2
    assert [job.id for job in await q.lease(max_jobs=5)] == ["g-1", "g-late"]


async def test_promote_of_a_job_that_is_not_delayed_changes_nothing(q):
    await q.enqueue(q.spec("waiting"), q.spec("active"))
    leased = await q.lease_one()
    assert leased.id == "waiting"
    before = {job_id: await q.job(job_id) for job_id in ("waiting", "active")}
    stream_length = await q.redis.xlen(q.keys.events)
    for job_id in ("waiting", "active"):
        assert await q.call("promote", job_id) == ScriptCode.NOT_DELAYED
        assert await q.job(job_id) == before[job_id]
    assert await q.line() == ["active"]
    assert await q.redis.xlen(q.keys.events) == stream_length


async def test_promote_of_a_missing_job(q):
    assert await q.call("promote", "nothing-here") == ScriptCode.JOB_NOT_FOUND
    assert not await q.redis.exists(q.keys.events)


async def test_a_delayed_enqueue_shows_when_it_runs_and_why(q):
    await q.add("later", delay_ms=HOUR_MS)
    job = await view(q, "later")
    assert (job.state, job.delay_reason) == ("delayed", "delay")
    assert job.run_at == job.created_at + HOUR_MS == (await q.zset(q.keys.delayed))["later"]
    waiting = await view(q, await q.add("now"))
    assert (waiting.run_at, waiting.delay_reason) == (None, None)


async def test_a_retry_waiting_out_its_backoff_shows_when_it_runs_and_why(q):
    await q.add("flaky", backoff_type="fixed", backoff_ms=HOUR_MS)
    leased = await q.lease_one()
    assert await q.fail("flaky", leased.lease_id) == [1, "delayed", 1]
    job = await view(q, "flaky")
    assert (job.state, job.delay_reason) == ("delayed", "retry")
    assert job.run_at == job.updated_at + HOUR_MS == (await q.zset(q.keys.delayed))["flaky"]


async def test_run_at_and_delay_reason_are_null_once_the_job_is_due(q):
    await q.add("later", delay_ms=HOUR_MS)
    await q.make_due("later")
    assert (await q.sweep())[2] == 1
    job = await view(q, "later")
    assert (job.state, job.run_at, job.delay_reason) == ("waiting", None, None)


async def test_run_at_and_delay_reason_are_null_once_promoted(q):
    await q.add("flaky", backoff_type="fixed", backoff_ms=HOUR_MS)
    leased = await q.lease_one()
    await q.fail("flaky", leased.lease_id)
    assert await q.call("promote", "flaky") == PROMOTED
    job = await view(q, "flaky")
    assert (job.state, job.run_at, job.delay_reason, job.attempt) == ("waiting", None, None, 1)
    assert (await q.lease_one()).attempt == 2  # as after its backoff
