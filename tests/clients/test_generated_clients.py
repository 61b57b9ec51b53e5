"""Clients generated from openapi/openapi.json work against the real service: Python from
openapi-python-client, TypeScript from openapi-typescript + openapi-fetch (the Node worker of
examples/node-worker)."""

from __future__ import annotations

import importlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openapi_python_client  # a dev dependency: missing means a broken install, not a skip
import pytest

from echomq import Client
from echomq_http.config import Settings
from tests.clients.support import ROOT, subprocess_env, wait_until
from tests.support.service import running_service

DOCUMENT = ROOT / "openapi" / "openapi.json"
NODE_WORKER = ROOT / "examples" / "node-worker"
NPM_CACHE = ROOT / ".cache" / "npm"  # .cache/ is git-ignored, like the example's node_modules/
ADMIN = "Adm1n-secret"


@pytest.fixture(scope="module")
def auth_url(redis_url: str) -> Iterator[str]:
    entries = (f"admin:{ADMIN}",)
    with running_service(Settings(redis_url=redis_url, sweep_interval_ms=100, auth_entries=entries)) as url:
        yield url


def test_openapi_python_client_runs_a_job_cycle(
    tmp_path: Path, auth_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("post_hooks: []\n")  # no ruff run over the output: we only import it
    generator = [sys.executable, "-m", openapi_python_client.__name__]  # the one imported above
    output = tmp_path / "emq_generated"
    arguments = [
        "generate",
        "--path",
        DOCUMENT,
        "--meta",
        "none",
        "--output-path",
        output,
        "--config",
        config,
    ]
    generated = subprocess.run(
        [*generator, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "Warning" not in generated.stdout + generated.stderr, generated.stdout  # nothing skipped

    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        package = importlib.import_module("emq_generated")
        models = importlib.import_module("emq_generated.models")
        # One package per tag of the document (echomq_http.api.openapi.TAGS), a module per operation in it.
        jobs = importlib.import_module("emq_generated.api.jobs")
        working = importlib.import_module("emq_generated.api.working")
        for module in ("jobs.enqueue", "jobs.get_job", "working.lease", "working.heartbeat", "working.ack"):
            importlib.import_module(f"emq_generated.api.{module}")
        for tag in ("inspect", "operate", "service"):
            importlib.import_module(f"emq_generated.api.{tag}")
        client = package.AuthenticatedClient(base_url=auth_url, token=ADMIN)
        with client:
            created = jobs.enqueue.sync(
                queue, client=client, body=models.EnqueueRequest(payload={"n": 7}, id="gen-1", max_attempts=2)
            )
            assert isinstance(created, models.EnqueueResponse)
            assert (created.id, created.state.value, created.created) == ("gen-1", "waiting", True)

            leased = working.lease.sync(
                queue, client=client, body=models.LeaseRequest(worker="gen-w", wait_ms=1000)
            )
            assert isinstance(leased, models.LeaseResponse)
            (job,) = leased.jobs
            assert (job.id, job.payload, job.attempt, job.max_attempts) == ("gen-1", {"n": 7}, 1, 2)

            beat = working.heartbeat.sync(
                queue,
                "gen-1",
                client=client,
                body=models.HeartbeatRequest(lease_id=job.lease_id, lease_ms=60_000),
            )
            assert isinstance(beat, models.HeartbeatResponse) and beat.lease_expires_at > job.lease_expires_at

            wrong = working.heartbeat.sync_detailed(
                queue, "gen-1", client=client, body=models.HeartbeatRequest(lease_id="not-it")
            )
            assert wrong.status_code == 409
            assert isinstance(wrong.parsed, models.Problem) and wrong.parsed.code == "lease_lost"

            acked = working.ack.sync(
                queue,
                "gen-1",
                client=client,
                body=models.AckRequest(lease_id=job.lease_id, result={"sum": 7}),
            )
            assert isinstance(acked, models.AckResponse) and acked.state.value == "completed"

            stored = jobs.get_job.sync(queue, "gen-1", client=client)
            assert isinstance(stored, models.JobView)
            assert (stored.state.value, stored.result, stored.worker) == ("completed", {"sum": 7}, None)

        anonymous = package.AuthenticatedClient(base_url=auth_url, token="wrong")
        with anonymous:
            refused = jobs.get_job.sync_detailed(queue, "gen-1", client=anonymous)
        assert refused.status_code == 401 and refused.parsed.code == "unauthorized"
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "emq_generated"]:
            del sys.modules[name]


def npm(*args: str) -> None:
    done = subprocess.run(
        ["npm", *args, "--cache", str(NPM_CACHE), "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=NODE_WORKER,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("npm") is None, reason="needs node (>= 20) and npm")
def test_node_worker_on_the_generated_typescript_client(service_url: str, sdk: Client, queue: str) -> None:
    installed = NODE_WORKER / "node_modules" / ".package-lock.json"
    lock = NODE_WORKER / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        npm("ci")  # exactly the locked versions (node_modules/ is git-ignored)
    npm("run", "build")  # generates src/schema.d.ts from the document, then type-checks the worker

    sdk.enqueue_many(
        queue,
        [{"payload": {"text": f"hello {n}"}, "id": f"t{n}"} for n in range(5)]
        + [
            {"payload": {"nope": 1}, "id": "bad"},
            {"payload": {"text": "slow", "delay_ms": 60_000}, "id": "slow"},
        ],
    )
    worker = subprocess.Popen(
        ["node", "dist/worker.js", queue, "--concurrency", "3", "--lease-ms", "1000", "--wait-ms", "500"],
        cwd=NODE_WORKER,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(EMQ_URL=service_url),
    )
    try:
        wait_until(lambda: sdk.queue(queue).counts.completed == 5 and sdk.queue(queue).counts.failed == 1)
        # The slow job outlives its 1 s lease by far: the worker's heartbeats keep it.
        wait_until(lambda: sdk.get_job(queue, "slow").state == "active")
        for _ in range(3):
            slow = sdk.get_job(queue, "slow")
            assert (slow.state, slow.attempt) == ("active", 1)
            time.sleep(0.7)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [event["event"] for event in events][-2:] == ["released", "stopped"]
    assert sdk.get_job(queue, "t3").result["shout"] == "HELLO 3"
    bad = sdk.get_job(queue, "bad")
    assert bad.state == "failed" and bad.error.startswith("Permanent: payload.text must be a string")
    slow = sdk.get_job(queue, "slow")
    assert (slow.state, slow.attempt) == ("waiting", 1)
