"""observability.histograms: the SDK's bucket rule, and histograms reaching an exporter with the rest."""

from __future__ import annotations

import os
import uuid
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Histogram,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from echomq_http.observability.histograms import LocalHistogram
from echomq_http.observability.telemetry import Telemetry


def only_point(histogram: LocalHistogram) -> Any:
    metric = histogram.metric()
    assert metric is not None and isinstance(metric.data, Histogram)
    (point,) = metric.data.data_points
    return point


def test_a_value_on_a_bound_counts_in_that_bound_s_bucket() -> None:
    histogram = LocalHistogram("h", "d", "s", (1, 10))
    for value in (0.5, 1, 1.0001, 10, 11):
        histogram.record(value, ("queue", "q"))
    point = only_point(histogram)
    assert point.bucket_counts == [2, 2, 1]  # (-inf, 1], (1, 10], (10, +inf)
    assert (point.count, point.sum, point.min, point.max) == (5, 23.5001, 0.5, 11)
    assert point.attributes == {"queue": "q"}


def test_record_many_is_the_same_as_recording_each() -> None:
    one_by_one = LocalHistogram("h", "d", "s", (1, 10))
    together = LocalHistogram("h", "d", "s", (1, 10))
    values = [0.1, 3, 30, 3]
    for value in values:
        one_by_one.record(value, ("queue", "q"))
    assert together.record_many(iter(values), ("queue", "q")) == 4
    assert together.record_many([], ("queue", "other")) == 0  # no point made for nothing
    a, b = only_point(one_by_one), only_point(together)
    assert (a.bucket_counts, a.count, a.sum, a.min, a.max) == (b.bucket_counts, b.count, b.sum, b.min, b.max)


def test_nothing_recorded_is_no_metric() -> None:
    assert LocalHistogram("h", "d", "s", (1,)).metric() is None


class Collector(MetricExporter):
    """An exporter that keeps what it is given (what an OTLP exporter would send)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[MetricsData] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: Any
    ) -> MetricExportResult:
        self.batches.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
        pass


def test_an_exporter_gets_the_histograms_with_the_sdk_s_metrics() -> None:
    collector = Collector()
    telemetry = Telemetry(metric_exporters=[collector], export_interval_ms=3_600_000)
    try:
        telemetry.record_leased("q", 2)
        telemetry.record_completed("q", [40, 60])
        telemetry.record_http("/v1/queues/{queue}/lease", "POST", 200, 0.002)
        telemetry.meter_provider.force_flush()
    finally:
        telemetry.shutdown()
    exported = {
        metric.name: metric
        for batch in collector.batches
        for resource in batch.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {"emq_jobs_leased", "emq_lease_to_ack_seconds", "emq_http_request_duration_seconds"} <= set(
        exported
    )
    (held,) = exported["emq_lease_to_ack_seconds"].data.data_points
    assert (held.count, held.sum, dict(held.attributes)) == (2, 0.1, {"queue": "q"})
    # Each process exports its own series: the resource says which process they are.
    (resource,) = {batch.resource_metrics[0].resource for batch in collector.batches}
    assert resource.attributes["process.pid"] == os.getpid()
    uuid.UUID(str(resource.attributes["service.instance.id"]))  # one of its own, unlike a pid
