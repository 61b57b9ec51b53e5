"""HTTP limits that hold under abuse, through real sockets against `python -m echomq_http`: the
head timeout, the keep-alive timeout, the header size and count caps, idle connections that keep
no one out (echomq_http.api.http_protocol)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from echomq_http.config import DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADERS
from tests.support.launched import LaunchedService, launched_service
from tests.support.raw_http import HEALTH_REQUEST, Answer, RawConnection

CONNECTION_CAP = 100
HEADER_TIMEOUT_S = 1
KEEPALIVE_TIMEOUT_S = 2  # uvicorn's own is 5 s
SILENT_CONNECTIONS = 300
PROBE_DEADLINE_S = 1.0  # another client's request answers within this, flood or not
MARGIN_S = 2.0  # for a loaded 2-core runner: a timer fires late, never early
TRICKLE_INTERVAL_S = 0.2
NOT_FOUND_REQUEST = b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
SEND_CHUNK_BYTES = 256 * 1024
HUGE_HEADER_BYTES = 60 * 1024 * 1024
MEMORY_GROWTH_BOUND_KB = 20 * 1024  # well under the huge header the service was sent


@pytest.fixture(scope="module")
def service(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedService]:
    log_path = tmp_path_factory.mktemp("http-limits") / "service.log"
    limits = {
        "EMQ_MAX_CONNECTIONS": str(CONNECTION_CAP),
        "EMQ_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "EMQ_KEEPALIVE_TIMEOUT_S": str(KEEPALIVE_TIMEOUT_S),
    }
    with launched_service(redis_url, log_path, **limits) as launched:
        launched.wait_ready()
        yield launched


def assert_refused(answer: Answer, status: int, code: str) -> None:
    assert answer.status == status
    assert answer.headers[b"content-type"] == b"application/problem+json"
    assert answer.headers[b"connection"] == b"close"
    problem = json.loads(answer.body)
    assert problem["status"] == status and problem["code"] == code, problem


def peak_memory_kb(service: LaunchedService) -> int:
    """The service process's peak resident set (VmHWM), in KiB."""
    status = Path(f"/proc/{service.process.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def head_with(*fields: bytes) -> bytes:
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    return head + b"".join(field + b"\r\n" for field in fields) + b"\r\n"


def test_silent_connections_keep_no_one_out_and_are_closed(service: LaunchedService) -> None:
    with contextlib.ExitStack() as stack:
        started = time.monotonic()
        silent = [stack.enter_context(RawConnection(service.url)) for _ in range(SILENT_CONNECTIONS)]
        for _ in range(5):
            asked = time.monotonic()
            with RawConnection(service.url) as probe:
                answer = probe.ask()
            assert answer.status == 200, answer
            assert time.monotonic() - asked < PROBE_DEADLINE_S
        # Beyond the cap the oldest went at once, the others at the head timeout.
        for connection in silent:
            remaining_s = started + HEADER_TIMEOUT_S + MARGIN_S - time.monotonic()
            connection.closed_after_s(max(remaining_s, 0.01))


@pytest.mark.parametrize("after_a_request", [False, True])
def test_a_head_that_never_ends_is_answered_408_at_the_head_timeout(
    service: LaunchedService, after_a_request: bool
) -> None:
    with RawConnection(service.url) as connection:
        if after_a_request:
            assert connection.ask().status == 200
        started = time.monotonic()
        connection.socket.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        while not connection.answer_waiting():
            assert time.monotonic() - started < HEADER_TIMEOUT_S + MARGIN_S, "still reading the head"
            time.sleep(TRICKLE_INTERVAL_S)
            connection.socket.sendall(b"a")  # a byte per 200 ms
        assert_refused(connection.answer(), 408, "request_timeout")
        assert time.monotonic() - started > HEADER_TIMEOUT_S - 0.05  # not before its time
        connection.closed_after_s(MARGIN_S)


def test_a_head_over_the_size_cap_is_answered_431_and_closed(service: LaunchedService) -> None:
    with RawConnection(service.url) as connection:
        fits = b"X-Fill: " + b"a" * (DEFAULT_MAX_HEADER_BYTES - 200)
        assert connection.ask(head_with(fits)).status == 200
        too_big = b"X-Big: " + b"a" * 20_000
        assert_refused(connection.ask(head_with(too_big)), 431, "headers_too_large")
        connection.closed_after_s(MARGIN_S)


def test_a_huge_header_is_refused_without_being_buffered(service: LaunchedService) -> None:
    before_kb = peak_memory_kb(service)
    with RawConnection(service.url) as connection:
        connection.socket.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: ")
        chunk = b"a" * SEND_CHUNK_BYTES
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(HUGE_HEADER_BYTES // SEND_CHUNK_BYTES):
                connection.socket.sendall(chunk)
        assert_refused(connection.answer(), 431, "headers_too_large")
    grown_kb = peak_memory_kb(service) - before_kb
    assert grown_kb < MEMORY_GROWTH_BOUND_KB, f"the service grew {grown_kb} KiB"


def test_more_header_fields_than_the_cap_are_answered_431(service: LaunchedService) -> None:
    with RawConnection(service.url) as connection:
        fields = [b"X-%d: 1" % number for number in range(DEFAULT_MAX_HEADERS)]
        assert connection.ask(head_with(*fields[:-1])).status == 200  # with Host: the cap
        assert_refused(connection.ask(head_with(*fields)), 431, "headers_too_large")
        connection.closed_after_s(MARGIN_S)


def test_an_idle_kept_alive_connection_lasts_the_keep_alive_timeout(service: LaunchedService) -> None:
    with RawConnection(service.url) as connection:
        assert connection.ask().status == 200
        time.sleep(HEADER_TIMEOUT_S + 0.3)  # idle longer than a head may take: still open
        assert connection.ask().status == 200
        idle_s = connection.closed_after_s(KEEPALIVE_TIMEOUT_S + MARGIN_S)
        assert idle_s > KEEPALIVE_TIMEOUT_S - 0.5


def test_pipelined_requests_are_answered_in_order_on_a_kept_connection(service: LaunchedService) -> None:
    with RawConnection(service.url) as connection:
        connection.socket.sendall(HEALTH_REQUEST + NOT_FOUND_REQUEST + HEALTH_REQUEST)
        assert [connection.answer().status for _ in range(3)] == [200, 404, 200]
        assert connection.ask().status == 200
