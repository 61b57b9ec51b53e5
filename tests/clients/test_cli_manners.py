"""`emq` behaves like the command lines people like (gh, kubectl, redis-cli): it asks before bulk
deletes and re-queues, says so when a queue, job or id does not exist, refuses a worker command it
cannot run, and prints nulls, times, closed pipes and connection problems the way a shell user
expects. Against a real service."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from pathlib import Path

from echomq import Client, __version__
from tests.clients.support import ROOT, subprocess_env
from tests.clients.test_cli import EMQ, emq, emq_json

TIME_WITH_ZONE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "


def dead_letters(sdk: Client, queue: str, count: int) -> list[str]:
    sdk.enqueue_many(queue, [{"payload": n, "id": f"d{n}", "max_attempts": 1} for n in range(count)])
    ids = []
    for job in sdk.lease(queue, "w", max_jobs=count):
        sdk.fail(queue, job.id, job.lease_id, "boom", retry=False)
        ids.append(job.id)
    return ids


def test_delete_queue_says_what_it_deletes_and_asks(service_url: str, sdk: Client, queue: str) -> None:
    dead_letters(sdk, queue, 2)
    sdk.enqueue_many(queue, [{"payload": n} for n in range(12)])
    sdk.put_schedule(queue, "nightly", {"payload": 1}, cron="@daily")

    declined = emq("delete-queue", queue, url=service_url, typed="n\n", check=False)
    question = f"delete queue {queue}: 12 waiting, 2 failed, 1 schedule(s) [y/N] "
    assert declined.returncode == 1 and declined.stderr.startswith(question)
    assert "nothing done" in declined.stderr and sdk.queue(queue).counts.waiting == 12
    assert emq("delete-queue", queue, url=service_url, typed="", check=False).returncode == 1  # EOF: no

    scripted = emq("delete-queue", queue, url=service_url, check=False)  # stdin is no terminal
    assert scripted.returncode == 2 and "add --yes" in scripted.stderr
    assert sdk.queue(queue).counts.waiting == 12

    done = emq("delete-queue", queue, url=service_url, typed="yes\n")
    assert done.stdout.strip() == f"queue {queue} deleted"
    assert sdk.queue(queue).counts.waiting == 0 and sdk.list_schedules(queue) == []


def test_a_real_terminal_is_asked(service_url: str, sdk: Client, queue: str) -> None:
    """The question on a pseudo-terminal, as an operator's shell gives one."""
    dead_letters(sdk, queue, 3)
    controller, terminal = pty.openpty()
    try:
        retry = subprocess.Popen(
            [*EMQ, "retry", queue, "--url", service_url],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        os.write(controller, b"y\n")
        out, err = retry.communicate(timeout=30)
    finally:
        os.close(controller)
        os.close(terminal)
    assert retry.returncode == 0, err
    assert err == f"re-queue every dead-lettered job of {queue}: 3 job(s), attempts reset [y/N] "
    assert out.startswith("retried 3 job(s)") and sdk.queue(queue).counts.waiting == 3


def test_retry_of_every_dead_letter_is_confirmed(service_url: str, sdk: Client, queue: str) -> None:
    dead_letters(sdk, queue, 2)
    assert "re-queues EVERY dead-lettered job" in " ".join(emq("retry", "--help", check=False).stdout.split())
    refused = emq("retry", queue, url=service_url, check=False)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    declined = emq("retry", queue, url=service_url, typed="\n", check=False)
    assert declined.returncode == 1 and sdk.queue(queue).counts.failed == 2
    assert sorted(emq_json("retry", queue, "-y", url=service_url)["retried"]) == ["d0", "d1"]
    assert emq("retry", queue, "d0", url=service_url, check=False).stderr.strip() == (
        "emq: not retried: d0 (waiting, not dead-lettered)"
    )  # named ids are explicit: never asked


def test_unknown_queues_jobs_and_ids_fail(service_url: str, sdk: Client, queue: str) -> None:
    for args in (
        ("delete-queue", queue, "--yes"),
        ("stats", queue),
        ("retry", queue, "--yes"),
        ("retry", queue, "some-id"),
        ("job", queue, "x"),
        ("cancel", queue, "x"),
        ("wait", queue, "x"),
        ("delete", queue, "x"),
        ("jobs", queue, "--state", "failed"),
        ("failed", queue),
        ("ledger", queue),
        ("groups", queue),
        ("history", queue),
        ("search", queue, "text"),
    ):
        ran = emq(*args, url=service_url, check=False)
        assert ran.returncode == 1 and ran.stderr.startswith(f"emq: no queue {queue} ("), args
        assert ran.stdout == "", args
    assert sdk.queues() == [] or queue not in [view.name for view in sdk.queues()]  # none made

    sdk.enqueue(queue, 1, id="here")
    cancel = emq("cancel", queue, "missing", url=service_url, check=False)
    assert (cancel.returncode, cancel.stderr) == (1, f"emq: no job missing in queue {queue}\n")
    retry = emq("retry", queue, "no-such-id", url=service_url, check=False)
    assert (retry.returncode, retry.stderr) == (1, "emq: not retried: no-such-id (no such job)\n")


def test_delete_jobs_by_id(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(4)])
    (held,) = sdk.lease(queue, "w")
    done = emq("delete", queue, "j1,j2", "nope", held.id, url=service_url, check=False)
    assert done.returncode == 1 and done.stdout.strip() == f"deleted 2 job(s) of {queue}: j1 j2"
    assert "nope (no such job)" in done.stderr and f"{held.id} (leased (active)" in done.stderr
    assert emq_json("delete", queue, "j3", url=service_url) == {"deleted": ["j3"], "not_deleted": {}}
    assert sdk.queue(queue).counts.waiting == 0 and sdk.queue(queue).counts.active == 1


