"""Which requests echomq_http.api.fastpath serves itself; every other test checks that it answers as
litestar does (the hot routes go through it in the whole HTTP suite)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from echomq_http.api import hot_serving
from echomq_http.api.fastpath import FastPath
from echomq_http.app import HOT_OPERATIONS, create_app
from echomq_http.config import Settings
from echomq_http.observability.telemetry import Telemetry
from tests.support import enqueue, lease_one
from tests.support.raw_http import RawConnection, post_request
from tests.support.service import running_service


def scope(path: str, method: str = "POST", raw_path: bytes | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode() if raw_path is None else raw_path,
        "headers": [(b"host", b"127.0.0.1")],
        **extra,
    }


@pytest.fixture(scope="module")
def fast(redis_url: str) -> FastPath:
    return create_app(Settings.from_env({"EMQ_REDIS_URL": redis_url}), Telemetry())


@pytest.mark.parametrize(
    ("path", "operation", "params"),
    [
        ("/v1/queues/q1/jobs", "enqueue", {"queue": "q1"}),
        ("/v1/queues/q1/enqueue", "enqueueMany", {"queue": "q1"}),
        ("/v1/queues/q1/lease", "lease", {"queue": "q1"}),
        ("/v1/queues/q1/jobs/j.1/heartbeat", "heartbeat", {"queue": "q1", "id": "j.1"}),
        ("/v1/queues/q1/heartbeat", "heartbeatMany", {"queue": "q1"}),
        ("/v1/queues/jobs/heartbeat", "heartbeatMany", {"queue": "jobs"}),
        ("/v1/queues/q1/jobs/j-1/ack", "ack", {"queue": "q1", "id": "j-1"}),
        ("/v1/queues/q1/ack", "ackMany", {"queue": "q1"}),
        ("/v1/queues/q1/jobs/j_1/fail", "fail", {"queue": "q1", "id": "j_1"}),
        ("/v1/queues/q1/jobs/j1/release", "release", {"queue": "q1", "id": "j1"}),
        ("/v1/queues/jobs/jobs/jobs/ack", "ack", {"queue": "jobs", "id": "jobs"}),
    ],
)
def test_the_hot_routes_are_matched_with_their_parameters(
    fast: FastPath, path: str, operation: str, params: dict[str, str]
) -> None:
    matched = fast.match(scope(path))
    assert matched is not None
    route, path_params = matched
    assert (route.handler.operation_id, path_params) == (operation, params)
    assert operation in HOT_OPERATIONS


@pytest.mark.parametrize(
    ("path", "method", "raw_path"),
    [
        ("/v1/queues/q1/lease", "GET", None),  # litestar answers 405
        ("/v1/queues/q1/jobs/j1", "POST", None),  # no such POST route
        ("/v1/queues/q1/pause", "POST", None),  # not a hot route
        ("/v1/queues/q1/lease/", "POST", None),  # a trailing slash: litestar's rules
        ("/v1/queues//lease", "POST", None),  # an empty segment: 404 from the app
        ("/v1/queues/q1/jobs//ack", "POST", None),
        ("/v1/queues/a/b/lease", "POST", b"/v1/queues/a%2Fb/lease"),  # an encoded slash
        ("/v1/queues/qA/lease", "POST", b"/v1/queues/q%41/lease"),  # any percent escape
        ("/v2/queues/q1/lease", "POST", None),
        ("/v1/queues/q1/jobs/j1/ack/more", "POST", None),
    ],
)
def test_everything_else_goes_to_litestar(
    fast: FastPath, path: str, method: str, raw_path: bytes | None
) -> None:
    assert fast.match(scope(path, method, raw_path)) is None


def test_a_root_path_goes_to_litestar(fast: FastPath) -> None:
    assert fast.match(scope("/v1/queues/q1/lease", root_path="/emq")) is None


async def test_with_request_tracing_on_litestar_serves_the_hot_routes(redis_url: str, queue: str) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    telemetry = Telemetry(span_exporter=exporter, batch_spans=False)
    with running_service(Settings.from_env({"EMQ_REDIS_URL": redis_url}), telemetry) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            await enqueue(client, queue, {"n": 1})
            job = await lease_one(client, queue, "w1")
    assert job["payload"] == {"n": 1}
    server_spans = [span.name for span in exporter.get_finished_spans() if span.kind.name == "SERVER"]
    assert any("/lease" in name for name in server_spans)  # litestar's plugin made it


@pytest.fixture(scope="module")
def litestar_url(redis_url: str) -> Any:
    """The same service with request tracing on: every request goes through litestar."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    telemetry = Telemetry(span_exporter=InMemorySpanExporter(), batch_spans=False)
    with running_service(Settings.from_env({"EMQ_REDIS_URL": redis_url}), telemetry) as url:
        yield url


