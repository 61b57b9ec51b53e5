"""`emq schedule`, `emq schedules`, `emq unschedule`, `emq trigger`: a queue's schedules from a
shell, their arguments and how they print, on ``echomq.Client``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from echomq.cli._commands import EXIT_OK, UsageError, parse_json, require_queue
from echomq.cli._output import duration, now_ms, print_json, table, when
from echomq.client import Client
from echomq.models import Schedule, ScheduleJob

JOB_OPTIONS = ("name", "priority", "max_attempts", "group")  # enqueue's, but delay_ms
# The options of a PUT besides the timing: given without --cron/--every-ms, they are a mistake.
PUT_OPTIONS = ("payload", "timezone", "start_at", "end_at", "limit", "overlap", "paused", *JOB_OPTIONS)
# Interval units, largest first: an interval is shown in the largest unit that divides it.
UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def instant_ms(text: str) -> int:
    """An option's time as epoch ms: epoch ms as they are, or ISO 8601 (without an offset: this
    machine's local time, as `emq` prints times)."""
    if text.isdigit():
        return int(text)
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text  # 3.9's fromisoformat: no Z
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not epoch ms or an ISO 8601 time (e.g. 2026-12-24T18:00 or 2026-12-24T17:00Z): {text!r}"
        ) from None
    return round(moment.astimezone().timestamp() * 1000)  # a naive time is read as local time


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    schedule = commands.add_parser(
        "schedule",
        parents=[common],
        help="create or replace a schedule (or show one)",
        description="With --cron or --every-ms: create the schedule, or replace it as a whole (an "
        "option left out takes its default; its run counts are kept, and its next run too when "
        "the timing is unchanged). Each run enqueues one job with --payload and the job options. "
        "Without them: show the schedule.",
    )
    schedule.add_argument("queue")
    schedule.add_argument("schedule", metavar="NAME", help="the schedule's name")
    timing = schedule.add_mutually_exclusive_group()
    timing.add_argument("--cron", help="5 fields or a macro (@daily, @hourly...), read in --tz")
    timing.add_argument("--every-ms", type=int, metavar="N", help="run every N ms (at least 1000)")
    schedule.add_argument("--tz", "--timezone", dest="timezone", help="IANA timezone of --cron (default UTC)")
    schedule.add_argument("--payload", help="each job's payload, as JSON (default null)")
    for option in ("--start-at", "--end-at"):
        schedule.add_argument(
            option,
            type=instant_ms,
            metavar="TIME",
            help=f"{'no run before' if option == '--start-at' else 'no run after'} TIME: epoch ms, or "
            "ISO 8601 (no offset: local time)",
        )
    schedule.add_argument("--limit", type=int, metavar="N", help="at most N runs, then it ends")
    schedule.add_argument(
        "--overlap",
        choices=("allow", "skip"),
        help="skip: no run while the previous job waits or runs (default allow)",
    )
    schedule.add_argument("--paused", action="store_true", default=None, help="put it paused: no runs")
    schedule.add_argument("--name", help="the jobs' name")
    schedule.add_argument("--priority", type=int, help="0..1000, higher first (default 0)")
    schedule.add_argument("--max-attempts", type=int, help="1..1000 (default 3)")
    schedule.add_argument("--group", help="the jobs' group")

    listing = commands.add_parser(
        "schedules", parents=[common], help="a queue's schedules: timing, next and last run, counts"
    )
    listing.add_argument("queue")
    for name, text in (
        ("unschedule", "delete a schedule (the jobs it made stay)"),
        ("trigger", "enqueue a schedule's job now, outside its timetable"),
    ):
        one = commands.add_parser(name, parents=[common], help=text)
        one.add_argument("queue")
        one.add_argument("schedule", metavar="NAME", help="the schedule's name")


def every_text(every_ms: int) -> str:
    for unit, size in UNITS_MS:
        if every_ms % size == 0:
            return f"every {every_ms // size}{unit}"
    return f"every {every_ms}ms"


def timing_text(view: Schedule) -> str:
    return view.cron if view.cron is not None else every_text(view.every_ms or 0)


