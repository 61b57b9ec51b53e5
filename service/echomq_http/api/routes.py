"""HTTP handlers: parse and check the request, make one queue call, shape the response.

No Redis here and no business rules: those live in echomq_http.core.queue and the Lua scripts. Each
handler's ``opt`` names its request body, responses and query parameters, from which
echomq_http.api.openapi builds the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, get_args

import msgspec
from litestar import Request, Response, delete, get, post, put
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import InternalServerException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import BaseRouteHandler
from litestar.response import Stream
from msgspec import UNSET, UnsetType

from echomq_http.api.auth import Action, Authenticator, Grant
from echomq_http.api.schemas import (
    AckManyRequest,
    AckManyResponse,
    AckRequest,
    AckResponse,
    CancelRequest,
    CancelResponse,
    EnqueueManyRequest,
    EnqueueManyResponse,
    EnqueueRequest,
    EnqueueResponse,
    FailedPage,
    FailRequest,
    FailResponse,
    GroupLimitRequest,
    GroupLimitResponse,
    GroupPage,
    HeartbeatManyRequest,
    HeartbeatManyResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    HistoryView,
    JobPage,
    JobState,
    JobView,
    LeaseRequest,
    LeaseResponse,
    LedgerView,
    PauseResponse,
    PromoteResponse,
    QueueList,
    QueueSettings,
    QueueView,
    QuietResponse,
    RedriveRequest,
    RedriveResponse,
    ReleaseRequest,
    ReleaseResponse,
    ScheduleList,
    ScheduleRequest,
    ScheduleView,
    SessionHeartbeatRequest,
    SessionHeartbeatResponse,
    StreamEvent,
    WorkerReleaseResponse,
    WorkersView,
    is_name,
)
from echomq_http.core import limits
from echomq_http.core.errors import BodyTimeout, InvalidRequest, ScriptCode, raise_for_code
from echomq_http.core.leasing import LeaseAsk, Leases, Leasing
from echomq_http.core.queue import FINAL_STATES, JobQueues
from echomq_http.core.schedules import Schedules
from echomq_http.runtime.event_feeds import EVENT_TYPES, OUTCOME_TYPES, EventHub, event_stream

S = TypeVar("S", bound=msgspec.Struct)

JSON = "application/json"
_DIGITS = re.compile(r"[0-9]{1,16}")
_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
_lenient_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def json_response(body: msgspec.Struct, status: int = 200) -> Response[bytes]:
    return Response(_encoder.encode(body), status_code=status, media_type=JSON)


async def json_with_streamed_list(
    shell: msgspec.Struct, chunks: AsyncIterator[Sequence[msgspec.Struct]]
) -> AsyncIterator[bytes]:
    """The JSON of shell, whose first field is an empty list, with the chunks' items in that
    list: byte for byte what encoding it with all of them would give, one chunk at a time."""
    head, tail = _encoder.encode(shell).split(b"[]", 1)  # the first "[]" is the first field's
    yield head + b"["
    first = True
    async for items in chunks:
        if items:
            encoded = [_encoder.encode(item) for item in items]
            # After the first items, a leading b"" makes the join start with the comma.
            yield b",".join(encoded if first else [b"", *encoded])
            first = False
    yield b"]" + tail


async def read_body(request: Request[Any, Any, State], struct: type[S], *, optional: bool = False) -> S:
    """Decode the body straight into a Struct; any malformed or out-of-range input -> 400."""
    try:
        # A client that trickles its body would otherwise hold a connection for ever.
        with request.app.state.body_timeouts.watch():
            body = await receive_body(request)
    except TimeoutError:
        raise BodyTimeout(
            f"the request body did not arrive within {request.app.state.body_timeout_s} s"
        ) from None
    if optional and not body.strip():
        body = b"{}"
    decoder = _decoders.get(struct)
    if decoder is None:
        decoder = _decoders[struct] = msgspec.json.Decoder(struct)
    try:
        # msgspec checks the JSON syntax of raw payloads but not their UTF-8; stored payloads
        # are returned verbatim, so they must be valid JSON text.
        body.decode()
        return decoder.decode(body)
    except msgspec.ValidationError as error:
        if "got `float`" in str(error):
            return _decode_whole_floats(body, struct)
        raise InvalidRequest(f"request body: {error}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        raise InvalidRequest(f"request body: {error}") from None
    except RecursionError:
        raise InvalidRequest("request body: JSON nested too deeply") from None


async def receive_body(request: Request[Any, Any, State]) -> bytes:
    """The body, as litestar's request.body() reads it (the same limit, the same errors),
    without the header parsing it does first: that was a tenth of a small request's CPU."""
    limit = request.route_handler.resolve_request_max_body_size() or math.inf
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise InternalServerException("client disconnected prematurely")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise RequestEntityTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_RAW_FIELDS = frozenset({"payload", "result"})


