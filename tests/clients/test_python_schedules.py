"""The Python SDK's schedule methods (both clients) against a real service: put, get, list,
replace, trigger, delete, a run made by the sweeper, and the errors of bad input and a missing
schedule."""

from __future__ import annotations

import time

import pytest

from echomq import (
    AsyncClient,
    Backoff,
    Client,
    Enqueued,
    InvalidRequest,
    NotFound,
    Schedule,
    ScheduleJob,
    ScheduleNotFound,
)
from tests.clients.support import await_until

FIVE_MINUTES_MS = 300_000


def test_put_get_list_replace_trigger_delete(sdk: Client, queue: str) -> None:
    before_ms = int(time.time() * 1000)
    made = sdk.put_schedule(
        queue,
        "report",
        {"payload": {"report": "sales"}, "name": "report", "priority": 7, "max_attempts": 2, "group": "g1"},
        cron="*/5 * * * *",
        timezone="Europe/Berlin",
        overlap="skip",
    )
    assert isinstance(made, Schedule)
    assert (made.schedule, made.queue, made.cron, made.every_ms, made.timezone) == (
        "report",
        queue,
        "*/5 * * * *",
        None,
        "Europe/Berlin",
    )
    assert (made.overlap, made.paused, made.limit, made.runs, made.skipped) == ("skip", False, None, 0, 0)
    assert made.job.payload == {"report": "sales"}
    assert (made.job.name, made.job.priority, made.job.max_attempts, made.job.group) == ("report", 7, 2, "g1")
    assert made.next_run_at is not None and made.next_run_at % FIVE_MINUTES_MS == 0  # Berlin: whole hours
    assert before_ms - 60_000 < made.next_run_at <= before_ms + FIVE_MINUTES_MS + 60_000
    assert (made.last_run_at, made.last_job_id) == (None, None)
    assert sdk.get_schedule(queue, "report") == made

    # Replaced as a whole: what is left out goes back to its default; the creation time stays.
    ticks = sdk.put_schedule(
        queue,
        "ticks",
        ScheduleJob(payload=1, backoff=Backoff(type="fixed", delay_ms=500)),
        every_ms=60_000,
        paused=True,
        limit=3,
    )
    assert (ticks.paused, ticks.next_run_at, ticks.limit, ticks.timezone) == (True, None, 3, "UTC")
    assert ticks.job.backoff == Backoff(type="fixed", delay_ms=500)
    replaced = sdk.put_schedule(queue, "report", {"payload": None}, every_ms=3_600_000)
    assert (replaced.cron, replaced.every_ms, replaced.overlap, replaced.timezone) == (
        None,
        3_600_000,
        "allow",
        "UTC",
    )
    assert (replaced.job.name, replaced.job.group) == (None, None)
    assert replaced.created_at == made.created_at and replaced.updated_at >= made.updated_at
    assert [view.schedule for view in sdk.list_schedules(queue)] == ["report", "ticks"]

    # A trigger makes one job now, whatever the timetable (paused here), and counts no run.
    triggered = sdk.trigger_schedule(queue, "ticks")
    assert isinstance(triggered, Enqueued) and (triggered.created, triggered.state) == (True, "waiting")
    job = sdk.get_job(queue, triggered.id)
    assert (job.schedule, job.payload) == ("ticks", 1)
    again = sdk.trigger_schedule(queue, "ticks")
    assert again.id != triggered.id
    after = sdk.get_schedule(queue, "ticks")
    assert (after.last_job_id, after.runs, after.next_run_at) == (again.id, 0, None)

    sdk.delete_schedule(queue, "ticks")
    assert [view.schedule for view in sdk.list_schedules(queue)] == ["report"]
    assert sdk.get_job(queue, triggered.id).state == "waiting"  # the jobs it made stay


def test_missing_schedules_and_bad_input_raise_typed_errors(sdk: Client, queue: str) -> None:
    for call in (
        lambda: sdk.get_schedule(queue, "nope"),
        lambda: sdk.delete_schedule(queue, "nope"),
        lambda: sdk.trigger_schedule(queue, "nope"),
    ):
        with pytest.raises(ScheduleNotFound) as missing:
            call()
        assert (missing.value.status, missing.value.code) == (404, "schedule_not_found")
        assert not isinstance(missing.value, NotFound)  # the path exists: the schedule does not
        assert "nope" in missing.value.detail

    with pytest.raises(InvalidRequest) as bad_cron:
        sdk.put_schedule(queue, "bad", {"payload": 1}, cron="61 * * * *")
    assert bad_cron.value.status == 400 and "invalid cron '61 * * * *'" in bad_cron.value.detail
    with pytest.raises(InvalidRequest) as both:
        sdk.put_schedule(queue, "bad", {"payload": 1}, cron="@daily", every_ms=60_000)
    assert "exactly one of cron and every_ms" in both.value.detail
    with pytest.raises(InvalidRequest) as zone:
        sdk.put_schedule(queue, "bad", {"payload": 1}, cron="@daily", timezone="Mars/Olympus")
    assert "Mars/Olympus" in zone.value.detail
    assert sdk.list_schedules(queue) == []  # nothing was stored


async def test_async_client_schedules_and_a_run_is_made(asdk: AsyncClient, queue: str) -> None:
    made = await asdk.put_schedule(queue, "tick", {"payload": {"n": 1}, "name": "tick"}, every_ms=1000)
    assert made.next_run_at is not None and made.runs == 0
    assert await asdk.get_schedule(queue, "tick") == made
    assert [view.schedule for view in await asdk.list_schedules(queue)] == ["tick"]

    async def ran() -> Schedule | None:
        view = await asdk.get_schedule(queue, "tick")
        return view if view.runs >= 1 else None

    first = await await_until(ran)  # the sweeper makes the run
    assert first.last_run_at is not None and first.last_job_id == f"tick-r{first.last_run_at}"
    job = await asdk.get_job(queue, first.last_job_id)
    assert (job.schedule, job.name, job.payload) == ("tick", "tick", {"n": 1})

    triggered = await asdk.trigger_schedule(queue, "tick")
    assert (await asdk.get_job(queue, triggered.id)).schedule == "tick"

    with pytest.raises(InvalidRequest) as bad:
        await asdk.put_schedule(queue, "tick", {"payload": 1}, cron="* * *")
    assert "has 3 fields: it needs 5" in bad.value.detail
    await asdk.delete_schedule(queue, "tick")
    with pytest.raises(ScheduleNotFound):
        await asdk.get_schedule(queue, "tick")
    with pytest.raises(ScheduleNotFound):
        await asdk.delete_schedule(queue, "tick")