def test_work_refuses_a_command_it_cannot_run_before_leasing(
    service_url: str, sdk: Client, queue: str, tmp_path: Path
) -> None:
    sdk.enqueue(queue, 1, id="j")
    plain_file = tmp_path / "script.sh"
    plain_file.write_text("#!/bin/sh\necho hi\n")  # not executable
    for command, why in (
        (
            ["/no/such/cmd"],
            "no such file",
        ),
        ([str(plain_file)], "not executable"),
        (["no-such-program-anywhere"], "not found in PATH"),
        (
            [str(tmp_path)],
            "a directory",
        ),
    ):
        ran = subprocess.run(
            [*EMQ, "work", queue, "--", *command],
            capture_output=True,
            text=True,
            env=subprocess_env(EMQ_URL=service_url),
            timeout=30,
        )
        assert ran.returncode == 2 and f"cannot run {command[0]}: {why}" in ran.stderr, ran.stderr
        assert "Traceback" not in ran.stderr
    job = sdk.get_job(queue, "j")
    assert (job.state, job.attempt) == ("waiting", 0)  # never leased


def test_version_and_urls_without_a_scheme(service_url: str, queue: str) -> None:
    assert emq("--version", check=False).stdout.strip() == f"emq (echomq-client) {__version__}"
    bare = service_url.removeprefix("http://")  # host:port
    assert json.loads(emq("enqueue", queue, "1", "--json", "--url", bare).stdout)["created"]
    assert emq_json("stats", queue, url=bare)["counts"]["waiting"] == 1  # $EMQ_URL too
    with Client(bare) as client:
        assert client.url == service_url and client.queue(queue).counts.waiting == 1


