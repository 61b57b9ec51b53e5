"""HTTP handlers: parse and check the request, make one queue call, shape the response.

No Redis here and no business rules: those live in service.queue and the Lua scripts. Each
handler's ``opt`` names its request body, responses and query parameters, from which
service.openapi builds the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import InternalServerException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import BaseRouteHandler
from litestar.response import Stream

from service import limits
from service.auth import Action, Authenticator, Grant
from service.errors import BodyTimeout, InvalidRequest
from service.longpoll import WakeHub, lease_with_wait
from service.queue import JobQueues, new_request_id
from service.schemas import (
    AckManyRequest,
    AckManyResponse,
    AckRequest,
    AckResponse,
    EnqueueManyRequest,
    EnqueueManyResponse,
    EnqueueRequest,
    EnqueueResponse,
    FailedPage,
    FailRequest,
    FailResponse,
    HeartbeatManyRequest,
    HeartbeatManyResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JobView,
    LeasedJob,
    LeaseRequest,
    LeaseResponse,
    LedgerView,
    PauseResponse,
    QueueList,
    QueueView,
    RedriveRequest,
    RedriveResponse,
    ReleaseRequest,
    ReleaseResponse,
    WorkerReleaseResponse,
    WorkersView,
    is_name,
)

S = TypeVar("S", bound=msgspec.Struct)

JSON = "application/json"
_DIGITS = re.compile(r"[0-9]{1,12}")
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
        with request.app.state.body_deadlines.watch():
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


def queues_of(request: Request[Any, Any, State]) -> JobQueues:
    return request.app.state.queues  # type: ignore[no-any-return]


def traceparent_of(request: Request[Any, Any, State], queues: JobQueues) -> str | None:
    """The trace context a new job carries to its workers (W3C traceparent header)."""
    # Straight from the ASGI scope: request.headers would parse every header first.
    header = next((value for name, value in request.scope["headers"] if name == b"traceparent"), None)
    return queues.telemetry.traceparent_to_store(None if header is None else header.decode("latin-1"))


def hub_of(request: Request[Any, Any, State]) -> WakeHub:
    return request.app.state.hub  # type: ignore[no-any-return]


def _opt(
    action: Action,
    request_body: type | None = None,
    responses: dict[int, type | None] | None = None,
    errors: tuple[int, ...] = (),
    query: tuple[tuple[str, str, str, int | None], ...] = (),
    body_optional: bool = False,
) -> dict[str, Any]:
    """What the auth guard checks and service.openapi documents for a handler."""
    return {
        "action": action,
        "request_body": request_body,
        "responses": responses or {},
        "errors": errors,
        "query": query,
        "body_optional": body_optional,
    }


Q = "/v1/queues/{queue:str}"
JOB = Q + "/jobs/{id:str}"


@post(
    Q + "/jobs",
    operation_id="enqueue",
    summary="Enqueue a job",
    opt=_opt(Action.ENQUEUE, EnqueueRequest, {201: EnqueueResponse, 200: EnqueueResponse}, (400, 413)),
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
    opt=_opt(Action.ENQUEUE, EnqueueManyRequest, {200: EnqueueManyResponse}, (400, 413)),
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
    opt=_opt(Action.WORK, LeaseRequest, {200: LeaseResponse}, (400, 429)),
)
async def lease(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    ask = await read_body(request, LeaseRequest)
    return json_response(LeaseResponse(jobs=await lease_jobs(request, queue, ask)))


async def lease_jobs(request: Request[Any, Any, State], queue: str, ask: LeaseRequest) -> list[LeasedJob]:
    """What a lease request answers: the lease route's, and an ack's lease_next. The request's
    body must have been read (a hang-up is then the next thing it can receive)."""
    queues = queues_of(request)

    # One request id for every try of a long poll: a re-sent try answers what an earlier one leased.
    request_id = ask.request_id or new_request_id()

    async def lease_now() -> list[LeasedJob]:
        return await queues.lease(queue, ask.worker, ask.lease_ms, ask.max_jobs, request_id)

    if ask.wait_ms <= 0:
        return await lease_now()
    client_gone = asyncio.Event()
    watcher = asyncio.create_task(_watch_hang_up(request, client_gone))
    try:
        jobs = await lease_with_wait(hub_of(request), queue, ask.wait_ms, lease_now, client_gone)
    finally:
        watcher.cancel()
    if client_gone.is_set() and jobs:
        # The client hung up while its jobs were being leased: give them straight back, unspent.
        await queues.release_many(queue, [(job.id, job.lease_id) for job in jobs])
    return jobs


async def _watch_hang_up(request: Request[Any, Any, State], client_gone: asyncio.Event) -> None:
    """The body is read, so the next ASGI message can only be the client's disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    client_gone.set()


