"""Which requests service.fastpath serves itself; every other test checks that it answers as
litestar does (the hot routes go through it in the whole HTTP suite)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.app import HOT_OPERATIONS, create_app
from service.config import Settings
from service.fastpath import FastPath
from service.telemetry import Telemetry
from tests.server import running_service
from tests.support import enqueue, lease_one


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