def _whole_numbers(value: Any, key: str | None = None) -> Any:
    """Integral floats (30000.0) as ints, outside payloads and results: JSON, and the JSON
    Schema of our document, make no difference between 1.0 and 1."""
    if key in _RAW_FIELDS:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def _decode_whole_floats(body: bytes, struct: type[S]) -> S:
    """The rare second try for a body that wrote an integer as 1.0. The body is checked with
    such floats made ints (strict types otherwise: "5" is still not an int), then decoded
    leniently from the original bytes, so payloads and results stay exactly as sent."""
    try:
        normalised = _whole_numbers(msgspec.json.decode(body))
        msgspec.json.decode(msgspec.json.encode(normalised), type=struct)
        return _lenient_decoder(struct).decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise InvalidRequest(f"request body: {error}") from None
    except RecursionError:
        raise InvalidRequest("request body: JSON nested too deeply") from None


def _lenient_decoder(struct: type[S]) -> msgspec.json.Decoder[S]:
    decoder = _lenient_decoders.get(struct)
    if decoder is None:
        decoder = _lenient_decoders[struct] = msgspec.json.Decoder(struct, strict=False)
    return decoder


def checked_name(value: str, what: str) -> str:
    if not is_name(value):
        raise InvalidRequest(
            f"invalid {what} {value!r}: 1-128 letters, digits, '.', '_', '-', not starting with a symbol"
        )
    return value


def path_name(request: Request[Any, Any, State], param: str, what: str) -> str:
    return checked_name(request.path_params[param], what)


def path_queue(request: Request[Any, Any, State]) -> str:
    return path_name(request, "queue", "queue name")


def path_job_id(request: Request[Any, Any, State]) -> str:
    return path_name(request, "id", "job id")


def query_name(request: Request[Any, Any, State], name: str) -> str | None:
    """A query parameter that holds a name (or a name's start), checked as one; None: absent."""
    raw = request.query_params.get(name)
    return None if raw is None else checked_name(raw, f"query parameter {name}")


