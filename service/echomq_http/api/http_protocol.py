"""uvicorn's httptools protocol, writing each response to the socket once rather than twice.

uvicorn writes a response's status line and headers as soon as the application sends
``http.response.start``, and the body at ``http.response.body``: two ``send()`` calls and two TCP
segments for every small answer, and two wake-ups of the client reading it. Here the writes
made in one turn of the event loop are joined and written at the end of that turn, so a small
response (both messages sent one after the other, as every handler here does) costs one of each.
Nothing waits longer than the current turn: a streamed response's chunks go out as they did.

It also holds the limits a server facing the internet needs, which uvicorn's protocol lacks
(it starts no timer before a first request, buffers a header of any size, and counts an idle
connection as a busy one). Everything below is enforced before any body is read:
- a request's head (request line and headers) must arrive within ``header_timeout_s`` (from the
  connection for the first, from its first byte for the next; 408, or a plain close if not a
  byte of it came), and an idle kept-alive connection is closed after ``keepalive_timeout_s``;
- a head is at most ``max_header_bytes`` as received and ``max_headers`` fields (431): bytes
  beyond the cap are never handed to the parser, so a huge header costs nothing to refuse;
- at most ``max_connections`` connections: one more closes the connection idle the longest
  (waiting for a request or for the rest of its head), so only requests in flight can fill the
  service, and those beyond ``max_connections`` answer 503.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httptools
import msgspec
from uvicorn import Config
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from echomq_http.api import hot_serving
from echomq_http.api.fastpath import FastPath
from echomq_http.config import Settings
from echomq_http.core.errors import problem_type

# After refusing a request, what the client still sends is read and dropped this long before the
# close, so that the close does not reset the connection before the client has read the answer.
LINGER_S = 2.0
# A timer may fire this much before its time (uvloop's clock has ms steps): then it is on time.
TIMER_SLACK_S = 0.001


@dataclass(frozen=True)
class HttpLimits:
    """The limits of one server process's HTTP connections (see the module)."""

    max_connections: int
    header_timeout_s: float
    keepalive_timeout_s: float
    max_header_bytes: int
    max_headers: int

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_connections=settings.max_connections,
            header_timeout_s=settings.header_timeout_s,
            keepalive_timeout_s=settings.keepalive_timeout_s,
            max_header_bytes=settings.max_header_bytes,
            max_headers=settings.max_headers,
        )


def http_protocol(settings: Settings) -> functools.partial[JoinedWritesProtocol]:
    """What uvicorn is given as its `http` protocol, by `emq serve` and by the tests alike (a
    partial of a module's class: it crosses to uvicorn's worker processes by pickling)."""
    return functools.partial(JoinedWritesProtocol, limits=HttpLimits.from_settings(settings))


