"""A queue's schedules: put, read, list, delete, trigger, and the firing of due runs.

Redis holds every schedule (lua/include/schedule.lua), so they survive restarts and any
process of any replica may fire one. Run times are computed here (echomq_http.core.schedule_times)
from the Redis clock; each write is one script: a PUT is a compare-and-set against the version
it read, a run is a compare-and-set on the run time it read as due (fire_schedules.lua),
with a job id made from the schedule and that time. So two processes firing the same run, a
re-sent call or a PUT racing a run never make two jobs for one run time.

A run is at most one sweep interval late: the sweep script reports due schedules (the queue's
entry in the due index follows its earliest run) and the sweeper fires them right after it.
After downtime the first due run fires once (the run missed longest ago stands for all missed
ones) and the next is computed from the present.
"""

from __future__ import annotations

import hashlib

import msgspec
from msgspec import Raw

from echomq_http.api.schemas.jobs import EnqueueResponse
from echomq_http.api.schemas.schedules import ScheduleJob, ScheduleRequest, ScheduleView
from echomq_http.core import limits
from echomq_http.core.bindings import (
    DueSchedules,
    FireSchedules,
    PutSchedule,
    Schedule,
    ScheduleList,
    ScriptJob,
    TriggerSchedule,
    number,
)
from echomq_http.core.errors import ScriptCode, raise_for_code
from echomq_http.core.queue import JobQueues, SweepReport, new_job_id
from echomq_http.core.schedule_times import Clock, cron_expression

FIRE_BATCH = 200  # due runs read and fired per script call
MAX_FIRE_CALLS = 25  # per queue per sweep: 5,000 runs; a larger backlog goes on at the next tick
LIST_PAGE = 200
PUT_ATTEMPTS = 20  # compare-and-set retries; each loses only to a write that just happened
OPTIONAL_FIELDS = ("overlap", "run_limit", "paused")


class _Timing(msgspec.Struct, array_like=True):
    """The fields that, changed by a PUT, move the next run."""

    cron: str | None
    every_ms: int | None
    timezone: str
    start_at: int | None


_encode = msgspec.json.Encoder().encode
_NO_PAYLOAD = Raw(b"null")


def run_job_id(schedule: str, run_at: int) -> str:
    """The id of the job a run makes: the same for every process and every re-sent call."""
    suffix = f"-r{run_at}"
    if len(schedule) + len(suffix) <= limits.MAX_NAME_CHARS:
        return schedule + suffix
    return hashlib.sha256(schedule.encode()).hexdigest()[:32] + suffix


def schedule_view(queue: str, name: str, fields: dict[bytes, bytes]) -> ScheduleView:
    """A schedule's hash as the API's view: the request it was put with, and its runs."""
    spec = msgspec.json.decode(fields[b"spec"], type=ScheduleRequest)
    job = msgspec.structs.replace(spec.job, payload=Raw(fields[b"payload"]))
    requested = {field: getattr(spec, field) for field in spec.__struct_fields__ if field != "job"}
    return ScheduleView(
        **requested,
        job=job,
        schedule=name,
        queue=queue,
        next_run_at=number(fields.get(b"next_run_at")),
        last_run_at=number(fields.get(b"last_run_at")),
        last_job_id=None if b"last_job_id" not in fields else fields[b"last_job_id"].decode(),
        runs=int(fields.get(b"runs", 0)),
        skipped=int(fields.get(b"skipped", 0)),
        created_at=int(fields[b"created_at"]),
        updated_at=int(fields[b"updated_at"]),
    )


def _script_job(job: ScheduleJob) -> bytes:
    return _encode(
        ScriptJob(
            name=job.name or "",
            priority=job.priority,
            delay_ms=0,
            max_attempts=job.max_attempts,
            backoff_type=job.backoff.type if job.backoff else "exponential",
            backoff_ms=job.backoff.delay_ms if job.backoff else limits.DEFAULT_BACKOFF_MS,
            group=job.group,
        )
    )


