"""Judging the rows against their targets, and printing them: the table, the CPU table, the machine."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bench_harness import Outcome
from bench_measures import Row, ratio
from bench_plan import BULLMQ_PY_VERSION, BULLMQ_VERSION, REPO

RATIO_ROWS = (
    "enqueue",
    "enqueue_batch",
    "next_cycle",
    "batch",
    "cycle_50",
    "sdk_worker",
    "sdk_worker_py",
    "sdk_next",
    "ts_worker",
)


def judge(rows: list[Row], _duration_s: float) -> None:
    """Mark each target met or not."""
    for row in rows:
        ours, bull = row.values()
        if not row.target or ours is None:
            continue
        if row.key in RATIO_ROWS:
            factor = float(row.target.split()[1].rstrip("x"))
            r = ratio(ours, bull)
            row.met = None if r is None else r >= factor
        elif row.key == "wakeup_p50":
            row.met = ours <= 2.0
        elif row.key == "wakeup_p99":
            row.met = ours <= 10.0
        elif row.key == "sweep":
            row.met = ours < 2.0
        elif row.key == "ack_ratio":
            row.met = ours <= 2.0
        elif row.key == "memory":
            row.met = ours <= 300


# ---------------------------------------------------------------------------------------------
# output


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "jobs/s":
        return f"{value:,.0f}"
    if unit == "bytes":
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"


def table(rows: list[Row]) -> str:
    header = ["workload", "unit", "EchoMQ", "BullMQ", "ratio", "BullMQ workload", "target", "met"]
    lines = [header]
    notes: list[str] = []
    for row in rows:
        ours, bull = row.values()
        r = ratio(ours, bull)
        met = "" if row.met is None else ("met" if row.met else "NOT met")
        title = row.title
        for side, outcome in (("EchoMQ", row.ours), ("BullMQ", row.bull)):
            if outcome is not None and outcome.note:
                note = f"{side}: {outcome.note}"
                if note not in notes:
                    notes.append(note)
                title += f" [{notes.index(note) + 1}]"
        lines.append(
            [
                title,
                row.unit,
                fmt(ours, row.unit),
                fmt(bull, row.unit),
                "-" if r is None else f"{r:.2f}x",
                row.bull_title,
                row.target,
                met,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        out.append("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) + " |")
        if index == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    out += [f"[{index}] {note}" for index, note in enumerate(notes, 1)]
    return "\n".join(out)


def cpu_us_per_job(outcome: Outcome) -> float | None:
    """CPU of every process of the side (client included) per job: robust to a busy machine."""
    jobs = outcome.extra.get("jobs")
    if not jobs or outcome.planned_window_s is None:
        return None
    return sum(outcome.cpu_pct.values()) / 100 * outcome.planned_window_s / jobs * 1e6


# CPU per job, every side, set against BullMQ's: (row, what it is, the row whose BullMQ side it
# is set against (None: its own), which side's CPU (None: all processes), the ceiling of the ratio).
CPU_GOALS = (
    ("enqueue", "one enqueue (Queue.add)", None, None, 1.3),
    ("enqueue_100", "enqueue of 100 (addBulk)", None, None, None),
    ("next_cycle", "ack with lease_next (moveToCompleted fetchNext)", None, None, 1.0),
    ("cycle_50", "lease 1 + ack 1, two requests (Worker c=50)", "batch", None, 1.5),
    ("next_cycle", "Redis only: single-job loop (Worker c=50's Redis)", "batch", "redis", 1.0),
    ("batch", "lease 100 + ack many (Worker c=50)", None, None, None),
    ("sdk_worker", "Python SDK Worker (Node Worker)", None, None, None),
    ("sdk_worker_py", "Python SDK Worker (Python Worker)", None, None, None),
    ("ts_worker", "TypeScript SDK Worker (Node Worker)", None, None, None),
)
CLIENT_SIDES = ("loadgen", "sdk", "node", "bullmq-python")


def cpu_sides_us(outcome: Outcome) -> dict[str, float] | None:
    """CPU µs per job of each process group of a side (client, service, redis)."""
    jobs = outcome.extra.get("jobs")
    if not jobs or outcome.planned_window_s is None or not outcome.cpu_pct:
        return None
    window_s = outcome.planned_window_s
    return {name: pct / 100 * window_s / jobs * 1e6 for name, pct in outcome.cpu_pct.items()}


def _sides_text(sides: dict[str, float]) -> str:
    order = sorted(sides, key=lambda name: (name not in CLIENT_SIDES, name == "redis", name))
    return " + ".join(f"{sides[name]:,.0f}" for name in order) + f" = **{sum(sides.values()):,.0f}**"


def cpu_goals_table(rows: list[Row]) -> str:
    """CPU per job on every side, EchoMQ's (client + service + Redis) against BullMQ's (Node +
    Redis), with the ratio and the issue's ceiling, met or not."""
    by_key = {row.key: row for row in rows}
    lines = [
        "| per job | EchoMQ µs: client + service + Redis | BullMQ µs: client + Redis | ratio | goal | met |",
        "|---|---|---|---|---|---|",
    ]
    for key, title, against, side, ceiling in CPU_GOALS:
        row = by_key.get(key)
        if row is None or row.ours is None:
            continue
        theirs_row = by_key.get(against or key)
        ours = cpu_sides_us(row.ours)
        theirs = cpu_sides_us(theirs_row.bull) if theirs_row and theirs_row.bull else None
        if ours is None:
            continue
        if side is not None:
            ours = {side: ours.get(side, 0.0)}
            theirs = None if theirs is None else {side: theirs.get(side, 0.0)}
        r = None if not theirs else sum(ours.values()) / sum(theirs.values())
        met = "" if ceiling is None or r is None else ("met" if r <= ceiling else "NOT met")
        lines.append(
            f"| {title} | {_sides_text(ours)} | {'-' if theirs is None else _sides_text(theirs)} | "
            f"{'-' if r is None else f'{r:.2f}x'} | {'' if ceiling is None else f'<= {ceiling}x'} | {met} |"
        )
    return "\n".join(lines)


