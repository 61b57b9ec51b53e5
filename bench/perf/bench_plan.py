"""make bench's constants and its two plans (FULL, --quick): sizes and durations of a run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parents[1]

BULLMQ_VERSION = "6.7.6"  # pinned: the newest release on the registry when this was written
# BullMQ 6 takes its Redis client as an optional peer dependency; the bench connects with ioredis.
IOREDIS_VERSION = "6.1.0"
NODE_PACKAGES = {"bullmq": BULLMQ_VERSION, "ioredis": IOREDIS_VERSION}
BULLMQ_PY_VERSION = "3.4.4"  # BullMQ for Python, pinned likewise
DEFAULT_NODE_CACHE = Path.home() / ".cache" / "echomq-bench" / "node"
DEFAULT_PY_CACHE = Path.home() / ".cache" / "echomq-bench" / "python"
SDK_WORKER_JOBS = 20_000  # sdk_worker: the queue the workers drain, on both sides
SDK_WORKER_DEADLINE_S = 120.0
PAYLOAD = {"n": 123456}  # the small payload of every job: 12 bytes of JSON
PAYLOAD_BYTES = len(json.dumps(PAYLOAD, separators=(",", ":")))
LONG_LEASE_MS = 12 * 3600 * 1000  # the API's maximum: nothing expires during a run
CYCLE_LEASE_MS = 60_000
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
NPM_TIMEOUT_S = 300.0
SCRIPT_CALL_BATCH = 1000  # jobs per enqueue script call when the harness fills a queue itself
FILL_CONCURRENCY = 4  # such calls in flight at once
SLOWLOG_LEN = 20_000
BENCH_CLIENT_NAME = "emq-bench"


@dataclass
class Plan:
    """Sizes and durations of one run (full or --quick)."""

    warmup_s: float
    duration_s: float
    wakeup_samples: int
    ledger_jobs: int  # jobs in flight for the sweep and ack measurements
    memory_jobs: int
    sweep_runs: int
    ack_samples: int
    # Jobs put in the queue before a processing workload; a queue that runs dry ends the
    # window early (the rate stays right, the window is shorter: the table says so).
    prefill_cycle: int
    prefill_batch: int
    prefill_bull_manual: int
    prefill_bull_worker: int
    # idle_sweep (bench/ledger_ops.py): queues with one waiting job each, left alone, measured
    idle_queues: int
    idle_settle_s: float
    idle_window_s: float
    # long_ops: jobs in flight (5 workers), dead letters, background rate, time at rest
    long_in_flight: int
    long_dead: int
    long_rate: float
    long_loops: int
    long_rest_s: float
    # ack_cost: jobs in flight, and at most this many acks per order (and a tenth of the size)
    ack_sizes: tuple[int, ...]
    ack_cost_samples: int
    # bench/events_ops.py: rounds of events on/off, SSE subscribers and events, outcome waits
    events_rounds: int
    sse_subscribers: int
    sse_events: int
    wait_rounds: int


FULL = Plan(
    warmup_s=1.5,
    duration_s=10.0,
    wakeup_samples=200,
    ledger_jobs=100_000,
    memory_jobs=100_000,
    sweep_runs=50,
    ack_samples=2000,
    prefill_cycle=80_000,
    prefill_batch=400_000,
    prefill_bull_manual=150_000,
    prefill_bull_worker=150_000,
    idle_queues=10_000,
    idle_settle_s=5.0,
    idle_window_s=20.0,
    long_in_flight=100_000,
    long_dead=50_000,
    long_rate=200.0,
    long_loops=4,
    long_rest_s=5.0,
    ack_sizes=(1_000, 10_000, 100_000),
    ack_cost_samples=1000,
    events_rounds=3,
    sse_subscribers=1000,
    sse_events=200,
    wait_rounds=300,
)
QUICK = Plan(
    warmup_s=0.75,
    duration_s=3.0,
    wakeup_samples=100,
    ledger_jobs=100_000,
    memory_jobs=50_000,
    sweep_runs=30,
    ack_samples=1000,
    prefill_cycle=25_000,
    prefill_batch=150_000,
    prefill_bull_manual=45_000,
    prefill_bull_worker=60_000,
    idle_queues=10_000,
    idle_settle_s=3.0,
    idle_window_s=5.0,
    long_in_flight=20_000,
    long_dead=10_000,
    long_rate=200.0,
    long_loops=4,
    long_rest_s=3.0,
    ack_sizes=(1_000, 10_000, 100_000),
    ack_cost_samples=200,
    events_rounds=1,
    sse_subscribers=1000,
    sse_events=50,
    wait_rounds=100,
)
