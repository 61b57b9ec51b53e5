"""The Operate operations, an operator's: delete a job or a queue, release a worker's
jobs, quiet a worker, pause and resume, retry dead letters, settings and group limits."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, post, put
from litestar.datastructures import State

from echomq_http.api.auth import Action
from echomq_http.api.http import (
    JOB,
    NEW_QUEUE_ERRORS,
    OPERATE,
    WORKER,
    Q,
    json_response,
    operation_opt,
    path_job_id,
    path_name,
    path_queue,
    query_flag,
    queues_of,
    read_body,
)
from echomq_http.api.schemas.operations import (
    GroupLimitRequest,
    GroupLimitResponse,
    PauseResponse,
    QueueSettings,
    QuietResponse,
    RedriveRequest,
    RedriveResponse,
    WorkerReleaseResponse,
)


@delete(
    JOB,
    operation_id="deleteJob",
    summary="Delete a job that is not leased",
    description="Deletes a waiting, delayed, completed or dead-lettered job with its keys; its id "
    "can then be enqueued again. 409 job_active while it is leased: let the worker finish, or "
    "release the worker's jobs first.",
    status_code=204,
    opt=operation_opt(Action.ADMIN, OPERATE, None, {204: (None, "Deleted")}, ("job_not_found", "job_active")),
)
async def delete_job(request: Request[Any, Any, State]) -> None:
    queue, id = path_queue(request), path_job_id(request)
    await queues_of(request).delete(queue, id)


@delete(
    Q,
    operation_id="deleteQueue",
    summary="Delete a queue with all its jobs and keys",
    description="Deletes the queue with all its jobs and keys, in bounded steps so that other "
    "requests keep flowing. 409 job_active while jobs are in flight, unless force=true: then those "
    "are deleted too, and their workers' later calls answer 404. Afterwards the name reads as an "
    "empty queue and can be used again.",
    status_code=204,
    opt=operation_opt(
        Action.ADMIN,
        OPERATE,
        None,
        {204: (None, "Deleted")},
        ("job_active",),
        (
            (
                "force",
                "boolean",
                "delete it even with jobs in flight (their workers' calls then answer 404)",
                None,
            ),
        ),
    ),
)
async def delete_queue(request: Request[Any, Any, State]) -> None:
    queue = path_queue(request)
    await queues_of(request).delete_queue(queue, force=query_flag(request, "force"))


@post(
    Q + "/workers/{worker:str}/release",
    operation_id="releaseWorker",
    summary="Release every job a worker holds (operator declares it dead)",
    description="For a worker known to be dead: gives every job it holds in the queue (lease live "
    "or expired) back to the front of waiting without waiting for the leases to expire, the "
    "attempt not counted, oldest lease first in line. Those leases are lost: the worker's later "
    "calls on them answer 409. Runs in bounded steps; leases made after the call began are left.",
    opt=operation_opt(Action.ADMIN, OPERATE, None, {200: WorkerReleaseResponse}),
)
async def release_worker(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    return json_response(
        WorkerReleaseResponse(released=await queues_of(request).release_worker(queue, worker))
    )


@post(
    WORKER + "/quiet",
    operation_id="quietWorker",
    summary="Quiet a worker: it leases nothing more",
    description="The worker's lease requests (and its acks' lease_next) lease nothing until its "
    "session ends, and its session heartbeats answer state quiet, so it finishes the jobs it "
    "holds and stops. 409 no_session when the worker has no live session. Idempotent.",
    opt=operation_opt(Action.ADMIN, OPERATE, None, {200: QuietResponse}, ("no_session",)),
)
async def quiet_worker(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    await queues_of(request).quiet(queue, worker)
    return json_response(QuietResponse(worker=worker, state="quiet"))


@post(
    Q + "/pause",
    operation_id="pauseQueue",
    summary="Stop leasing from a queue",
    description="Leases from the queue answer no jobs (long polls keep waiting) until it is "
    "resumed, on every replica. Everything else goes on: enqueue, the heartbeats, acks, fails "
    "and releases of jobs already leased, and the stalled sweep. Idempotent.",
    opt=operation_opt(Action.ADMIN, OPERATE, None, {200: PauseResponse}, NEW_QUEUE_ERRORS),
)
async def pause(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(PauseResponse(name=queue, paused=await queues_of(request).set_paused(queue, True)))


@post(
    Q + "/resume",
    operation_id="resumeQueue",
    summary="Resume leasing from a queue",
    description="Leasing from the queue goes on, and its waiting long polls are woken. Idempotent.",
    opt=operation_opt(Action.ADMIN, OPERATE, None, {200: PauseResponse}, NEW_QUEUE_ERRORS),
)
async def resume(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(PauseResponse(name=queue, paused=await queues_of(request).set_paused(queue, False)))


@post(
    Q + "/failed/retry",
    operation_id="redriveFailed",
    summary="Send dead-lettered jobs (all, or the listed ids) back to waiting",
    description="Sends dead letters back to waiting, at the back of the line, their attempts reset "
    "to 0 and their error cleared: the listed ids (others are skipped), or with no body or no ids "
    "all of them, in bounded steps, up to those that failed when the call began. Answers the ids "
    "sent back; a repeated call skips them, as they are no longer dead letters.",
    opt=operation_opt(Action.ADMIN, OPERATE, RedriveRequest, {200: RedriveResponse}, body_optional=True),
)
async def redrive(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    ask = await read_body(request, RedriveRequest, optional=True)
    return json_response(RedriveResponse(retried=await queues_of(request).redrive(queue, ask.ids)))


@put(
    Q + "/settings",
    operation_id="putSettings",
    summary="Replace a queue's settings",
    description="Replaces the queue's settings as a whole: a field left out (or null) takes its "
    "default (no limit, events on, the service's retention). Every replica follows at once: the "
    "scripts read the settings on every call. A cap raised or removed wakes the queue's long "
    "polls. A queue configured before its first job is listed by GET /v1/queues from then on. "
    "Idempotent: the same body again changes nothing. 400 on a value out of range.",
    opt=operation_opt(Action.ADMIN, OPERATE, QueueSettings, {200: QueueSettings}, NEW_QUEUE_ERRORS),
)
async def put_settings(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    settings = await read_body(request, QueueSettings)
    return json_response(await queues_of(request).put_settings(queue, settings))


@put(
    Q + "/groups/{group:str}",
    operation_id="setGroupLimit",
    summary="Set or clear a group's own cap on its jobs in flight",
    description="At most max_in_flight of the group's jobs in the ledger at once, whatever the queue's "
    "group_max_in_flight; null goes back to the queue's. A group at its cap is skipped by leases "
    "(at no cost) until one of its jobs leaves the ledger (ack, fail, release, the sweep, ...). "
    "Raising the cap lets leases take more of the group's waiting jobs at once (long polls are "
    "woken); lowering it below the jobs in flight takes none until enough have left. Idempotent.",
    opt=operation_opt(Action.ADMIN, OPERATE, GroupLimitRequest, {200: GroupLimitResponse}),
)
async def set_group_limit(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, group = path_queue(request), path_name(request, "group", "group")
    ask = await read_body(request, GroupLimitRequest)
    return json_response(await queues_of(request).set_group_limit(queue, group, ask.max_in_flight))
