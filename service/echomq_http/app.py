"""create_app(settings) and its lifespan: wiring only."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from types import FrameType
from typing import Any
from urllib.parse import parse_qsl

from litestar import Litestar, Request, Response, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.plugins.opentelemetry import OpenTelemetryConfig, OpenTelemetryPlugin
from litestar.response import Redirect
from litestar.types import ASGIApp, Receive, Scope, Send
from opentelemetry.metrics import NoOpMeterProvider
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from echomq_http.api import openapi
from echomq_http.api.auth import Action, Authenticator, Forbidden, Unauthorized
from echomq_http.api.body_timeouts import BodyReadTimeouts
from echomq_http.api.docs import DOCS_HANDLERS
from echomq_http.api.fastpath import FastPath
from echomq_http.api.http import authorize, grant_of, json_response
from echomq_http.api.routes import QUEUE_HANDLERS
from echomq_http.api.schemas.common import Health, Problem
from echomq_http.api.webguard import AllowedHosts, WebGuard
from echomq_http.config import Settings
from echomq_http.core.errors import PROBLEMS, QueueError, problem_type
from echomq_http.core.flows import Flows
from echomq_http.core.leasing import Leasing
from echomq_http.core.queue import JobQueues
from echomq_http.core.schedules import Schedules
from echomq_http.observability import exposition, metrics
from echomq_http.observability.replica_totals import ReplicaTotals
from echomq_http.observability.telemetry import Telemetry, http_metrics_middleware
from echomq_http.runtime.event_feeds import EventHub
from echomq_http.runtime.sweeper import Sweeper
from echomq_http.runtime.wakeups import TooManyWaiters, WakeHub
from echomq_http.store.backends import WriteNotConfirmed
from echomq_http.store.connect import check_server, close, connect
from echomq_http.ui import template_config, ui_handlers
from echomq_http.ui.pages import UI

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
RETRY_AFTER_S = 1
SWEEP_CONNECTIONS = 2  # the sweep's own pool: it runs one call at a time, plus a spare
# Redis answers these while it cannot serve writes for now: not the client's fault, retry later.
_UNAVAILABLE_REPLIES = ("OOM", "READONLY", "MASTERDOWN", "LOADING", "BUSY", "NOREPLICAS")
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 400: "invalid_request"}


def problem(status: int, code: str, title: str, detail: str, retry_after: bool = False) -> Response[bytes]:
    body = Problem(type=problem_type(code), title=title, status=status, detail=detail, code=code)
    response = json_response(body, status)
    response.media_type = PROBLEM_JSON
    if retry_after:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def on_queue_error(_: Request[Any, Any, State], error: QueueError) -> Response[bytes]:
    status, code, title = PROBLEMS[type(error)]
    return problem(status, code, title, str(error), retry_after=status == 503)


def on_unauthorized(_: Request[Any, Any, State], error: Unauthorized) -> Response[bytes]:
    response = problem(401, "unauthorized", "Unauthorized", str(error))
    response.headers["WWW-Authenticate"] = 'Bearer realm="echomq"'
    return response


def on_forbidden(_: Request[Any, Any, State], error: Forbidden) -> Response[bytes]:
    return problem(403, "forbidden", "Forbidden", str(error))


def on_too_many_waiters(_: Request[Any, Any, State], error: TooManyWaiters) -> Response[bytes]:
    return problem(429, "too_many_requests", "Too many waiting requests", str(error), retry_after=True)


def on_http_error(_: Request[Any, Any, State], error: HTTPException) -> Response[bytes]:
    status = error.status_code
    code = _HTTP_CODES.get(status, "http_error")
    detail = error.detail
    if status == 400 and error.extra:
        detail = f"{detail}: {error.extra}"
    response = problem(status, code, code.replace("_", " ").capitalize(), str(detail))
    if error.headers and "allow" in {name.lower() for name in error.headers}:
        response.headers.update(error.headers)  # 405 names the methods the path takes
    return response


def on_redis_error(_: Request[Any, Any, State], error: RedisError) -> Response[bytes]:
    unavailable = isinstance(error, RedisConnectionError | RedisTimeoutError) or (
        isinstance(error, ResponseError) and str(error).startswith(_UNAVAILABLE_REPLIES)
    )
    if unavailable:
        return problem(
            503,
            "backend_unavailable",
            "Backend unavailable",
            f"Redis is unavailable: {str(error) or type(error).__name__}",
            retry_after=True,
        )
    log.error("unexpected Redis error", exc_info=error)
    return problem(500, "internal_error", "Internal error", "unexpected backend error")


def on_write_not_confirmed(_: Request[Any, Any, State], error: WriteNotConfirmed) -> Response[bytes]:
    return problem(
        503, "backend_unavailable", "Write not confirmed", f"durable mode: {error}", retry_after=True
    )


def on_unexpected(_: Request[Any, Any, State], error: Exception) -> Response[bytes]:
    log.error("unhandled error", exc_info=error)
    return problem(500, "internal_error", "Internal error", "unexpected error; see the service log")


EXCEPTION_HANDLERS: dict[type[Exception], Any] = {
    QueueError: on_queue_error,
    TooManyWaiters: on_too_many_waiters,
    Unauthorized: on_unauthorized,
    Forbidden: on_forbidden,
    HTTPException: on_http_error,
    RedisError: on_redis_error,
    WriteNotConfirmed: on_write_not_confirmed,
    Exception: on_unexpected,
}

# What workers call in a loop: served by echomq_http.api.fastpath, past litestar's routing.
HOT_OPERATIONS = (
    "enqueue",
    "enqueueMany",
    "lease",
    "heartbeat",
    "heartbeatMany",
    "ack",
    "ackMany",
    "fail",
    "release",
)


def reject_ambiguous_paths(app: ASGIApp) -> ASGIApp:
    """The router matches the decoded, normalised path: "/v1/queues//active" would read as queue
    "active", and "/v1/queues/a%2Fpause" as a pause of queue "a". Names never hold "/", so a
    path with an empty segment or an encoded slash names nothing: 404."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        raw_path = scope.get("raw_path") or scope["path"].encode()
        if scope["type"] == "http" and (b"//" in raw_path or b"%2f" in raw_path.lower()):
            response = problem(404, "not_found", "Not found", "no such path (empty or encoded path segment)")
            await response.to_asgi_response(app=None, request=None)(scope, receive, send)  # type: ignore[arg-type]
            return
        await app(scope, receive, send)

    return middleware


