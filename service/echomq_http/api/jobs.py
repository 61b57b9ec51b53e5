"""The Jobs operations: enqueue (one or many), read a job (and wait for its outcome),
cancel, promote."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, Response, get, post
from litestar.datastructures import State

from echomq_http.api.auth import Action
from echomq_http.api.http import (
    JOB,
    JOBS,
    NEW_QUEUE_ERRORS,
    Q,
    events_of,
    json_response,
    operation_opt,
    path_job_id,
    path_queue,
    query_int,
    queues_of,
    read_body,
    traceparent_of,
)
from echomq_http.api.schemas.jobs import (
    CancelRequest,
    CancelResponse,
    EnqueueManyRequest,
    EnqueueManyResponse,
    EnqueueRequest,
    EnqueueResponse,
    JobView,
    PromoteResponse,
)
from echomq_http.core import limits
from echomq_http.core.errors import ScriptCode, raise_for_code
from echomq_http.core.queue import FINAL_STATES, JobQueues
from echomq_http.runtime.event_feeds import OUTCOME_TYPES, EventHub


@post(
    Q + "/jobs",
    operation_id="enqueue",
    summary="Enqueue a job",
    description="Stores a job in the queue (a queue exists from its first job on): waiting, or "
    "delayed with delay_ms. Idempotent by id: while a job with the given id is kept in the queue, "
    "in any state, enqueueing that id again changes nothing (whatever its payload) and answers "
    "that job (200, created false), so a producer can retry safely; without an id the service "
    "makes one, and a retry can store the job twice. The producer's W3C traceparent header (or, "
    "with tracing on, the enqueue's own span) is kept and handed to the job's workers. Long polls "
    "waiting on the queue, on any replica, are woken.",
    opt=operation_opt(
        Action.ENQUEUE,
        JOBS,
        EnqueueRequest,
        {
            201: (EnqueueResponse, "Stored now"),
            200: (EnqueueResponse, "A job with this id was already kept: nothing changed"),
        },
        NEW_QUEUE_ERRORS,
    ),
)
async def enqueue(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    job = await read_body(request, EnqueueRequest)
    queues = queues_of(request)
    (created,) = await queues.enqueue(queue, [job], traceparent_of(request, queues))
    return json_response(created, 201 if created.created else 200)


@post(
    Q + "/enqueue",
    operation_id="enqueueMany",
    summary="Enqueue up to 1000 jobs",
    description="Enqueues 1-1000 jobs in one atomic step, each as the single enqueue does (the same "
    "fields, the same idempotency by id). The answer has one entry per job, in the order sent, and "
    "the status is 200 whether or not any job was stored now. A body with any invalid job is "
    "refused whole (400): nothing is stored.",
    opt=operation_opt(Action.ENQUEUE, JOBS, EnqueueManyRequest, {200: EnqueueManyResponse}, NEW_QUEUE_ERRORS),
)
async def enqueue_many(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    batch = await read_body(request, EnqueueManyRequest)
    queues = queues_of(request)
    return json_response(
        EnqueueManyResponse(jobs=await queues.enqueue(queue, batch.jobs, traceparent_of(request, queues)))
    )


GET_JOB_QUERY = (
    (
        "wait_ms",
        "integer",
        f"wait up to this long for the job's outcome (0-{limits.MAX_OUTCOME_WAIT_MS}, default 0: answer now)",
        limits.MAX_OUTCOME_WAIT_MS,
    ),
)


@get(
    JOB,
    operation_id="getJob",
    summary="Inspect a job",
    description="Reads a job in any state: its payload, state, attempts, result or latest error, "
    "progress, and who holds it while it is leased. Completed, dead-lettered and cancelled jobs "
    "can be read for their retention time; 404 after that, and for an id never enqueued or "
    "deleted. With wait_ms, waits for the job's outcome: answers as soon as the job is completed, "
    "failed or cancelled (at once if it already is), or after wait_ms with its state then; 404 "
    "when it is deleted meanwhile. The state and the position in the queue's events are read "
    "together, and the wait follows the events from there, so an outcome that happens as the call "
    "arrives is never missed. A wait holds no Redis connection; each counts toward "
    "EMQ_MAX_WAITERS (429 past it).",
    opt=operation_opt(
        Action.READ, JOBS, None, {200: JobView}, ("job_not_found", "too_many_requests"), GET_JOB_QUERY
    ),
)
async def get_job(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    wait_ms = query_int(request, "wait_ms", 0, 0, limits.MAX_OUTCOME_WAIT_MS)
    queues = queues_of(request)
    if wait_ms == 0:
        return json_response(await queues.get_job(queue, id))
    return json_response(await wait_for_outcome(events_of(request), queues, queue, id, wait_ms / 1000))


OUTCOME_POLL_S = 0.1  # how often a wait reads the job when the service keeps no events


# A queue's events can be turned off by its settings at any time: a wait following the events
# looks again this often whether they are still on (a read at most this stale decides).
EVENTS_RECHECK_S = 1.0


async def wait_for_outcome(
    hub: EventHub, queues: JobQueues, queue: str, job_id: str, wait_s: float
) -> JobView:
    """The job once it is final, or after wait_s. Subscribed before reading: every event after
    the position read with the job reaches the subscriber."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    async with hub.subscribe(queue, OUTCOME_TYPES, job_id) as (_, subscriber):
        view, position = await queues.job_and_position(queue, job_id)
        if view is None:
            raise_for_code(ScriptCode.JOB_NOT_FOUND, job_id)
        if view.state in FINAL_STATES:  # type: ignore[union-attr]
            return view  # type: ignore[return-value]
        # No events to follow (none kept by the service, or the queue's own turned off): look
        # at the job again now and then.
        polling = queues.events_maxlen == 0 or await queues.events_off(queue)
        checked_at = loop.time()
        while (remaining := deadline - loop.time()) > 0:
            if not polling and loop.time() - checked_at >= EVENTS_RECHECK_S:
                polling, checked_at = await queues.events_off(queue), loop.time()
            if polling:
                await asyncio.sleep(min(OUTCOME_POLL_S, remaining))
                view = await queues.get_job(queue, job_id)
                if view.state in FINAL_STATES:
                    return view
                continue
            event = await subscriber.next(min(remaining, EVENTS_RECHECK_S))
            if subscriber.dropped or subscriber.resync is not None:
                break  # shutting down, or the queue was deleted: answer with what is there now
            if event is not None and event.number > position:
                break
    return await queues.get_job(queue, job_id)