def query_flag(request: Request[Any, Any, State], name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise InvalidRequest(f"query parameter {name} must be true or false, got {raw!r}")


def query_int(request: Request[Any, Any, State], name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # Plain ASCII digits only: int() would also take "1_0", " 1" and other scripts' digits.
    if _DIGITS.fullmatch(raw) is None:
        raise InvalidRequest(f"query parameter {name} must be a non-negative integer, got {raw!r}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidRequest(f"query parameter {name} must be in {low}..{high}, got {value}")
    return value


async def authorize(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """The one guard: the handler's opt names its action; the token must allow it on the queue.
    Handlers without an action (health, readiness, the document) are public."""
    action = handler.opt.get("action")
    auth: Authenticator = connection.app.state.auth
    if action is None or not auth.enabled:
        return
    grant = auth.identify(connection.headers.get("authorization"))
    auth.authorize(grant, action, connection.path_params.get("queue"))
    connection.state.grant = grant


def grant_of(request: Request[Any, Any, State]) -> Grant | None:
    return request.state.get("grant")


def worker_owner(request: Request[Any, Any, State]) -> str:
    """The id a worker name is claimed and checked with (README, Security, "Worker names"): the
    token's, "" without tokens or for an admin token (no check, no claim)."""
    grant = grant_of(request)
    return "" if grant is None else grant.worker_owner


def queues_of(request: Request[Any, Any, State]) -> JobQueues:
    return request.app.state.queues  # type: ignore[no-any-return]


def schedules_of(request: Request[Any, Any, State]) -> Schedules:
    return request.app.state.schedules  # type: ignore[no-any-return]


def traceparent_of(request: Request[Any, Any, State], queues: JobQueues) -> str | None:
    """The trace context a new job carries to its workers (W3C traceparent header)."""
    # Straight from the ASGI scope: request.headers would parse every header first.
    header = next((value for name, value in request.scope["headers"] if name == b"traceparent"), None)
    return queues.telemetry.traceparent_to_store(None if header is None else header.decode("latin-1"))


def leasing_of(request: Request[Any, Any, State]) -> Leasing:
    return request.app.state.leasing  # type: ignore[no-any-return]


def events_of(request: Request[Any, Any, State]) -> EventHub:
    return request.app.state.events  # type: ignore[no-any-return]


# A response: its Struct (None: no content), or the Struct and what that status means.
Answer = type | None | tuple[type | None, str]


def _opt(
    action: Action,
    tag: str,
    request_body: type | None = None,
    responses: dict[int, Answer] | None = None,
    errors: tuple[str, ...] = (),
    query: tuple[tuple[str, str | tuple[str, ...], str, int | None], ...] = (),
    body_optional: bool = False,
) -> dict[str, Any]:
    """What the auth guard checks and echomq_http.api.openapi documents for a handler: its tag, body,
    responses, the problem codes particular to it (echomq_http.api.openapi adds those of auth, Redis,
    parameters and bodies) and its query parameters."""
    return {
        "action": action,
        "tag": tag,
        "request_body": request_body,
        "responses": responses or {},
        "errors": errors,
        "query": query,
        "body_optional": body_optional,
    }


# What a call that can start a queue answers when the service holds EMQ_MAX_QUEUES already.
NEW_QUEUE_ERRORS = ("too_many_queues",)
JOBS, WORKING, INSPECT, OPERATE = "Jobs", "Working", "Inspect", "Operate"  # echomq_http.api.openapi.TAGS
SCHEDULES = "Schedules"
Q = "/v1/queues/{queue:str}"
JOB = Q + "/jobs/{id:str}"
SCHEDULE = Q + "/schedules/{schedule:str}"


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
    opt=_opt(
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
    opt=_opt(Action.ENQUEUE, JOBS, EnqueueManyRequest, {200: EnqueueManyResponse}, NEW_QUEUE_ERRORS),
)
async def enqueue_many(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    batch = await read_body(request, EnqueueManyRequest)
    queues = queues_of(request)
    return json_response(
        EnqueueManyResponse(jobs=await queues.enqueue(queue, batch.jobs, traceparent_of(request, queues)))
    )


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
    opt=_opt(Action.WORK, WORKING, LeaseRequest, {200: LeaseResponse}, ("too_many_requests",)),
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
    opt=_opt(
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
    opt=_opt(Action.WORK, WORKING, HeartbeatManyRequest, {200: HeartbeatManyResponse}),
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
    opt=_opt(
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
    opt=_opt(Action.WORK, WORKING, AckManyRequest, {200: AckManyResponse}, LEASE_NEXT_ERRORS),
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
    opt=_opt(Action.WORK, WORKING, FailRequest, {200: FailResponse}, ("job_not_found", "lease_lost")),
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
    opt=_opt(Action.WORK, WORKING, ReleaseRequest, {200: ReleaseResponse}, ("job_not_found", "lease_lost")),
)
async def release(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    given_back = await read_body(request, ReleaseRequest)
    state = await queues_of(request).release(queue, id, given_back.lease_id)
    return json_response(ReleaseResponse(id=id, state=state))  # type: ignore[arg-type]


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
    opt=_opt(Action.READ, JOBS, None, {200: JobView}, ("job_not_found", "too_many_requests"), GET_JOB_QUERY),
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
    opt=_opt(
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
    opt=_opt(Action.ENQUEUE, JOBS, None, {200: PromoteResponse}, ("job_not_found", "not_delayed")),
)
async def promote(request: Request[Any, Any, State]) -> Response[bytes]:
    return json_response(await queues_of(request).promote(path_queue(request), path_job_id(request)))


_EVENT_TYPE = "(" + "|".join(sorted(EVENT_TYPES)) + ")"
EVENT_TYPES_PATTERN = f"^{_EVENT_TYPE}(,{_EVENT_TYPE})*$"
EVENTS_QUERY = (
    (
        "after",
        "integer",
        "resume after this event id (0: from the oldest kept event); the Last-Event-ID header, when "
        "sent, takes its place. Without either, only new events are sent",
        2**53,
    ),
    (
        "types",
        {"type": "string", "pattern": EVENT_TYPES_PATTERN},
        "only events of these types, comma-separated (e.g. completed,failed)",
        None,
    ),
    ("job", "string", "only the events of this job", None),
)


def events_query(request: Request[Any, Any, State]) -> tuple[int | None, frozenset[str] | None, str | None]:
    after: int | None = None
    last_event_id = request.headers.get("last-event-id")
    if last_event_id is not None:
        if not _DIGITS.fullmatch(last_event_id.strip()):
            raise InvalidRequest(f"Last-Event-ID must be an event id (a whole number), got {last_event_id!r}")
        after = int(last_event_id)
    elif "after" in request.query_params:
        after = query_int(request, "after", 0, 0, 2**53)
    types: frozenset[str] | None = None
    raw_types = request.query_params.get("types")
    if raw_types is not None:
        types = frozenset(raw_types.split(","))
        unknown = sorted(types - EVENT_TYPES)
        if unknown or not raw_types:
            raise InvalidRequest(f"unknown event types {unknown}: known are {sorted(EVENT_TYPES)}")
    job = request.query_params.get("job")
    if job is not None:
        checked_name(job, "job")
    return after, types, job


@get(
    Q + "/events",
    operation_id="events",
    summary="Follow the queue's events (Server-Sent Events)",
    description="A text/event-stream of what happens to the queue's jobs, in the order it happens: "
    "enqueued, leased, progress, completed, retrying, failed (dead-lettered), released, reclaimed, "
    "cancel_requested, cancelled, promoted, deleted, and the queue's paused and resumed. Each event is "
    "written by the same script call as the change it reports, so none is lost or out of order. "
    "Event ids are whole numbers that grow within the queue: resume after one with the "
    "Last-Event-ID header (browsers' EventSource sends it by itself) or ?after=; ?after=0 starts "
    "from the oldest kept event (the last EMQ_EVENTS_MAXLEN, at least). A resume from an id that "
    "is no longer kept first sends one resync event: read the state again. A comment line comes "
    "at least every 15 s on an idle stream. A subscriber that falls too far behind is "
    "disconnected and resumes by id. No event carries a payload, a result or a lease id. "
    "Subscribers hold no Redis connection each; each counts toward EMQ_MAX_WAITERS (429 past it).",
    opt=_opt(
        Action.READ,
        INSPECT,
        None,
        {
            200: {
                "media": "text/event-stream",
                "schema": {
                    "type": "object",
                    "description": "one event of the stream (SSE fields); comment lines are keep-alives",
                    "properties": {
                        "id": {"type": "string", "description": "the event's id, a whole number"},
                        "event": {"type": "string", "description": "the event's type"},
                        "data": {
                            "type": "string",
                            "description": "a StreamEvent as JSON",
                            "contentMediaType": "application/json",
                            "contentSchema": {"$ref": "#/components/schemas/StreamEvent"},
                        },
                        "retry": {
                            "type": "integer",
                            "description": "sent once: reconnect after this many ms",
                        },
                    },
                },
                "description": "The stream: every event's data is a StreamEvent",
                "struct": StreamEvent,
            }
        },
        ("too_many_requests",),
        EVENTS_QUERY,
    ),
)
async def events(request: Request[Any, Any, State]) -> Stream:
    return await sse_response(request, path_queue(request))


async def sse_response(request: Request[Any, Any, State], queue: str) -> Stream:
    """The queue's event stream as the request asks for it (from an id, some types, one job):
    the API's feed, and the dashboard's (which signs in by cookie)."""
    after, types, job = events_query(request)
    return await sse_stream(event_stream(events_of(request), queue, after, types, job))


async def sse_stream(body: AsyncIterator[bytes]) -> Stream:
    """A Server-Sent Events answer of body, whose first chunk is read before the status goes
    out: by then the stream has subscribed, or refused with 429."""
    first = await anext(body)
    return Stream(
        _prepend(first, body),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


HISTORY_QUERY = (
    (
        "minutes",
        "integer",
        f"this many minutes back, the current one included (default {limits.DEFAULT_HISTORY_MINUTES})",
        limits.MAX_HISTORY_MINUTES,
    ),
)


@get(
    Q + "/history",
    operation_id="history",
    summary="Per-minute counts of the last hours",
    description="For each of the last `minutes` minutes, oldest first and the current (partial) "
    "one last: how many jobs were enqueued, completed, dead-lettered and reclaimed (lease "
    "expired). Counted in Redis by the scripts themselves, so every replica answers the same; "
    "kept 24 hours.",
    opt=_opt(Action.READ, INSPECT, None, {200: HistoryView}, (), HISTORY_QUERY),
)
async def history(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    minutes = query_int(request, "minutes", limits.DEFAULT_HISTORY_MINUTES, 1, limits.MAX_HISTORY_MINUTES)
    return json_response(HistoryView(minutes=await queues_of(request).history(queue, minutes)))


@delete(
    JOB,
    operation_id="deleteJob",
    summary="Delete a job that is not leased",
    description="Deletes a waiting, delayed, completed or dead-lettered job with its keys; its id "
    "can then be enqueued again. 409 job_active while it is leased: let the worker finish, or "
    "release the worker's jobs first.",
    status_code=204,
    opt=_opt(Action.ADMIN, OPERATE, None, {204: (None, "Deleted")}, ("job_not_found", "job_active")),
)
async def delete_job(request: Request[Any, Any, State]) -> None:
    queue, id = path_queue(request), path_job_id(request)
    await queues_of(request).delete(queue, id)


QUEUES_QUERY = (
    ("limit", "integer", f"at most this many queues (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "string", "the next_cursor of the previous page; none for the first page", None),
    ("prefix", "string", "only the queues whose name starts with this", None),
)


@get(
    "/v1/queues",
    operation_id="listQueues",
    summary="List queues with their counts, page by page",
    description="Lists the known queues (from a queue's first enqueue, pause, resume, settings or "
    "schedule until it is deleted) by name, each with its pause state and counts, a page at a "
    f"time: limit of them (default {limits.DEFAULT_PAGE}, at most {limits.MAX_PAGE}); pass the "
    "answer's next_cursor as cursor for the next page, until it is null. Following the cursors "
    "lists every queue that stays known once. A token limited to queue patterns sees only the "
    "queues it covers. The service holds at most EMQ_MAX_QUEUES queues.",
    opt=_opt(Action.READ, INSPECT, None, {200: QueueList}, (), QUEUES_QUERY),
)
async def list_queues(request: Request[Any, Any, State]) -> Response[bytes]:
    queues, grant = queues_of(request), grant_of(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    cursor, prefix = query_name(request, "cursor"), query_name(request, "prefix")
    names, next_cursor = await queues.queue_page(
        cursor, limit, prefix or "", None if grant is None else grant.covers
    )
    views = await asyncio.gather(*(queues.queue_view(name) for name in names))
    return json_response(QueueList(queues=list(views), next_cursor=next_cursor))


@get(
    Q,
    operation_id="getQueue",
    summary="A queue's counts and pause state",
    description="A queue's pause state and its jobs in each state, read as one consistent "
    "snapshot. Any valid name answers: a queue never used reads as empty and not paused.",
    opt=_opt(Action.READ, INSPECT, None, {200: QueueView}),
)
async def get_queue(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(await queues_of(request).queue_view(queue))


@delete(
    Q,
    operation_id="deleteQueue",
    summary="Delete a queue with all its jobs and keys",
    description="Deletes the queue with all its jobs and keys, in bounded steps so that other "
    "requests keep flowing. 409 job_active while jobs are in flight, unless force=true: then those "
    "are deleted too, and their workers' later calls answer 404. Afterwards the name reads as an "
    "empty queue and can be used again.",
    status_code=204,
    opt=_opt(
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


LEDGER_QUERY = (
    ("worker", "string", "only the jobs this worker holds", None),
    (
        "limit",
        "integer",
        f"at most this many jobs (default {limits.DEFAULT_LEDGER_PAGE})",
        limits.MAX_LEDGER_PAGE,
    ),
    ("offset", "integer", "skip this many of the oldest leases", limits.MAX_OFFSET),
)


@get(
    Q + "/active",
    operation_id="getLedger",
    summary="The in-flight ledger, oldest lease first",
    description="Every leased job of the queue with its worker, attempt and lease times, oldest "
    "lease first; a lease that ends in the past has expired and the sweep is about to reclaim "
    "its job. Filter by worker; page with limit and offset.",
    opt=_opt(Action.READ, INSPECT, None, {200: LedgerView}, (), LEDGER_QUERY),
)
async def get_ledger(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    worker = request.query_params.get("worker")
    if worker is not None:
        checked_name(worker, "worker")
    limit = query_int(request, "limit", limits.DEFAULT_LEDGER_PAGE, 1, limits.MAX_LEDGER_PAGE)
    offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
    return json_response(LedgerView(jobs=await queues_of(request).ledger(queue, worker, offset, limit)))


@get(
    Q + "/workers",
    operation_id="listWorkers",
    summary="Who holds what",
    description="Every worker holding jobs of the queue or with a live session, by name, with the "
    "ids it holds and its session (state, times and info), or null.",
    opt=_opt(Action.READ, INSPECT, None, {200: WorkersView}),
)
async def list_workers(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(WorkersView(workers=await queues_of(request).workers(queue)))


FAILED_QUERY = (
    ("limit", "integer", f"at most this many jobs (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("offset", "integer", "skip this many of the most recently failed", limits.MAX_OFFSET),
)


@get(
    Q + "/failed",
    operation_id="listFailed",
    summary="Dead-lettered jobs, most recent first",
    description="A page of the queue's dead letters (jobs whose attempts ran out, or that failed "
    "with retry false), most recently failed first, with their total. The page is streamed; a job "
    "redriven or deleted while it is read is left out.",
    opt=_opt(Action.READ, INSPECT, None, {200: FailedPage}, (), FAILED_QUERY),
)
async def list_failed(request: Request[Any, Any, State]) -> Stream:
    queue = path_queue(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
    jobs, total = await queues_of(request).failed_page(queue, offset, limit)
    # Streamed: a page of large jobs is hundreds of MB, encoded here one chunk at a time.
    return Stream(json_with_streamed_list(FailedPage(jobs=[], total=total), jobs), media_type=JSON)


JOB_STATES: tuple[str, ...] = get_args(JobState)
LIST_QUERY = (
    ("state", JOB_STATES, "list the jobs in this state (required)", None),
    ("limit", "integer", f"at most this many jobs (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "cursor", "the next_cursor of the previous page (same state); none for the first page", None),
)


@get(
    Q + "/jobs",
    operation_id="listJobs",
    summary="List the jobs in one state, page by page",
    description="A page of the queue's jobs in one state, in that state's order: waiting in the order "
    "leases take them (highest priority first, then first in line), delayed by due time, active "
    "oldest lease first, completed, failed and cancelled most recently finished first. Pass the "
    "answer's next_cursor as cursor for the next page, until it is null. Following the cursors "
    "lists every job that stays in the state meanwhile exactly once, whatever else happens to the "
    "queue (one that enters or leaves the state may or may not be listed); a page may hold fewer "
    "jobs than limit and still have a next one. A cursor is opaque, and valid only for its state. "
    "The page is streamed; a queue never used lists nothing.",
    opt=_opt(Action.READ, INSPECT, None, {200: JobPage}, (), LIST_QUERY),
)
async def list_jobs(request: Request[Any, Any, State]) -> Stream:
    queue = path_queue(request)
    state = request.query_params.get("state")
    if state not in JOB_STATES:
        raise InvalidRequest(f"query parameter state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    cursor = request.query_params.get("cursor")
    jobs, next_cursor = await queues_of(request).list_jobs(queue, state, limit, cursor)
    return Stream(json_with_streamed_list(JobPage(jobs=[], next_cursor=next_cursor), jobs), media_type=JSON)


@post(
    Q + "/workers/{worker:str}/release",
    operation_id="releaseWorker",
    summary="Release every job a worker holds (operator declares it dead)",
    description="For a worker known to be dead: gives every job it holds in the queue (lease live "
    "or expired) back to the front of waiting without waiting for the leases to expire, the "
    "attempt not counted, oldest lease first in line. Those leases are lost: the worker's later "
    "calls on them answer 409. Runs in bounded steps; leases made after the call began are left.",
    opt=_opt(Action.ADMIN, OPERATE, None, {200: WorkerReleaseResponse}),
)
async def release_worker(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    return json_response(
        WorkerReleaseResponse(released=await queues_of(request).release_worker(queue, worker))
    )


WORKER = Q + "/workers/{worker:str}"


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
    opt=_opt(
        Action.WORK, WORKING, SessionHeartbeatRequest, {200: SessionHeartbeatResponse}, body_optional=True
    ),
)
async def session_heartbeat(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    ask = await read_body(request, SessionHeartbeatRequest, optional=True)
    return json_response(
        await queues_of(request).session_heartbeat(queue, worker, ask.ttl_ms, ask.info, worker_owner(request))
    )


@post(
    WORKER + "/quiet",
    operation_id="quietWorker",
    summary="Quiet a worker: it leases nothing more",
    description="The worker's lease requests (and its acks' lease_next) lease nothing until its "
    "session ends, and its session heartbeats answer state quiet, so it finishes the jobs it "
    "holds and stops. 409 no_session when the worker has no live session. Idempotent.",
    opt=_opt(Action.ADMIN, OPERATE, None, {200: QuietResponse}, ("no_session",)),
)
async def quiet_worker(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    await queues_of(request).quiet(queue, worker)
    return json_response(QuietResponse(worker=worker, state="quiet"))


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
    opt=_opt(Action.WORK, WORKING, None, {200: WorkerReleaseResponse}),
)
async def end_session(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    released = await queues_of(request).end_session(queue, worker, worker_owner(request))
    return json_response(WorkerReleaseResponse(released=released))


@post(
    Q + "/pause",
    operation_id="pauseQueue",
    summary="Stop leasing from a queue",
    description="Leases from the queue answer no jobs (long polls keep waiting) until it is "
    "resumed, on every replica. Everything else goes on: enqueue, the heartbeats, acks, fails "
    "and releases of jobs already leased, and the stalled sweep. Idempotent.",
    opt=_opt(Action.ADMIN, OPERATE, None, {200: PauseResponse}, NEW_QUEUE_ERRORS),
)
async def pause(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(PauseResponse(name=queue, paused=await queues_of(request).set_paused(queue, True)))


@post(
    Q + "/resume",
    operation_id="resumeQueue",
    summary="Resume leasing from a queue",
    description="Leasing from the queue goes on, and its waiting long polls are woken. Idempotent.",
    opt=_opt(Action.ADMIN, OPERATE, None, {200: PauseResponse}, NEW_QUEUE_ERRORS),
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
    opt=_opt(Action.ADMIN, OPERATE, RedriveRequest, {200: RedriveResponse}, body_optional=True),
)
async def redrive(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    ask = await read_body(request, RedriveRequest, optional=True)
    return json_response(RedriveResponse(retried=await queues_of(request).redrive(queue, ask.ids)))


@get(
    Q + "/settings",
    operation_id="getSettings",
    summary="A queue's settings (flow control, retention, events)",
    description="The queue's settings as they apply now on every replica: max_in_flight, "
    "group_max_in_flight, rate_limit, max_stalls, events, and its own retention times. A queue "
    "never configured (or never used) answers the defaults: no limits, events on, the service's "
    "retention.",
    opt=_opt(Action.READ, INSPECT, None, {200: QueueSettings}),
)
async def get_settings(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(await queues_of(request).get_settings(queue))


@put(
    Q + "/settings",
    operation_id="putSettings",
    summary="Replace a queue's settings",
    description="Replaces the queue's settings as a whole: a field left out (or null) takes its "
    "default (no limit, events on, the service's retention). Every replica follows at once: the "
    "scripts read the settings on every call. A cap raised or removed wakes the queue's long "
    "polls. A queue configured before its first job is listed by GET /v1/queues from then on. "
    "Idempotent: the same body again changes nothing. 400 on a value out of range.",
    opt=_opt(Action.ADMIN, OPERATE, QueueSettings, {200: QueueSettings}, NEW_QUEUE_ERRORS),
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
    opt=_opt(Action.ADMIN, OPERATE, GroupLimitRequest, {200: GroupLimitResponse}),
)
async def set_group_limit(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, group = path_queue(request), path_name(request, "group", "group")
    ask = await read_body(request, GroupLimitRequest)
    return json_response(await queues_of(request).set_group_limit(queue, group, ask.max_in_flight))


GROUPS_QUERY = (
    ("limit", "integer", f"at most this many groups (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "string", "the next_cursor of the previous page; none for the first page", None),
)


@get(
    Q + "/groups",
    operation_id="listGroups",
    summary="A queue's groups, page by page",
    description="The queue's groups by name, each with its waiting jobs, its jobs in flight and its "
    "cap: every group with waiting jobs, jobs in flight or a cap of its own. Pass the answer's "
    "next_cursor as cursor for the next page, until it is null.",
    opt=_opt(Action.READ, INSPECT, None, {200: GroupPage}, (), GROUPS_QUERY),
)
async def list_groups(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    cursor = request.query_params.get("cursor")
    if cursor is not None:
        checked_name(cursor, "cursor")
    groups, next_cursor = await queues_of(request).groups(queue, cursor, limit)
    return json_response(GroupPage(groups=groups, next_cursor=next_cursor))


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
    opt=_opt(
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
    opt=_opt(Action.READ, SCHEDULES, None, {200: ScheduleView}, ("schedule_not_found",)),
)
async def get_schedule(request: Request[Any, Any, State]) -> Response[bytes]:
    return json_response(await schedules_of(request).get(path_queue(request), path_schedule(request)))


@get(
    Q + "/schedules",
    operation_id="listSchedules",
    summary="List a queue's schedules",
    description="Every schedule of the queue by name, each as GET of one answers it.",
    opt=_opt(Action.READ, SCHEDULES, None, {200: ScheduleList}),
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
    opt=_opt(Action.ENQUEUE, SCHEDULES, None, {204: (None, "Deleted")}, ("schedule_not_found",)),
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
    opt=_opt(
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


QUEUE_HANDLERS = [
    enqueue,
    enqueue_many,
    lease,
    heartbeat,
    heartbeat_many,
    ack,
    ack_many,
    fail,
    release,
    get_job,
    cancel,
    promote,
    events,
    history,
    delete_job,
    list_queues,
    get_queue,
    delete_queue,
    get_ledger,
    list_workers,
    list_failed,
    list_jobs,
    release_worker,
    session_heartbeat,
    quiet_worker,
    end_session,
    pause,
    resume,
    redrive,
    get_settings,
    put_settings,
    set_group_limit,
    list_groups,
    put_schedule,
    get_schedule,
    list_schedules,
    delete_schedule,
    trigger_schedule,
]
