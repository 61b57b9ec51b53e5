"""`python -m echomq_http` in a process of its own, for what only the launcher does: its uvicorn
settings (the connection cap), refusing to start, and what it logs."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from echomq_http.store.server_process import ServerDidNotStart, ServerProcess
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
READY_POLL_S = 0.05
STOP_TIMEOUT_S = 30.0


def ready(url: str) -> bool:
    """One GET of the service's /readyz: True once it answers 200."""
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(url + "/readyz").status_code == 200
    return False


def service_server(
    argv: list[str],
    url: str,
    *,
    env: dict[str, str],
    log: Path | None = None,
    cwd: Path | None = None,
    new_session: bool = False,
    startup_timeout_s: float = START_TIMEOUT_S,
) -> ServerProcess:
    """The service (argv, serving at url) as a server process: ready once its /readyz says 200."""
    return ServerProcess(
        argv,
        functools.partial(ready, url),
        name=f"the service on {url}",
        log=log,
        env=env,
        cwd=cwd,
        new_session=new_session,
        startup_timeout_s=startup_timeout_s,
        poll_s=READY_POLL_S,
    )


@dataclass
class LaunchedService:
    server: ServerProcess
    url: str
    log_path: Path

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self.server.process is not None
        return self.server.process

    def log(self) -> str:
        """Everything it wrote so far (its stdout and stderr)."""
        return self.log_path.read_text()

    def wait_ready(self) -> None:
        try:
            self.server.wait_ready()
        except ServerDidNotStart:
            raise RuntimeError(f"the service did not become ready:\n{self.log()}") from None

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
    url = f"http://127.0.0.1:{port}"
    log_path.write_bytes(b"")
    env = launcher_env(PORT=str(port), **settings)
    server = service_server([sys.executable, "-m", "echomq_http"], url, env=env, log=log_path).spawn()
    try:
        yield LaunchedService(server, url, log_path)
    finally:
        server.stop(stop_with, STOP_TIMEOUT_S)


@contextlib.contextmanager
def launched_service(redis_url: str, log_path: Path, **settings: str) -> Iterator[LaunchedService]:
    """One worker process serving on a free loopback port with Redis at redis_url."""
    with launched(log_path, EMQ_REDIS_URL=redis_url, **settings) as service:
        yield service


@functools.cache
def _alias_dir(folder: Path) -> str:
    """One directory per checkout, made once however often its replicas start, holding
    ``echomq_http`` as a symlink to the checkout's service/ folder."""
    path = tempfile.mkdtemp(prefix="emq-checkout-")
    (Path(path) / "echomq_http").symlink_to(folder, target_is_directory=True)
    return path


def service_process(service_dir: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The argv (after the interpreter) and env that run the service of a checkout.

    The folder is service/; it installs as ``echomq_http``, the name this repository's editable
    install also claims. Another checkout's folder is given that name by a symlink in a
    directory of its own, first on PYTHONPATH (before the editable install's finder), so uvicorn's
    worker processes import it too. Checkouts from before the rename run as ``service``; since the
    package moved into service/echomq_http, service/ itself goes on PYTHONPATH."""
    if service_dir == REPO:
        return ["-m", "echomq_http"], env
    folder = service_dir / "service"
    if (folder / "echomq_http" / "__main__.py").exists():
        module, path = "echomq_http", str(folder)
    elif "echomq_http" not in (folder / "__main__.py").read_text():
        module, path = "service", str(service_dir)
    else:
        module, path = "echomq_http", _alias_dir(folder)
    return ["-m", module], env | {"PYTHONPATH": os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))}


def descendants(pid: int) -> list[int]:
    """pid and every process below it (uvicorn's worker processes, for EMQ_WORKERS)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found
