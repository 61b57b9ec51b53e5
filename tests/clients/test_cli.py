"""The `emq` command line (echomq.cli, the client package's), in this process or as a process of its
own, against a real service."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from echomq import Client, cli
from echomq_http.config import Settings
from tests.clients.support import ROOT, stop_work, subprocess_env, wait_until
from tests.support.ports import free_port
from tests.support.service import running_service

EMQ = [sys.executable, "-m", "echomq.cli"]


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


class Keyboard(io.StringIO):
    """Standard input that is a terminal: what the operator types at `emq`'s questions."""

    def isatty(self) -> bool:
        return True


def emq(*args: str, url: str | None = None, check: bool = True, typed: str | None = None, **env: str) -> Ran:
    """`emq ARGS` run in this process (the one-shot commands; `work` and `serve` run as processes
    of their own below). ``url`` and ``env`` are the environment it sees; ``typed``, when given,
    is what is typed on its terminal (else stdin is no terminal, and empty)."""
    out, err = io.StringIO(), io.StringIO()
    stdin = Keyboard(typed) if typed is not None else io.StringIO()
    changes = {"EMQ_URL": url, "EMQ_TOKEN": None, **env}
    saved = {key: os.environ.get(key) for key in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), swapped_stdin(stdin):
            try:
                code = cli.main(list(args))
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    ran = Ran(code, out.getvalue(), err.getvalue())
    if check:
        assert ran.returncode == 0, ran.stderr
    return ran


@contextlib.contextmanager
def swapped_stdin(stdin: io.StringIO) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stdin
    try:
        yield
    finally:
        sys.stdin = saved


def emq_json(*args: str, url: str) -> object:
    return json.loads(emq(*args, "--json", url=url).stdout)


def test_enqueue_stats_pause_resume(service_url: str, queue: str) -> None:
    one = emq_json(
        "enqueue", queue, '{"to": "ada"}', "--priority", "7", "--max-attempts", "2", url=service_url
    )
    assert one["created"] is True and one["state"] == "waiting"
    created = emq("enqueue", queue, "1", "--id", "x", "--url", service_url).stdout.strip()
    assert created == f"enqueued job x into {queue} (waiting)"
    assert "already exists" in emq("enqueue", queue, "2", "--id", "x", url=service_url).stdout
    assert emq_json("enqueue", queue, "[1, 2]", "--delay-ms", "60000", url=service_url)["state"] == "delayed"

    stats = emq_json("stats", queue, url=service_url)
    assert stats["counts"] == {
        "waiting": 2,
        "delayed": 1,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    table = emq("stats", url=service_url).stdout.splitlines()
    assert table[0].split() == [
        "QUEUE",
        "PAUSED",
        "WAITING",
        "DELAYED",
        "ACTIVE",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ]
    assert [queue, "no", "2", "1", "0", "0", "0", "0"] in [line.split() for line in table]
    only = emq_json("stats", "--prefix", queue, url=service_url)
    assert [view["name"] for view in only["queues"]] == [queue]  # type: ignore[index]
    assert emq("pause", queue, url=service_url).stdout.strip() == f"queue {queue} paused"
    assert emq_json("stats", queue, url=service_url)["paused"] is True
    assert emq_json("resume", queue, url=service_url) == {"name": queue, "paused": False}

    with Client(service_url) as client:
        stored = client.get_job(queue, one["id"])
    assert (stored.payload, stored.priority, stored.max_attempts) == ({"to": "ada"}, 7, 2)


def test_delete_queue(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": n} for n in range(3)])
    sdk.lease(queue, "w1")
    refused = emq("delete-queue", queue, "--yes", url=service_url, check=False)
    assert refused.returncode == 1 and "job_active" in refused.stderr and "--force" in refused.stderr
    deleted = emq("delete-queue", queue, "--force", "--yes", url=service_url)
    assert deleted.stdout.strip() == f"queue {queue} deleted"
    sdk.enqueue(queue, 1)
    assert emq_json("delete-queue", queue, "-y", url=service_url) == {"deleted": queue}
    gone = emq("stats", queue, url=service_url, check=False)
    assert gone.returncode == 1 and f"no queue {queue}" in gone.stderr


def test_enqueue_file_in_batches_with_a_progress_bar(service_url: str, queue: str, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"n": n}) + "\n" + ("\n" if n == 5 else "") for n in range(2500)))
    done = emq("enqueue", queue, "--file", str(jobs), "--progress", "--max-attempts", "5", url=service_url)
    assert done.stdout.startswith(f"enqueued 2500 job(s) into {queue}")
    bar = done.stderr.splitlines()  # (text mode reads each \r as a line end)
    assert [frame.split("]")[1].split()[0] for frame in bar if "]" in frame] == [
        "1000/2500",
        "2000/2500",
        "2500/2500",
    ]
    with Client(service_url) as client:
        assert client.queue(queue).counts.waiting == 2500
        (leased,) = client.lease(queue, "w1")
        assert leased.payload == {"n": 0} and leased.max_attempts == 5


