"""Tests for echomq_http.store.embedded against real valkey-server processes (no mocks)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq_http.store.embedded import (
    PID_NAME,
    SECRET_NAME,
    SHORT_SOCKET_DIR,
    EmbeddedValkey,
    socket_path_for,
)

AOF_FSYNC_WAIT_S = 1.5  # appendfsync everysec: after this the write is on disk
GONE_TIMEOUT_S = 10.0

Factory = Callable[..., EmbeddedValkey]


def wait_gone(pid: int, timeout_s: float = GONE_TIMEOUT_S) -> bool:
    """True once pid has exited (reaping it if it is a child of this test process)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


@pytest.fixture
def make_server() -> Iterator[Factory]:
    """Builds EmbeddedValkey objects and stops (or kills) whatever they started."""
    made: list[EmbeddedValkey] = []

    def make(data_dir: Path, **kwargs: object) -> EmbeddedValkey:
        server = EmbeddedValkey(data_dir, **kwargs)  # type: ignore[arg-type]
        made.append(server)
        return server

    yield make
    for server in reversed(made):
        pid = server.pid
        try:
            server.stop()
        except Exception:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_gone(pid)


def uses_socket_fallback(data_dir: Path) -> bool:
    return socket_path_for(data_dir.resolve()).parent == SHORT_SOCKET_DIR


@pytest.fixture(params=["short", "long"])
def data_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A data dir whose socket fits in sun_path, and one that needs the /tmp fallback."""
    if request.param == "long":
        path = tmp_path / ("d" * 120)
        assert uses_socket_fallback(path)
        yield path
        return
    # Not under tmp_path, whose length depends on the machine: as short a path as /tmp allows.
    short = Path(tempfile.mkdtemp(prefix="emq-", dir=SHORT_SOCKET_DIR))
    try:
        assert not uses_socket_fallback(short / "data")
        yield short / "data"
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.timeout(60)
def test_data_survives_restart(make_server: Factory, data_dir: Path) -> None:
    first = make_server(data_dir)
    url = first.start()
    assert url.startswith("unix:///") and "?password=" in url
    redis.Redis.from_url(url).set("key", "value")
    pid = first.pid
    assert pid is not None
    first.stop()
    assert first.pid is None
    assert wait_gone(pid)
    first.stop()  # idempotent

    second = make_server(data_dir)
    client = redis.Redis.from_url(second.start())
    assert client.get("key") == b"value"
    assert second.pid != pid
    second.stop()


@pytest.mark.timeout(60)
def test_password_required(make_server: Factory, tmp_path: Path) -> None:
    server = make_server(tmp_path / "data")
    url = server.start()
    socket = redis.Redis.from_url(url).connection_pool.connection_kwargs["path"]
    no_retry = Retry(NoBackoff(), 0)  # redis-py 8 retries auth failures with backoff by default
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(unix_socket_path=socket, retry=no_retry).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(unix_socket_path=socket, password="wrong", retry=no_retry).ping()
    assert redis.Redis.from_url(url).ping()
    assert stat.S_IMODE((tmp_path / "data" / SECRET_NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    server.stop()
    # The secret is generated once and reused.
    assert make_server(tmp_path / "data").start() == url


@pytest.mark.timeout(60)
def test_adopts_orphaned_server(make_server: Factory, tmp_path: Path) -> None:
    orphaned = make_server(tmp_path / "data")
    orphaned.start()  # never stopped: its launcher "was SIGKILLed"
    redis.Redis.from_url(orphaned.url).set("key", "value")

    adopter = make_server(tmp_path / "data")
    client = redis.Redis.from_url(adopter.start())
    assert adopter.pid == orphaned.pid
    assert client.get("key") == b"value"
    pid = adopter.pid
    assert pid is not None
    adopter.stop()
    assert wait_gone(pid)


@pytest.mark.timeout(60)
def test_restarts_after_server_killed(make_server: Factory, tmp_path: Path) -> None:
    crashed = make_server(tmp_path / "data")
    redis.Redis.from_url(crashed.start()).set("key", "value")
    time.sleep(AOF_FSYNC_WAIT_S)
    pid = crashed.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    assert (tmp_path / "data" / PID_NAME).exists()  # stale pidfile left behind

    fresh = make_server(tmp_path / "data")
    client = redis.Redis.from_url(fresh.start())
    assert fresh.pid not in (None, pid)
    assert client.get("key") == b"value"
    fresh.stop()


@pytest.mark.timeout(60)
def test_hung_server_is_killed_and_replaced(make_server: Factory, tmp_path: Path) -> None:
    hung = make_server(tmp_path / "data")
    redis.Redis.from_url(hung.start()).set("key", "value")
    time.sleep(AOF_FSYNC_WAIT_S)
    pid = hung.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # alive, ours, but never answers PING

    fresh = make_server(tmp_path / "data", startup_timeout_s=2.0)
    client = redis.Redis.from_url(fresh.start())
    assert wait_gone(pid)
    assert fresh.pid not in (None, pid)
    assert client.get("key") == b"value"
    fresh.stop()


@pytest.mark.timeout(60)
def test_stale_pidfile_naming_unrelated_process(make_server: Factory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / PID_NAME).write_text(f"{os.getpid()}\n")  # pid reuse: a live non-valkey process

    server = make_server(data)
    assert redis.Redis.from_url(server.start()).ping()
    assert server.pid not in (None, os.getpid())
    os.kill(os.getpid(), 0)  # we are still alive
    server.stop()


@pytest.mark.timeout(60)
def test_startup_failure_raises(make_server: Factory, tmp_path: Path) -> None:
    server = make_server(tmp_path / "data", binary=Path("/bin/false"), startup_timeout_s=2.0)
    with pytest.raises(RuntimeError, match="did not become ready"):
        server.start()
    assert server.pid is None
