"""The abuse harness's judge: from what a run recorded to a table and a verdict, and nothing else.

bench/abuse.py runs the service, its workers, the probe and the floods; this module only reads
the records, so a test (tests/test_abuse_checker.py) can feed it a run with a known fault in it.

A flood record: {"name", "started", "engaged", "ended" (epoch s), "summary" (the flood process's
JSON), "fault": {"kind", "t", "skipped", "release_ms": [death -> leased again, ms],
"release_busy_ms": [those of them late because every live worker was busy (chaos_check's busy_fleet)]}}.
A probe: [op, due, sent (epoch s), latency_ms, status] (status 0: no answer), loadgen's probe.
RSS samples: {process name: [[epoch s, MB], ...]}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

P99_BOUND_MS = 1000.0  # a probe sent after a flood ended (and the 1 s allowed to recover) answers by then
RSS_BOUND_MB = 300.0  # per service process, at any time
RECOVER_S = 1.0  # the service must be itself again this soon after a flood ends
SENT = 2


@dataclass(frozen=True)
class Bounds:
    p99_ms: float = P99_BOUND_MS
    rss_mb: float = RSS_BOUND_MB
    release_ms: float = 3200.0  # lease + sweep interval + 1 s
    recover_s: float = RECOVER_S


@dataclass
class Latency:
    n: int = 0
    errors: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


@dataclass
class FloodRow:
    name: str
    load: str
    during: Latency
    after: Latency
    rss_peak_mb: float | None
    rss_after_mb: float | None
    release_ms: float | None
    fault: str
    release_busy: bool = False  # late, while every live worker was busy: excused (chaos_check)
    failures: list[str] = field(default_factory=list)


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def latency(probes: list[list[Any]], t0: float, t1: float) -> Latency:
    """The probes sent in [t0, t1): a probe that got no 2xx is an error, and counts in the
    latencies with the time it took to fail (a timeout counts as its timeout)."""
    inside = [p for p in probes if t0 <= p[SENT] < t1]
    times = [float(p[3]) for p in inside]
    return Latency(
        n=len(inside),
        errors=sum(1 for p in inside if not 200 <= p[4] < 300),
        p50_ms=percentile(times, 0.5),
        p99_ms=percentile(times, 0.99),
        max_ms=max(times, default=None),
    )


def rss_peak(samples: dict[str, list[list[float]]], t0: float, t1: float) -> float | None:
    """The largest resident size of any one service process sampled in [t0, t1]."""
    values = [mb for series in samples.values() for t, mb in series if t0 <= t <= t1]
    return max(values, default=None)


def rss_last(samples: dict[str, list[list[float]]], t: float) -> float | None:
    """Each process's last sample at or before t: the largest of them."""
    values = [max((s for s in series if s[0] <= t), default=[0, None])[1] for series in samples.values()]
    present = [v for v in values if v is not None]
    return max(present, default=None)


def refused_all(statuses: dict[str, int]) -> bool:
    """A hostile request must never be served: no 2xx among its answers."""
    return not any(str(status).isdigit() and 200 <= int(status) < 300 for status in statuses)


def expectations(name: str, summary: dict[str, Any]) -> list[str]:
    """What the service must have refused during the flood itself."""
    failures = []
    if name == "headers" and not refused_all(summary.get("statuses", {})):
        failures.append(f"headers: a request with {summary.get('mb_sent_each')} MB of headers was served")
    if name == "web":
        for kind, statuses in summary.get("statuses", {}).items():
            if not statuses:
                failures.append(f"web: no {kind} request was answered in the flood's time")
            elif not refused_all(statuses):
                failures.append(f"web: {kind} was served ({statuses})")
    if name == "queues":  # the listings must still answer among thousands of queues
        for path, fetched in summary.get("pages", {}).items():
            statuses = sorted({status for status, _, _ in fetched})
            if not fetched:
                failures.append(f"queues: {path} was not fetched")
            elif statuses != [200]:
                failures.append(f"queues: {path} answered {statuses}")
    return failures


def describe(name: str, summary: dict[str, Any]) -> str:
    """What the flood did and what the service answered, in a few words."""
    if name == "sse":
        return f"streams: {summary.get('streams_open')} open, answers {summary.get('statuses')}"
    if name == "silent":
        return f"{summary.get('opened')} open, {summary.get('closed_by_service')} closed by the service"
    if name == "slowloris":
        return f"{summary.get('answers')}"
    if name == "headers":
        return f"MB sent {summary.get('mb_sent_each')}, answers {summary.get('statuses')}"
    if name == "progress":
        return (
            f"{summary.get('progress_mb_sent')} MB of progress, {summary.get('subscribers')} stalled "
            f"subscribers, answers {summary.get('statuses')}"
        )
    if name == "web":
        return "; ".join(f"{kind} {statuses}" for kind, statuses in summary.get("statuses", {}).items())
    if name == "queues":
        pages = summary.get("pages", {})
        worst = {path: max((s for _, s, _ in got), default=None) for path, got in pages.items()}
        return f"created {summary.get('created')}, slowest page s {worst}"
    return str(summary)


