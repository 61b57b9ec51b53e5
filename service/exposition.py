"""Totals in the Prometheus text format (0.0.4): what /metrics answers."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from echomq_http.totals import Labels, Totals

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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
    lines: list[str] = []
    for family in families:
        if family.kind == "histogram":
            lines += _histogram(family, totals)
            continue
        series = (totals.counters if family.kind == "counter" else totals.gauges).get(family.name)
        if not series:
            continue
        name = f"{family.name}_total" if family.kind == "counter" else family.name
        lines += [f"# HELP {name} {family.description}", f"# TYPE {name} {family.kind}"]
        lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in sorted(series.items())]
    return "\n".join(lines) + "\n"


def _histogram(family: Family, totals: Totals) -> list[str]:
    series = totals.histograms.get(family.name)
    if not series:
        return []
    name = family.name
    lines = [f"# HELP {name} {family.description}", f"# TYPE {name} histogram"]
    for labels, counts in sorted(series.items()):
        if len(counts.buckets) != len(family.bounds) + 1:
            continue  # not these buckets: only a snapshot written by other code could be so
        cumulative = 0
        for bound, count in zip((*family.bounds, math.inf), counts.buckets, strict=True):
            cumulative += count
            le = 'le="' + _number(float(bound)) + '"'
            lines.append(f"{name}_bucket{_labels(labels, le)} {cumulative}")
        lines.append(f"{name}_sum{_labels(labels)} {_number(float(counts.sum))}")
        lines.append(f"{name}_count{_labels(labels)} {counts.count}")
    return lines
