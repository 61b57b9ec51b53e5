"""The Working operations, what a worker calls in its loop: lease, heartbeat, ack (with
lease_next), fail, release, and its session. Leasing's policy is core/leasing.py's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Request, Response, delete, post
from litestar.datastructures import State
from msgspec import UNSET, UnsetType

from echomq_http.api.auth import Action
from echomq_http.api.http import (
    JOB,
    WORKER,
    WORKING,
    Q,
    json_response,
    leasing_of,
    operation_opt,
    path_job_id,
    path_name,
    path_queue,
    queues_of,
    read_body,
    worker_owner,
)
from echomq_http.api.schemas.operations import WorkerReleaseResponse
from echomq_http.api.schemas.working import (
    AckManyRequest,
    AckManyResponse,
    AckRequest,
    AckResponse,
    FailRequest,
    FailResponse,
    HeartbeatManyRequest,
    HeartbeatManyResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaseRequest,
    LeaseResponse,
    ReleaseRequest,
    ReleaseResponse,
    SessionHeartbeatRequest,
    SessionHeartbeatResponse,
)
from echomq_http.core.leasing import LeaseAsk, Leases


@post(
    Q + "/lease",
    operation_id="lease",
    summary="Lease jobs (long poll with wait_ms)",
    description="Leases up to max_jobs jobs to the worker: each moves atomically into the queue's "
    "in-flight ledger under a lease of lease_ms, its attempt counted; highest priority first, then "
    "first in line (delayed jobs that have come due are promoted first). The job stays with the "
    "worker until it acks, fails or releases it: renew the lease with heartbeats before "
    "lease_expires_at, or once it has expired the stalled sweep gives the job back to waiting "
    "(dead-letters it on its last attempt) and another worker may get it. A paused queue leases "
    "nothing. With wait_ms the call waits until a job can be leased or wait_ms has passed (an "
    "enqueue, release, retry or resume on any replica wakes it); it answers no jobs at once when "
    "the service shuts down, and jobs leased just as the client hung up are given back unspent. "
    "Retries: with request_id, the same call within 5 minutes leases nothing new and answers the "
    "jobs the first one leased and still holds; without it, a retried call can lease other jobs "
    "while the first call's jobs wait out their lease. With tokens, a worker name belongs to the "
    "token that uses it first, as long as its leases or session last: another worker token's "
    "lease in that name (a retry of its request_id included) answers 403 forbidden; an admin "
    "token may act for any worker.",
    opt=operation_opt(Action.WORK, WORKING, LeaseRequest, {200: LeaseResponse}, ("too_many_requests",)),
)
async def lease(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    ask = lease_ask(request, await read_body(request, LeaseRequest))
    leases = await leasing_of(request).lease(queue, ask, hang_up_of(request))
    return json_response(LeaseResponse(jobs=leases.jobs, retry_after_ms=retry_after(leases)))


def retry_after(leases: Leases) -> int | UnsetType:
    """A lease answer's retry_after_ms: only when the rate limit held the lease back."""
    return leases.retry_after_ms if leases.retry_after_ms > 0 else UNSET


def lease_ask(request: Request[Any, Any, State], body: LeaseRequest) -> LeaseAsk:
    """A lease request (the lease route's body, or an ack's lease_next), for the calling token."""
    return LeaseAsk.of(
        body.worker, body.lease_ms, body.max_jobs, body.request_id, body.wait_ms, worker_owner(request)
    )


def hang_up_of(request: Request[Any, Any, State]) -> Callable[[], Awaitable[None]]:
    """What waits for the client to hang up: its body is read, so the next ASGI message can only
    be its disconnect."""

    async def hung_up() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return hung_up


