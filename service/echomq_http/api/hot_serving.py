"""The hot routes served by the HTTP protocol itself, past ASGI.

Through ASGI, a small request to a hot route still paid for uvicorn's request task wrapper, the
proxy-headers middleware, two ASGI messages and their checks for the answer, a receive() for a
body that was all there, and a body-timeout watch: about a fifth of the service's CPU for one
enqueue (docs/PERFORMANCE.md). When the body of such a request has arrived whole by the time its
task runs (a small body comes in the same segment as its head), the protocol
(api/http_protocol.py) runs this instead of the ASGI app: the same FastPath route, guard, auth,
handler, exception handlers and request metric, the answer written as uvicorn's
RequestResponseCycle.send would write it, in one write.

Everything else goes through ASGI as before: a request FastPath would give to litestar, one the
web guard refuses, one whose body is still arriving, and one expecting 100-continue. The access
log line, when that log is on, is uvicorn's. The request's cycle is uvicorn's own, so pipelining, a
client hanging up (a long-poll lease's hang-up watch reads the cycle) and shutdown behave as
they do for any request.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from litestar import Response
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from echomq_http.api.fastpath import FastPath, HotRequest

log = logging.getLogger("uvicorn.error")

INTERNAL_ERROR = (
    STATUS_LINE[500] + b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\n"
    b"connection: close\r\n\r\nInternal Server Error"
)


def direct_request(fast: FastPath, cycle: RequestResponseCycle) -> tuple[HotRequest, Any] | None:
    """The request the protocol serves itself, its body taken from the cycle, and its route;
    None: ASGI's."""
    if cycle.more_body or cycle.waiting_for_100_continue:
        return None
    matched = fast.direct_route(cycle.scope)
    if matched is None:
        return None
    route, path_params = matched
    body, cycle.body = bytes(cycle.body), bytearray()  # as the cycle's receive() hands it over
    cycle.message_event.clear()  # the body is taken: what the cycle tells next is a hang-up
    request = HotRequest(cycle.scope, cycle.receive, cycle.send, fast.app, path_params, route.handler, body)
    return request, route


async def serve(fast: FastPath, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
    """The request's task: served here if it can be (see the module), else by app through ASGI."""
    direct = direct_request(fast, cycle)
    if direct is None:
        await cycle.run_asgi(app)
        return
    request, route = direct
    started = time.perf_counter()
    try:
        response = await fast.respond(request, route)
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
    except BaseException as error:  # cancelled at shutdown: answered as uvicorn's run_asgi does
        log.error("Exception in ASGI application\n", exc_info=error)
        if not cycle.disconnected:
            cycle.response_started = cycle.response_complete = True
            cycle.transport.write(INTERNAL_ERROR)
            cycle.transport.close()
        return
    if not cycle.disconnected:
        _write(cycle, response)
    fast.record(route, response.status_code, started)


# The head's first lines for one status and media type, with the default headers they were made
# with (uvicorn makes a new list of those each second, for its date header). An entry serves only
# the list it holds, so servers of other threads (the tests') never get each other's.
_head_starts: dict[tuple[int, str], tuple[list[Any], bytes]] = {}


def head_start(status: int, media_type: str, defaults: list[tuple[bytes, bytes]]) -> bytes:
    """Status line, default headers and content-type, as RequestResponseCycle.send writes them
    (and the protocol's own refusals: api/http_protocol.py)."""
    made = _head_starts.get((status, media_type))
    if made is not None and made[0] is defaults:
        return made[1]
    parts = [STATUS_LINE[status]]
    for name, value in defaults:
        parts += [name, b": ", value, b"\r\n"]
    parts += [b"content-type: ", media_type.encode(), b"\r\n"]
    start = b"".join(parts)
    _head_starts[status, media_type] = (defaults, start)
    return start


def _write(cycle: RequestResponseCycle, response: Response[Any]) -> None:
    """The response's head and body in one write, as RequestResponseCycle.send writes a
    response whose content is bytes (every hot handler answers so)."""
    body: bytes = response.content
    head = [
        head_start(response.status_code, response.media_type, cycle.default_headers),
        b"content-length: %d\r\n" % len(body),
    ]
    for name, value in response.headers.items():
        head += [name.lower().encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n"]
    if not cycle.keep_alive:
        head.append(b"connection: close\r\n")
    head += [b"\r\n", body]
    if cycle.access_log:
        scope = cycle.scope
        client, path = get_client_addr(scope), get_path_with_query_string(scope)
        line = '%s - "%s %s HTTP/%s" %d'
        cycle.access_logger.info(line, client, "POST", path, scope["http_version"], response.status_code)
    cycle.response_started = cycle.response_complete = True
    cycle.transport.write(b"".join(head))
    cycle.message_event.set()  # a hang-up watch still waiting ends: the exchange is over
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()
