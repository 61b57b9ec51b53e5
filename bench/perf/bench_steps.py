"""The measured groups of a run, one function each (run_all runs them in order)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench_harness import Bench, Outcome
from bench_measures import Row, ledger_costs, measure_pair, memory_per_job
from bench_plan import (
    PAYLOAD_BYTES,
)
from bench_sdks import run_sdk, run_ts_worker
from bench_tables import judge

NEXT_CYCLE_LOOPS = 50  # single-job worker loops, as the BullMQ loops they are set against


def selection(args: argparse.Namespace) -> Callable[[str], bool]:
    """Whether --only selects a workload: by its key, or by the key's first word."""
    only = set(args.only.split(",")) if args.only else None

    def enabled(key: str) -> bool:
        return only is None or key in only or key.split("_")[0] in only

    return enabled


# The workloads of bench/ledger_ops.py: key, what it measures, and the extra seconds it may
# add to the hard deadline (quick, full).
LEDGER_OPS = (
    ("idle_sweep", "idle-queue sweep cost", (120, 180)),
    ("long_ops", "small requests during long operations", (180, 420)),
    ("ack_cost", "ack cost by ledger size and order", (240, 480)),
)
# The workloads of bench/events_ops.py (issue 14), the same way.
EVENT_OPS = (
    ("events_cost", "batched throughput, events on vs off", (90, 240)),
    ("sse_fanout", "1,000 SSE subscribers of one queue", (60, 90)),
    ("outcome_wait", "waiting for a job's outcome", (30, 60)),
)
# The workloads of bench/flow_ops.py (issue 15, queue settings), the same way.
FLOW_OPS = (
    ("rate_limit", "throughput under a rate limit, achieved vs configured", (60, 90)),
    ("max_in_flight", "max_in_flight held under load", (45, 60)),
)
# The workload of bench/sessions_ops.py (issue 15), the same way.
SESSION_OPS = (("session_recovery", "a SIGKILLed worker's jobs back, session vs lease", (90, 300)),)
# The workload of bench/groups_ops.py (issue 15), the same way.
GROUP_OPS = (("group_lease_cost", "lease cost with 1 vs 10,000 groups", (120, 300)),)
# The workload of bench/ui_ops.py (issue 17, the dashboard), the same way.
UI_OPS = (("ui_pages", "dashboard pages with 1,000,000 waiting and 10,000 in flight", (90, 240)),)
# The workload of bench/schedules_ops.py (issue 16), the same way.
SCHEDULE_OPS = (("schedule_cost", "10,000 schedules, 100 due a second: CPU and lateness", (90, 120)),)
# Workloads another checkout's service can run (--service-dir): over HTTP alone, or on jobs this
# checkout's scripts enqueue (prefill), which every version since the job hash settled can lease.
HTTP_ONLY_WORKLOADS = {
    "enqueue",
    "enqueue_batch",
    "enqueue_100",
    "cycle_50",
    "next_cycle",
    "batch",
    "wakeup",
    "idle_sweep",
    "idle",
}


