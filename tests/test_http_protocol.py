"""The HTTP protocol the service runs (echomq_http.api.http_protocol): a response in one write.

The protocol is uvicorn's own, given a transport that records what reaches it, so the test
sees each write the socket would get."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from echomq_http.api.http_protocol import TIMER_SLACK_S, HttpLimits, JoinedWrites, JoinedWritesProtocol

REQUEST = b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n"


class RecordingTransport(asyncio.Transport):
    """What the protocol wrote, one entry per write; no socket behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:  # type: ignore[override]
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def small_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def streamed_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"first", "more_body": True})
    await asyncio.sleep(0.05)  # a later turn of the loop: this chunk must not wait for the next
    await send({"type": "http.response.body", "body": b"second", "more_body": False})


async def served(
    protocol_class: type[HttpToolsProtocol], app: Any, request: bytes = REQUEST, ends_with: bytes = b"ok"
) -> RecordingTransport:
    """The protocol given the request's bytes; what it wrote once the last write ends as expected."""
    config = Config(app, lifespan="off", log_level="warning")
    protocol = protocol_class(config, ServerState(), app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if b"".join(transport.writes).endswith(ends_with):
            break
    return transport


async def test_a_small_response_is_one_write() -> None:
    transport = await served(JoinedWritesProtocol, small_answer)
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\nok")


async def test_uvicorns_own_protocol_writes_it_twice() -> None:
    """What the subclass changes: without it, headers and body are two writes (two segments)."""
    transport = await served(HttpToolsProtocol, small_answer)
    assert len(transport.writes) == 2


async def test_a_streamed_response_goes_out_as_it_is_sent() -> None:
    transport = await served(JoinedWritesProtocol, streamed_answer, ends_with=b"0\r\n\r\n")
    assert len(transport.writes) == 2  # start + first chunk in one turn, then the rest
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"5\r\nfirst\r\n")
    assert transport.writes[1] == b"6\r\nsecond\r\n0\r\n\r\n"


async def test_close_writes_what_is_pending_first() -> None:
    """A response with connection: close is written, then the transport closed."""
    request = b"GET /x HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    transport = await served(JoinedWritesProtocol, small_answer, request)
    assert transport.closed
    assert b"".join(transport.writes).endswith(b"\r\n\r\nok")


@pytest.mark.parametrize("pipelined", [2, 3])
async def test_pipelined_requests_are_answered_in_order(pipelined: int) -> None:
    async def numbered(scope: Any, receive: Any, send: Any) -> None:
        body = scope["path"].encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    requests = b"".join(b"GET /%d HTTP/1.1\r\nHost: test\r\n\r\n" % i for i in range(pipelined))
    transport = await served(JoinedWritesProtocol, numbered, requests, ends_with=b"/%d" % (pipelined - 1))
    answers = b"".join(transport.writes)
    places = [answers.find(b"\r\n\r\n/%d" % i) for i in range(pipelined)]
    assert -1 not in places and places == sorted(places)


async def test_writelines_and_write_eof_keep_the_order_of_what_was_written() -> None:
    transport = RecordingTransport()
    joined = JoinedWrites(transport, asyncio.get_running_loop())
    joined.write(b"a")
    joined.writelines([b"b", b"c"])
    assert transport.writes == []  # nothing before the end of this turn
    joined.write_eof()
    assert transport.writes == [b"abc"] and transport.eof


LIMITS = HttpLimits(
    max_connections=2, header_timeout_s=10, keepalive_timeout_s=60, max_header_bytes=1024, max_headers=10
)


def connected(app: Any, server_state: ServerState) -> tuple[JoinedWritesProtocol, RecordingTransport]:
    config = Config(app, lifespan="off", log_level="warning")
    protocol = JoinedWritesProtocol(config, server_state, app_state={}, limits=LIMITS)
    transport = RecordingTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def test_over_the_cap_the_longest_idle_connection_is_closed_never_a_busy_one() -> None:
    never_answers = asyncio.Event()

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await never_answers.wait()

    state = ServerState()
    busy, busy_transport = connected(slow, state)
    busy.data_received(REQUEST)
    _, oldest_idle = connected(slow, state)
    _, newer_idle = connected(slow, state)  # one over the cap: the oldest idle one goes
    assert oldest_idle.closed and not busy_transport.closed and not newer_idle.closed
    _, newest = connected(slow, state)
    assert newer_idle.closed and not busy_transport.closed and not newest.closed
    never_answers.set()


async def test_a_head_and_a_big_body_in_one_read_are_within_the_header_cap() -> None:
    received: list[bytes] = []

    async def reads_the_body(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        received.append(message["body"])
        await small_answer(scope, receive, send)

    body = b"x" * (LIMITS.max_header_bytes * 10)
    request = b"POST /x HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    protocol, transport = connected(reads_the_body, ServerState())
    protocol.data_received(request)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if transport.writes:
            break
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 200 OK\r\n")
    assert received == [body]


async def test_a_pipelined_head_is_counted_from_its_own_first_byte() -> None:
    """Two requests in one read, each under the cap, together over it: both are answered."""
    field = b"X-Fill: " + b"a" * (LIMITS.max_header_bytes - 100) + b"\r\n"
    one = b"GET /x HTTP/1.1\r\nHost: test\r\n" + field + b"\r\n"
    protocol, transport = connected(small_answer, ServerState())
    protocol.data_received(one + one)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if b"".join(transport.writes).count(b"200 OK") == 2:
            break
    assert b"".join(transport.writes).count(b"HTTP/1.1 200 OK") == 2
    assert not transport.closed


class CountingLoop:
    """The running loop, counting the timers made through it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.timers = 0

    def call_at(self, when: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return self._loop.call_at(when, callback, *args)

    def call_later(self, delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return self._loop.call_later(delay, callback, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


async def answered(transport: RecordingTransport, count: int) -> None:
    for _ in range(100):
        if b"".join(transport.writes).count(b"200 OK") >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"fewer than {count} answers: {transport.writes!r}")


async def test_requests_on_a_kept_connection_make_no_timer_each() -> None:
    """Each request moves the head and keep-alive deadlines; the connection's one timer stays."""
    config = Config(small_answer, lifespan="off", log_level="warning")
    protocol = JoinedWritesProtocol(config, ServerState(), app_state={}, limits=LIMITS)
    loop = CountingLoop(asyncio.get_running_loop())
    protocol.loop = loop  # type: ignore[assignment]
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for count in range(1, 21):
        protocol.data_received(REQUEST)
        await answered(transport, count)
    assert loop.timers == 1  # the head's, from the connection on; before: two per request
    assert not transport.closed


async def test_a_deadline_set_later_than_the_timer_is_waited_for_never_cut_short() -> None:
    """The timer set for the first head (100 ms) fires while the keep-alive deadline (300 ms)
    runs: the connection stays open until that one passes, and is closed then."""
    limits = HttpLimits(max_connections=2, header_timeout_s=0.1, keepalive_timeout_s=0.3,
                        max_header_bytes=1024, max_headers=10)  # fmt: skip
    config = Config(small_answer, lifespan="off", log_level="warning")
    protocol = JoinedWritesProtocol(config, ServerState(), app_state={}, limits=limits)
    transport = RecordingTransport()
    protocol.connection_made(transport)
    sent_at = asyncio.get_running_loop().time()  # the keep-alive deadline counts from later
    protocol.data_received(REQUEST)
    await answered(transport, 1)
    await asyncio.sleep(0.2)
    assert not transport.closed
    while not transport.closed:
        await asyncio.sleep(0.01)
    assert asyncio.get_running_loop().time() - sent_at >= 0.3 - TIMER_SLACK_S
