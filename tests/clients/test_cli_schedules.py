"""`emq schedule`, `emq schedules`, `emq unschedule` and `emq trigger` against a real service."""

from __future__ import annotations

from datetime import datetime

from echomq import Client
from tests.clients.test_cli import emq, emq_json

NEW_YEAR_2030_MS = 1_893_456_000_000


def test_schedule_show_list_trigger_unschedule(service_url: str, sdk: Client, queue: str) -> None:
    unknown = emq("schedules", queue, url=service_url, check=False)
    assert unknown.returncode == 1 and unknown.stderr.startswith(f"emq: no queue {queue} (")
    sdk.enqueue(queue, None, id="first", delay_ms=3_600_000)  # the queue exists, without schedules
    assert emq("schedules", queue, url=service_url).stdout.strip() == f"no schedules in {queue}"
    report = emq_json(
        "schedule",
        queue,
        "report",
        "--cron",
        "*/5 * * * *",
        "--tz",
        "Europe/Berlin",
        "--payload",
        '{"report": "sales"}',
        "--name",
        "report",
        "--priority",
        "3",
        "--max-attempts",
        "2",
        "--group",
        "g1",
        "--overlap",
        "skip",
        "--limit",
        "10",
        url=service_url,
    )
    assert isinstance(report, dict)
    assert (report["cron"], report["timezone"], report["overlap"], report["limit"]) == (
        "*/5 * * * *",
        "Europe/Berlin",
        "skip",
        10,
    )
    assert report["job"] == {
        "payload": {"report": "sales"},
        "name": "report",
        "priority": 3,
        "max_attempts": 2,
        "group": "g1",
    }
    assert report["next_run_at"] % 300_000 == 0

    put = emq("schedule", queue, "ticks", "--every-ms", "60000", "--paused", url=service_url).stdout
    assert put.strip() == f"schedule ticks of {queue}: every 1m (UTC), next run paused"
    starts = emq_json(
        "schedule", queue, "later", "--every-ms", "1000", "--start-at", "2030-01-01T00:00Z", url=service_url
    )
    assert isinstance(starts, dict)
    assert starts["start_at"] == starts["next_run_at"] == NEW_YEAR_2030_MS
    assert starts["job"]["payload"] is None

    shown = emq("schedule", queue, "report", url=service_url).stdout.splitlines()
    assert "timing:       */5 * * * *" in shown and "timezone:     Europe/Berlin" in shown
    assert "overlap:      skip" in shown and 'payload:      {"report": "sales"}' in shown
    assert emq_json("schedule", queue, "report", url=service_url) == report  # shown, not changed

    lines = emq("schedules", queue, url=service_url).stdout.splitlines()
    assert lines[0].split() == [
        "SCHEDULE",
        "WHEN",
        "TZ",
        "NEXT",
        "RUN",
        "LAST",
        "RUN",
        "RUNS",
        "SKIPPED",
        "PAUSED",
    ]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == ["later", "report", "ticks"]
    local_2030 = datetime.fromtimestamp(NEW_YEAR_2030_MS / 1000)  # local time, as emq shows it
    assert local_2030.strftime("%Y-%m-%d %H:%M:%S") in rows["later"] and "every 1s" in rows["later"]
    assert "*/5 * * * *" in rows["report"] and "Europe/Berlin" in rows["report"] and "(in " in rows["report"]
    assert rows["ticks"].split()[1:] == ["every", "1m", "UTC", "paused", "-", "0", "0", "yes"]
    listed = emq_json("schedules", queue, url=service_url)
    assert isinstance(listed, dict) and [s["schedule"] for s in listed["schedules"]] == [
        "later",
        "report",
        "ticks",
    ]

    said = emq("trigger", queue, "ticks", url=service_url).stdout.strip()
    job_id = said.split()[4]
    assert said == f"schedule ticks enqueued job {job_id} into {queue} (waiting)"
    assert sdk.get_job(queue, job_id).schedule == "ticks"
    made = emq_json("trigger", queue, "ticks", url=service_url)
    assert isinstance(made, dict) and made["created"] is True and made["id"] != job_id

    gone = emq("unschedule", queue, "ticks", url=service_url).stdout.strip()
    assert gone == f"schedule ticks of {queue} deleted (the jobs it made stay)"
    assert emq_json("unschedule", queue, "later", url=service_url) == {"deleted": "later", "queue": queue}
    assert [view.schedule for view in sdk.list_schedules(queue)] == ["report"]


def test_schedule_bad_input_and_missing_schedules(service_url: str, queue: str) -> None:
    def refused(*args: str) -> tuple[int, str]:
        ran = emq(*args, url=service_url, check=False)
        assert ran.stdout == ""
        return ran.returncode, ran.stderr

    code, err = refused("schedule", queue, "s", "--cron", "61 * * * *")
    assert code == 1 and err.startswith("emq: 400 invalid_request:") and "invalid cron '61 * * * *'" in err
    code, err = refused("schedule", queue, "s", "--cron", "@daily", "--tz", "Mars/Olympus")
    assert code == 1 and "Mars/Olympus" in err
    code, err = refused("schedule", queue, "s", "--every-ms", "10")
    assert code == 1 and "400 invalid_request" in err
    assert refused("schedule", queue, "s", "--cron", "@daily", "--every-ms", "1000")[0] == 2
    code, err = refused("schedule", queue, "s", "--cron", "@daily", "--payload", "{oops")
    assert code == 2 and "the payload is not JSON" in err
    code, err = refused("schedule", queue, "s", "--tz", "Europe/Berlin")
    assert code == 2 and "--tz needs --cron or --every-ms" in err
    code, err = refused("schedule", queue, "s", "--priority", "3")
    assert code == 2 and "--priority needs --cron or --every-ms" in err
    code, err = refused("schedule", queue, "s", "--every-ms", "1000", "--start-at", "tomorrow")
    assert code == 2 and "ISO 8601" in err
    assert refused("schedules", queue)[0] == 1  # refused puts made nothing, not even the queue

    for command in ("schedule", "unschedule", "trigger"):
        code, err = refused(command, queue, "nope")
        assert code == 1 and err.startswith("emq: 404 schedule_not_found:") and "nope" in err, command