def run_ledger_ops(
    bench: Bench,
    enabled: Callable[[str], bool],
    module_name: str = "ledger_ops",
    ops: Sequence[Any] = LEDGER_OPS,
) -> list[Row]:
    """The workloads of a module (idle_sweep, long_ops, ack_cost of bench/ledger_ops.py; those of
    bench/events_ops.py): their rows; their own tables and figures go in bench.ledger_tables and
    bench.ledger_results. A workload that fails is reported as such and the others still run."""
    import importlib
    import traceback

    ledger_ops = importlib.import_module(module_name)

    def row(key: str, title: str, unit: str, **fields: Any) -> Row:
        return Row(key, title, unit, None, None, **fields)

    rows: list[Row] = []
    for key, what, _ in ops:
        if not enabled(key):
            continue
        print(f"- {key}: {what} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            bench.flush()
            result = getattr(ledger_ops, key)(bench)
        except Exception as error:
            traceback.print_exc()
            rows.append(Row(key, what, "-", Outcome(note=f"{key} failed: {error!r}"[:300]), None))
            continue
        finally:
            print(f"  ({key}: {time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        bench.ledger_results[key] = result
        rows += getattr(ledger_ops, f"{key}_rows")(result, row)
        bench.ledger_tables.append(getattr(ledger_ops, f"{key}_table")(result))
        print(f"  {getattr(ledger_ops, f'{key}_summary')(result)}", file=sys.stderr, flush=True)
    return rows


def run_enqueue(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """Enqueue, one job a request, against Queue.add."""
    args = bench.args
    rows: list[Row] = []
    ours, bull = measure_pair(
        bench,
        "enqueue",
        lambda: bench.loadgen("enqueue", args.enqueue_concurrency),
        lambda: bench.bullmq("add", concurrency=args.enqueue_concurrency),
        enabled,
    )
    if ours:
        rows.append(
            Row(
                "enqueue",
                f"enqueue, 1 job/request, c={args.enqueue_concurrency}",
                "jobs/s",
                ours,
                bull,
                f"Queue.add, c={args.enqueue_concurrency}",
                target=">= 0.75x",
            )
        )
    return rows


def run_enqueue_100(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """Enqueue, 100 jobs a request, against addBulk(100): the batch most producers send."""
    args = bench.args
    rows: list[Row] = []
    ours, bull = measure_pair(
        bench,
        "enqueue_100",
        lambda: bench.loadgen("enqueue_batch", args.batch_concurrency, batch=100),
        lambda: bench.bullmq("addBulk", concurrency=args.batch_concurrency, batch=100),
        enabled,
    )
    if ours:
        rows.append(
            Row(
                "enqueue_100",
                f"enqueue, 100 jobs/request, c={args.batch_concurrency}",
                "jobs/s",
                ours,
                bull,
                f"addBulk(100), c={args.batch_concurrency}",
            )
        )
    return rows


def run_enqueue_batch(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """Enqueue, 1000 jobs a request, against addBulk."""
    args = bench.args
    rows: list[Row] = []
    ours, bull = measure_pair(
        bench,
        "enqueue_batch",
        lambda: bench.loadgen("enqueue_batch", args.batch_concurrency, batch=1000),
        lambda: bench.bullmq("addBulk", concurrency=args.batch_concurrency, batch=1000),
        enabled,
    )
    if ours:
        row = Row(
            "enqueue_batch",
            f"enqueue, 1000 jobs/request, c={args.batch_concurrency}",
            "jobs/s",
            ours,
            bull,
            f"addBulk(1000), c={args.batch_concurrency}",
            target=">= 2x",
        )
        rows.append(row)
    return rows


def run_cycles(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """Lease 1 + ack 1 per job with 1, 8 and 50 workers, against getNextJob + moveToCompleted."""
    plan = bench.plan
    rows: list[Row] = []
    for workers in (1, 8, 50):
        key = f"cycle_{workers}"

        def ours_cycle(workers: int = workers) -> Outcome:
            bench.prefill("bench", plan.prefill_cycle)
            return bench.loadgen("cycle", workers)

        ours, bull = measure_pair(
            bench,
            key,
            ours_cycle,
            lambda workers=workers: bench.bullmq(
                "manual", concurrency=workers, prefill=plan.prefill_bull_manual
            ),
            enabled,
        )
        if ours:
            rows.append(
                Row(
                    key,
                    f"lease 1 + ack 1 per job, {workers} worker{'s' if workers > 1 else ''}",
                    "jobs/s",
                    ours,
                    bull,
                    f"getNextJob + moveToCompleted, {workers} loop(s)",
                    target=">= 0.6x" if workers == 50 else "",
                )
            )
    return rows


def run_next_cycle(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """The single-job worker loop: each ack leases the next job (lease_next), against
    moveToCompleted(fetchNext) loops."""
    plan = bench.plan
    rows: list[Row] = []
    loops = NEXT_CYCLE_LOOPS

    def ours_next() -> Outcome:
        bench.prefill("bench", plan.prefill_cycle)
        return bench.loadgen("next_cycle", loops)

    ours, bull = measure_pair(
        bench,
        "next_cycle",
        ours_next,
        lambda: bench.bullmq("fetch_next", concurrency=loops, prefill=plan.prefill_bull_manual),
        enabled,
    )
    if ours:
        rows.append(
            Row(
                "next_cycle",
                f"ack with lease_next (1 job), {loops} loops",
                "jobs/s",
                ours,
                bull,
                f"moveToCompleted(fetchNext), {loops} loops",
                target=">= 0.6x",
            )
        )
    return rows


def run_batch(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """Lease 100 + one ack-many, against a Worker of concurrency 50."""
    args, plan = bench.args, bench.plan
    rows: list[Row] = []

    def ours_batch() -> Outcome:
        bench.prefill("bench", plan.prefill_batch)
        return bench.loadgen("batch_cycle", args.batch_workers, batch=100)

    ours, bull = measure_pair(
        bench,
        "batch",
        ours_batch,
        lambda: bench.bullmq("worker", concurrency=50, prefill=plan.prefill_bull_worker),
        enabled,
    )
    if ours:
        rows.append(
            Row(
                "batch",
                f"lease 100 + 1 ack-many, {args.batch_workers} workers",
                "jobs/s",
                ours,
                bull,
                "Worker, concurrency 50, no-op",
                target=">= 4x",
            )
        )
    return rows


def run_wakeup(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """The long-poll wake-up, p50 and p99, against add -> processor start."""
    args, plan = bench.args, bench.plan
    rows: list[Row] = []
    ours, bull = measure_pair(
        bench,
        "wakeup",
        lambda: bench.loadgen(
            "wakeup", 1, samples=plan.wakeup_samples, wait_ms=10_000, settle_ms=args.settle_ms
        ),
        lambda: bench.bullmq(
            "latency",
            samples=plan.wakeup_samples,
            settle_ms=args.settle_ms,
            duration_ms=int(args.wakeup_timeout_s * 1000),
        ),
        enabled,
    )
    if ours:
        rows.append(
            Row(
                "wakeup_p50",
                "long-poll wake-up, p50",
                "ms",
                ours,
                bull,
                "add -> processor start, p50",
                metric="p50",
                target="<= 2 ms",
            )
        )
        rows.append(
            Row(
                "wakeup_p99",
                "long-poll wake-up, p99",
                "ms",
                ours,
                bull,
                "add -> processor start, p99",
                metric="p99",
                target="<= 10 ms",
            )
        )
    return rows


def run_ledger(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """The sweep and ack cost with many and 100 jobs in flight (the harness measures them itself)."""
    plan = bench.plan
    rows: list[Row] = []
    if enabled("ledger") or enabled("sweep") or enabled("ack"):
        print(f"- sweep and ack with {plan.ledger_jobs:,} and 100 in flight ...", file=sys.stderr, flush=True)
        bench.flush()
        big = asyncio.run(ledger_costs(bench, plan.ledger_jobs, "ledger-big"))
        bench.flush()
        small = asyncio.run(ledger_costs(bench, 100, "ledger-small"))
        bench.flush()
        print(f"  {json.dumps({'big': big, 'small': small})}", file=sys.stderr, flush=True)
        n = f"{plan.ledger_jobs // 1000}k"
        sweep = Row(
            "sweep",
            f"sweep run, {n} in flight, none expired",
            "ms/run",
            None,
            None,
            target="< 2 ms",
            ours_value=big["sweep_ms"]["p50"],
        )
        sweep.extra = {"big": big, "small": small}  # type: ignore[attr-defined]
        rows.append(sweep)
        rows.append(
            Row(
                "sweep_server",
                "  same, Redis execution time (slow log)",
                "ms/run",
                None,
                None,
                ours_value=big["sweep_server_us"]["p50"] / 1000,
            )
        )
        rows.append(
            Row(
                "ack_big",
                f"ack (oldest first), {n} in flight",
                "ms",
                None,
                None,
                ours_value=big["ack_oldest_ms"]["p50"],
            )
        )
        rows.append(
            Row(
                "ack_small",
                "ack (oldest first), 100 in flight",
                "ms",
                None,
                None,
                ours_value=small["ack_oldest_ms"]["p50"],
            )
        )
        ack_ratio = big["ack_oldest_ms"]["p50"] / small["ack_oldest_ms"]["p50"]
        rows.append(
            Row(
                "ack_ratio",
                f"ack {n} / ack 100 in flight",
                "x",
                None,
                None,
                target="<= 2x",
                ours_value=ack_ratio,
            )
        )
        server_ratio = big["ack_oldest_server_us"]["p50"] / small["ack_oldest_server_us"]["p50"]
        rows.append(
            Row(
                "ack_ratio_server",
                "  same, Redis execution time (slow log)",
                "x",
                None,
                None,
                ours_value=server_ratio,
            )
        )
        rows.append(
            Row(
                "ack_newest",
                f"ack (newest first), {n} in flight, Redis time",
                "ms",
                None,
                None,
                ours_value=big["ack_newest_server_us"]["p50"] / 1000,
            )
        )
    return rows


def run_memory(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """Redis bytes per queued and per in-flight job, against BullMQ's per queued job."""
    plan = bench.plan
    rows: list[Row] = []
    if enabled("memory"):
        print(f"- memory per job ({plan.memory_jobs:,} jobs) ...", file=sys.stderr, flush=True)
        bench.flush()
        mine = asyncio.run(memory_per_job(bench, plan.memory_jobs))
        bench.flush()
        theirs = bench.bullmq("memory", count=plan.memory_jobs)
        bench.flush()
        bull_bytes = None
        if theirs is not None and "used_memory_after" in theirs.extra:
            extra = theirs.extra
            bull_bytes = (extra["used_memory_after"] - extra["used_memory_before"]) / extra["jobs"]
            bull_bytes -= PAYLOAD_BYTES
        print(f"  ours {json.dumps(mine)}; BullMQ {bull_bytes}", file=sys.stderr, flush=True)
        row = Row(
            "memory",
            f"Redis bytes per queued job beyond its {PAYLOAD_BYTES}-byte payload",
            "bytes",
            None,
            theirs,
            "addBulk, same payload",
            target="<= 300 B",
            ours_value=mine["overhead_per_queued_job"],
            bull_value=bull_bytes,
        )
        row.extra = {"ours": mine, "bullmq": theirs.extra if theirs else None}  # type: ignore[attr-defined]
        rows.append(row)
        rows.append(
            Row(
                "memory_in_flight",
                "Redis bytes per in-flight job (payload included)",
                "bytes",
                None,
                None,
                ours_value=mine["bytes_per_in_flight_job"],
            )
        )
    return rows


def run_module(module_name: str, ops: Sequence[Any]) -> Callable[[Bench, Callable[[str], bool]], list[Row]]:
    """The step that runs a module's workloads (see run_ledger_ops)."""
    return functools.partial(run_ledger_ops, module_name=module_name, ops=ops)


# The measured groups, in the order they run; each gives its rows.
STEPS: tuple[Callable[[Bench, Callable[[str], bool]], list[Row]], ...] = (
    run_enqueue,
    run_enqueue_batch,
    run_enqueue_100,
    run_cycles,
    run_next_cycle,
    run_batch,
    run_sdk,
    run_wakeup,
    run_ledger,
    run_memory,
    run_ts_worker,
    run_module("ledger_ops", LEDGER_OPS),
    run_module("events_ops", EVENT_OPS),
    run_module("flow_ops", FLOW_OPS),
    run_module("sessions_ops", SESSION_OPS),
    run_module("groups_ops", GROUP_OPS),
    run_module("ui_ops", UI_OPS),
    run_module("schedules_ops", SCHEDULE_OPS),
)


def run_all(bench: Bench) -> list[Row]:
    """Every step whose workloads --only/--skip leave in, then each row judged on its target."""
    enabled = selection(bench.args)
    rows: list[Row] = []
    for step in STEPS:
        rows += step(bench, enabled)
    judge(rows, bench.plan.duration_s)
    return rows