class Schedules:
    def __init__(self, queues: JobQueues) -> None:
        self._queues = queues

    async def _read(self, queue: str, name: str) -> tuple[int, dict[bytes, bytes]]:
        return Schedule.reply(await self._queues.call_script("schedule", queue, name))

    async def get(self, queue: str, name: str) -> ScheduleView:
        _, fields = await self._read(queue, name)
        if not fields:
            raise_for_code(ScriptCode.SCHEDULE_NOT_FOUND, name)
        return schedule_view(queue, name, fields)

    async def put(self, queue: str, name: str, request: ScheduleRequest) -> tuple[ScheduleView, bool]:
        """Create or replace; True when created. Replacing keeps runs, and the next run too when
        cron/every_ms, timezone and start_at are unchanged (a deploy that puts its schedules at
        every start makes no extra run and misses none)."""
        await self._queues.register(queue)
        expression = None if request.cron is None else cron_expression(request.cron)
        timing = _encode(_Timing(expression, request.every_ms, request.timezone, request.start_at))
        spec = _encode(
            msgspec.structs.replace(request, job=msgspec.structs.replace(request.job, payload=_NO_PAYLOAD))
        )
        for _ in range(PUT_ATTEMPTS):
            now, stored = await self._read(queue, name)
            unchanged = stored.get(b"timing") == timing
            anchor = None
            if request.every_ms is not None:
                if unchanged:  # the same grid: its anchor is in the stored clock
                    anchor = Clock.parse(stored[b"clock"]).anchor
                else:
                    anchor = request.start_at if request.start_at is not None else now + request.every_ms
            clock = Clock(
                cron=expression,
                timezone=request.timezone,
                every_ms=request.every_ms,
                anchor=anchor,
                start_at=request.start_at,
                end_at=request.end_at,
            )
            next_run = self._next_run(request, clock, stored, now, unchanged)
            values: dict[str, str | bytes] = {
                "spec": spec,
                "job": _script_job(request.job),
                "payload": bytes(request.job.payload),
                "clock": clock.text(),
                "timing": timing,
            }
            if request.overlap == "skip":
                values["overlap"] = "skip"
            if request.limit is not None:
                values["run_limit"] = str(request.limit)
            if request.paused:
                values["paused"] = "1"
            absent = [field for field in OPTIONAL_FIELDS if field not in values]
            args = PutSchedule.args(name, stored.get(b"version", b"0"), next_run, now, values, absent)
            put = PutSchedule.reply(await self._queues.call_script("put-schedule", queue, *args))
            if put is None:
                continue  # a run fired or another PUT landed since the read: decide again
            created, fields = put
            return schedule_view(queue, name, fields), created
        raise RuntimeError(f"schedule {name!r} kept changing during {PUT_ATTEMPTS} attempts to put it")

    @staticmethod
    def _next_run(
        request: ScheduleRequest, clock: Clock, stored: dict[bytes, bytes], now: int, unchanged: bool
    ) -> int | None:
        if request.paused:
            return None
        if request.limit is not None and int(stored.get(b"runs", 0)) >= request.limit:
            return None
        kept = stored.get(b"next_run_at")
        if unchanged and kept is not None:  # a due run kept stays due: it is not lost to a re-put
            next_run: int | None = int(kept)
            if request.end_at is not None and next_run > request.end_at:  # type: ignore[operator]
                next_run = None
            return next_run
        # Never a run time already made: the next run is after the last one.
        return clock.next_after(max(now, int(stored.get(b"last_run_at", 0))))

    async def delete(self, queue: str, name: str) -> None:
        raise_for_code(await self._queues.call_script("delete-schedule", queue, name), name)

    async def list(self, queue: str) -> list[ScheduleView]:
        """Every schedule of the queue by name, read in pages (each one bounded script call)."""
        views: list[ScheduleView] = []
        after = ""
        while True:
            page, more = ScheduleList.reply(
                await self._queues.call_script("schedules", queue, after, LIST_PAGE)
            )
            for name, fields in page:
                if fields:
                    views.append(schedule_view(queue, name, fields))
                after = name
            if not more:
                return views

    async def trigger(self, queue: str, name: str) -> EnqueueResponse:
        """One job of the schedule made now; its timetable, runs and limit are not touched."""
        job_id = new_job_id()
        reply = await self._queues.call_script("trigger-schedule", queue, name, job_id)
        state, created = TriggerSchedule.reply(name, reply)
        return EnqueueResponse(id=job_id, queue=queue, state=state, created=created)  # type: ignore[arg-type]

    async def fire_due(self, queue: str) -> SweepReport:
        """Fire the queue's due runs, in batches (each two script calls: read, then fire)."""
        fired = skipped = 0
        for _ in range(MAX_FIRE_CALLS):
            now, due = DueSchedules.reply(await self._queues.call_script("due-schedules", queue, FIRE_BATCH))
            if not due:
                break
            runs = [
                (
                    run.schedule,
                    run.run_at,
                    Clock.parse(run.clock).next_after(max(run.run_at, now)),
                    run_job_id(run.schedule, run.run_at),
                )
                for run in due
            ]
            outcomes = await self._queues.call_script("fire-schedules", queue, *FireSchedules.args(runs))
            fired += outcomes.count(FireSchedules.FIRED)
            skipped += outcomes.count(FireSchedules.SKIPPED)
            if len(due) < FIRE_BATCH:
                break
        return SweepReport(runs_fired=fired, runs_skipped=skipped)