def judge_flood(
    flood: dict[str, Any],
    probes: list[list[Any]],
    rss: dict[str, list[list[float]]],
    bounds: Bounds,
    next_start: float,
) -> FloodRow:
    """One flood: the probes during it (and the second after), after it (from ended + recover_s
    until the next flood starts), the memory, and the reclaim of the job its worker fault hit."""
    ended = flood["ended"]
    after_from = ended + bounds.recover_s
    during = latency(probes, flood["started"], after_from)
    after = latency(probes, after_from, next_start)
    fault = flood.get("fault") or {}
    releases = fault.get("release_ms") or []
    judged = list(releases)
    for busy in fault.get("release_busy_ms") or []:
        judged.remove(busy)
    row = FloodRow(
        name=flood["name"],
        load=describe(flood["name"], flood.get("summary") or {}),
        during=during,
        after=after,
        rss_peak_mb=rss_peak(rss, flood["started"], next_start),
        rss_after_mb=rss_last(rss, next_start),
        release_ms=max(releases) if releases else None,
        fault=fault.get("kind", "none"),
        release_busy=len(judged) < len(releases),
    )
    name = row.name
    if not flood.get("summary"):
        row.failures.append(f"{name}: the flood process reported nothing")
    row.failures += expectations(name, flood.get("summary") or {})
    if after.n == 0:
        row.failures.append(f"{name}: no probe was sent after the flood")
    elif after.errors:
        row.failures.append(f"{name}: {after.errors} of {after.n} probes failed after the flood")
    if after.p99_ms is not None and after.p99_ms > bounds.p99_ms:
        row.failures.append(
            f"{name}: probe p99 {after.p99_ms:.0f} ms after the flood > {bounds.p99_ms:.0f} ms"
        )
    if row.rss_peak_mb is not None and row.rss_peak_mb > bounds.rss_mb:
        row.failures.append(
            f"{name}: a service process reached {row.rss_peak_mb:.0f} MB > {bounds.rss_mb:.0f} MB"
        )
    if fault.get("skipped"):
        row.failures.append(f"{name}: {fault.get('kind')} not injected ({fault['skipped']})")
    elif row.release_ms is None:
        row.failures.append(f"{name}: the job of the {fault.get('kind')} was never leased again")
    elif judged and max(judged) > bounds.release_ms:
        row.failures.append(
            f"{name}: {fault.get('kind')}'s job leased again {max(judged):.0f} ms after the fault "
            f"> {bounds.release_ms:.0f} ms"
        )
    return row


def judge(
    floods: list[dict[str, Any]],
    probes: list[list[Any]],
    rss: dict[str, list[list[float]]],
    bounds: Bounds,
    end: float,
) -> list[FloodRow]:
    """Every flood, each judged up to the start of the next (the last one up to end)."""
    starts = [flood["started"] for flood in floods[1:]] + [end]
    return [judge_flood(flood, probes, rss, bounds, nxt) for flood, nxt in zip(floods, starts, strict=True)]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(rows: list[FloodRow], baseline: Latency, baseline_rss: float | None) -> str:
    """The markdown table docs/RELIABILITY.md shows (bench/report/report.py's abuse block)."""
    lines = [
        "| flood | what it did, what the service answered | probes during (+1 s): p50 / p99 / max ms, "
        "failed | after: p99 / max ms, failed | RSS peak / after MB | worker fault: leased again after "
        "| verdict |",
        "|---|---|---|---|---|---|---|",
        f"| (none: before the floods) | steady producer and workers | {ms(baseline.p50_ms)} / "
        f"{ms(baseline.p99_ms)} / {ms(baseline.max_ms)}, {baseline.errors}/{baseline.n} | | "
        f"{mb(baseline_rss)} | | |",
    ]
    for row in rows:
        during, after = row.during, row.after
        release = "not injected" if row.release_ms is None else f"{row.release_ms / 1000:.2f} s"
        if row.release_busy:
            release += " (every live worker busy)"
        lines.append(
            f"| {row.name} | {row.load.replace('|', '/')} | {ms(during.p50_ms)} / {ms(during.p99_ms)} / "
            f"{ms(during.max_ms)}, {during.errors}/{during.n} | {ms(after.p99_ms)} / {ms(after.max_ms)}, "
            f"{after.errors}/{after.n} | {mb(row.rss_peak_mb)} / {mb(row.rss_after_mb)} | {row.fault}: "
            f"{release} | {'PASS' if not row.failures else 'FAIL'} |"
        )
    return "\n".join(lines)