def next_run_text(view: Schedule, now: float) -> str:
    if view.next_run_at is None:
        return "paused" if view.paused else "ended"
    left = view.next_run_at - now
    return f"{when(view.next_run_at)} ({'in ' + duration(left) if left > 0 else 'due'})"


def _show(view: Schedule) -> None:
    shown: list[tuple[str, Any]] = [
        ("schedule", view.schedule),
        ("queue", view.queue),
        ("timing", timing_text(view)),
        ("timezone", view.timezone),
        ("next run", next_run_text(view, now_ms())),
        ("last run", when(view.last_run_at)),
        ("last job", view.last_job_id or "-"),
        ("runs", view.runs),
        ("skipped", view.skipped),
        ("limit", view.limit or "-"),
        ("start at", when(view.start_at)),
        ("end at", when(view.end_at)),
        ("overlap", view.overlap),
        ("paused", "yes" if view.paused else "no"),
        ("job name", view.job.name or "-"),
        ("priority", view.job.priority),
        ("max attempts", view.job.max_attempts),
        ("group", view.job.group or "-"),
        ("payload", json.dumps(view.job.payload, ensure_ascii=False)),
    ]
    for key, value in shown:
        print(f"{key + ':':14}{value}")


def _job_of(args: argparse.Namespace) -> ScheduleJob:
    payload = None if args.payload is None else parse_json(args.payload, "the payload")
    options = {name: getattr(args, name) for name in JOB_OPTIONS if getattr(args, name) is not None}
    return ScheduleJob(payload=payload, **options)


def cmd_schedule(args: argparse.Namespace, client: Client) -> int:
    if args.cron is None and args.every_ms is None:
        given = [name for name in PUT_OPTIONS if getattr(args, name) is not None]
        if given:
            option = "--tz" if given[0] == "timezone" else "--" + given[0].replace("_", "-")
            raise UsageError(f"{option} needs --cron or --every-ms: a schedule is put whole")
        view = client.get_schedule(args.queue, args.schedule)
        if args.json:
            print_json(view.to_dict())
        else:
            _show(view)
        return EXIT_OK
    view = client.put_schedule(
        args.queue,
        args.schedule,
        _job_of(args),
        cron=args.cron,
        every_ms=args.every_ms,
        timezone=args.timezone,
        start_at=args.start_at,
        end_at=args.end_at,
        limit=args.limit,
        overlap=args.overlap,
        paused=args.paused,
    )
    if args.json:
        print_json(view.to_dict())
    else:
        print(
            f"schedule {view.schedule} of {view.queue}: {timing_text(view)} ({view.timezone}), "
            f"next run {next_run_text(view, now_ms())}"
        )
    return EXIT_OK


def cmd_schedules(args: argparse.Namespace, client: Client) -> int:
    views = client.list_schedules(args.queue)
    if not views:
        require_queue(client, args.queue)
    if args.json:
        print_json({"schedules": [view.to_dict() for view in views]})
        return EXIT_OK
    if not views:
        print(f"no schedules in {args.queue}")
        return EXIT_OK
    now = now_ms()
    rows = [
        [
            view.schedule,
            timing_text(view),
            view.timezone,
            next_run_text(view, now),
            when(view.last_run_at),
            view.runs,
            view.skipped,
            "yes" if view.paused else "no",
        ]
        for view in views
    ]
    table(["SCHEDULE", "WHEN", "TZ", "NEXT RUN", "LAST RUN", "RUNS", "SKIPPED", "PAUSED"], rows)
    return EXIT_OK


def cmd_unschedule(args: argparse.Namespace, client: Client) -> int:
    client.delete_schedule(args.queue, args.schedule)
    if args.json:
        print_json({"deleted": args.schedule, "queue": args.queue})
    else:
        print(f"schedule {args.schedule} of {args.queue} deleted (the jobs it made stay)")
    return EXIT_OK


def cmd_trigger(args: argparse.Namespace, client: Client) -> int:
    made = client.trigger_schedule(args.queue, args.schedule)
    if args.json:
        print_json(made.to_dict())
    else:
        print(f"schedule {args.schedule} enqueued job {made.id} into {made.queue} ({made.state})")
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Client], int]] = {
    "schedule": cmd_schedule,
    "schedules": cmd_schedules,
    "unschedule": cmd_unschedule,
    "trigger": cmd_trigger,
}