def test_enqueue_file_stops_at_a_bad_line_before_sending(
    service_url: str, queue: str, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"n": 1}\n{"n": 2}\n{"n": \n')
    done = emq("enqueue", queue, "--file", str(jobs), url=service_url, check=False)
    assert done.returncode == 2 and "line 3 is not JSON" in done.stderr
    untouched = emq("stats", queue, url=service_url, check=False)  # not even made
    assert untouched.returncode == 1 and f"no queue {queue}" in untouched.stderr


def test_enqueue_requests_from_stdin_is_idempotent_by_id(service_url: str, queue: str) -> None:
    lines = "".join(json.dumps({"payload": n, "id": f"job-{n}", "priority": n % 3}) + "\n" for n in range(30))
    run = [*EMQ, "enqueue", queue, "--file", "-", "--requests", "--json", "--batch-size", "7"]
    for expected_new in (30, 0):
        done = subprocess.run(
            run,
            input=lines,
            capture_output=True,
            text=True,
            env=subprocess_env(EMQ_URL=service_url),
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary == {
            "queue": queue,
            "enqueued": 30,
            "created": expected_new,
            "existing": 30 - expected_new,
        }
        assert done.stderr == ""  # no progress bar when stderr is not a terminal


def test_ledger_failed_and_retry(service_url: str, queue: str) -> None:
    with Client(service_url) as client:
        client.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(3)])
        held = client.lease(queue, "worker-a", max_jobs=2, lease_ms=60_000)
        for job in held:
            client.fail(
                queue, job.id, job.lease_id, f"boom {job.id}\nTraceback...\nValueError: {job.id}", retry=False
            )
        (active,) = client.lease(queue, "worker-b", lease_ms=60_000)

    ledger = emq("ledger", queue, url=service_url).stdout.splitlines()
    assert ledger[0].split() == ["JOB", "WORKER", "ATTEMPT", "HELD", "FOR", "LEASE", "LEFT"]
    row = ledger[1].split()
    assert row[:3] == [active.id, "worker-b", "1"] and row[4].endswith("s")
    assert 50 <= float(row[4].rstrip("s")) <= 60
    assert ledger[-1] == "1 job(s) in flight, held by 1 worker(s): worker-b (1)"
    assert [entry["id"] for entry in emq_json("ledger", queue, url=service_url)["jobs"]] == [active.id]

    failed = emq("failed", queue, url=service_url).stdout.splitlines()
    assert failed[0].startswith(f"2 dead-lettered job(s) in {queue}")
    assert any(f"boom {held[0].id}: ValueError: {held[0].id}" in line for line in failed)
    assert emq_json("failed", queue, url=service_url)["total"] == 2

    partly = emq("retry", queue, f"{held[0].id},nope", active.id, url=service_url, check=False)
    assert partly.returncode == 1 and partly.stdout.strip() == f"retried 1 job(s): {held[0].id}"
    assert partly.stderr.strip() == (
        f"emq: not retried: nope (no such job), {active.id} (active, not dead-lettered)"
    )
    assert emq_json("retry", queue, "--yes", url=service_url) == {"retried": [held[1].id]}
    assert emq("retry", queue, url=service_url).stdout.strip() == "nothing to retry"
    shown = emq("job", queue, held[0].id, url=service_url).stdout
    assert "state:        waiting" in shown


