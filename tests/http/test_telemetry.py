"""OpenTelemetry: spans per request and per script call, trace context carried from producer to
worker through the queue, the metrics a scrape returns after a known sequence, JSON logs."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from echomq_http.config import Settings
from echomq_http.observability.telemetry import JsonLogFormatter, Telemetry
from tests.conftest import HTTP_TIMEOUT_S, TEST_SWEEP_INTERVAL_MS
from tests.support import (
    enqueue,
    eventually,
    job_call,
    lease,
    lease_one,
    long_polls_waiting,
    metric_value,
    wait_for_long_polls,
)
from tests.support.service import running_service

PRODUCER_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def tracing_service(redis_url: str) -> Iterator[tuple[str, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    telemetry = Telemetry(span_exporter=exporter, batch_spans=False)
    with running_service(Settings(redis_url=redis_url), telemetry=telemetry) as url:
        yield url, exporter


async def test_the_producers_trace_reaches_the_worker(
    tracing_service: tuple[str, InMemorySpanExporter], queue: str
) -> None:
    url, _ = tracing_service
    async with httpx.AsyncClient(base_url=url) as http:
        await http.post(
            f"/v1/queues/{queue}/jobs", json={"payload": 1}, headers={"traceparent": PRODUCER_PARENT}
        )
        job = await lease_one(http, queue)
    assert job["traceparent"] == PRODUCER_PARENT
    # A worker continues the producer's trace with the traceparent it was handed.
    worker_tracer = TracerProvider().get_tracer("worker")
    context = TraceContextTextMapPropagator().extract({"traceparent": job["traceparent"]})
    with worker_tracer.start_as_current_span("process", context=context) as span:
        assert f"{span.get_span_context().trace_id:032x}" == PRODUCER_PARENT.split("-")[1]


async def test_requests_and_script_calls_are_spans(
    tracing_service: tuple[str, InMemorySpanExporter], queue: str
) -> None:
    url, exporter = tracing_service
    exporter.clear()
    async with httpx.AsyncClient(base_url=url) as http:
        created = await enqueue(http, queue, {"n": 1})  # no traceparent: the request's own trace is kept
        job = await lease_one(http, queue)
    spans = exporter.get_finished_spans()
    # A new queue's first enqueue is refused by the script (nothing stored), admitted to the
    # registry, then stored by a second call.
    refused, script = (s for s in spans if s.name == "emq enqueue")
    assert refused.attributes["emq.outcome"] == "new_queue" and refused.parent == script.parent
    assert script.attributes["emq.queue"] == queue and script.attributes["emq.outcome"] == "ok"
    request = next(s for s in spans if s.context.span_id == script.parent.span_id)
    assert "POST" in request.name
    assert job["traceparent"].split("-")[1] == f"{request.context.trace_id:032x}"
    lease_span = next(s for s in spans if s.name == "emq lease")
    # the lease reply: its count of dropped index entries and retry_after_ms, then 10 fields per job
    assert lease_span.attributes["emq.reply_items"] == 2 + 10 and created["id"] == job["id"]


async def test_a_stale_call_is_traced_with_its_outcome(
    tracing_service: tuple[str, InMemorySpanExporter], queue: str
) -> None:
    url, exporter = tracing_service
    async with httpx.AsyncClient(base_url=url) as http:
        await enqueue(http, queue, 1)
        job = await lease_one(http, queue)
        exporter.clear()
        assert (await job_call(http, queue, job["id"], "heartbeat", lease_id="0" * 32)).status_code == 409
    span = next(s for s in exporter.get_finished_spans() if s.name == "emq heartbeat")
    assert span.attributes["emq.outcome"] == "lease_lost" and span.attributes["emq.job_id"] == job["id"]


@pytest.fixture
async def own_client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A service of the test's own: its counters and gauges hold only what the test did."""
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT_S) as http:
            yield http


async def scrape(client: httpx.AsyncClient) -> str:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return response.text