@post(
    JOB + "/heartbeat",
    operation_id="heartbeat",
    summary="Renew a lease",
    description="Renews the lease: it now ends lease_ms from now (by default the length it was "
    "leased with); the lease id stays. Each call renews again, so a repeated call is harmless. "
    "409 lease_lost once the lease has expired, even before the sweep reclaimed the job, or when "
    "the job was released, reclaimed or finished: stop working on it, as it may go to another "
    "worker. 403 forbidden when the job's worker name belongs to another token (lease ids "
    "alone do not make a token the worker's).",
    opt=operation_opt(
        Action.WORK, WORKING, HeartbeatRequest, {200: HeartbeatResponse}, ("job_not_found", "lease_lost")
    ),
)
async def heartbeat(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    beat = await read_body(request, HeartbeatRequest)
    return json_response(
        await queues_of(request).heartbeat(
            queue, id, beat.lease_id, beat.lease_ms, beat.progress, owner=worker_owner(request)
        )
    )


@post(
    Q + "/heartbeat",
    operation_id="heartbeatMany",
    summary="Renew up to 1000 leases",
    description="Each lease is renewed as its own heartbeat would renew it (by lease_ms, else by "
    "its own length), or reported lost (lease_lost, job_not_found) without failing the others. "
    "The results come in the order of the leases sent, and the status is 200 whatever they say. "
    "For a worker holding many jobs: one call instead of one per job. A lease of a worker whose "
    "name belongs to another token is not renewed (code forbidden).",
    opt=operation_opt(Action.WORK, WORKING, HeartbeatManyRequest, {200: HeartbeatManyResponse}),
)
async def heartbeat_many(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    batch = await read_body(request, HeartbeatManyRequest)
    return json_response(
        HeartbeatManyResponse(
            results=await queues_of(request).heartbeat_many(queue, batch.leases, worker_owner(request))
        )
    )


# An ack's lease_next leases after the ack, so a lease's errors can follow a done ack.
LEASE_NEXT_ERRORS = ("too_many_requests",)


@post(
    JOB + "/ack",
    operation_id="ack",
    summary="Acknowledge a finished job (and lease the next)",
    description="Completes the job: it leaves the in-flight ledger, and it stays readable with its "
    "result for EMQ_COMPLETED_RETENTION_S (at most EMQ_COMPLETED_MAX per queue). Idempotent: the "
    "same ack again (same job, same lease id) answers 200 as the first did while the job is kept. "
    "409 lease_lost when the lease expired or the job was released or reclaimed: the job may be "
    "delivered again (at least once). With lease_next, the ack is applied first and answered as "
    "without it; then the lease request in lease_next runs, and its jobs are added to the answer. "
    "An ack that fails (404, 409) leases nothing. 403 forbidden, nothing acked, when lease_next's "
    "worker name belongs to another token.",
    opt=operation_opt(
        Action.WORK,
        WORKING,
        AckRequest,
        {200: AckResponse},
        ("job_not_found", "lease_lost", *LEASE_NEXT_ERRORS),
    ),
)
async def ack(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    done = await read_body(request, AckRequest)
    if done.lease_next is None:
        await queues_of(request).ack_one(queue, id, done.lease_id, done.result)
        return json_response(AckResponse(id=id, state="completed"))
    ask = lease_ask(request, done.lease_next)
    leases = await leasing_of(request).ack_and_lease(
        queue, id, done.lease_id, done.result, ask, hang_up_of(request)
    )
    return json_response(
        AckResponse(id=id, state="completed", jobs=leases.jobs, retry_after_ms=retry_after(leases))
    )


@post(
    Q + "/ack",
    operation_id="ackMany",
    summary="Acknowledge up to 1000 jobs (and lease the next)",
    description="Completes 1-1000 jobs in one call, each as the single ack does (idempotent the "
    "same way), each refused on its own (lease_lost, job_not_found) without failing the others. "
    "The results come in the order of the acks sent, and the status is 200 whatever they say. With "
    "lease_next, the lease request in it runs after the whole batch, whatever each ack's result, "
    "and its jobs are added to the answer; 403 forbidden, nothing acked, when its worker name "
    "belongs to another token.",
    opt=operation_opt(Action.WORK, WORKING, AckManyRequest, {200: AckManyResponse}, LEASE_NEXT_ERRORS),
)
async def ack_many(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    batch = await read_body(request, AckManyRequest)
    if batch.lease_next is None:
        return json_response(AckManyResponse(results=await queues_of(request).ack(queue, batch.acks)))
    ask = lease_ask(request, batch.lease_next)
    results, leases = await leasing_of(request).ack_many_and_lease(
        queue, batch.acks, ask, hang_up_of(request)
    )
    return json_response(
        AckManyResponse(results=results, jobs=leases.jobs, retry_after_ms=retry_after(leases))
    )


@post(
    JOB + "/fail",
    operation_id="fail",
    summary="Report a failed attempt",
    description="The attempt failed: the job leaves the in-flight ledger and its error is kept. "
    "With attempts left and retry true it is retried: after retry_after_ms when given, else after "
    "its backoff (state delayed), or at once at the back of the line when that is 0 (state "
    "waiting). With no attempts left, or retry false, it is dead-lettered (state failed): kept "
    "for EMQ_FAILED_RETENTION_S (at most EMQ_FAILED_MAX per queue), listed by GET .../failed, and "
    "sent back by a redrive. Idempotent: the same call again (same job, same lease id) answers as "
    "the first did and changes nothing.",
    opt=operation_opt(
        Action.WORK, WORKING, FailRequest, {200: FailResponse}, ("job_not_found", "lease_lost")
    ),
)
async def fail(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    report = await read_body(request, FailRequest)
    return json_response(
        await queues_of(request).fail(
            queue, id, report.lease_id, report.error, report.retry, report.retry_after_ms
        )
    )


@post(
    JOB + "/release",
    operation_id="release",
    summary="Give a leased job back",
    description="Gives the job back unworked, for a worker that is shutting down or cannot take it "
    "now: it leaves the in-flight ledger and is leased next, first in line within its priority, "
    "and this attempt does not count (its next lease keeps the attempt number). Idempotent: the "
    "same call again (same job, same lease id) answers as the first did and changes nothing.",
    opt=operation_opt(
        Action.WORK, WORKING, ReleaseRequest, {200: ReleaseResponse}, ("job_not_found", "lease_lost")
    ),
)
async def release(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    given_back = await read_body(request, ReleaseRequest)
    state = await queues_of(request).release(queue, id, given_back.lease_id)
    return json_response(ReleaseResponse(id=id, state=state))  # type: ignore[arg-type]


@post(
    WORKER + "/heartbeat",
    operation_id="sessionHeartbeat",
    summary="Start or renew a worker's session",
    description="Starts the worker's session in the queue, or renews it for ttl_ms from now. A "
    "session not renewed within ttl_ms lapses: within ttl_ms + the sweep interval + 1 s every job "
    "the worker holds in the queue leaves the ledger as if its lease had expired (reclaimed, a "
    "stall counted, or dead-lettered on its last attempt) and those leases are lost; a job it "
    "leases after the lapse is not taken by it. Renewing keeps the session's state: the answer "
    "says quiet when an operator quieted the worker (stop leasing, finish the jobs held). A "
    "heartbeat after a lapse starts a new session. Leases of a worker without a session behave "
    "as before. Safe to repeat. With tokens, 403 forbidden when the worker name belongs to "
    "another token (it does while that token's leases or session last).",
    opt=operation_opt(
        Action.WORK, WORKING, SessionHeartbeatRequest, {200: SessionHeartbeatResponse}, body_optional=True
    ),
)
async def session_heartbeat(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    ask = await read_body(request, SessionHeartbeatRequest, optional=True)
    return json_response(
        await queues_of(request).session_heartbeat(queue, worker, ask.ttl_ms, ask.info, worker_owner(request))
    )


@delete(
    WORKER,
    operation_id="endSession",
    summary="End a worker's session, giving back its jobs",
    description="A clean shutdown: ends the worker's session and gives every job it holds in the "
    "queue back to the front of waiting, the attempt not counted, oldest lease first in line. "
    "Those leases are lost. Answers the ids given back; a repeat gives back nothing more. Runs in "
    "bounded steps; leases made after the call began are left. With tokens, 403 forbidden when "
    "the worker name belongs to another token; once the worker holds nothing, its name is free "
    "for any token.",
    status_code=200,
    opt=operation_opt(Action.WORK, WORKING, None, {200: WorkerReleaseResponse}),
)
async def end_session(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    released = await queues_of(request).end_session(queue, worker, worker_owner(request))
    return json_response(WorkerReleaseResponse(released=released))