def test_workers_and_quiet(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="a")
    assert emq("workers", queue, url=service_url).stdout.startswith("no workers in")
    sdk.lease(queue, "holder")
    sdk.session_heartbeat(queue, "w-1", ttl_ms=60_000, info={"host": "h1"})
    text = emq("workers", queue, url=service_url).stdout
    lines = text.splitlines()
    assert lines[0].split() == ["WORKER", "JOBS", "SESSION", "UP", "FOR", "LAPSES", "IN", "INFO"]
    assert lines[1].split()[:3] == ["holder", "1", "-"]
    assert lines[2].split()[:3] == ["w-1", "0", "running"] and '{"host":"h1"}' in lines[2]
    listed = emq_json("workers", queue, url=service_url)
    assert [entry["worker"] for entry in listed["workers"]] == ["holder", "w-1"]  # type: ignore[index]

    assert emq("quiet", queue, "w-1", url=service_url).stdout.strip() == (
        f"worker w-1 is quiet: it leases nothing more in {queue}"
    )
    assert emq_json("quiet", queue, "w-1", url=service_url) == {"worker": "w-1", "state": "quiet"}
    assert sdk.session_heartbeat(queue, "w-1").state == "quiet"
    none = emq("quiet", queue, "nobody", url=service_url, check=False)
    assert none.returncode == 1 and "409 no_session" in none.stderr
    assert sdk.end_session(queue, "holder") == ["a"]


def test_jobs_cancel_and_wait(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}", "name": "mail"} for n in range(5)])
    listed = emq_json("jobs", queue, "--state", "waiting", "--limit", "3", url=service_url)
    assert [job["id"] for job in listed["jobs"]] == ["j0", "j1", "j2"] and listed["next_cursor"]
    shown = emq("jobs", queue, "--state", "waiting", "--limit", "3", url=service_url).stdout.splitlines()
    assert shown[0].split() == ["JOB", "NAME", "ATTEMPTS", "UPDATED"]
    assert shown[1].split()[:3] == ["j0", "mail", "0/3"]
    assert shown[-1].startswith(f"more: emq jobs {queue} --state waiting --cursor ")
    rest = emq_json("jobs", queue, "--state", "waiting", "--cursor", listed["next_cursor"], url=service_url)
    assert [job["id"] for job in rest["jobs"]] == ["j3", "j4"] and rest["next_cursor"] is None

    assert (
        emq("cancel", queue, "j0", "--reason", "typo", url=service_url).stdout.strip() == "job j0 cancelled"
    )
    assert emq("cancel", queue, "j0", url=service_url).stdout.strip() == "job j0 cancelled"  # idempotent
    (held,) = sdk.lease(queue, "w1")
    assert "cancellation requested" in emq("cancel", queue, held.id, url=service_url).stdout
    cancelled = emq("jobs", queue, "--state", "cancelled", url=service_url).stdout
    assert "j0" in cancelled and "typo" in cancelled

    waited = emq("wait", queue, "j0", url=service_url, check=False)
    assert (waited.returncode, waited.stdout.strip()) == (1, "job j0 cancelled: typo")
    pending = emq("wait", queue, "j2", "--timeout", "0.2", url=service_url, check=False)
    assert (pending.returncode, pending.stdout.strip()) == (3, "job j2 still waiting after 0.2 s")
    (next_job,) = sdk.lease(queue, "w1")
    sdk.ack(queue, next_job.id, next_job.lease_id, {"ok": 1})
    done = emq("wait", queue, next_job.id, url=service_url)
    assert done.stdout.strip() == f'job {next_job.id} completed: {{"ok": 1}}'


