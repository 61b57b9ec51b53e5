"""Totals in the Prometheus text format (0.0.4): what /metrics answers, rendered in steps of a
bounded number of series so that a big scrape never holds the event loop for long."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from echomq_http.observability.totals import Labels, Totals

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SERIES_PER_STEP = 200  # series rendered between two yields to the event loop (a few ms)


@dataclass(frozen=True, slots=True)
class Family:
    """A metric's name (a counter's without ``_total``), help text, type and buckets."""

    name: str
    description: str
    kind: Literal["counter", "gauge", "histogram"]
    bounds: tuple[float, ...] = ()


def _labels(labels: Labels, extra: str = "") -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    parts = [f'{re.sub(r"[^a-zA-Z0-9_]", "_", k)}="{escape(str(v))}"' for k, v in sorted(labels)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value) if isinstance(value, float) and not value.is_integer() else str(int(value))


def render(families: Iterable[Family], totals: Totals) -> str:
    """Every family that has a series, in the order given; its series sorted by label."""
    return "".join(_pieces(families, totals))


async def render_in_steps(families: Iterable[Family], totals: Totals) -> str:
    """What render answers, yielding to the event loop every SERIES_PER_STEP series."""
    pieces = []
    for count, piece in enumerate(_pieces(families, totals), 1):
        pieces.append(piece)
        if count % SERIES_PER_STEP == 0:
            await asyncio.sleep(0)
    return "".join(pieces)


def _pieces(families: Iterable[Family], totals: Totals) -> Iterator[str]:
    """The text a family's header, then each of its series, adds (lines ending in a newline)."""
    for family in families:
        if family.kind == "histogram":
            yield from _histogram(family, totals)
            continue
        series = (totals.counters if family.kind == "counter" else totals.gauges).get(family.name)
        if not series:
            continue
        name = f"{family.name}_total" if family.kind == "counter" else family.name
        yield f"# HELP {name} {family.description}\n# TYPE {name} {family.kind}\n"
        for labels, value in sorted(series.items()):
            yield f"{name}{_labels(labels)} {_number(value)}\n"


def _histogram(family: Family, totals: Totals) -> Iterator[str]:
    series = totals.histograms.get(family.name)
    if not series:
        return
    name = family.name
    yield f"# HELP {name} {family.description}\n# TYPE {name} histogram\n"
    les = ['le="' + _number(float(bound)) + '"' for bound in (*family.bounds, math.inf)]
    for labels, counts in sorted(series.items()):
        if len(counts.buckets) != len(family.bounds) + 1:
            continue  # not these buckets: only a snapshot written by other code could be so
        lines = []
        cumulative = 0
        for le, count in zip(les, counts.buckets, strict=True):
            cumulative += count
            lines.append(f"{name}_bucket{_labels(labels, le)} {cumulative}\n")
        plain = _labels(labels)
        lines.append(f"{name}_sum{plain} {_number(float(counts.sum))}\n{name}_count{plain} {counts.count}\n")
        yield "".join(lines)
