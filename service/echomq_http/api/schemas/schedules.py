"""The bodies of the Schedules operations (api/schedules.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from echomq_http.api.schemas.common import (
    NAME_RULE,
    EpochMs,
    MaxAttempts,
    Name,
    Payload,
    Priority,
    StrictBody,
    require_names,
    require_plain_json,
)
from echomq_http.api.schemas.jobs import Backoff
from echomq_http.core import limits, schedule_times


class ScheduleJob(StrictBody):
    """The job each run of a schedule enqueues: an enqueue request without id and delay_ms (a
    run's job id is made from the schedule's name and the run's time)."""

    payload: Payload
    name: Annotated[
        Annotated[str, Meta(min_length=1, max_length=128)] | None,
        Meta(description="a label for the jobs, 1-128 characters"),
    ] = None
    priority: Annotated[Priority, Meta(description="0-1000, as on enqueue")] = 0
    max_attempts: Annotated[MaxAttempts, Meta(description="1-1000, as on enqueue")] = (
        limits.DEFAULT_MAX_ATTEMPTS
    )
    backoff: Annotated[
        Backoff | None, Meta(description="the wait before a retry after fail, as on enqueue")
    ] = None
    group: Annotated[Name | None, Meta(description=f"the jobs' group, as on enqueue. {NAME_RULE}")] = None

    def __post_init__(self) -> None:
        require_names(self.group)
        require_plain_json("payload", self.payload)


class ScheduleRequest(StrictBody):
    """A schedule: exactly one of cron and every_ms, and the job each run makes. Unknown fields
    are refused (400)."""

    job: Annotated[ScheduleJob, Meta(description="the job each run enqueues")]
    cron: Annotated[
        Annotated[str, Meta(min_length=1, max_length=limits.MAX_CRON_CHARS)] | None,
        Meta(
            description="5 fields (minute hour day-of-month month day-of-week; names such as JAN and MON, "
            "ranges, steps, lists, L) or a macro: @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly; read in timezone. On a spring-forward day a time in the gap runs at the "
            "first minute after it, once; on a fall-back day a daily time that occurs twice runs once"
        ),
    ] = None
    every_ms: Annotated[
        Annotated[int, Meta(ge=limits.MIN_EVERY_MS, le=limits.MAX_EVERY_MS)] | None,
        Meta(
            description="run every this many ms (at least 1000) on a fixed grid without drift: first at "
            "start_at if given, else one interval after the schedule was created"
        ),
    ] = None
    timezone: Annotated[
        Annotated[str, Meta(min_length=1, max_length=limits.MAX_TIMEZONE_CHARS)],
        Meta(
            description="the IANA timezone cron times are read in, e.g. Europe/Berlin (a name of the IANA "
            "database; not localtime, Factory, right/... or posix/...)"
        ),
    ] = "UTC"
    start_at: Annotated[
        EpochMs | None, Meta(description="no run before this time (epoch ms); for every_ms, the first run")
    ] = None
    end_at: Annotated[
        EpochMs | None,
        Meta(description="no run after this time (epoch ms): then the schedule stays, with next_run_at null"),
    ] = None
    limit: Annotated[
        Annotated[int, Meta(ge=1, le=limits.MAX_SCHEDULE_LIMIT)] | None,
        Meta(description="at most this many runs (triggers do not count): then next_run_at is null"),
    ] = None
    overlap: Annotated[
        Literal["allow", "skip"],
        Meta(
            description="skip: a run is skipped (counted in skipped) while the schedule's previous job is "
            "still waiting, delayed or active; allow: every run makes a job"
        ),
    ] = "allow"
    paused: Annotated[bool, Meta(description="a paused schedule makes no runs (next_run_at null)")] = False

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_ms is None):
            raise ValueError("give exactly one of cron and every_ms")
        if self.cron is not None:
            schedule_times.cron_expression(self.cron)
        schedule_times.timezone(self.timezone)
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise ValueError("end_at is before start_at: the schedule could never run")


class ScheduleView(ScheduleRequest, kw_only=True):
    """A schedule: the fields it was put with, and where its runs stand."""

    schedule: Annotated[str, Meta(description="its name")]
    queue: Annotated[str, Meta(description="the queue its jobs go to")]
    next_run_at: Annotated[
        int | None,
        Meta(description="when it runs next (epoch ms, Redis clock); null while paused or once ended"),
    ]
    last_run_at: Annotated[
        int | None, Meta(description="the time of its last run that made a job (epoch ms), or null")
    ]
    last_job_id: Annotated[
        str | None, Meta(description="the id of the last job it made (a run's or a trigger's), or null")
    ]
    runs: Annotated[int, Meta(description="runs that made a job (triggers and skipped runs not counted)")]
    skipped: Annotated[int, Meta(description='runs skipped by overlap "skip"')] = 0
    created_at: Annotated[int, Meta(description="when it was first put (epoch ms)")]
    updated_at: Annotated[int, Meta(description="when it was last put (epoch ms)")]


class ScheduleList(Struct):
    """A queue's schedules."""

    schedules: Annotated[list[ScheduleView], Meta(description="every schedule of the queue, by name")]
