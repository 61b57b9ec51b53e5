"""What the metrics have counted, as plain data, which /metrics renders."""

from __future__ import annotations

import msgspec

Labels = tuple[tuple[str, str], ...]  # (name, value) pairs, in the order they were recorded


class HistogramCounts(msgspec.Struct, array_like=True):
    buckets: list[int]  # per bucket, not cumulative; the last is (last bound, +Inf)
    sum: float

    @property
    def count(self) -> int:
        return sum(self.buckets)


class Totals(msgspec.Struct):
    """Counters and histograms are cumulative since their process started; gauges are values now."""

    counters: dict[str, dict[Labels, int]] = msgspec.field(default_factory=dict)
    histograms: dict[str, dict[Labels, HistogramCounts]] = msgspec.field(default_factory=dict)
    gauges: dict[str, dict[Labels, float]] = msgspec.field(default_factory=dict)