@post(
    JOB + "/cancel",
    operation_id="cancel",
    summary="Cancel a job",
    description="A waiting or delayed job is cancelled at once: it is never leased, and is kept "
    "like a dead letter (state cancelled, the reason as its error). An active job stays active "
    "with cancel_requested: its worker's heartbeats say so; an ack still completes it, while a "
    "fail (whatever its retry), a release, an operator release or an expired lease make it "
    "cancelled, never retried. A completed, failed or cancelled job is left as it is, and the "
    "answer shows its state. Idempotent: cancelling again changes nothing.",
    opt=operation_opt(
        Action.CANCEL, JOBS, CancelRequest, {200: CancelResponse}, ("job_not_found",), body_optional=True
    ),
)
async def cancel(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    ask = await read_body(request, CancelRequest, optional=True)
    return json_response(await queues_of(request).cancel(queue, id, ask.reason))


@post(
    JOB + "/promote",
    operation_id="promote",
    summary="Run a delayed job now",
    description="A delayed job (an enqueue's delay_ms, or a failed attempt waiting out its backoff) "
    "becomes waiting at once, at the back of its priority's line (its group's line for a grouped "
    "job), as it would have when due; long polls waiting on the queue are woken. 409 not_delayed "
    "when the job is in another state (nothing changes). Emits promoted.",
    opt=operation_opt(Action.ENQUEUE, JOBS, None, {200: PromoteResponse}, ("job_not_found", "not_delayed")),
)
async def promote(request: Request[Any, Any, State]) -> Response[bytes]:
    return json_response(await queues_of(request).promote(path_queue(request), path_job_id(request)))
