"""HTTP plumbing the handlers share: reading and checking bodies, path and query
parameters, JSON and SSE answers, the auth guard, what a handler declares (operation_opt: its
tag, body, answers and problems, from which api/openapi.py builds the document), and the app
state a handler reaches."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import InternalServerException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import BaseRouteHandler
from litestar.response import Stream

from echomq_http.api.auth import Action, Authenticator, Grant
from echomq_http.api.schemas.common import is_name
from echomq_http.core.errors import BodyTimeout, InvalidRequest
from echomq_http.core.flows import Flows
from echomq_http.core.leasing import Leasing
from echomq_http.core.queue import JobQueues
from echomq_http.core.schedules import Schedules
from echomq_http.runtime.event_feeds import EventHub

S = TypeVar("S", bound=msgspec.Struct)


JSON = "application/json"


_DIGITS = re.compile(r"[0-9]{1,16}")


_encoder = msgspec.json.Encoder()


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


_lenient_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


class JsonResponse(Response[bytes]):
    """A litestar Response of JSON bytes, made without Response.__init__'s general work (its
    cookies and headers normalised, its encoders merged): about 5 µs of a small request's CPU.
    Its headers and cookies are its own, as litestar's are."""

    __slots__ = ()

    def __init__(self, content: bytes, status: int) -> None:
        self.content = content
        self.status_code = status
        self.media_type = JSON
        self.headers = {}
        self.cookies = []
        self.background = None
        self.encoding = "utf-8"
        self.response_type_encoders = {}


def json_response(body: msgspec.Struct, status: int = 200) -> Response[bytes]:
    return JsonResponse(_encoder.encode(body), status)


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
    body: bytes | None = getattr(request, "body", None)  # a HotRequest's, whole already
    if isinstance(body, bytes):
        if len(body) > (request.route_handler.resolve_request_max_body_size() or math.inf):
            raise RequestEntityTooLarge
    else:
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
    """The id a worker name is claimed and checked with (docs/security.md, "Worker names"): the
    token's, "" without tokens or for an admin token (no check, no claim)."""
    grant = grant_of(request)
    return "" if grant is None else grant.worker_owner


def queues_of(request: Request[Any, Any, State]) -> JobQueues:
    return request.app.state.queues  # type: ignore[no-any-return]


def schedules_of(request: Request[Any, Any, State]) -> Schedules:
    return request.app.state.schedules  # type: ignore[no-any-return]


def flows_of(request: Request[Any, Any, State]) -> Flows:
    return request.app.state.flows  # type: ignore[no-any-return]


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


def operation_opt(
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


WORKER = Q + "/workers/{worker:str}"