def cpu_table(rows: list[Row]) -> str:
    lines = [
        "| workload | side | jobs/s | p50 ms | p99 ms | CPU % (100 = one core) | CPU µs/job, all processes |",
        "|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for row in rows:
        for side, outcome in (("EchoMQ", row.ours), ("BullMQ", row.bull)):
            if outcome is None or not outcome.cpu_pct or (id(outcome), side) in seen:
                continue
            seen.add((id(outcome), side))
            cpu = ", ".join(f"{name} {pct:.0f}" for name, pct in outcome.cpu_pct.items())
            rate = "-" if outcome.jobs_per_s is None else f"{outcome.jobs_per_s:,.0f}"
            p50 = "-" if outcome.p50_ms is None else f"{outcome.p50_ms:.2f}"
            p99 = "-" if outcome.p99_ms is None else f"{outcome.p99_ms:.2f}"
            per_job = cpu_us_per_job(outcome) if outcome.jobs_per_s is not None else None
            per_job_text = "-" if per_job is None else f"{per_job:,.0f}"
            title = row.title.replace(", p50", "")
            lines.append(f"| {title} | {side} | {rate} | {p50} | {p99} | {cpu} | {per_job_text} |")
    return "\n".join(lines)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def machine(redis_version: str, node_version: str | None) -> dict[str, Any]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    cpu_mhz = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        cpu_mhz = float(Path("/proc/cpuinfo").read_text().split("cpu MHz")[1].split(":")[1].split()[0])
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "service_changes_uncommitted": bool(_git("status", "--porcelain", "--", "service", "lua")),
        "nproc": os.cpu_count(),
        "cpu_mhz": cpu_mhz,
        "cpu_model": cpu_model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": redis_version,
        "node": node_version,
        "bullmq": BULLMQ_VERSION if node_version else None,
        "bullmq_python": BULLMQ_PY_VERSION,
        "loadavg_start": os.getloadavg(),
    }


# ---------------------------------------------------------------------------------------------
# BullMQ installation