API_PREFIX = "/v1/"


def repeated_query_parameter(query_string: bytes) -> str | None:
    """The first name the query string gives twice (blank values count), or None."""
    seen: set[str] = set()
    for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, separator="&"):
        if name in seen:
            return name
        seen.add(name)
    return None


def reject_repeated_query_parameters(app: ASGIApp) -> ASGIApp:
    """The API reads one value per query parameter: ?limit=1&limit=1000 would be answered with
    one of them, whichever the parser keeps, so a repeat is refused (400) on every /v1 route
    instead of silently resolved. (FastPath hands every request with a query string to litestar.)"""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        query_string = scope.get("query_string", b"")
        if scope["type"] == "http" and query_string and scope["path"].startswith(API_PREFIX):
            name = repeated_query_parameter(query_string)
            if name is not None:
                detail = f"query parameter {name} is given more than once: give it once"
                response = problem(400, "invalid_request", "Invalid request", detail)
                await response.to_asgi_response(app=None, request=None)(scope, receive, send)  # type: ignore[arg-type]
                return
        await app(scope, receive, send)

    return middleware


def tracing_plugin(telemetry: Telemetry) -> OpenTelemetryPlugin:
    """A server span per request (litestar's OpenTelemetry integration); HTTP metrics are ours."""
    config = OpenTelemetryConfig(
        tracer_provider=telemetry.tracer_provider,
        meter_provider=NoOpMeterProvider(),
        exclude=["/healthz", "/readyz", "/metrics"],
    )
    return OpenTelemetryPlugin(config)


def hook_shutdown_signals(hub: WakeHub, events: EventHub) -> None:
    """Before uvicorn waits for requests to finish, answer the long polls (else shutdown would
    wait up to wait_ms), end the event streams and outcome waits, and lease nothing more. uvicorn
    has installed its SIGTERM/SIGINT handlers by the time the lifespan starts; ours runs first,
    then passes the signal on."""
    if threading.current_thread() is not threading.main_thread():
        return  # signals reach only the main thread (an app served from a thread, as in tests)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(number: int, frame: FrameType | None, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(hub.begin_closing)
            loop.call_soon_threadsafe(events.begin_closing)
            if callable(previous):
                previous(number, frame)

        signal.signal(signum, handler)


def create_app_from_env() -> FastPath:
    """The app of a uvicorn worker process (settings from the environment)."""
    die_with_parent()
    return create_app(Settings.from_env())


