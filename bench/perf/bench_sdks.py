"""The SDKs' steps: the Python SDK's Worker and lease_next loops, the TypeScript SDK's (built first),
each against BullMQ's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from bench_harness import Bench, Outcome, outcome_of
from bench_measures import Row, describe, measure_pair
from bench_plan import (
    BENCH_DIR,
    CYCLE_LEASE_MS,
    NPM_TIMEOUT_S,
    REPO,
    SDK_WORKER_DEADLINE_S,
    SDK_WORKER_JOBS,
)


def run_sdk(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """The Python SDK: its Worker draining a queue (against BullMQ's Workers, Node and Python),
    and single-job loops whose acks lease the next job."""
    plan, rows = bench.plan, []
    ours, bull = measure_pair(
        bench,
        "sdk_worker",
        bench.sdk_worker,
        lambda: bench.bullmq(
            "worker",
            concurrency=50,
            prefill=SDK_WORKER_JOBS,
            drain=True,
            warmup_ms=0,
            duration_ms=int(SDK_WORKER_DEADLINE_S * 1000),
        ),
        enabled,
    )
    if ours:
        title = f"SDK Worker drains {SDK_WORKER_JOBS:,}, c=50, no-op"
        rows.append(
            Row("sdk_worker", title, "jobs/s", ours, bull, "Worker (Node), c=50, no-op", target=">= 1.5x")
        )
        python = None
        if bench.bullmq_python is not None:
            print("- sdk_worker: BullMQ Python ...", file=sys.stderr, flush=True)
            bench.flush()
            python = bench.bullmq_py_worker()
            print(f"  {describe(python)}", file=sys.stderr, flush=True)
        rows.append(
            Row(
                "sdk_worker_py", title, "jobs/s", ours, python, "Worker (Python), c=50, no-op", target=">= 3x"
            )
        )

    def ours_next() -> Outcome:
        bench.prefill("bench", plan.prefill_cycle)
        return bench.loadgen("sdk_next", 50)

    ours, bull = measure_pair(
        bench,
        "sdk_next",
        ours_next,
        lambda: bench.bullmq("fetch_next", concurrency=50, prefill=plan.prefill_bull_manual),
        enabled,
    )
    if ours:
        rows.append(
            Row(
                "sdk_next",
                "SDK ack with lease_next (1 job), 50 loops",
                "jobs/s",
                ours,
                bull,
                "moveToCompleted(fetchNext), 50 loops",
                target=">= 0.6x",
            )
        )
    return rows


TS_SDK = REPO / "clients" / "typescript"
TS_WORKER_JOBS = 20_000
TS_WORKER_CONCURRENCY = 50
TS_WORKER_EXTRA_S = 120  # npm ci, the build, both drains: added to the hard deadline


def build_ts_sdk() -> bool:
    """npm ci (when node_modules does not hold what the lock names) and build clients/typescript."""
    if shutil.which("npm") is None:
        print("npm not found: the ts_worker workload is skipped", file=sys.stderr)
        return False
    for step in (["node", "scripts/install.mjs"], ["npm", "run", "build"]):
        done = subprocess.run(
            step, cwd=TS_SDK, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            print(f"{' '.join(step)} failed; ts_worker skipped:\n{done.stderr[-2000:]}", file=sys.stderr)
            return False
    return True


def run_ts_worker(bench: Bench, enabled: Callable[[str], bool]) -> list[Row]:
    """The TypeScript SDK's Worker (bench/ts_worker_bench.mjs) against BullMQ's Worker, both
    concurrency 50 with a no-op handler, on TS_WORKER_JOBS pre-filled jobs, from start to the
    last ack. Part of the default run; --only ts_worker runs it alone."""
    if not (enabled("ts_worker") or enabled("ts_next")) or not build_ts_sdk():
        return []

    def node_client(script: str, **extra: Any) -> Outcome:
        spec = {
            "url": bench.service.urls[0],
            "queue": "bench",
            "concurrency": TS_WORKER_CONCURRENCY,
            "lease_ms": CYCLE_LEASE_MS,
            "watch": bench.watch,
            "deadline_ms": 150_000,
        } | extra
        done = subprocess.run(
            ["node", str(BENCH_DIR / script), json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{script} failed: {done.stderr.strip()[-2000:]}")
        return outcome_of([json.loads(done.stdout.strip().splitlines()[-1])])

    def ours() -> Outcome:
        bench.prefill("bench", TS_WORKER_JOBS)
        return node_client("ts_worker_bench.mjs", prefill=TS_WORKER_JOBS, duration_ms=120_000)

    def ours_next() -> Outcome:
        bench.prefill("bench", bench.plan.prefill_cycle)
        return node_client(
            "ts_next_bench.mjs",
            warmup_ms=int(bench.plan.warmup_s * 1000),
            duration_ms=int(bench.plan.duration_s * 1000),
        )

    rows = []
    mine, theirs = measure_pair(
        bench,
        "ts_worker",
        ours,
        lambda: bench.bullmq(
            "worker",
            concurrency=TS_WORKER_CONCURRENCY,
            prefill=TS_WORKER_JOBS,
            warmup_ms=0,
            duration_ms=int(bench.plan.duration_s * 1000),
        ),
        enabled,
    )
    if mine is not None:
        rows.append(
            Row(
                "ts_worker",
                f"TypeScript SDK Worker, c={TS_WORKER_CONCURRENCY}, no-op, {TS_WORKER_JOBS:,} jobs",
                "jobs/s",
                mine,
                theirs,
                f"Worker, concurrency {TS_WORKER_CONCURRENCY}, no-op",
                target=">= 1.5x",
            )
        )
    mine, theirs = measure_pair(
        bench,
        "ts_next",
        ours_next,
        lambda: bench.bullmq(
            "fetch_next", concurrency=TS_WORKER_CONCURRENCY, prefill=bench.plan.prefill_bull_manual
        ),
        enabled,
    )
    if mine is not None:
        rows.append(
            Row(
                "ts_next",
                f"TS SDK ack with lease_next (1 job), {TS_WORKER_CONCURRENCY} loops",
                "jobs/s",
                mine,
                theirs,
                f"moveToCompleted(fetchNext), {TS_WORKER_CONCURRENCY} loops",
                target=">= 0.6x",
            )
        )
    return rows
