"""The README's walk-through runs as written, top to bottom, against a fresh service as `make serve`
starts it (examples/walkthrough.sh runs the README's block), and answers no error it does not
announce. (The configuration table's checks are in tests/test_docs.py, with docs/configuration.md.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
WALKTHROUGH = ROOT / "examples" / "walkthrough.sh"
START_TIMEOUT_S = 30.0

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def walkthrough_block(readme: str) -> str:
    section = readme.split("\n## Walk-through\n", 1)[1]
    found = re.search(r"^```sh\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    assert found, "no ```sh block under ## Walk-through"
    return found[1]


@pytest.fixture(scope="module")
def fresh_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m echomq_http` as `make serve` runs it (its own embedded Valkey, an empty data
    dir), so the walk-through's queue `emails` starts from nothing."""
    data_dir = tmp_path_factory.mktemp("walkthrough")
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("EMQ_")}
    env.update(EMQ_DATA_DIR=str(data_dir / "data"), EMQ_WORKERS="1", HOST="127.0.0.1", PORT=str(port))
    log = (data_dir / "service.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "echomq_http"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((data_dir / "service.log").read_text())
            time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)  # it stops its Valkey on the way out
        try:
            process.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def ready(url: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(url + "/readyz").status_code == 200
    return False


def run_walkthrough(url: str, readme: Path = README) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(WALKTHROUGH), url, str(readme)], capture_output=True, text=True, timeout=60
    )


@needs_curl
def test_the_readme_walkthrough_runs_as_written_against_a_fresh_service(fresh_service: str) -> None:
    done = run_walkthrough(fresh_service)
    # Nothing on stderr: no unannounced error status, no failed python3 -c, no shell error.
    assert done.returncode == 0 and done.stderr == "", done.stderr + done.stdout
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {"id": answers[0]["id"], "state": "completed"} in answers  # the job leased, renewed, acked
    assert {"id": "order-7", "state": "cancelled", "cancel_requested": True} in answers
    calls = len(curl_commands(walkthrough_block(README.read_text())))
    assert done.stdout.splitlines()[-1] == f"# walk-through: {calls} calls"  # every one of them ran


@needs_curl
def test_the_walkthrough_fails_on_an_error_the_readme_does_not_announce(
    fresh_service: str, tmp_path: Path
) -> None:
    call = "curl -s localhost:8080/v1/queues/emails/jobs/no-such-job\n"
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Walk-through\n\n```sh\n{call}```\n")
    done = run_walkthrough(fresh_service, readme)
    assert done.returncode == 1
    assert "GET " in done.stderr and "/v1/queues/emails/jobs/no-such-job answered 404" in done.stderr
    readme.write_text(f"# x\n\n## Walk-through\n\n```sh\n{call}# 404 job_not_found: no such job\n```\n")
    assert run_walkthrough(fresh_service, readme).returncode == 0


def curl_commands(block: str) -> list[list[str]]:
    """Each curl command of the block (continuation lines joined), as its arguments."""
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        if (at := line.find("curl ")) >= 0 and not line.lstrip().startswith("#"):
            words = shlex.split(line[at:].split(" #", 1)[0].rstrip(")"))
            commands.append(words)
    return commands


def test_every_walkthrough_call_with_a_body_says_it_is_json() -> None:
    commands = curl_commands(walkthrough_block(README.read_text()))
    with_body = [words for words in commands if "-d" in words]
    assert len(with_body) >= 10
    for words in with_body:
        assert "content-type: application/json" in words, " ".join(words)
