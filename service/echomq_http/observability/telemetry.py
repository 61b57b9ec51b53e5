"""OpenTelemetry: a span per request and per script call, the queue's metrics (handed to /metrics
as plain totals, exported over OTLP by the SDK), W3C trace context carried through the queue,
and JSON log lines.

Exporters are configured the standard way (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME ...);
with none configured nothing is exported and request tracing is off, so it costs nothing.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Tracer

from echomq_http.observability.exposition import Family
from echomq_http.observability.histograms import LocalHistogram, LocalMetricsExporter
from echomq_http.observability.totals import Labels, Totals

DEFAULT_SERVICE_NAME = "echomq-http"
INSTRUMENTATION = "echomq"
DURATION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
HELD_BUCKETS_S = (0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 43200)
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
WAITERS = "emq_long_poll_waiters"
SUBSCRIBERS = "emq_event_subscribers"
QUEUES = "emq_queues"  # /metrics only: read from the registry at each scrape
QUEUES_LISTED = "emq_queues_listed"
QUEUES_HELP = "Queues known (those the token covers)."
QUEUES_LISTED_HELP = (
    "Queues with series of their own in this scrape: the first EMQ_METRICS_MAX_QUEUES known, by name."
)
# The gauges read from Redis, the same whichever process reads them: name -> help.
QUEUE_GAUGES = {
    "emq_queue_depth": "Jobs waiting to be leased.",
    "emq_ledger_size": "Jobs in the in-flight ledger.",
    "emq_jobs": "Jobs per queue and state.",
}


def queue_gauges(queue_counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[Labels, float]]:
    """The queue gauges' series, from each queue's counts by state."""
    return {
        "emq_queue_depth": {(("queue", q),): c["waiting"] for q, c in queue_counts.items()},
        "emq_ledger_size": {(("queue", q),): c["active"] for q, c in queue_counts.items()},
        "emq_jobs": {(("queue", q), ("state", s)): n for q, c in queue_counts.items() for s, n in c.items()},
    }


def _otlp_configured(env: Mapping[str, str], signal: str) -> bool:
    if env.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))


class Tally:
    """A monotonic counter kept in plain ints, which OpenTelemetry reads when it collects (an
    observable counter): an increment costs a dict update instead of a pass through the SDK."""

    def __init__(self, meter: Meter, name: str, description: str) -> None:
        self.name, self.description = name, description
        self.totals: dict[Labels, int] = {}
        meter.create_observable_counter(name, [self._observe], description=description)

    def add(self, amount: int, *labels: tuple[str, str]) -> None:
        self.totals[labels] = self.totals.get(labels, 0) + amount

    def _observe(self, _: CallbackOptions) -> list[Observation]:
        # list() copies the items in one step: an exporter's thread may collect meanwhile.
        return [Observation(total, dict(labels)) for labels, total in list(self.totals.items())]


class Telemetry:
    """One process's tracer, meters and instruments. ``record_*`` methods are what the queue
    operations report; ``totals`` is what they have counted, for /metrics. The OTLP queue
    gauges read the counts that /metrics last read from Redis."""

    def __init__(
        self,
        *,
        service_name: str = DEFAULT_SERVICE_NAME,
        span_exporter: SpanExporter | None = None,
        batch_spans: bool = True,
        metric_exporters: Sequence[MetricExporter] = (),
        export_interval_ms: float | None = None,
    ) -> None:
        # Each process exports its own series over OTLP: a backend tells them apart by the
        # instance (and adds them up), as the replica's processes count separately.
        resource = Resource.create(
            {
                "service.name": service_name,
                "service.instance.id": str(uuid.uuid4()),
                "process.pid": os.getpid(),
            }
        )
        self.tracing = span_exporter is not None
        if span_exporter is not None:
            self.tracer_provider: TracerProvider | None = TracerProvider(resource=resource)
            processor = BatchSpanProcessor if batch_spans else SimpleSpanProcessor
            self.tracer_provider.add_span_processor(processor(span_exporter))
            self.tracer: Tracer = self.tracer_provider.get_tracer(INSTRUMENTATION)
        else:
            self.tracer_provider = None
            self.tracer = trace.NoOpTracer()
        # Histograms are recorded outside the SDK (echomq_http.observability.histograms: it cost too much per
        # record) and join its data in the scrape and in every export.
        self.held = LocalHistogram("emq_lease_to_ack_seconds", "Time from lease to ack.", "s", HELD_BUCKETS_S)
        self.sweep_duration = LocalHistogram(
            "emq_sweep_duration_seconds",
            "Duration of one stalled sweep of every queue.",
            "s",
            DURATION_BUCKETS_S,
        )
        self.http_duration = LocalHistogram(
            "emq_http_request_duration_seconds",
            "HTTP request duration by route, method and status.",
            "s",
            DURATION_BUCKETS_S,
        )
        self.histograms = (self.held, self.sweep_duration, self.http_duration)
        exporting = [
            PeriodicExportingMetricReader(
                LocalMetricsExporter(exporter, self.histograms), export_interval_millis=export_interval_ms
            )
            for exporter in metric_exporters
        ]
        self.meter_provider = MeterProvider(
            resource=resource,
            metric_readers=exporting,
            # Exemplars link measurements to sampled spans: nothing to link without tracing.
            exemplar_filter=None if self.tracing else AlwaysOffExemplarFilter(),
        )
        meter = self.meter_provider.get_meter(INSTRUMENTATION)
        self.enqueued = Tally(meter, "emq_jobs_enqueued", "Jobs stored by enqueue (new ids only).")
        self.leased = Tally(meter, "emq_jobs_leased", "Jobs handed to workers.")
        self.completed = Tally(meter, "emq_jobs_completed", "Jobs acknowledged.")
        self.failed = Tally(meter, "emq_jobs_failed", "Jobs dead-lettered, by reason.")
        self.retried = Tally(meter, "emq_jobs_retried", "Failed attempts sent back for a retry.")
        self.reclaimed = Tally(meter, "emq_jobs_reclaimed", "Expired leases the sweep returned to waiting.")
        self.stale = Tally(
            meter,
            "emq_stale_index_entries",
            "Index entries (waiting, delayed, deadlines, dead letters, holdings) naming no job in "
            "that state: dropped, never acted on.",
        )
        # Every counter above, in the order defined: a new one reaches /metrics with no list to keep.
        self.tallies = tuple(value for value in vars(self).values() if isinstance(value, Tally))
        self.queue_counts: dict[str, Mapping[str, int]] = {}
        self.waiters: Callable[[], int] = lambda: 0
        self.subscribers: Callable[[], int] = lambda: 0
        for name, description in QUEUE_GAUGES.items():
            meter.create_observable_gauge(name, [self._queue_observer(name)], description=description)
        waiters_help = "Long-poll lease requests waiting."
        meter.create_observable_gauge(
            WAITERS, [lambda _: [Observation(self.waiters())]], description=waiters_help
        )
        subscribers_help = "Event stream subscribers and outcome waits open."
        meter.create_observable_gauge(
            SUBSCRIBERS, [lambda _: [Observation(self.subscribers())]], description=subscribers_help
        )
        # What /metrics shows, in this order.
        self.families = (
            *(Family(tally.name, tally.description, "counter") for tally in self.tallies),
            *(Family(name, description, "gauge") for name, description in QUEUE_GAUGES.items()),
            Family(WAITERS, waiters_help, "gauge"),
            Family(SUBSCRIBERS, subscribers_help, "gauge"),
            Family(QUEUES, QUEUES_HELP, "gauge"),
            Family(QUEUES_LISTED, QUEUES_LISTED_HELP, "gauge"),
            *(Family(h.name, h.description, "histogram", h.bounds) for h in self.histograms),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Telemetry:
        span_exporter = None
        if _otlp_configured(env, "TRACES"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter()
        exporters: list[MetricExporter] = []
        if _otlp_configured(env, "METRICS"):
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporters.append(OTLPMetricExporter())
        name = env.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
        return cls(service_name=name, span_exporter=span_exporter, metric_exporters=exporters)

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # -- what the queue operations report --------------------------------------------------

    def record_enqueued(self, queue: str, created: int) -> None:
        if created:
            self.enqueued.add(created, ("queue", queue))

    def record_leased(self, queue: str, count: int) -> None:
        if count:
            self.leased.add(count, ("queue", queue))

    def record_completed(self, queue: str, held_ms: Iterable[int]) -> None:
        count = self.held.record_many((ms / 1000 for ms in held_ms), ("queue", queue))
        if count:
            self.completed.add(count, ("queue", queue))

    def record_failed(self, queue: str, state: str) -> None:
        if state == "failed":
            self.failed.add(1, ("queue", queue), ("reason", "fail"))
        else:
            self.retried.add(1, ("queue", queue))

    def record_stale(self, queue: str, count: int) -> None:
        if count:
            self.stale.add(count, ("queue", queue))

    def record_http(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_duration.record(seconds, ("method", method), ("route", route), ("status", str(status)))

    def http_recorder(self, route: str, method: str, status: int) -> Callable[[float], None]:
        """record_http for one route, method and status, its series looked up once."""
        return self.http_duration.recorder(("method", method), ("route", route), ("status", str(status)))

    def record_sweep(self, queue: str, reclaimed: int, dead_lettered: int) -> None:
        if reclaimed:
            self.reclaimed.add(reclaimed, ("queue", queue))
        if dead_lettered:
            self.failed.add(dead_lettered, ("queue", queue), ("reason", "lease_expired"))

    # -- traces ----------------------------------------------------------------------------

    def current_traceparent(self) -> str | None:
        """The W3C traceparent of the current span, when tracing records one."""
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def traceparent_to_store(self, header: str | None) -> str | None:
        """What enqueue keeps for a job: the caller's traceparent, else our request span's."""
        if header is not None and TRACEPARENT.match(header.strip().lower()):
            return header.strip().lower()
        return self.current_traceparent() if self.tracing else None

    # -- metrics ---------------------------------------------------------------------------

    def _queue_observer(self, name: str) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(_: CallbackOptions) -> list[Observation]:
            series = queue_gauges(self.queue_counts)[name]
            return [Observation(value, dict(labels)) for labels, value in series.items()]

        return observe

    def totals(self) -> Totals:
        """What this process has counted so far, and its own gauges (not the queue gauges,
        which /metrics reads from Redis)."""
        return Totals(
            # Copies: what a snapshot holds must not move as the counting goes on.
            counters={tally.name: dict(tally.totals) for tally in self.tallies},
            histograms={histogram.name: histogram.counts() for histogram in self.histograms},
            gauges={WAITERS: {(): self.waiters()}, SUBSCRIBERS: {(): self.subscribers()}},
        )


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, with the trace and span ids of the current span when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = f"{context.trace_id:032x}"
            entry["span_id"] = f"{context.span_id:016x}"
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def route_label(path: str) -> str:
    """A route's template as the request metric names it: "/v1/queues/{queue}/lease"."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def http_metrics_middleware(telemetry: Telemetry) -> Callable[[Any], Any]:
    """ASGI middleware (placed after routing) recording each request's duration by route
    template, method and status; templates, not raw paths, so job ids never become labels."""

    def factory(app: Any) -> Any:
        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500

            async def send_and_note(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await app(scope, receive, send_and_note)
            finally:
                paths = getattr(scope.get("route_handler"), "paths", None) or {"unmatched"}
                telemetry.record_http(
                    route_label(min(paths)), scope["method"], status, time.perf_counter() - started
                )

        return middleware

    return factory