def test_delayed_jobs_show_when_they_run_and_promote_runs_one_now(
    service_url: str, sdk: Client, queue: str
) -> None:
    sdk.enqueue(queue, 1, id="later", delay_ms=3 * 3_600_000)
    sdk.enqueue(queue, 2, id="flaky")
    (held,) = sdk.lease(queue, "w1")
    sdk.fail(queue, held.id, held.lease_id, "busy", retry_after_ms=5 * 3_600_000)
    shown = emq("jobs", queue, "--state", "delayed", url=service_url).stdout.splitlines()
    assert shown[0].split() == ["JOB", "NAME", "ATTEMPTS", "UPDATED", "RUNS", "AT", "IN", "WHY"]
    rows = {line.split()[0]: line.split() for line in shown[1:]}
    run_at = sdk.get_job(queue, "later").run_at
    assert run_at is not None
    due = datetime.fromtimestamp(run_at / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    # the due time, then its zone, how long until then and why
    assert rows["later"][-5:-3] == due.split() and rows["later"][-2:] == ["3.0h", "delay"]
    assert rows["flaky"][-2:] == ["5.0h", "retry"]

    assert emq("promote", queue, "later", url=service_url).stdout.strip() == "job later is waiting now"
    assert sdk.get_job(queue, "later").state == "waiting"
    assert emq_json("promote", queue, "flaky", url=service_url) == {"id": "flaky", "state": "waiting"}
    refused = emq("promote", queue, "later", url=service_url, check=False)
    assert refused.returncode == 1 and "not delayed" in refused.stderr
    missing = emq("promote", queue, "nope", url=service_url, check=False)
    assert missing.returncode == 1 and "no job nope in queue" in missing.stderr


def test_events_tails_the_feed(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="a")
    tail = subprocess.Popen(
        [
            *EMQ,
            "events",
            queue,
            "--after",
            "0",
            "--type",
            "enqueued",
            "--type",
            "cancelled",
            "--url",
            service_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        # Ctrl-C stops it even when this run was started with SIGINT ignored (a background job).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert tail.stdout is not None
        first = tail.stdout.readline().split()
        sdk.cancel(queue, "a", reason="no")
        second = tail.stdout.readline().split()
    finally:
        tail.send_signal(signal.SIGINT)
        try:
            tail.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            tail.kill()
            tail.communicate()
            raise
    # id, date, time, zone, type, job, details
    assert first[0] == "1" and first[4:] == ["enqueued", "a", "state=waiting"]
    assert second[0] == "2" and second[4:6] == ["cancelled", "a"]
    assert tail.returncode == 130


def test_errors_and_usage(service_url: str, queue: str) -> None:
    bad = emq("enqueue", "bad queue", "1", url=service_url, check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("emq: 400 invalid_request:")
    missing = emq("job", queue, "nope", url=service_url, check=False)
    assert missing.returncode == 1 and missing.stderr.startswith(f"emq: no queue {queue} (")
    emq("enqueue", queue, "1", url=service_url)
    missing = emq("job", queue, "nope", url=service_url, check=False)
    assert (missing.returncode, missing.stderr) == (1, f"emq: no job nope in queue {queue}\n")
    assert emq("enqueue", queue, "{oops", url=service_url, check=False).returncode == 2
    assert emq("enqueue", queue, url=service_url, check=False).returncode == 2
    port = free_port()
    down = emq("stats", "--url", f"127.0.0.1:{port}", check=False)
    assert down.returncode == 1
    assert down.stderr.strip() == f"emq: cannot reach EchoMQ at http://127.0.0.1:{port}: connection refused"
    # The options every command takes are taken before the command too; after it, they win.
    before = emq("--url", f"127.0.0.1:{port}", "stats", check=False)
    assert (before.returncode, before.stderr) == (down.returncode, down.stderr)
    assert emq("--json", "--url", service_url, "stats", queue).stdout.startswith("{")
    assert emq("--url", f"127.0.0.1:{port}", "stats", queue, "--url", service_url).returncode == 0
    assert emq("work", queue, url=service_url, check=False).returncode == 2  # no command


@pytest.fixture(scope="module")
def auth_url(redis_url: str) -> Iterator[str]:
    entries = ("admin:Adm1n-secret", "producer:p-secret")
    with running_service(Settings(redis_url=redis_url, sweep_interval_ms=100, auth_entries=entries)) as url:
        yield url


def test_tokens(auth_url: str, queue: str) -> None:
    anonymous = emq("stats", queue, url=auth_url, check=False)
    assert anonymous.returncode == 1 and anonymous.stderr.strip() == (
        "emq: 401 unauthorized: this service needs a token: pass --token TOKEN or set $EMQ_TOKEN"
    )
    unknown = emq("stats", queue, "--token", "guess", url=auth_url, check=False)
    assert "the token given (--token or $EMQ_TOKEN) is not accepted" in unknown.stderr
    assert emq_json("enqueue", queue, "1", "--token", "p-secret", url=auth_url)["created"]
    forbidden = emq("pause", queue, "--token", "p-secret", url=auth_url, check=False)
    assert forbidden.returncode == 1 and "403 forbidden" in forbidden.stderr
    assert "--token or $EMQ_TOKEN" in forbidden.stderr and "Bearer" not in forbidden.stderr
    assert emq("pause", queue, url=auth_url, EMQ_TOKEN="Adm1n-secret").returncode == 0


# --- emq work ----------------------------------------------------------------------------------

PROBE = """
import json, os, sys
payload = json.load(sys.stdin)
env = {k: os.environ[k] for k in ("EMQ_JOB_ID", "EMQ_ATTEMPT", "EMQ_FENCE", "EMQ_QUEUE")}
if payload == "text":
    print("plain words, not JSON")
elif payload == "fail":
    sys.stderr.write("x" * 20000 + "\\nthe last words\\n")
    sys.exit(3)
else:
    print(json.dumps({"payload": payload, "env": env}))
"""


def start_work(url: str, queue: str, *args: str, command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*EMQ, "work", queue, "--json", "--wait-ms", "500", *args, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=subprocess_env(EMQ_URL=url),
    )


def test_work_turns_a_program_into_a_worker(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(
        queue, [{"payload": p, "id": i} for i, p in [("j", {"a": 1}), ("t", "text"), ("f", "fail")]]
    )
    worker = start_work(service_url, queue, "--concurrency", "3", command=[sys.executable, "-c", PROBE])
    try:
        wait_until(lambda: sdk.queue(queue).counts.completed == 2 and sdk.get_job(queue, "f").attempt == 1)
        wait_until(lambda: sdk.get_job(queue, "f").state != "active")
    finally:
        events, err = stop_work(worker)
    result = sdk.get_job(queue, "j").result
    assert result["payload"] == {"a": 1}
    assert result["env"] == {
        "EMQ_JOB_ID": "j",
        "EMQ_ATTEMPT": "1",
        "EMQ_FENCE": result["env"]["EMQ_FENCE"],
        "EMQ_QUEUE": queue,
    }
    assert int(result["env"]["EMQ_FENCE"]) >= 1
    assert sdk.get_job(queue, "t").result == "plain words, not JSON"
    failed = sdk.get_job(queue, "f")
    assert failed.error.startswith("exit status 3\n") and failed.error.endswith("the last words")
    assert len(failed.error.encode()) <= 8192
    assert failed.state in ("delayed", "waiting")
    assert "the last words" in err  # the command's stderr is passed through
    kinds = [event["event"] for event in events]
    assert kinds[0] == "started" and kinds[-1] == "stopped"
    assert sorted(kinds[1:-1]) == ["done", "done", "failed"]


SLOW = (
    "import os, sys, time; sys.stdin.read(); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_work_sigterm_without_grace_stops_commands_and_releases_their_jobs(
    service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    sdk.enqueue(queue, None, id="slow", max_attempts=1)
    worker = start_work(
        service_url, queue, "--grace-s", "0", command=[sys.executable, "-c", SLOW, str(pidfile)]
    )
    wait_until(lambda: pidfile.exists() and pidfile.read_text())
    started = time.monotonic()
    events, _ = stop_work(worker)
    assert time.monotonic() - started < 5
    assert [event["event"] for event in events] == ["started", "released", "stopped"]
    assert not pid_alive(int(pidfile.read_text()))
    job = sdk.get_job(queue, "slow")
    assert job.state == "waiting"
    assert sdk.lease(queue, "other")[0].attempt == 1  # the release spent no attempt


def test_work_stops_the_command_when_the_lease_is_lost(
    service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    sdk.enqueue(queue, None, id="j")
    worker = start_work(
        service_url,
        queue,
        "--worker",
        "doomed",
        "--lease-ms",
        "1500",
        command=[sys.executable, "-c", SLOW, str(pidfile)],
    )
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text())
        sdk.pause(queue)
        assert sdk.release_worker(queue, "doomed") == ["j"]
        wait_until(lambda: not pid_alive(int(pidfile.read_text())), timeout=10)
    finally:
        events, _ = stop_work(worker)
    assert [event["event"] for event in events] == ["started", "stopping-command", "lease-lost", "stopped"]
    job = sdk.get_job(queue, "j")
    assert (job.state, job.result, job.error) == ("waiting", None, None)


GATED = (
    "import json, os, sys, time; payload = json.load(sys.stdin); "
    "open(os.path.join(sys.argv[1], os.environ['EMQ_JOB_ID']), 'w').close(); "
    "exec('while not os.path.exists(sys.argv[2]): time.sleep(0.02)'); print(json.dumps({'n': payload}))"
)


def test_work_runs_on_the_sdk_worker_and_sigterm_lets_running_commands_finish(
    service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    started, go = tmp_path / "started", tmp_path / "go"
    started.mkdir()
    sdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(5)])
    worker = start_work(
        service_url, queue, "-c", "3", command=[sys.executable, "-c", GATED, str(started), str(go)]
    )
    try:
        assert worker.stdout is not None
        first = json.loads(worker.stdout.readline())
        wait_until(lambda: len(list(started.iterdir())) == 3)
        ledger = sdk.ledger(queue)
    except BaseException:
        worker.kill()
        raise
    # The Worker's id (host-pid-random of the emq process) holds all three, leased by one
    # request for every free slot (one Redis time stamp).
    assert first["event"] == "started" and first["worker"].split("-")[-2] == str(worker.pid)
    assert {entry.worker for entry in ledger} == {first["worker"]}
    assert len(ledger) == 3 and len({entry.leased_at for entry in ledger}) == 1
    worker.send_signal(signal.SIGTERM)
    time.sleep(1)  # the signal is handled (leasing stops) before the commands may finish
    go.touch()
    out, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [event["event"] for event in events] == ["done", "done", "done", "stopped"]
    assert events[-1] == {"event": "stopped", "done": 3, "failed": 0, "lost": 0, "released": 0}
    ran = sorted(path.name for path in started.iterdir())
    assert [sdk.get_job(queue, job_id).result for job_id in ran] == [{"n": int(i[1:])} for i in ran]
    assert sdk.queue(queue).counts.waiting == 2  # nothing leased once stopping


def test_serve_runs_the_service(redis_url: str, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "serve.log"
    with log.open("w") as output:
        service = subprocess.Popen(
            [*EMQ, "serve", "--port", str(port)],
            env=subprocess_env(EMQ_REDIS_URL=redis_url, HOST="127.0.0.1"),
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
            except httpx.TransportError:
                assert service.poll() is None, log.read_text()
                return False

        wait_until(ready, timeout=30, interval=0.1)
        stats = emq_json("stats", url=f"http://127.0.0.1:{port}")
        assert "queues" in stats
    finally:
        service.send_signal(signal.SIGTERM)
        assert service.wait(30) == 0


def test_settings_show_and_change_only_what_is_given(service_url: str, queue: str) -> None:
    unknown = emq("settings", queue, url=service_url, check=False)
    assert unknown.returncode == 1 and f"no queue {queue}" in unknown.stderr
    emq("enqueue", queue, "1", url=service_url)
    assert emq_json("settings", queue, url=service_url)["max_in_flight"] is None
    changed = emq_json("settings", queue, "--max-in-flight", "4", "--rate", "100/1000", url=service_url)
    assert changed["max_in_flight"] == 4 and changed["rate_limit"] == {"max": 100, "per_ms": 1000}
    # Read, change, write: the settings not given keep their value.
    changed = emq_json("settings", queue, "--events", "off", "--failed-retention-s", "60", url=service_url)
    assert changed["max_in_flight"] == 4 and changed["rate_limit"] == {"max": 100, "per_ms": 1000}
    assert changed["events"] is False and changed["failed_retention_s"] == 60
    changed = emq_json("settings", queue, "--max-in-flight", "none", "--rate", "none", url=service_url)
    assert changed["max_in_flight"] is None and changed["rate_limit"] is None and changed["events"] is False
    shown = emq("settings", queue, url=service_url).stdout
    assert "events:" in shown and "off" in shown and "failed_retention_s:" in shown
    assert "keep their current value" in emq("settings", "--help", url=service_url).stdout
    bad = emq("settings", queue, "--max-in-flight", "0", url=service_url, check=False)
    assert bad.returncode == 2 and "at least 1" in bad.stderr
    bad = emq("settings", queue, "--rate", "100", url=service_url, check=False)
    assert bad.returncode == 2 and "MAX/PER_MS" in bad.stderr
    bad = emq("settings", queue, "--rate", "1/10", url=service_url, check=False)  # the service says 400
    assert bad.returncode != 0 and "per_ms" in bad.stderr


def test_groups(service_url: str, sdk: Client, queue: str) -> None:
    emq("enqueue", queue, "1", "--group", "tenant-1", "--id", "g1", url=service_url)
    assert sdk.get_job(queue, "g1").group == "tenant-1"
    out = emq("group", queue, "tenant-1", "--max-in-flight", "2", url=service_url).stdout
    assert out.strip() == f"group tenant-1 of {queue}: at most 2 in flight"
    assert emq_json("group", queue, "tenant-1", "--max-in-flight", "none", url=service_url) == {
        "group": "tenant-1",
        "max_in_flight": None,
    }
    table = emq("groups", queue, url=service_url).stdout.splitlines()
    assert table[1].split() == ["tenant-1", "1", "0", "-", "-"]
    refused = emq("group", queue, "tenant-1", "--max-in-flight", "0", url=service_url, check=False)
    assert refused.returncode == 2 and "--max-in-flight" in refused.stderr
