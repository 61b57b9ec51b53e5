"""One server binary as a child process: started, waited on until it answers, stopped for sure.

The one way this project starts a server process: the embedded Valkey (store/embedded.py) and,
through tests.support, every Redis, Valkey, Cluster node, Sentinel and service process that the
tests and the benchmarks start. What "answers" means is the caller's: a PING, a /readyz.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_STARTUP_TIMEOUT_S = 15.0
DEFAULT_STOP_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.05


class ServerDidNotStart(RuntimeError):
    """The process exited before it answered, or did not answer in time (it is killed then)."""

    def __init__(self, name: str, returncode: int | None, timeout_s: float) -> None:
        self.returncode = returncode
        self.exited_by_itself = returncode is not None
        why = f"exited with {returncode}" if self.exited_by_itself else f"did not answer within {timeout_s} s"
        super().__init__(f"{name} {why}")


class ServerProcess:
    """argv as a child process. start() spawns it and waits until ready() holds; stop() and kill()
    end it and reap it whatever it does.

    ready: one attempt, True once the server answers; an exception from it is final (the process
    is killed and ServerDidNotStart raised from it). log: its stdout and stderr, appended (else
    discarded). stdin: bytes written to it, then closed (else it reads nothing). new_session: in
    a session of its own, so a Ctrl-C to the terminal does not reach it; its whole process group
    gets the signals then."""

    def __init__(
        self,
        argv: Sequence[str],
        ready: Callable[[], bool] | None = None,
        *,
        name: str | None = None,
        log: Path | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        new_session: bool = False,
        preexec_fn: Callable[[], None] | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        poll_s: float = POLL_INTERVAL_S,
    ) -> None:
        self.argv = [str(arg) for arg in argv]
        self.ready = ready
        self.name = name or Path(self.argv[0]).name
        self.log = log
        self.stdin = stdin
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.new_session = new_session
        self.preexec_fn = preexec_fn
        self.startup_timeout_s = startup_timeout_s
        self.poll_s = poll_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> ServerProcess:
        """Spawn it and wait until it answers."""
        return self.spawn().wait_ready()

    def spawn(self) -> ServerProcess:
        """Spawn it; wait_ready() waits for it to answer."""
        kwargs: dict[str, Any] = {}
        if self.preexec_fn is not None:
            kwargs["preexec_fn"] = self.preexec_fn
        with contextlib.ExitStack() as files:
            out: Any = files.enter_context(open(self.log, "ab")) if self.log else subprocess.DEVNULL
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE if self.stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if self.log else subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=self.new_session,
                **kwargs,
            )
        if self.stdin is not None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(self.stdin)
                self.process.stdin.close()
            except BrokenPipeError:
                pass  # it exited early; wait_ready() says so
        return self

    def wait_ready(self, timeout_s: float | None = None) -> ServerProcess:
        """Until ready() holds; on a timeout, an exception from ready() or an exit, the process is
        killed (if still running) and ServerDidNotStart raised."""
        timeout_s = self.startup_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.ready is None or self.ready():
                    return self
            except Exception as error:
                returncode = self.returncode
                self.kill()
                raise ServerDidNotStart(self.name, returncode, timeout_s) from error
            if self.returncode is not None:
                raise ServerDidNotStart(self.name, self.returncode, timeout_s)
            if time.monotonic() >= deadline:
                self.kill()
                raise ServerDidNotStart(self.name, None, timeout_s)
            time.sleep(self.poll_s)

    def send(self, sig: int) -> None:
        """sig to it (to its process group when it has a session of its own), if still running."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            if self.new_session:
                os.killpg(self.pid, sig)
            else:
                self.process.send_signal(sig)  # type: ignore[union-attr]

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.process is None:
            return
        self.send(signal.SIGKILL)
        self.process.wait()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> int | None:
        """sig, then SIGKILL if it has not exited after timeout_s; its exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.send(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode
