"""What the metrics have counted, as plain data: written to a file by each process of a replica,
added up across them, and cut down to the queues a token may see before /metrics renders it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import msgspec

Labels = tuple[tuple[str, str], ...]  # (name, value) pairs, in the order they were recorded
QUEUE_LABEL = "queue"
N = TypeVar("N", int, float)
V = TypeVar("V")


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


def _add_series(into: dict[str, dict[Labels, N]], part: Mapping[str, Mapping[Labels, N]]) -> None:
    for name, series in part.items():
        target = into.setdefault(name, {})
        for labels, value in series.items():
            target[labels] = target.get(labels, 0) + value


def add_up(parts: Iterable[Totals]) -> Totals:
    """The sum of several processes' totals, series by series."""
    result = Totals()
    for part in parts:
        _add_series(result.counters, part.counters)
        _add_series(result.gauges, part.gauges)
        for name, series in part.histograms.items():
            target = result.histograms.setdefault(name, {})
            for labels, counts in series.items():
                mine = target.get(labels)
                if mine is None:
                    target[labels] = HistogramCounts(list(counts.buckets), counts.sum)
                elif len(mine.buckets) == len(counts.buckets):  # the same bounds: the same code
                    mine.buckets = [a + b for a, b in zip(mine.buckets, counts.buckets, strict=True)]
                    mine.sum += counts.sum
    return result


def only_queues(totals: Totals, covers: Callable[[str], bool]) -> Totals:
    """The series of the queues ``covers`` accepts, and those without a queue label."""
    return Totals(
        counters=_cut(totals.counters, covers),
        histograms=_cut(totals.histograms, covers),
        gauges=_cut(totals.gauges, covers),
    )


def _cut(kind: Mapping[str, Mapping[Labels, V]], covers: Callable[[str], bool]) -> dict[str, dict[Labels, V]]:
    def keep(labels: Labels) -> bool:
        return all(covers(value) for name, value in labels if name == QUEUE_LABEL)

    return {
        name: {labels: v for labels, v in series.items() if keep(labels)} for name, series in kind.items()
    }
