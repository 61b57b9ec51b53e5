"""The routes workers call in a loop, dispatched without litestar's per-request machinery.

Routing, the middleware stack, the signature model and the Response-to-ASGI conversion took
about a third of a small request's CPU (docs/PERFORMANCE.md). For a POST to one of the routes
given, this ASGI wrapper matches the path itself and runs what litestar would have run: the same
auth guard, the same handler function, the same exception handlers and the same request metric.
Everything else goes to litestar: other paths and methods, paths that are not plain (percent
escapes, empty segments, a trailing slash), a query string (its middleware refuses repeated
parameters), a host header litestar would refuse, a root path, and every request while request
tracing is on (litestar's plugin makes the server spans).

Being the outermost app, it is also where every request, hot or not, meets the web guard
(echomq_http.api.webguard) first: a refused one is answered here and reaches no route.

A handler served here gets a HotRequest, not litestar's Request (about 5 µs a request to make):
the few things the hot handlers and the auth guard read of a request, from the same scope.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from litestar import Litestar, Request, Response
from litestar._asgi.utils import is_valid_host
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from litestar.types import Receive, Scope, Send

from echomq_http.api.http import authorize
from echomq_http.api.webguard import WebGuard
from echomq_http.observability.telemetry import Telemetry, route_label

ExceptionHandler = Callable[[Request[Any, Any, Any], Any], Response[Any]]
REFUSED_LABEL = "refused"  # the request metric's route for what the web guard refused


@dataclass(frozen=True, slots=True)
class _Route:
    """One route template, as the segments after /v1/queues/: a literal, or None for a parameter."""

    segments: tuple[str | None, ...]
    params: tuple[tuple[int, str], ...]  # (segment index, parameter name)
    handler: HTTPRouteHandler
    label: str  # the template, as the request metric names it
    literals: tuple[tuple[int, str], ...]  # (segment index, the literal it must be)

    def params_of(self, segments: list[str]) -> dict[str, str] | None:
        """The path parameters when segments fit the template (literals equal, parameters not
        empty), else None. Plain loops: this runs for every hot request."""
        for index, literal in self.literals:
            if segments[index] != literal:
                return None
        params = {}
        for index, name in self.params:
            segment = segments[index]
            if not segment:
                return None
            params[name] = segment
        return params


class _RequestState(dict[str, Any]):
    """A request's state: read with get(), written as attributes (as litestar's State is)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class _Headers:
    """A request's headers by lower-case name, read from the scope only when asked."""

    __slots__ = ("_scope",)

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    def get(self, name: str, default: str | None = None) -> str | None:
        wanted = name.lower().encode("latin-1")
        for key, value in self._scope["headers"]:
            if key == wanted:
                return value.decode("latin-1")  # type: ignore[no-any-return]
        return default


class HotRequest:
    """What a hot handler (and api/http.py's helpers, and the auth guard) reads of a request:
    the scope, receive, the app, the path parameters, the route's handler, the state, the
    headers. litestar's Request is made for every use a handler could have.

    body is the whole request body when the HTTP protocol had all of it before the handler ran
    (api/hot_serving.py); None: read_body reads it through receive."""

    __slots__ = ("app", "body", "path_params", "receive", "route_handler", "scope", "send", "state")

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        app: Litestar,
        path_params: dict[str, str],
        route_handler: HTTPRouteHandler,
        body: bytes | None = None,
    ) -> None:
        self.scope = scope
        self.body = body
        self.receive = receive
        self.send = send
        self.app = app
        self.path_params = path_params
        self.route_handler = route_handler
        self.state = _RequestState()

    @property
    def headers(self) -> _Headers:
        return _Headers(self.scope)


def _route(path: str, prefix: str, handler: HTTPRouteHandler) -> _Route:
    segments: list[str | None] = []
    params: list[tuple[int, str]] = []
    for index, segment in enumerate(path[len(prefix) :].split("/")):
        if segment.startswith("{"):
            params.append((index, segment[1:-1].split(":")[0]))
            segments.append(None)
        else:
            segments.append(segment)
    literals = tuple((index, segment) for index, segment in enumerate(segments) if segment is not None)
    return _Route(tuple(segments), tuple(params), handler, route_label(path), literals)