PARITY_CASES = [
    ("lease", b'{"worker":'),
    ("lease", b""),
    ("lease", b'{"worker":"w","max_jobs":0}'),
    ("lease", b'{"worker":"w","max_jobs":1.0}'),
    ("lease", b'{"worker":"w"}'),
    ("jobs", b'{"name":"x"}'),
    ("jobs", b'{"payload":1,"priority":"high"}'),
    ("enqueue", b'{"jobs":[]}'),
    ("enqueue", b'{"jobs":[{"payload":"' + b"x" * (1024 * 1024) + b'"}]}'),
    ("ack", b'{"acks":[{"id":"nope","lease_id":"x"}]}'),
    ("jobs/nope/ack", b'{"lease_id":"x"}'),
    ("jobs/nope/heartbeat", b'{"lease_id":"x"}'),
    ("heartbeat", b'{"leases":[{"id":"nope","lease_id":"x"}]}'),
    ("heartbeat", b'{"leases":[]}'),
    ("jobs/nope/ack", b'{"lease_id":"x","lease_next":{"worker":"w"}}'),
    ("jobs/nope/ack", b'{"lease_id":"x","lease_next":{"worker":"w","max_jobs":0}}'),
    ("ack", b'{"acks":[{"id":"nope","lease_id":"x"}],"lease_next":{"worker":"w"}}'),
    ("jobs/nope/fail", b'{"lease_id":"x","error":"e"}'),
    ("jobs/nope/release", b'{"lease_id":"x"}'),
    ("jobs/bad%21id/ack", b'{"lease_id":"x"}'),
]


@pytest.mark.parametrize(
    ("route", "body"), PARITY_CASES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(PARITY_CASES)]
)
async def test_the_fast_path_answers_as_litestar_does(
    service_url: str, litestar_url: str, queue: str, route: str, body: bytes
) -> None:
    answers = []
    for url in (service_url, litestar_url):
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.post(
                f"/v1/queues/{queue}/{route}", content=body, headers={"content-type": "application/json"}
            )
        headers = {name: value for name, value in response.headers.items() if name != "date"}
        answers.append((response.status_code, headers, response.content))
    assert answers[0] == answers[1]


Exchange = tuple[int, dict[bytes, bytes], bytes]


def _answer_to(url: str, request: bytes, body_apart: bool) -> Exchange:
    """The answer to request, its body sent with its head or 50 ms after it."""
    with RawConnection(url) as connection:
        if body_apart:
            head, _, body = request.partition(b"\r\n\r\n")
            connection.send(head + b"\r\n\r\n")
            time.sleep(0.05)
            connection.send(body)
        else:
            connection.send(request)
        answer = connection.answer()
    return answer.status, {k: v for k, v in answer.headers.items() if k != b"date"}, answer.body


@pytest.fixture
def direct_answers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statuses the HTTP protocol answered itself (the services here run in this process)."""
    written: list[int] = []
    write = hot_serving._write

    def counted(cycle: Any, response: Any) -> None:
        written.append(response.status_code)
        write(cycle, response)

    monkeypatch.setattr(hot_serving, "_write", counted)
    return written


@pytest.mark.parametrize(
    ("route", "body"), PARITY_CASES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(PARITY_CASES)]
)
def test_a_body_with_its_head_or_after_it_gets_the_same_answer(
    service_url: str, litestar_url: str, queue: str, route: str, body: bytes, direct_answers: list[int]
) -> None:
    request = post_request(f"/v1/queues/{queue}/{route}", body)
    with_head = _answer_to(service_url, request, body_apart=False)
    # Served by the HTTP protocol itself (api/hot_serving.py), unless litestar's or too big to
    # come in one segment.
    assert direct_answers == ([with_head[0]] if "%" not in route and len(body) < 4096 else [])
    assert with_head == _answer_to(service_url, request, body_apart=True)  # through ASGI (a body)
    assert with_head == _answer_to(litestar_url, request, body_apart=False)


def test_pipelined_requests_are_answered_in_order(service_url: str, queue: str) -> None:
    enqueue = post_request(f"/v1/queues/{queue}/jobs", b'{"id":"p1","payload":1}')
    read = b"GET /v1/queues/%s/jobs/p1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % queue.encode()
    lease = post_request(f"/v1/queues/{queue}/lease", b'{"worker":"w1"}')
    with RawConnection(service_url) as connection:
        connection.send(enqueue + read + lease + read)
        answers = [connection.answer() for _ in range(4)]
    assert [answer.status for answer in answers] == [201, 200, 200, 200]
    assert json.loads(answers[1].body)["state"] == "waiting"
    assert [job["id"] for job in json.loads(answers[2].body)["jobs"]] == ["p1"]
    assert json.loads(answers[3].body)["state"] == "active"


@pytest.mark.parametrize(
    ("version", "extra"),
    [(b"HTTP/1.1", (b"Connection: close",)), (b"HTTP/1.0", ())],
    ids=["close", "http1.0"],
)
def test_a_hot_request_that_ends_its_connection_is_answered_then_closed(
    service_url: str, queue: str, version: bytes, extra: tuple[bytes, ...]
) -> None:
    request = post_request(f"/v1/queues/{queue}/jobs", b'{"payload":1}', *extra).replace(
        b"HTTP/1.1", version, 1
    )
    with RawConnection(service_url) as connection:
        answer = connection.ask(request)
        assert answer.status == 201
        assert answer.headers[b"connection"] == b"close"
        assert connection.is_closed()
