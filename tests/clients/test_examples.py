"""The worker examples in examples/ run as documented against a real service: the Python SDK
worker and `emq work` with a shell script (the Node worker: test_generated_clients.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

from echomq import Client
from tests.clients.support import ROOT, stop_work, subprocess_env, wait_until

EXAMPLES = ROOT / "examples"
WORDCOUNT = EXAMPLES / "emq-work-wordcount.sh"
FAST = ("--lease-ms", "1000", "--wait-ms", "500")  # short leases (heartbeats matter), quick stop


def test_python_sdk_worker_example(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(
        queue,
        [{"payload": {"numbers": [n, n, 1]}, "id": f"s{n}"} for n in range(3)]
        + [
            {"payload": {"numbers": "x"}, "id": "bad"},
            {"payload": {"numbers": [1], "sleep_s": 60}, "id": "slow"},
        ],
    )
    worker = subprocess.Popen(
        [sys.executable, EXAMPLES / "python_worker.py", queue, *FAST, "--concurrency", "3", "--grace-s", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(EMQ_URL=service_url),
    )
    try:
        wait_until(lambda: sdk.queue(queue).counts.completed == 3 and sdk.queue(queue).counts.failed == 1)
        wait_until(lambda: sdk.get_job(queue, "slow").state == "active")
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert out.splitlines()[-1] == "stopped: 3 acked, 1 failed, 1 released"
    assert [sdk.get_job(queue, f"s{n}").result for n in range(3)] == [{"sum": 1}, {"sum": 3}, {"sum": 5}]
    bad = sdk.get_job(queue, "bad")
    assert bad.state == "failed" and bad.error == "the payload needs a list of numbers under 'numbers'"
    # The example configures logging: its Worker's start, failed jobs and stop on stderr.
    assert f"working on queue {queue} at {service_url} (concurrency 3)" in err
    assert (
        "job bad: attempt 1 failed: the payload needs a list of numbers under 'numbers' (now failed)" in err
    )
    assert "stopped (" in err
    slow = sdk.get_job(queue, "slow")
    assert (slow.state, slow.attempt) == ("waiting", 1)


def test_emq_work_with_a_shell_script(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, "the quick brown fox", id="fox")
    sdk.enqueue(queue, "jumps over the lazy dog", id="dog")
    sdk.enqueue(queue, {"not": "a string"}, id="bad", max_attempts=1)
    worker = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "work", queue, *FAST, "-c", "2", "--json", "--", WORDCOUNT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=subprocess_env(EMQ_URL=service_url),
    )
    try:
        wait_until(lambda: sdk.queue(queue).counts.completed == 2 and sdk.queue(queue).counts.failed == 1)
    finally:
        events, err = stop_work(worker)
    # `emq work` logs its Worker at INFO on stderr: the start with its URL, failures, the stop.
    assert f"emq work: worker {events[0]['worker']}: working on queue {queue} at {service_url}" in err
    assert "emq work: job bad: attempt 1 failed: exit status 65 (now failed)" in err
    assert events[-1] == {
        "event": "stopped",
        "done": 2,
        "failed": 1,
        "lost": 0,
        "released": 0,
    }
    fox = sdk.get_job(queue, "fox").result
    assert fox == {"words": 4, "job": "fox", "attempt": 1}
    assert sdk.get_job(queue, "dog").result["words"] == 5
    bad = sdk.get_job(queue, "bad")
    assert bad.error.startswith("exit status 65\n")
    assert bad.error.endswith('the payload must be a JSON string, got: {"not": "a string"}')