class FastPath:
    """ASGI app: the given POST routes under prefix served directly, the rest by litestar."""

    def __init__(
        self,
        app: Litestar,
        telemetry: Telemetry,
        operation_ids: Iterable[str],
        exception_handlers: Mapping[type[Exception], ExceptionHandler],
        guard: WebGuard,
        prefix: str = "/v1/queues/",
    ) -> None:
        self.app = app
        self.guard = guard
        self.telemetry = telemetry
        self.prefix = prefix
        self.exception_handlers = exception_handlers
        wanted = set(operation_ids)
        # litestar's registered handlers, not the decorated originals: only these resolve the
        # app's settings (the request body limit).
        self.routes: dict[tuple[int, str], list[_Route]] = {}
        for route in app.routes:
            if not isinstance(route, HTTPRoute):
                continue
            for handler in route.route_handlers:
                if handler.operation_id in wanted and "POST" in handler.http_methods:
                    for path in handler.paths:
                        entry = _route(path, prefix, handler)
                        shape = (len(entry.segments), entry.segments[-1] or "")
                        self.routes.setdefault(shape, []).append(entry)
                    wanted.discard(str(handler.operation_id))
        if wanted:
            raise ValueError(f"no POST route for {sorted(wanted)}")
        self._recorders: dict[tuple[str, int], Callable[[float], None]] = {}  # see record

    def match(self, scope: Scope) -> tuple[_Route, dict[str, str]] | None:
        path: str = scope["path"]
        if (
            scope["method"] != "POST"
            or not path.startswith(self.prefix)
            or scope.get("root_path")
            or scope.get("query_string")
            or scope.get("raw_path", path.encode()) != path.encode()
        ):
            return None
        segments = path[len(self.prefix) :].split("/")
        for route in self.routes.get((len(segments), segments[-1]), ()):
            params = route.params_of(segments)
            if params is not None:
                return route, params
        return None

    def direct_route(self, scope: Scope) -> tuple[_Route, dict[str, str]] | None:
        """The route of a request the HTTP protocol may serve itself, past ASGI
        (api/hot_serving.py): a hot route that the web guard lets through. None: give it to
        this app as an ASGI request."""
        matched = self.match(scope)
        if matched is None or self.telemetry.tracing or self.guard.refusal(scope) is not None:
            return None
        return matched if _host_ok(scope) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = None
        if scope["type"] == "http":
            refused = self.guard.refusal(scope)
            if refused is not None:
                await self._refuse(scope, receive, send, refused)
                return
            if not self.telemetry.tracing and _host_ok(scope):
                matched = self.match(scope)
        if matched is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        route, path_params = matched
        request = HotRequest(scope, receive, send, self.app, path_params, route.handler)
        response = await self.respond(request, route)
        await _send(response, send)
        self.record(route, response.status_code, started)

    async def respond(self, request: HotRequest, route: _Route) -> Response[Any]:
        """The route's answer to the request, an error answered as litestar would."""
        try:
            await authorize(request, route.handler)  # type: ignore[arg-type]
            return await route.handler.fn(request)  # type: ignore[no-any-return]
        except Exception as error:
            return self._answer(request, error)  # type: ignore[arg-type]

    def record(self, route: _Route, status: int, started: float) -> None:
        seconds = time.perf_counter() - started
        recorder = self._recorders.get((route.label, status))
        if recorder is None:
            # Bounded: one per hot route and status it answers (a few dozen at most).
            recorder = self._recorders[route.label, status] = self.telemetry.http_recorder(
                route.label, "POST", status
            )
        recorder(seconds)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, error: Exception) -> None:
        started = time.perf_counter()
        response = self._answer(Request(scope, receive, send), error)
        await _send(response, send)
        seconds = time.perf_counter() - started
        self.telemetry.record_http(REFUSED_LABEL, scope["method"], response.status_code, seconds)

    def _answer(self, request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
        for kind in type(error).__mro__:
            handler = self.exception_handlers.get(kind)
            if handler is not None:
                return handler(request, error)
        raise error


async def _send(response: Response[Any], send: Send) -> None:
    """A response whose content is bytes already (every handler served here answers so)."""
    body = response.content
    headers = [
        (b"content-type", response.media_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *((name.lower().encode(), value.encode()) for name, value in response.headers.items()),
    ]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _host_ok(scope: Scope) -> bool:
    """litestar answers 400 to a malformed host header: leave those to it."""
    for name, value in scope["headers"]:
        if name == b"host":
            return bool(is_valid_host(value))
    return True
