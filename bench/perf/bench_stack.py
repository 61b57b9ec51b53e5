"""The processes of a bench run: its Redis, the service's replicas, the helpers; each stopped on exit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_plan import BENCH_DIR, REPO, START_TIMEOUT_S, STOP_TIMEOUT_S

from echomq_http.store.server_process import ServerDidNotStart, ServerProcess
from tests.support.launched import descendants, service_process, service_server
from tests.support.ports import free_port
from tests.support.servers import RedisServer

# ---------------------------------------------------------------------------------------------
# processes


_children: list[subprocess.Popen[Any] | ServerProcess] = []


def _stop(process: subprocess.Popen[Any] | ServerProcess, sig: int = signal.SIGTERM) -> None:
    if isinstance(process, ServerProcess):
        process.stop(sig, STOP_TIMEOUT_S)
        return
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


def adopt(process: Any) -> Any:
    """A process started elsewhere, stopped with the rest (stop_children, the watchdog)."""
    _children.append(process)
    return process


def redis_server(binary: str, directory: Path) -> RedisServer:
    """A throwaway Redis on a loopback port (no RDB, no AOF, noeviction; its log in directory),
    stopped with the rest."""
    log = directory / "redis.log"
    server = RedisServer(directory, binary=binary, log=log, startup_timeout_s=START_TIMEOUT_S)
    server.spawn()
    adopt(server.process)
    assert server.process is not None
    server.process.wait_ready()
    return server


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
        self.processes: list[ServerProcess] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def start(self) -> Service:
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
            url = f"http://127.0.0.1:{port}"
            log = self.log_dir / f"{self.log_name}-{index}.log"
            server = service_server(args, url, env=env, log=log, cwd=self.service_dir)
            self.processes.append(adopt(server.spawn()))
            self.ports.append(port)
        for server in self.processes:
            try:
                server.wait_ready()
            except ServerDidNotStart as error:
                raise RuntimeError(f"{error}; see {self.log_dir}") from None
        return self

    def pids(self) -> list[int]:
        return [pid for process in self.processes for pid in descendants(process.pid)]

    def sample_window(self, start_at: float, end_at: float) -> None:
        """With --profile-service: sample the service's stacks from start_at to end_at (wall clock)."""
        if not self.profile:
            return

        def send(sig: int) -> None:
            for process in self.processes:
                process.send(sig)

        for at, sig in ((start_at, signal.SIGUSR1), (end_at, signal.SIGUSR2)):
            timer = threading.Timer(max(0.0, at - time.time()), send, (sig,))
            timer.daemon = True
            timer.start()

    def stop(self) -> None:
        for process in self.processes:
            _stop(process)
            with contextlib.suppress(ValueError):
                _children.remove(process)


def show_logs(workdir: Path, lines: int = 30) -> None:
    """The run failed: the end of each server log says why (the directory is removed after)."""
    for log in sorted(workdir.rglob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        print(f"--- last lines of {log.name}:", *tail, sep="\n", file=sys.stderr)


def watchdog(deadline_s: float, name: str = "bench") -> None:
    """Past deadline_s, every process started here is stopped and the run exits 2."""

    def fire() -> None:
        print(f"{name}: hard deadline of {deadline_s:.0f} s passed; stopping", file=sys.stderr, flush=True)
        stop_children()
        os._exit(2)

    timer = threading.Timer(deadline_s, fire)
    timer.daemon = True
    timer.start()
