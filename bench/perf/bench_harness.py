"""Running one workload: the Bench (its stack, loadgen and BullMQ sides) and its Outcome."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_plan import (
    BENCH_CLIENT_NAME,
    BENCH_DIR,
    CYCLE_LEASE_MS,
    FILL_CONCURRENCY,
    PAYLOAD,
    SCRIPT_CALL_BATCH,
    SDK_WORKER_DEADLINE_S,
    SDK_WORKER_JOBS,
    Plan,
)
from bench_stack import Service, _children, _stop, redis_server, show_logs, spawn

from tests.support.servers import RedisServer

# ---------------------------------------------------------------------------------------------
# running workloads


@dataclass
class Outcome:
    """One side's result of one workload."""

    jobs_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    window_s: float | None = None
    planned_window_s: float | None = None
    cpu_pct: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def outcome_of(results: Sequence[dict[str, Any]], rate: bool = True) -> Outcome:
    jobs = sum(result["jobs"] for result in results)
    window_s = min(result["window_s"] for result in results)
    planned_s = max(result["planned_window_s"] for result in results)
    latencies = [ms for result in results for ms in result["latencies_ms"]]
    cpu: dict[str, float] = {}
    for result in results:
        for name, seconds in result["cpu_s"].items():
            cpu[name] = cpu.get(name, 0.0) + seconds
    outcome = Outcome(
        jobs_per_s=jobs / window_s if rate else None,
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        window_s=window_s,
        planned_window_s=planned_s,
        cpu_pct={name: 100 * seconds / planned_s for name, seconds in cpu.items()},
        errors=sum(result["errors"] for result in results),
        extra={"jobs": jobs, "requests": sum(result["requests"] for result in results)},
    )
    enqueue_ms = [ms for result in results for ms in result.get("enqueue_latencies_ms", ())]
    if enqueue_ms:  # wake-up samples: how long the enqueue itself took to answer
        outcome.extra["enqueue_answer_p50_ms"] = percentile(enqueue_ms, 0.5)
        outcome.extra["enqueue_answer_p99_ms"] = percentile(enqueue_ms, 0.99)
    if rate and window_s < 0.9 * planned_s:
        outcome.note = f"queue ran dry: {window_s:.1f} of {planned_s:.1f} s measured"
    return outcome