def test_comma_lists(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="a")
    sdk.cancel(queue, "a")
    dead_letters(sdk, queue, 1)
    tail = subprocess.Popen(
        [*EMQ, "events", queue, "--after", "0", "--type", "cancelled,failed", "--json", "--url", service_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert tail.stdout is not None
        kinds = [json.loads(tail.stdout.readline())["type"] for _ in range(2)]
    finally:
        tail.kill()
        tail.communicate(timeout=10)
    assert kinds == ["cancelled", "failed"]
    bad = emq("events", queue, "--type", "failed,nope", url=service_url, check=False)
    assert bad.returncode == 2 and "nope: not one of" in bad.stderr


def test_a_closed_pipe_ends_quietly(service_url: str, sdk: Client, queue: str) -> None:
    """`emq jobs q | head -1`: the reader is gone before emq writes; no traceback, exit 0."""
    sdk.enqueue_many(queue, [{"payload": n} for n in range(50)])
    jobs = subprocess.Popen(
        [*EMQ, "jobs", queue, "--state", "waiting", "--url", service_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    assert jobs.stdout is not None and jobs.stderr is not None
    jobs.stdout.close()  # before the interpreter has even started: every write finds no reader
    err = jobs.stderr.read().decode()
    jobs.stderr.close()
    assert (jobs.wait(timeout=30), err) == (0, "")
    shell = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{' '.join(EMQ)} jobs {queue} --state waiting | head -1"],
        capture_output=True,
        text=True,
        env=subprocess_env(EMQ_URL=service_url),
        cwd=ROOT,
        timeout=30,
    )
    assert (shell.returncode, shell.stdout.split(), shell.stderr) == (
        0,
        ["JOB", "NAME", "ATTEMPTS", "UPDATED"],
        "",
    )


def test_nulls_read_as_a_dash_and_times_carry_their_zone(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, None, id="j")
    shown = emq("job", queue, "j", "--utc", url=service_url).stdout
    assert "None" not in shown and "null" not in shown
    fields = dict(line.split(":", 1) for line in shown.splitlines() if ":" in line)
    assert fields["name"].strip() == fields["worker"].strip() == fields["payload"].strip() == "-"
    assert fields["result"].strip() == fields["finished"].strip() == "-"
    assert re.fullmatch(TIME_WITH_ZONE + "UTC", shown.split("created:")[1].splitlines()[0].strip())
    assert emq_json("job", queue, "j", url=service_url)["name"] is None  # --json: null as it is

    berlin = subprocess.run(
        [*EMQ, "job", queue, "j", "--url", service_url],
        capture_output=True,
        text=True,
        env=subprocess_env(TZ="Europe/Berlin"),
        timeout=30,
    )
    created = berlin.stdout.split("created:")[1].splitlines()[0].strip()
    assert re.fullmatch(TIME_WITH_ZONE + "CES?T", created), created

    sdk.put_schedule(queue, "s", {"payload": 1}, every_ms=3_600_000)
    listed = emq("schedules", queue, "--utc", url=service_url).stdout.splitlines()[1]
    assert re.search(TIME_WITH_ZONE + r"UTC \(in ", listed), listed


def test_history(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": n} for n in range(3)])
    (job,) = sdk.lease(queue, "w")
    sdk.ack(queue, job.id, job.lease_id)
    shown = emq("history", queue, "--minutes", "5", "--utc", url=service_url).stdout.splitlines()
    assert shown[0].split() == ["MINUTE", "ENQUEUED", "COMPLETED", "FAILED", "RECLAIMED"]
    assert len(shown) == 1 + 5 + 2 and re.match(TIME_WITH_ZONE + "UTC", shown[1])
    assert shown[-1] == f"last 5 minute(s) of {queue}: 3 enqueued, 1 completed, 0 failed, 0 reclaimed"
    minutes = emq_json("history", queue, "--minutes", "2", url=service_url)["minutes"]
    assert len(minutes) == 2 and sum(minute["enqueued"] for minute in minutes) == 3
    assert emq("history", queue, "--minutes", "0", url=service_url, check=False).returncode == 2


def test_search(service_url: str, sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": {"to": f"user{n}@example.com"}, "id": f"m{n}"} for n in range(30)])
    sdk.enqueue(queue, {"to": "ada@lovelace.org"}, id="ada", name="Welcome")
    (held,) = sdk.lease(queue, "w")
    sdk.fail(queue, held.id, held.lease_id, "SMTP said: mailbox full", retry=False)

    found = emq("search", queue, "LOVELACE", url=service_url).stdout.splitlines()
    assert found[0].split() == ["JOB", "STATE", "NAME", "UPDATED", "ERROR"]
    assert found[1].split()[:3] == ["ada", "waiting", "Welcome"]
    assert found[-1].startswith(f"1 job(s) of {queue} hold 'LOVELACE'; 31 job(s) read (")
    failed = emq_json("search", queue, "mailbox full", "--state", "failed,cancelled", url=service_url)
    assert [job["id"] for job in failed["jobs"]] == [held.id] and failed["complete"] is True
    bounded = emq_json("search", queue, "example.com", "--scan", "10", url=service_url)
    assert bounded["scanned"] == 10 and bounded["complete"] is False
    limited = emq("search", queue, "example.com", "--limit", "2", url=service_url).stdout
    assert limited.rstrip().endswith("stopped at --limit 2")


def test_a_traceback_reads_as_its_first_line() -> None:
    """`emq failed` and `emq jobs` show one line per error: a traceback's last line repeats its
    exception, module-qualified, and adds nothing (it read "JobError: x: echomq.errors.JobError: x")."""
    from echomq.cli._output import summary
    from echomq.errors import JobError
    from echomq.worker import error_text

    try:
        raise JobError("no recipient", plain=False)
    except JobError as error:
        assert summary(error_text(error)) == "JobError: no recipient"
    try:
        raise ValueError("bad value")
    except ValueError as error:
        assert summary(error_text(error)) == "ValueError: bad value"
    assert summary("boom j0\nTraceback...\nValueError: j0") == "boom j0: ValueError: j0"
