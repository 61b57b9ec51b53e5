"""What the launcher claims and checks before it starts anything, and the line it prints then.

- ``DataDirLock``: an flock on ``launcher.lock`` in the data dir, held for the launcher's whole
  life, with the owner's pid, address and start time written in it. A second launcher on the
  same dir is refused at once with those details; the embedded Valkey of a dir is started,
  adopted or stopped only by the launcher holding its lock, so an orphaned server is adopted only
  once its owner is provably gone (the kernel drops an flock when its process dies, SIGKILL too).
- ``check_port``: a bind test of HOST:PORT, so a port already in use is refused before any
  Valkey is started or adopted (uvicorn would only find out after, and stop the server on exit).
- ``startup_line``: the API, dashboard and docs addresses.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path
from types import TracebackType

import msgspec

from echomq_http.api.docs import DOCS
from echomq_http.ui.pages import UI

LOCK_NAME = "launcher.lock"
DATA_DIR_MODE = 0o700  # as the embedded Valkey keeps it: its password lives there
LOCK_FILE_MODE = 0o600
MAX_PORT = 65535
MAX_RECORD_BYTES = 4096  # far more than an owner record takes
WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


class CannotStart(Exception):
    """The launcher must not start; the message says why and what to do instead."""


class Owner(msgspec.Struct, frozen=True):
    """What the launcher holding a data dir writes in its lock file."""

    pid: int
    host: str
    port: int
    started_at: str  # ISO 8601, local time with its offset

    @classmethod
    def parse(cls, record: bytes) -> Owner | None:
        """None when the file is empty (an owner that has just taken the lock) or unreadable."""
        try:
            return msgspec.json.decode(record, type=cls)
        except msgspec.MsgspecError:
            return None


def _data_dir_in_use(data_dir: Path, owner: Owner | None, port: int) -> CannotStart:
    who = (
        f"EchoMQ HTTP pid {owner.pid} (on {owner.host}:{owner.port}, since {owner.started_at})"
        if owner is not None
        else "another EchoMQ HTTP (starting or stopping)"
    )
    return CannotStart(
        f"the data dir {data_dir} is in use: {who} owns it and its embedded Valkey. "
        "Nothing was started or stopped. To run a second instance, give it a data dir and a port "
        f"of its own, e.g. EMQ_DATA_DIR=./.emq-data-2 PORT={_another_port(owner.port if owner else port)} "
        "make serve (or emq serve)"
    )


def _another_port(port: int) -> int:
    return port + 1 if port < MAX_PORT else port - 1


class DataDirLock:
    """The launcher's claim on a data dir: acquire() it before touching the embedded Valkey,
    release() it only after the server is stopped."""

    def __init__(self, data_dir: Path, host: str, port: int) -> None:
        self._data_dir = data_dir.resolve()
        self._owner = Owner(os.getpid(), host, port, time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self._data_dir / LOCK_NAME

    def acquire(self) -> None:
        """Take the lock without waiting; CannotStart naming the owner if another launcher has it."""
        self._data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        # Not truncated on open: until the lock is ours, the file holds the owner's details.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = Owner.parse(os.pread(fd, MAX_RECORD_BYTES, 0))
            os.close(fd)
            raise _data_dir_in_use(self._data_dir, owner, self._owner.port) from None
        except BaseException:
            os.close(fd)
            raise
        record = msgspec.json.encode(self._owner)
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)  # no stale details for whoever reads it next
        os.close(self._fd)  # drops the flock
        self._fd = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def check_port(host: str, port: int) -> None:
    """CannotStart, naming HOST:PORT and the settings, if nothing could listen there now.

    The bind test is as uvicorn binds (SO_REUSEADDR, so connections of a previous run still in
    TIME_WAIT do not count). A program taking the port between this test and uvicorn's bind still
    makes uvicorn fail; this check is for the usual case, caught before anything is started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            address = f"{host}:{port}"
            if error.errno == errno.EADDRINUSE:
                raise CannotStart(
                    f"{address} is already in use (another EchoMQ HTTP, or another program, listens "
                    "there). Nothing was started. Stop it, or set PORT (and HOST) to listen "
                    f"elsewhere, e.g. PORT={_another_port(port)}"
                ) from None
            reason = error.strerror or str(error)
            raise CannotStart(f"cannot listen on {address}: {reason}. Check HOST and PORT") from None


def base_url(host: str, port: int) -> str:
    """An address a browser on this machine can open: a wildcard host becomes loopback."""
    host = WILDCARD_HOSTS.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def startup_line(host: str, port: int) -> str:
    url = base_url(host, port)
    return f"EchoMQ HTTP on {url}: dashboard {url}{UI}, API docs {url}{DOCS}"
