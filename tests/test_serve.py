"""`python -m echomq_http` as `make serve` runs it: the embedded Valkey, persistence across restarts,
a clean stop on SIGTERM, and adopting the server left behind by a SIGKILLed service."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from echomq_http.store.embedded import PID_NAME
from tests.support.ports import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class ServiceProcess:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        env.update(EMQ_DATA_DIR=str(self.data_dir), PORT=str(self.port), HOST="127.0.0.1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "echomq_http"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(self.url + "/readyz").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the service did not become ready")
            time.sleep(0.1)

    def signal(self, signum: int) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return self.process.wait(STOP_TIMEOUT_S)


def valkey_pid(data_dir: Path) -> int | None:
    pidfile = data_dir / PID_NAME
    return int(pidfile.read_text()) if pidfile.exists() else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "data"
    yield directory
    pid = valkey_pid(directory)
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_jobs_survive_restarts_and_an_orphaned_server_is_adopted(data_dir: Path) -> None:
    service = ServiceProcess(data_dir).start()
    created = httpx.post(service.url + "/v1/queues/q/jobs", json={"payload": {"n": 1}, "id": "keep"})
    assert created.status_code == 201
    server_pid = valkey_pid(data_dir)
    assert server_pid is not None and alive(server_pid)

    # SIGTERM: the service stops, and stops the server it started.
    assert service.signal(signal.SIGTERM) == 0
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive(server_pid):
        assert time.monotonic() < deadline, "the embedded server outlived the service"
        time.sleep(0.05)

    # Restart: the job is still there (AOF).
    service = ServiceProcess(data_dir).start()
    job = httpx.get(service.url + "/v1/queues/q/jobs/keep")
    assert job.status_code == 200 and job.json()["payload"] == {"n": 1}
    orphan_pid = valkey_pid(data_dir)

    # SIGKILL leaves the server running; the next start adopts it instead of starting a second.
    service.signal(signal.SIGKILL)
    assert orphan_pid is not None and alive(orphan_pid)
    service = ServiceProcess(data_dir).start()
    assert valkey_pid(data_dir) == orphan_pid
    assert httpx.get(service.url + "/v1/queues/q/jobs/keep").json()["state"] == "waiting"
    assert service.signal(signal.SIGINT) == 0
