"""The Schedules operations: put, read, list, delete and trigger a queue's schedules."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, post, put
from litestar.datastructures import State

from echomq_http.api.auth import Action
from echomq_http.api.http import (
    NEW_QUEUE_ERRORS,
    SCHEDULE,
    SCHEDULES,
    Q,
    json_response,
    operation_opt,
    path_name,
    path_queue,
    read_body,
    schedules_of,
)
from echomq_http.api.schemas.jobs import EnqueueResponse
from echomq_http.api.schemas.schedules import ScheduleList, ScheduleRequest, ScheduleView


def path_schedule(request: Request[Any, Any, State]) -> str:
    return path_name(request, "schedule", "schedule name")


@put(
    SCHEDULE,
    operation_id="putSchedule",
    summary="Create or replace a schedule",
    description="Stores a schedule: cron (5 fields or a macro, in timezone) or every_ms, and the job "
    "each run enqueues. Each run makes exactly one job, whatever the number of replicas, at most the "
    "sweep interval + 1 s after its time, with the id <schedule>-r<run time ms> and the job view's "
    "schedule set; the next run never waits for the previous job to start. After a time with no "
    "replica up, the first missed run is made once and the schedule goes on from the present. "
    "Replacing keeps runs and skipped, and keeps next_run_at when cron/every_ms, timezone and "
    "start_at are unchanged, so a deploy that puts its schedules at every start makes no extra run "
    "and misses none; a run time already made is never made again. 201 created, 200 replaced. 400 "
    "with what is wrong: cron text, an unknown timezone, both or neither of cron and every_ms.",
    opt=operation_opt(
        Action.ENQUEUE,
        SCHEDULES,
        ScheduleRequest,
        {201: (ScheduleView, "Created"), 200: (ScheduleView, "Replaced")},
        NEW_QUEUE_ERRORS,
    ),
)
async def put_schedule(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, name = path_queue(request), path_schedule(request)
    ask = await read_body(request, ScheduleRequest)
    view, created = await schedules_of(request).put(queue, name, ask)
    return json_response(view, 201 if created else 200)


@get(
    SCHEDULE,
    operation_id="getSchedule",
    summary="Read a schedule",
    description="The schedule as it was put, with its next and last run, last job and run counts.",
    opt=operation_opt(Action.READ, SCHEDULES, None, {200: ScheduleView}, ("schedule_not_found",)),
)
async def get_schedule(request: Request[Any, Any, State]) -> Response[bytes]:
    return json_response(await schedules_of(request).get(path_queue(request), path_schedule(request)))


@get(
    Q + "/schedules",
    operation_id="listSchedules",
    summary="List a queue's schedules",
    description="Every schedule of the queue by name, each as GET of one answers it.",
    opt=operation_opt(Action.READ, SCHEDULES, None, {200: ScheduleList}),
)
async def list_schedules(request: Request[Any, Any, State]) -> Response[bytes]:
    return json_response(ScheduleList(schedules=await schedules_of(request).list(path_queue(request))))


@delete(
    SCHEDULE,
    operation_id="deleteSchedule",
    summary="Delete a schedule",
    description="No more runs; the jobs it made stay. 404 schedule_not_found when there is none "
    "(also for a repeat of a delete that succeeded).",
    status_code=204,
    opt=operation_opt(Action.ENQUEUE, SCHEDULES, None, {204: (None, "Deleted")}, ("schedule_not_found",)),
)
async def delete_schedule(request: Request[Any, Any, State]) -> None:
    await schedules_of(request).delete(path_queue(request), path_schedule(request))


@post(
    SCHEDULE + "/trigger",
    operation_id="triggerSchedule",
    summary="Make one job of a schedule now",
    description="Enqueues the schedule's job now (with a new id, the job view's schedule set, and the "
    "schedule's last_job_id updated), outside its timetable: next_run_at, runs and limit are not "
    "touched, and a paused or ended schedule can be triggered. Each call makes one job.",
    status_code=201,
    opt=operation_opt(
        Action.ENQUEUE,
        SCHEDULES,
        None,
        {201: (EnqueueResponse, "The job made now")},
        ("schedule_not_found",),
    ),
)
async def trigger_schedule(request: Request[Any, Any, State]) -> Response[bytes]:
    made = await schedules_of(request).trigger(path_queue(request), path_schedule(request))
    return json_response(made, 201)
