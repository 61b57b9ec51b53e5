"""The launcher never harms another instance: a second one on the same data dir, one whose port is
taken, and `--help` are refused or answered before any Valkey is started, adopted or stopped.
Real launchers in processes of their own, on free ports and data dirs of their own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from echomq_http.launcher import CannotStart, DataDirLock, check_port
from echomq_http.store.embedded import LOG_NAME, socket_path_for
from tests.support.launched import launched, launched_service, launcher_env
from tests.support.ports import free_port

# A refusal comes before anything starts: an interpreter's start and imports, well under this.
REFUSAL_TIMEOUT_S = 15.0
BIN = Path(sys.executable).parent
ENTRY_POINTS = {
    "emq-http": [str(BIN / "emq-http")],
    "python -m echomq_http": [sys.executable, "-m", "echomq_http"],
    "emq serve": [str(BIN / "emq"), "serve"],
}


def valkey_servers(data_dir: Path) -> list[int]:
    """The pids of the valkey-servers serving data_dir (their title names its socket), zombies too."""
    socket_path = str(socket_path_for(data_dir.resolve())).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # exited meanwhile
        if b"valkey-server" in command and socket_path in command:
            found.append(int(entry.name))
    return found


def run_launcher(command: list[str], **settings: str) -> subprocess.CompletedProcess[str]:
    """A launcher run to its end: a refusal, a help text."""
    return subprocess.run(
        command, env=launcher_env(**settings), capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S
    )


def refused(data_dir: Path, port: int) -> subprocess.CompletedProcess[str]:
    result = run_launcher(ENTRY_POINTS["python -m echomq_http"], EMQ_DATA_DIR=str(data_dir), PORT=str(port))
    assert result.returncode == 1, result.stderr
    return result


def answers(url: str) -> bool:
    """Ready (its Redis answers PING) and the queue API works."""
    enqueued = httpx.post(url + "/v1/queues/launcher/jobs", json={"payload": {}})
    return httpx.get(url + "/readyz").status_code == 200 and enqueued.status_code == 201


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir; whatever valkey-server is left serving it at the end is killed."""
    directory = tmp_path / "data"
    yield directory
    for pid in valkey_servers(directory):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.timeout(90)
def test_a_second_launcher_on_the_same_data_dir_is_refused_and_the_first_is_untouched(
    data_dir: Path, tmp_path: Path
) -> None:
    with launched(tmp_path / "first.log", EMQ_DATA_DIR=str(data_dir), stop_with=signal.SIGTERM) as first:
        first.wait_ready()
        port = int(first.url.rpartition(":")[2])
        [server] = valkey_servers(data_dir)
        # Its own port (a second `make serve`), and another one: the data dir alone decides.
        for second_port in (port, free_port()):
            message = refused(data_dir, second_port).stderr
            assert f"pid {first.process.pid} (on 127.0.0.1:{port}," in message
            assert "EMQ_DATA_DIR=" in message and "PORT=" in message
            assert valkey_servers(data_dir) == [server]
            assert answers(first.url)
        assert first.stop() == 0
    assert valkey_servers(data_dir) == []


@pytest.mark.timeout(60)
def test_a_taken_port_is_refused_before_a_valkey_is_started(data_dir: Path, taken_port: int) -> None:
    message = refused(data_dir, taken_port).stderr
    assert f"127.0.0.1:{taken_port} is already in use" in message and "PORT" in message
    assert valkey_servers(data_dir) == []
    assert not (data_dir / LOG_NAME).exists()  # no server was ever started there


@pytest.mark.timeout(90)
def test_a_taken_port_leaves_an_orphaned_valkey_alone_for_the_next_launcher_to_adopt(
    data_dir: Path, tmp_path: Path, taken_port: int
) -> None:
    with launched(tmp_path / "killed.log", EMQ_DATA_DIR=str(data_dir)) as killed:
        killed.wait_ready()
        [orphan] = valkey_servers(data_dir)
        killed.process.kill()  # SIGKILL: its Valkey lives on, ownerless
        killed.process.wait()

    refused(data_dir, taken_port)
    assert valkey_servers(data_dir) == [orphan]  # neither adopted and stopped, nor replaced

    with launched(tmp_path / "next.log", EMQ_DATA_DIR=str(data_dir), stop_with=signal.SIGTERM) as adopter:
        adopter.wait_ready()
        assert valkey_servers(data_dir) == [orphan]
        assert f"adopted running valkey-server pid {orphan}" in adopter.log()
        assert answers(adopter.url)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_help_on_every_entry_point_starts_nothing(entry_point: str, data_dir: Path) -> None:
    port = free_port()
    for flag in ("--help", "-h"):
        result = run_launcher([*ENTRY_POINTS[entry_point], flag], EMQ_DATA_DIR=str(data_dir), PORT=str(port))
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"usage: {entry_point} ")
        for setting in ("EMQ_REDIS_URL", "EMQ_DATA_DIR", "PORT", "EMQ_AUTH_TOKENS"):
            assert setting in result.stdout
    unknown = run_launcher([*ENTRY_POINTS[entry_point], "--no-such-option"], EMQ_DATA_DIR=str(data_dir))
    assert unknown.returncode == 2 and "unrecognized arguments: --no-such-option" in unknown.stderr
    assert not data_dir.exists()  # neither locked nor started


@pytest.mark.timeout(60)
def test_the_startup_line_names_the_api_the_dashboard_and_the_docs(redis_url: str, tmp_path: Path) -> None:
    with launched_service(redis_url, tmp_path / "service.log") as service:
        service.wait_ready()
        url = service.url
        assert f"EchoMQ HTTP on {url}: dashboard {url}/ui, API docs {url}/docs" in service.log()


def test_the_data_dir_lock_names_its_owner_and_is_free_once_released(tmp_path: Path) -> None:
    owner = DataDirLock(tmp_path / "data", "127.0.0.1", 8123)
    with owner, pytest.raises(CannotStart, match=f"pid {os.getpid()} \\(on 127.0.0.1:8123, since "):
        DataDirLock(tmp_path / "data", "127.0.0.1", 8124).acquire()
    with DataDirLock(tmp_path / "data", "127.0.0.1", 8124):
        pass


def test_check_port_names_the_address_and_the_setting(taken_port: int) -> None:
    with pytest.raises(CannotStart, match=f"127.0.0.1:{taken_port} is already in use.*set PORT"):
        check_port("127.0.0.1", taken_port)
    check_port("127.0.0.1", free_port())
