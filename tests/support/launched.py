"""`python -m echomq_http` in a process of its own, for what only the launcher does: its uvicorn
settings (the connection cap), refusing to start, and what it logs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass
class LaunchedService:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        """Everything it wrote so far (its stdout and stderr)."""
        return self.log_path.read_text()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/readyz").status_code == 200:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not become ready:\n{self.log()}")
            time.sleep(0.05)

    def exit_status(self) -> int:
        """Its exit status, once it has stopped by itself."""
        return self.process.wait(START_TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM, as an orchestrator stops it; its exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)


def launcher_env(**settings: str) -> dict[str, str]:
    """This environment without its EMQ_* settings, one worker process on loopback, and settings."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("EMQ_")}
    env.update(EMQ_WORKERS="1", HOST="127.0.0.1", **settings)
    return env


@contextlib.contextmanager
def launched(
    log_path: Path, port: int | None = None, stop_with: signal.Signals = signal.SIGKILL, **settings: str
) -> Iterator[LaunchedService]:
    """`python -m echomq_http` serving on port (a free one by default) with settings as more
    environment variables (EMQ_DATA_DIR="...", EMQ_MAX_CONNECTIONS="16"). Sent stop_with at the
    end if still running (SIGTERM: it stops the embedded Valkey it started), killed if it hangs."""
    port = free_port() if port is None else port
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "echomq_http"],
            env=launcher_env(PORT=str(port), **settings),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield LaunchedService(process, f"http://127.0.0.1:{port}", log_path)
    finally:
        if process.poll() is None:
            process.send_signal(stop_with)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def launched_service(redis_url: str, log_path: Path, **settings: str) -> Iterator[LaunchedService]:
    """One worker process serving on a free loopback port with Redis at redis_url."""
    with launched(log_path, EMQ_REDIS_URL=redis_url, **settings) as service:
        yield service