async def test_metrics_after_a_known_sequence(own_client: httpx.AsyncClient, queue: str) -> None:
    client = own_client
    await enqueue(client, queue, 1, id="a", max_attempts=1)
    await enqueue(client, queue, 2, id="b", backoff={"type": "fixed", "delay_ms": 0})
    await enqueue(client, queue, 3, id="c")
    await enqueue(client, queue, 4, id="a")  # a duplicate: not counted
    jobs = {job["id"]: job for job in await lease(client, queue, max_jobs=3)}
    await job_call(client, queue, "a", "fail", lease_id=jobs["a"]["lease_id"], error="final")
    await job_call(client, queue, "b", "fail", lease_id=jobs["b"]["lease_id"], error="again")
    await job_call(client, queue, "c", "ack", lease_id=jobs["c"]["lease_id"])
    text = await scrape(client)
    assert metric_value(text, "emq_jobs_enqueued_total", queue=queue) == 3
    assert metric_value(text, "emq_jobs_leased_total", queue=queue) == 3
    assert metric_value(text, "emq_jobs_completed_total", queue=queue) == 1
    assert metric_value(text, "emq_jobs_retried_total", queue=queue) == 1
    assert metric_value(text, "emq_jobs_failed_total", queue=queue, reason="fail") == 1
    assert metric_value(text, "emq_lease_to_ack_seconds_count", queue=queue) == 1
    assert metric_value(text, "emq_queue_depth", queue=queue) == 1
    assert metric_value(text, "emq_ledger_size", queue=queue) == 0
    assert metric_value(text, "emq_jobs", queue=queue, state="failed") == 1
    assert metric_value(text, "emq_long_poll_waiters") == 0  # no lease of the sequence waited
    # Each request counted once, under its route's template and the status it answered.
    requests = "emq_http_request_duration_seconds_count"
    job_route = "/v1/queues/{queue}/jobs/{id}"
    assert metric_value(text, requests, route="/v1/queues/{queue}/jobs", method="POST", status="201") == 3
    assert metric_value(text, requests, route="/v1/queues/{queue}/jobs", method="POST", status="200") == 1
    assert metric_value(text, requests, route="/v1/queues/{queue}/lease", method="POST", status="200") == 1
    assert metric_value(text, requests, route=f"{job_route}/fail", method="POST", status="200") == 2
    assert metric_value(text, requests, route=f"{job_route}/ack", method="POST", status="200") == 1
    assert queue not in {m for m in re.findall(r'route="([^"]*)"', text)}  # templates, not raw paths

    async def swept() -> bool:  # the service sweeps on its own timer: each sweep is timed
        return metric_value(await scrape(client), "emq_sweep_duration_seconds_count") >= 1

    await eventually(swept, "a timed sweep")


async def test_the_waiter_gauge_counts_parked_long_polls(own_client: httpx.AsyncClient, queue: str) -> None:
    polls = [asyncio.create_task(lease(own_client, queue, f"w{i}", wait_ms=20_000)) for i in range(3)]
    await wait_for_long_polls(own_client, 3)
    jobs = [{"payload": i} for i in range(3)]
    created = await own_client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
    assert created.status_code == 200, created.text
    answered = await asyncio.gather(*polls)
    assert sorted(len(jobs) for jobs in answered) == [1, 1, 1]
    assert await long_polls_waiting(own_client) == 0  # answered: no longer counted


def test_json_log_lines_carry_the_trace_ids() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    record = logging.LogRecord("service.x", logging.WARNING, __file__, 1, "lease %s lost", ("j1",), None)
    with provider.get_tracer("t").start_as_current_span("op") as span:
        line = json.loads(JsonLogFormatter().format(record))
    assert line["message"] == "lease j1 lost" and line["level"] == "warning"
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert "trace_id" not in json.loads(JsonLogFormatter().format(record))


def test_nothing_is_exported_without_configuration() -> None:
    telemetry = Telemetry.from_env({})
    assert telemetry.tracing is False and telemetry.tracer_provider is None
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_METRICS_EXPORTER": "none"}
    configured = Telemetry.from_env(env)
    assert configured.tracing is True
    configured.shutdown()  # no spans were made, so nothing is sent to the (closed) port