def die_with_parent() -> None:
    """A worker process whose supervisor was SIGKILLed must not live on as an orphan still
    serving (and sweeping): on Linux, ask for SIGTERM when the parent dies."""
    parent = multiprocessing.parent_process()
    if sys.platform != "linux" or parent is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent.pid:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def answer_options(app: ASGIApp) -> ASGIApp:
    """OPTIONS lists every method of the path: litestar's own answer names only the first
    handler registered on it (GET but not DELETE for a job)."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            path = min(scope["route_handler"].paths)
            methods = scope["litestar_app"].route_handler_method_map.get(path, {})
            response = Response(b"", status_code=204, headers={"Allow": ", ".join(sorted(methods))})
            await response.to_asgi_response(app=None, request=None)(scope, receive, send)  # type: ignore[arg-type]
            return
        await app(scope, receive, send)

    return middleware


def job_queues(
    client: Redis | RedisCluster, settings: Settings, telemetry: Telemetry, calls: int
) -> JobQueues:
    return JobQueues(
        client,
        completed_retention_s=settings.completed_retention_s,
        failed_retention_s=settings.failed_retention_s,
        completed_max=settings.completed_max,
        failed_max=settings.failed_max,
        events_maxlen=settings.events_maxlen,
        sweep_batch=settings.sweep_batch,
        telemetry=telemetry,
        max_concurrent_calls=calls,
        confirm_replicas=settings.wait_replicas,
        confirm_timeout_ms=settings.wait_timeout_ms,
        max_queues=settings.max_queues,
        merge_calls=settings.merge_calls,
    )


def create_app(settings: Settings, telemetry: Telemetry | None = None) -> FastPath:
    telemetry = telemetry or Telemetry.from_env()
    document = openapi.render(openapi.document())
    auth = Authenticator.from_entries(settings.auth_entries)
    hosts = AllowedHosts(settings.allowed_hosts, settings.host)
    # With several processes (the launcher's directory), a scrape reports all of them.
    replica = ReplicaTotals(settings.metrics_dir, telemetry.totals) if settings.metrics_dir else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        client = await connect(settings)
        queues = job_queues(client, settings, telemetry, settings.redis_pool_size)
        await check_server(queues.backend)
        # The sweep on connections of its own: no load on the request path can make it skip.
        sweep_client = await connect(dataclasses.replace(settings, redis_pool_size=SWEEP_CONNECTIONS))
        sweep_queues = job_queues(sweep_client, settings, telemetry, SWEEP_CONNECTIONS)
        sweep_queues.due_index = sweep_queues.backend.due_index(sharing=queues.due_index)
        hub = queues.backend.wake_hub(settings.max_waiters)
        telemetry.waiters = lambda: hub.waiting
        events = EventHub(
            queues.backend,
            max_subscribers=settings.max_waiters,
            buffer_events=settings.events_buffer,
            buffer_bytes=settings.events_buffer_bytes,
            keepalive_s=settings.events_keepalive_ms / 1000,
            max_queues=settings.max_followed_queues,
            readers=settings.event_readers,
        )
        telemetry.subscribers = lambda: events.subscribed
        schedules = Schedules(queues)
        sweeper = Sweeper(sweep_queues, Schedules(sweep_queues), settings.sweep_interval_ms)
        body_timeouts = BodyReadTimeouts(settings.body_timeout_s)
        app.state.update(
            client=client,
            queues=queues,
            schedules=schedules,
            flows=Flows(queues),
            hub=hub,
            leasing=Leasing(queues, hub),
            events=events,
            sweeper=sweeper,
            auth=auth,
            allowed_hosts=hosts,
            body_timeout_s=settings.body_timeout_s,
            body_timeouts=body_timeouts,
        )
        hub.start()
        sweeper.start()
        body_timeouts.start()
        if replica is not None:
            replica.start()
        hook_shutdown_signals(hub, events)
        try:
            yield
        finally:
            await hub.stop()
            await events.stop()
            await sweeper.stop()
            await body_timeouts.stop()
            await queues.aclose()
            await sweep_queues.aclose()
            await close(client)
            await close(sweep_client)
            if replica is not None:
                await replica.stop()  # after the sweep and the requests: their last counts too
            telemetry.shutdown()

    @get("/", include_in_schema=False)
    async def front_door() -> Redirect:
        # Public, as the dashboard's own page is: it asks for a token itself when one is needed.
        return Redirect(UI, status_code=307)

    @get("/healthz", include_in_schema=False)
    async def healthz() -> Response[bytes]:
        return json_response(Health(status="ok"))

    @get("/readyz", include_in_schema=False)
    async def readyz(state: State) -> Response[bytes]:
        try:
            await state.client.ping()
        except (RedisError, OSError) as error:
            return problem(
                503,
                "backend_unavailable",
                "Backend unavailable",
                f"Redis does not answer: {error}",
                retry_after=True,
            )
        return json_response(Health(status="ready"))

    @get("/metrics", include_in_schema=False, opt={"action": Action.METRICS})
    async def metrics_text(request: Request[Any, Any, State]) -> Response[str]:
        grant = grant_of(request)
        covers = None if grant is None or grant.patterns is None else grant.covers
        text = await metrics.scrape(
            request.app.state.queues, telemetry, replica, covers, settings.metrics_max_queues
        )
        return Response(text, media_type=exposition.CONTENT_TYPE)

    @get("/openapi.json", include_in_schema=False)
    async def openapi_json() -> Response[bytes]:
        return Response(document, media_type="application/json")

    app = Litestar(
        route_handlers=[
            *QUEUE_HANDLERS,
            front_door,
            healthz,
            readyz,
            metrics_text,
            openapi_json,
            *DOCS_HANDLERS,
            *ui_handlers(),
        ],
        lifespan=[lifespan],
        openapi_config=None,
        logging_config=None,
        middleware=[
            reject_ambiguous_paths,
            reject_repeated_query_parameters,
            answer_options,
            http_metrics_middleware(telemetry),
        ],
        plugins=[tracing_plugin(telemetry)] if telemetry.tracing else [],
        guards=[authorize],  # the launcher configures logging; no queue-listener threads
        request_max_body_size=settings.max_body_bytes,
        exception_handlers=dict(EXCEPTION_HANDLERS),  # type: ignore[arg-type]
        template_config=template_config(),
    )
    return FastPath(app, telemetry, HOT_OPERATIONS, EXCEPTION_HANDLERS, WebGuard(hosts))