@post(
    JOB + "/heartbeat",
    operation_id="heartbeat",
    summary="Renew a lease",
    opt=_opt(Action.WORK, HeartbeatRequest, {200: HeartbeatResponse}, (400, 404, 409)),
)
async def heartbeat(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    beat = await read_body(request, HeartbeatRequest)
    return json_response(await queues_of(request).heartbeat(queue, id, beat.lease_id, beat.lease_ms))


@post(
    Q + "/heartbeat",
    operation_id="heartbeatMany",
    summary="Renew up to 1000 leases",
    description="Each lease is renewed as its own heartbeat would renew it (by lease_ms, else by "
    "its own length), or reported lost (lease_lost, job_not_found) without failing the others. "
    "The results come in the order of the leases sent.",
    opt=_opt(Action.WORK, HeartbeatManyRequest, {200: HeartbeatManyResponse}, (400, 413)),
)
async def heartbeat_many(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    batch = await read_body(request, HeartbeatManyRequest)
    return json_response(
        HeartbeatManyResponse(results=await queues_of(request).heartbeat_many(queue, batch.leases))
    )


# An ack's lease_next leases after the ack, so a lease's errors can follow a done ack.
LEASE_NEXT_ERRORS = (429,)


@post(
    JOB + "/ack",
    operation_id="ack",
    summary="Acknowledge a finished job (and lease the next)",
    description="With lease_next, the ack is applied first and answered as without it; then the "
    "lease request in lease_next runs, and its jobs are added to the answer. An ack that fails "
    "(404, 409) leases nothing.",
    opt=_opt(Action.WORK, AckRequest, {200: AckResponse}, (400, 404, 409, 413, *LEASE_NEXT_ERRORS)),
)
async def ack(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    done = await read_body(request, AckRequest)
    await queues_of(request).ack_one(queue, id, done.lease_id, done.result)
    if done.lease_next is None:
        return json_response(AckResponse(id=id, state="completed"))
    jobs = await lease_jobs(request, queue, done.lease_next)
    return json_response(AckResponse(id=id, state="completed", jobs=jobs))


@post(
    Q + "/ack",
    operation_id="ackMany",
    summary="Acknowledge up to 1000 jobs (and lease the next)",
    description="With lease_next, the lease request in it runs after the whole batch, whatever "
    "each ack's result, and its jobs are added to the answer.",
    opt=_opt(Action.WORK, AckManyRequest, {200: AckManyResponse}, (400, 413, *LEASE_NEXT_ERRORS)),
)
async def ack_many(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    batch = await read_body(request, AckManyRequest)
    results = await queues_of(request).ack(queue, batch.acks)
    if batch.lease_next is None:
        return json_response(AckManyResponse(results=results))
    jobs = await lease_jobs(request, queue, batch.lease_next)
    return json_response(AckManyResponse(results=results, jobs=jobs))


@post(
    JOB + "/fail",
    operation_id="fail",
    summary="Report a failed attempt",
    opt=_opt(Action.WORK, FailRequest, {200: FailResponse}, (400, 404, 409)),
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
    opt=_opt(Action.WORK, ReleaseRequest, {200: ReleaseResponse}, (400, 404, 409)),
)
async def release(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    given_back = await read_body(request, ReleaseRequest)
    await queues_of(request).release(queue, id, given_back.lease_id)
    return json_response(ReleaseResponse(id=id, state="waiting"))


@get(
    JOB,
    operation_id="getJob",
    summary="Inspect a job",
    opt=_opt(Action.READ, None, {200: JobView}, (400, 404)),
)
async def get_job(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, id = path_queue(request), path_job_id(request)
    return json_response(await queues_of(request).get_job(queue, id))


@delete(
    JOB,
    operation_id="deleteJob",
    summary="Delete a job that is not leased",
    status_code=204,
    opt=_opt(Action.ADMIN, None, {204: None}, (400, 404, 409)),
)
async def delete_job(request: Request[Any, Any, State]) -> None:
    queue, id = path_queue(request), path_job_id(request)
    await queues_of(request).delete(queue, id)


@get(
    "/v1/queues",
    operation_id="listQueues",
    summary="List queues with their counts",
    opt=_opt(Action.READ, None, {200: QueueList}),
)
async def list_queues(request: Request[Any, Any, State]) -> Response[bytes]:
    queues, grant = queues_of(request), grant_of(request)
    names = [name for name in await queues.queue_names() if grant is None or grant.covers(name)]
    views = await asyncio.gather(*(queues.queue_view(name) for name in names))
    return json_response(QueueList(queues=list(views)))


@get(
    Q,
    operation_id="getQueue",
    summary="A queue's counts and pause state",
    opt=_opt(Action.READ, None, {200: QueueView}, (400,)),
)
async def get_queue(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(await queues_of(request).queue_view(queue))


@delete(
    Q,
    operation_id="deleteQueue",
    summary="Delete a queue with all its jobs and keys",
    status_code=204,
    opt=_opt(
        Action.ADMIN,
        None,
        {204: None},
        (400, 409),
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
    opt=_opt(Action.READ, None, {200: LedgerView}, (400,), LEDGER_QUERY),
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
    opt=_opt(Action.READ, None, {200: WorkersView}, (400,)),
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
    opt=_opt(Action.READ, None, {200: FailedPage}, (400,), FAILED_QUERY),
)
async def list_failed(request: Request[Any, Any, State]) -> Stream:
    queue = path_queue(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
    jobs, total = await queues_of(request).failed_page(queue, offset, limit)
    # Streamed: a page of large jobs is hundreds of MB, encoded here one chunk at a time.
    return Stream(json_with_streamed_list(FailedPage(jobs=[], total=total), jobs), media_type=JSON)


@post(
    Q + "/workers/{worker:str}/release",
    operation_id="releaseWorker",
    summary="Release every job a worker holds (operator declares it dead)",
    opt=_opt(Action.ADMIN, None, {200: WorkerReleaseResponse}, (400,)),
)
async def release_worker(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, worker = path_queue(request), path_name(request, "worker", "worker")
    return json_response(
        WorkerReleaseResponse(released=await queues_of(request).release_worker(queue, worker))
    )


@post(
    Q + "/pause",
    operation_id="pauseQueue",
    summary="Stop leasing from a queue",
    opt=_opt(Action.ADMIN, None, {200: PauseResponse}, (400,)),
)
async def pause(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(PauseResponse(name=queue, paused=await queues_of(request).set_paused(queue, True)))


@post(
    Q + "/resume",
    operation_id="resumeQueue",
    summary="Resume leasing from a queue",
    opt=_opt(Action.ADMIN, None, {200: PauseResponse}, (400,)),
)
async def resume(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(PauseResponse(name=queue, paused=await queues_of(request).set_paused(queue, False)))


@post(
    Q + "/failed/retry",
    operation_id="redriveFailed",
    summary="Send dead-lettered jobs (all, or the listed ids) back to waiting",
    opt=_opt(Action.ADMIN, RedriveRequest, {200: RedriveResponse}, (400, 413), body_optional=True),
)
async def redrive(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    ask = await read_body(request, RedriveRequest, optional=True)
    return json_response(RedriveResponse(retried=await queues_of(request).redrive(queue, ask.ids)))


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
    delete_job,
    list_queues,
    get_queue,
    delete_queue,
    get_ledger,
    list_workers,
    list_failed,
    release_worker,
    pause,
    resume,
    redrive,
]