class Bench:
    payload = PAYLOAD

    def __init__(self, args: argparse.Namespace, plan: Plan, redis: RedisServer, service: Service):
        self.args = args
        self.plan = plan
        self.redis = redis
        self.service = service
        self.watch = {"service": service.pids(), "redis": [redis.process.pid]}  # type: ignore[union-attr]
        self.node: list[str] | None = None  # the command line that runs bullmq_bench.mjs
        self.node_modules: Path | None = None
        self.bullmq_python: str | None = None  # the Python of the virtualenv with BullMQ for Python
        self.ledger_results: dict[str, Any] = {}  # bench/ledger_ops.py's figures, by workload
        self.ledger_tables: list[str] = []

    @contextlib.contextmanager
    def own_stack(self, name: str, replicas: int, workers: int, env: dict[str, str] | None = None) -> Any:
        """A workload's own Redis and service (``replicas`` x EMQ_WORKERS=workers, with env),
        as a Bench of their own; both are stopped when the block ends, however it ends."""
        directory = Path(tempfile.mkdtemp(prefix=f"emq-bench-{name}-"))
        redis = service = None
        try:
            redis = redis_server(self.redis.binary, directory / "redis")
            service = Service(
                redis.url,
                replicas,
                workers,
                directory,
                None,
                service_dir=self.service.service_dir,
                env=env,
                log_name=f"{name}-service",
            ).start()
            stack = Bench(self.args, self.plan, redis, service)
            stack.node, stack.node_modules = self.node, self.node_modules
            stack.bullmq_python = self.bullmq_python
            yield stack
        except BaseException:
            show_logs(directory)
            raise
        finally:
            if service is not None:
                service.stop()
            if redis is not None:
                redis.stop()
            shutil.rmtree(directory, ignore_errors=True)

    def spawn(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """A helper process, stopped with the others when the run ends (see forget)."""
        return spawn(args, **kwargs)

    def forget(self, process: subprocess.Popen[Any]) -> None:
        """A helper process that has ended: no longer one to stop."""
        _stop(process)
        with contextlib.suppress(ValueError):
            _children.remove(process)

    # -- ours --------------------------------------------------------------------------------

    def loadgen(self, workload: str, concurrency: int, **extra: Any) -> Outcome:
        alone = workload in ("wakeup", "sdk_worker")  # one process; no warm-up; ends when done
        procs = 1 if alone else max(1, min(self.args.load_procs, concurrency))
        base = {
            "workload": workload,
            "client": extra.pop("client", self.args.client),
            "queue": extra.pop("queue", "bench"),
            "payload": PAYLOAD,
            "lease_ms": CYCLE_LEASE_MS,
        } | extra
        urls = self.service.urls
        processes = []
        for index in range(procs):
            share = concurrency // procs + (1 if index < concurrency % procs else 0)
            spec = base | {
                "concurrency": share,
                "urls": urls[index % len(urls) :] + urls[: index % len(urls)],
                "tag": f"p{index}",
                "watch": self.watch if index == 0 else {},
            }
            processes.append(
                spawn(
                    [sys.executable, str(BENCH_DIR / "loadgen.py"), json.dumps(spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for process in processes:
            line = process.stdout.readline()  # type: ignore[union-attr]
            if line.strip() != "ready":
                raise RuntimeError(f"loadgen did not start ({workload}): {line!r}")
        warmup_s = 0.0 if alone else self.plan.warmup_s
        duration_s = {"wakeup": self.args.wakeup_timeout_s, "sdk_worker": SDK_WORKER_DEADLINE_S}.get(
            workload, self.plan.duration_s
        )
        measure_from = time.time() + warmup_s
        go = f"go {measure_from} {measure_from + duration_s}\n"
        for process in processes:
            process.stdin.write(go)  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]
        self.service.sample_window(measure_from, measure_from + duration_s)
        results = []
        for process in processes:
            out, _ = process.communicate(timeout=warmup_s + duration_s + 60)
            if process.returncode != 0:
                raise RuntimeError(f"loadgen failed ({workload}), exit {process.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
            _children.remove(process)
        return outcome_of(results, rate=workload != "wakeup")

    def sdk_worker(self) -> Outcome:
        self.prefill("bench", SDK_WORKER_JOBS)
        return self.loadgen("sdk_worker", 50, total=SDK_WORKER_JOBS)

    def flush(self) -> None:
        self.redis.client().flushall()
        time.sleep(0.2)  # let the service's sweep pass over a registry that is now empty

    async def fill(self, queues: Any, queue: str, count: int) -> None:
        """Enqueue count jobs with the service's own code, without HTTP (set-up, not measured)."""
        from msgspec import Raw

        from echomq_http.api.schemas.jobs import EnqueueRequest

        payload = Raw(json.dumps(PAYLOAD, separators=(",", ":")).encode())
        batch = [EnqueueRequest(payload=payload) for _ in range(SCRIPT_CALL_BATCH)]
        sizes = [min(SCRIPT_CALL_BATCH, count - start) for start in range(0, count, SCRIPT_CALL_BATCH)]

        async def loop() -> None:
            while sizes:
                await queues.enqueue(queue, batch[: sizes.pop()])

        await asyncio.gather(*(loop() for _ in range(FILL_CONCURRENCY)))

    def prefill(self, queue: str, count: int) -> None:
        async def go() -> None:
            async with self.job_queues() as queues:
                await self.fill(queues, queue, count)

        asyncio.run(go())

    @contextlib.asynccontextmanager
    async def job_queues(self) -> Any:
        """The service's own JobQueues on a client of ours (named, so the slow log tells our
        calls apart), built from the service's default Settings like its app does."""
        from redis.asyncio import Redis

        from echomq_http.config import Settings
        from echomq_http.core.queue import JobQueues
        from echomq_http.observability.telemetry import Telemetry

        settings = Settings(redis_url=self.redis.url)
        offered = {
            "completed_retention_s": settings.completed_retention_s,
            "failed_retention_s": settings.failed_retention_s,
            "sweep_batch": settings.sweep_batch,
            "telemetry": Telemetry(),
            "max_concurrent_calls": settings.redis_pool_size,
        }
        accepted = inspect.signature(JobQueues).parameters
        client = Redis.from_url(self.redis.url, client_name=BENCH_CLIENT_NAME)
        try:
            yield JobQueues(client, **{name: value for name, value in offered.items() if name in accepted})
        finally:
            await client.aclose()

    # -- BullMQ ------------------------------------------------------------------------------

    def bullmq(self, workload: str, **extra: Any) -> Outcome | None:
        if self.node is None:
            return None
        spec = {
            "workload": workload,
            "host": "127.0.0.1",
            "port": self.redis.port,
            "queue": "bench",
            "payload": PAYLOAD,
            "node_modules": str(self.node_modules),
            "warmup_ms": int(self.plan.warmup_s * 1000),
            "duration_ms": int(self.plan.duration_s * 1000),
            "watch": {"redis": self.watch["redis"]},
            "deadline_ms": 300_000,
        } | extra
        try:
            done = subprocess.run(
                [*self.node, json.dumps(spec)], capture_output=True, text=True, timeout=360, check=False
            )
        except subprocess.TimeoutExpired:
            print(f"  BullMQ {workload}: timed out", file=sys.stderr)
            return Outcome(note="timed out")
        if done.returncode != 0:
            print(f"  BullMQ {workload} failed: {done.stderr.strip()[-2000:]}", file=sys.stderr)
            return Outcome(note=f"failed (exit {done.returncode})")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if workload in ("memory", "ack_cost"):
            return Outcome(extra=result)
        return outcome_of([result], rate=workload != "latency")

    def bullmq_py_worker(self) -> Outcome | None:
        """BullMQ for Python's Worker (concurrency 50, no-op) drains SDK_WORKER_JOBS jobs."""
        if self.bullmq_python is None:
            return None
        spec = {
            "host": "127.0.0.1",
            "port": self.redis.port,
            "queue": "bench",
            "payload": PAYLOAD,
            "concurrency": 50,
            "prefill": SDK_WORKER_JOBS,
            "deadline_s": SDK_WORKER_DEADLINE_S,
            "watch": {"redis": self.watch["redis"]},
        }
        script = str(BENCH_DIR / "bullmq_py_bench.py")
        try:
            done = subprocess.run(
                [self.bullmq_python, script, json.dumps(spec)],
                capture_output=True,
                text=True,
                timeout=SDK_WORKER_DEADLINE_S + 120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Outcome(note="timed out")
        if done.returncode != 0:
            print(f"  BullMQ Python failed: {done.stderr.strip()[-2000:]}", file=sys.stderr)
            return Outcome(note=f"failed (exit {done.returncode})")
        return outcome_of([json.loads(done.stdout.strip().splitlines()[-1])])