class HeadRefused(Exception):
    """Raised in a parser callback to stop the parser: the request is answered with this."""

    def __init__(self, status: int, code: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.title, self.detail = status, code, title, detail


class JoinedWrites:
    """A transport whose writes within one turn of the event loop reach the socket as one.

    Everything else is the transport's own; write_eof() and close() first write what is
    pending, as a transport's close() sends what it has buffered."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def writelines(self, chunks: Iterable[bytes]) -> None:
        self.write(b"".join(chunks))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


# Per server: its connections with no request in flight, the longest idle first.
_idle_connections: weakref.WeakKeyDictionary[ServerState, dict[JoinedWritesProtocol, None]] = (
    weakref.WeakKeyDictionary()
)


class JoinedWritesProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose responses are written with one send() each, within the limits
    (see the module)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits or HttpLimits.from_settings(Settings())
        self._idle = _idle_connections.setdefault(server_state, {})
        # One deadline at a time (the head's or the keep-alive one), watched by one timer that is
        # moved only when the deadline comes earlier than it fires (see _arm).
        self._deadline: float | None = None  # loop time; None: nothing is timed
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when _timer fires
        self._timing_head = False  # the deadline is the head's (else the keep-alive one)
        self._head_bytes: int | None = 0  # of the head being received; None while a body is
        self._head_begun = False  # a request's first byte came, its headers are not complete
        self._header_fields = 0
        self._refused = False  # answered 408/431: what comes is dropped until the close
        # Its hot routes served past ASGI (not with uvicorn's opt-in fresh context per request).
        self._fast_path = None if getattr(config, "reset_contextvars", False) else _fast_path_in(self.app)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = JoinedWrites(transport, self.loop)  # type: ignore[assignment]
        self._idle[self] = None
        self._arm(self.limits.header_timeout_s, head=True)
        self._reclaim_an_idle_connection()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._idle.pop(self, None)

    def _reclaim_an_idle_connection(self) -> None:
        """Over the cap: close the connection idle the longest, unless this is the only one."""
        if len(self.connections) <= self.limits.max_connections:
            return
        oldest = next(iter(self._idle))
        if oldest is self:
            return  # every other one is busy: this one answers 503 if it asks before one ends
        del self._idle[oldest]
        self.connections.discard(oldest)  # gone already for the count, though closed a turn later
        oldest.transport.close()

    # Timers. Each request sets a deadline twice (its head's, then the keep-alive one) and clears
    # one: a timer made and cancelled each time cost about 2.3 µs a time (uvloop, timeit), a
    # tenth of a small request's floor. The deadline is a number instead; the connection's one
    # timer fires when it was set for, and then times out, or waits on for a deadline set later.

    def _arm(self, delay_s: float, head: bool) -> None:
        deadline = self.loop.time() + delay_s
        self._deadline, self._timing_head = deadline, head
        if self._timer is not None and self._timer_at <= deadline:
            return  # it fires first and then looks at the deadline
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self.loop.call_at(deadline, self._on_timer), deadline

    def _disarm(self) -> None:
        self._deadline = None  # the timer, if one is set, finds nothing to do
        self._timing_head = False

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        if self.loop.time() < deadline - TIMER_SLACK_S:
            self._timer, self._timer_at = self.loop.call_at(deadline, self._on_timer), deadline
            return
        self._deadline = None
        self._timed_out()

    def _timed_out(self) -> None:
        if self._head_begun:
            seconds = f"{self.limits.header_timeout_s:g}"
            self._refuse(
                HeadRefused(
                    408,
                    "request_timeout",
                    "Request head too slow",
                    f"the request line and headers did not arrive within {seconds} s",
                )
            )
        else:
            self.transport.close()  # idle: nothing to answer

    def _busy(self) -> bool:
        """A request of this connection is in flight (or waits behind one, pipelined)."""
        return self.cycle is not None and not self.cycle.response_complete

    # Reading

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        while data and not self.transport.is_closing():
            if self._head_bytes is None:
                chunk, data = data, b""
            else:
                room = self.limits.max_header_bytes - self._head_bytes
                if room <= 0:
                    limit = self.limits.max_header_bytes
                    self._refuse(
                        HeadRefused(
                            431,
                            "headers_too_large",
                            "Request header fields too large",
                            f"the request line and headers may take {limit} bytes at most",
                        )
                    )
                    return
                chunk, data = data[:room], data[room:]
                self._head_bytes += len(chunk)
            if not self._feed(chunk):
                return

    def _feed(self, chunk: bytes) -> bool:
        """The parser given chunk; False once the connection needs no more of it."""
        try:
            self.parser.feed_data(chunk)
        except httptools.HttpParserError as error:
            if isinstance(error.__context__, HeadRefused):
                self._refuse(error.__context__)
            else:
                message = "Invalid HTTP request received."
                self.logger.warning(message)
                self.send_400_response(message)
            return False
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        return True

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        self._header_fields = 0
        if not self._busy() and not self._timing_head:  # a pipelined head is timed once it is next
            self._arm(self.limits.header_timeout_s, head=True)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_fields += 1
        if self._header_fields > self.limits.max_headers:
            limit = self.limits.max_headers
            raise HeadRefused(
                431,
                "headers_too_large",
                "Request header fields too large",
                f"a request may carry {limit} header fields at most",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_begun = False
        self._head_bytes = None
        self._disarm()
        self._idle.pop(self, None)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes = 0  # what follows is the next request's head

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        # The busy-request limit: requests in flight, whatever the number of idle connections.
        if app is self.app and len(self.tasks) >= self.limits.max_connections:
            self.logger.warning("Exceeded concurrency limit.")
            app = service_unavailable
        elif app is self.app and self._fast_path is not None:
            # Decided when the task runs: by then a small body has arrived with its head.
            task = self.loop.create_task(hot_serving.serve(self._fast_path, cycle, app))
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)
            return
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        # uvicorn's, but with this module's timers and the idle connections' order.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle[self] = None  # now the newest idle connection
        if self._head_begun:
            self._arm(self.limits.header_timeout_s, head=True)
        else:
            self._arm(self.limits.keepalive_timeout_s, head=False)

    # Refusing

    def _refuse(self, refusal: HeadRefused) -> None:
        """Answer with a problem and close; what the client still sends meanwhile is dropped."""
        if self._busy():
            self.transport.close()  # a pipelined head: no answer may cut into the one under way
            return
        body = msgspec.json.encode(
            {
                "type": problem_type(refusal.code),
                "title": refusal.title,
                "status": refusal.status,
                "detail": refusal.detail,
                "code": refusal.code,
            }
        )
        defaults = self.server_state.default_headers
        head = [
            hot_serving.head_start(refusal.status, "application/problem+json", defaults),
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._disarm()
        self.loop.call_later(LINGER_S, self.transport.close)


def _fast_path_in(app: Any) -> FastPath | None:
    """The FastPath under uvicorn's wrappers (its proxy-headers middleware: nothing a hot route
    reads), if this server runs one."""
    for _ in range(8):
        if isinstance(app, FastPath):
            return app
        app = getattr(app, "app", None)
    return None
