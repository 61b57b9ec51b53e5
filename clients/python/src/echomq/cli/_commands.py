"""The one-shot commands of `emq`: each is a call or a few of ``echomq.Client``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Optional

import msgspec

from echomq.cli._confirm import confirm
from echomq.cli._output import (
    DELAYED_HEADERS,
    NULL,
    Progress,
    cell,
    delayed_cells,
    duration,
    now_ms,
    print_json,
    summary,
    table,
    when,
)
from echomq.client import Client
from echomq.errors import EchoMQError, JobActive, JobNotFound
from echomq.models import Event, Job, NewJob, QueueInfo

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PENDING = 0, 1, 2, 3
MAX_BATCH = 1000
MAX_PAGE = 1000  # jobs per page of the job listing
JOB_OPTIONS = ("name", "priority", "delay_ms", "max_attempts", "group")
STATES = ("waiting", "delayed", "active", "completed", "failed", "cancelled")


NONE = object()  # `emq settings --max-in-flight none`: clear the setting


class UsageError(Exception):
    """Wrong arguments or input: exit status 2, nothing sent."""


class Failed(Exception):
    """A command that could not be done: exit status 1."""


def known_queue(client: Client, queue: str) -> Optional[QueueInfo]:
    """The queue's view if it exists: it holds jobs or is paused, or the service lists it (from
    its first enqueue, settings, pause or schedule until it is deleted). The listing is read
    only for an empty queue, so a queue with jobs costs one call: one page of one queue, the
    first by name of those that start with the queue's name, which is the queue if it is listed."""
    view = client.queue(queue)
    if view.paused or any(getattr(view.counts, state) for state in STATES):
        return view
    page = client.list_queues(limit=1, prefix=queue)
    return next((known for known in page.queues if known.name == queue), None)


def no_queue(queue: str) -> Failed:
    return Failed(f"no queue {queue} (emq stats lists the queues)")


def require_queue(client: Client, queue: str) -> QueueInfo:
    view = known_queue(client, queue)
    if view is None:
        raise no_queue(queue)
    return view


def missing_job(client: Client, queue: str, job_id: str) -> Failed:
    """What to say when the service answered job_not_found: the queue or the job is unknown."""
    if known_queue(client, queue) is None:
        return no_queue(queue)
    return Failed(f"no job {job_id} in queue {queue}")


def parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise UsageError(f"{where} is not JSON: {error}") from None


def _job_defaults(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in JOB_OPTIONS if getattr(args, name) is not None}


def cmd_enqueue(args: argparse.Namespace, client: Client) -> int:
    if (args.payload is None) == (args.file is None):
        raise UsageError("give a JSON payload or --file FILE (one JSON value per line), not both")
    if args.file is None:
        payload = parse_json(args.payload, "the payload")
        answer = client.enqueue(args.queue, payload, id=args.id, **_job_defaults(args))
        if args.json:
            print_json(answer.to_dict())
        elif answer.created:
            print(f"enqueued job {answer.id} into {answer.queue} ({answer.state})")
        else:
            print(f"job {answer.id} already exists in {answer.queue} ({answer.state}); left as it is")
        return EXIT_OK
    if args.id is not None:
        raise UsageError("--id applies to a single job; in a file, give ids per line with --requests")
    return _enqueue_file(args, client)


def _lines(path: str) -> Iterator[tuple[int, str]]:
    stream: IO[str] = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    try:
        for number, line in enumerate(stream, 1):
            if line.strip():
                yield number, line
    finally:
        if stream is not sys.stdin:
            stream.close()


def _job_of_line(args: argparse.Namespace, number: int, line: str) -> NewJob:
    value = parse_json(line, f"line {number}")
    defaults = _job_defaults(args)
    if not args.requests:
        return NewJob(payload=value, **defaults)
    if not isinstance(value, dict) or "payload" not in value:
        raise UsageError(f"line {number}: with --requests each line is an object with a 'payload'")
    try:
        return msgspec.convert({**defaults, **value}, NewJob)
    except msgspec.ValidationError as error:
        raise UsageError(f"line {number}: {error}") from None


def _enqueue_file(args: argparse.Namespace, client: Client) -> int:
    total: Optional[int] = None
    if args.file != "-":
        if not Path(args.file).is_file():
            raise UsageError(f"no such file: {args.file}")
        total = 0
        for number, line in _lines(args.file):  # all lines valid before the first is sent
            _job_of_line(args, number, line)
            total += 1
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(total, sys.stderr, show)
    created = existing = 0
    batch: list[NewJob] = []
    first_line = 0

    def send() -> None:
        nonlocal created, existing
        try:
            answers = client.enqueue_many(args.queue, batch)
        except EchoMQError as error:
            raise Failed(
                f"the batch from line {first_line} was refused ({error}); "
                f"{progress.done} job(s) before it were enqueued"
            ) from error
        made = sum(1 for answer in answers if answer.created)
        created += made
        existing += len(answers) - made
        progress.advance(len(batch))
        batch.clear()

    try:
        for number, line in _lines(args.file):
            if not batch:
                first_line = number
            batch.append(_job_of_line(args, number, line))
            if len(batch) >= args.batch_size:
                send()
        if batch:
            send()
    finally:
        progress.finish()
    elapsed = time.monotonic() - progress.started
    done = {"queue": args.queue, "enqueued": progress.done, "created": created, "existing": existing}
    if args.json:
        print_json(done)
    else:
        print(
            f"enqueued {progress.done} job(s) into {args.queue} in {elapsed:.1f} s "
            f"({created} new, {existing} already there)"
        )
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, client: Client) -> int:
    if args.queue:
        views = [require_queue(client, args.queue)]
        answer: Any = views[0].to_dict()
    else:
        views = client.queues(prefix=args.prefix or None)
        answer = {"queues": [view.to_dict() for view in views]}
    if args.json:
        print_json(answer)
        return EXIT_OK
    if not views:
        print("no queues")
        return EXIT_OK
    rows = [
        [view.name, "yes" if view.paused else "no", *(getattr(view.counts, state) for state in STATES)]
        for view in sorted(views, key=lambda view: view.name)
    ]
    table(["QUEUE", "PAUSED", *(state.upper() for state in STATES)], rows)
    return EXIT_OK


def cmd_ledger(args: argparse.Namespace, client: Client) -> int:
    jobs = client.ledger(args.queue, worker=args.worker or None, limit=args.limit or None)
    if not jobs:
        require_queue(client, args.queue)
    if args.json:
        print_json({"jobs": [job.to_dict() for job in jobs]})
        return EXIT_OK
    if not jobs:
        print(f"nothing in flight in {args.queue}")
        return EXIT_OK
    now = now_ms()
    rows = []
    for job in jobs:
        left = job.lease_expires_at - now
        rows.append(
            [
                job.id,
                job.worker,
                job.attempt,
                duration(now - job.leased_at),
                duration(left) if left >= 0 else f"expired {duration(left)} ago",
            ]
        )
    table(["JOB", "WORKER", "ATTEMPT", "HELD FOR", "LEASE LEFT"], rows)
    holders: dict[str, int] = {}
    for job in jobs:
        holders[job.worker] = holders.get(job.worker, 0) + 1
    print()
    print(f"{len(jobs)} job(s) in flight, held by {len(holders)} worker(s): ", end="")
    print(", ".join(f"{worker} ({count})" for worker, count in sorted(holders.items())))
    return EXIT_OK


def cmd_workers(args: argparse.Namespace, client: Client) -> int:
    holdings = client.workers(args.queue)
    if not holdings:
        require_queue(client, args.queue)
    if args.json:
        print_json({"workers": [holding.to_dict() for holding in holdings]})
        return EXIT_OK
    if not holdings:
        print(f"no workers in {args.queue}: none holds a job or has a session")
        return EXIT_OK
    now = now_ms()
    rows = []
    for holding in holdings:
        session = holding.session
        if session is None:
            rows.append([holding.worker, len(holding.jobs), "-", "-", "-", "-"])
            continue
        info = json.dumps(session.info, separators=(",", ":")) if session.info else "-"
        rows.append(
            [
                holding.worker,
                len(holding.jobs),
                session.state,
                duration(now - session.started_at),
                duration(session.expires_at - now),
                summary(info, 48),
            ]
        )
    table(["WORKER", "JOBS", "SESSION", "UP FOR", "LAPSES IN", "INFO"], rows)
    return EXIT_OK


def cmd_quiet(args: argparse.Namespace, client: Client) -> int:
    answer = client.quiet(args.queue, args.worker)
    if args.json:
        print_json(answer.to_dict())
    else:
        print(f"worker {answer.worker} is quiet: it leases nothing more in {args.queue}")
    return EXIT_OK


def cmd_failed(args: argparse.Namespace, client: Client) -> int:
    page = client.failed(args.queue, limit=args.limit, offset=args.offset)
    if not page.total:
        require_queue(client, args.queue)
    if args.json:
        print_json(page.to_dict())
        return EXIT_OK
    if not page.total:
        print(f"no dead-lettered jobs in {args.queue}")
        return EXIT_OK
    offset = args.offset or 0
    shown = f"{offset + 1}-{offset + len(page.jobs)}" if page.jobs else "none"
    print(f"{page.total} dead-lettered job(s) in {args.queue}, most recent first (showing {shown})")
    rows = [
        [job.id, f"{job.attempt}/{job.max_attempts}", when(job.updated_at), summary(job.error)]
        for job in page.jobs
    ]
    table(["JOB", "ATTEMPTS", "FAILED AT", "ERROR"], rows)
    return EXIT_OK


def cmd_retry(args: argparse.Namespace, client: Client) -> int:
    """Listed ids: those, and which were not retried (exit 1). No ids: every dead letter, once
    the operator confirmed how many that is."""
    ids = [job_id for listed in args.ids for job_id in listed]
    if ids:
        retried = client.retry_failed(args.queue, ids)
    elif _confirm_retry_all(args, client):
        retried = client.retry_failed(args.queue, None)
    else:
        retried = []
    if args.json:
        print_json({"retried": retried})
    elif retried:
        print(f"retried {len(retried)} job(s): {' '.join(retried)}")
    elif not ids:
        print("nothing to retry")
    left = [job_id for job_id in dict.fromkeys(ids) if job_id not in set(retried)]
    if left and not retried and known_queue(client, args.queue) is None:
        raise no_queue(args.queue)
    if left:
        raise Failed("not retried: " + ", ".join(_not_retried(client, args.queue, job_id) for job_id in left))
    return EXIT_OK


def _confirm_retry_all(args: argparse.Namespace, client: Client) -> bool:
    """Whether there is anything to retry; when there is, the operator confirmed it."""
    total = client.failed(args.queue, limit=1).total
    if not total:
        require_queue(client, args.queue)
        return False
    confirm(f"re-queue every dead-lettered job of {args.queue}: {total} job(s), attempts reset", yes=args.yes)
    return True


def _not_retried(client: Client, queue: str, job_id: str) -> str:
    try:
        state = client.get_job(queue, job_id).state
    except JobNotFound:
        return f"{job_id} (no such job)"
    return f"{job_id} ({state}, not dead-lettered)"


def cmd_pause(args: argparse.Namespace, client: Client) -> int:
    answer = client.pause(args.queue) if args.command == "pause" else client.resume(args.queue)
    if args.json:
        print_json(answer.to_dict())
    else:
        print(f"queue {answer.name} {'paused' if answer.paused else 'running'}")
    return EXIT_OK


# `emq settings` options -> QueueSettings fields (rate and events are set apart).
SETTING_OPTIONS = (
    "max_in_flight",
    "group_max_in_flight",
    "max_stalls",
    "completed_retention_s",
    "failed_retention_s",
)


def cmd_settings(args: argparse.Namespace, client: Client) -> int:
    """Show the settings; with options, read them, change the ones given, write them all back."""
    current = client.get_settings(args.queue)
    fields = current.to_dict()
    if not any(getattr(args, name) is not None for name in (*SETTING_OPTIONS, "rate", "events")):
        require_queue(client, args.queue)  # a PUT may configure a queue before its first job
    changes = {name: getattr(args, name) for name in SETTING_OPTIONS if getattr(args, name) is not None}
    if args.rate is not None:
        changes["rate_limit"] = args.rate
    if args.events is not None:
        changes["events"] = args.events
    if changes:
        fields.update({name: None if value is NONE else value for name, value in changes.items()})
        current = client.put_settings(args.queue, **fields)
    if args.json:
        print_json(current.to_dict())
        return EXIT_OK
    rate = current.rate_limit
    shown = {
        **current.to_dict(),
        "rate_limit": f"{rate.max}/{rate.per_ms} ms" if rate else None,
        "events": "on" if current.events else "off",
    }
    for key, value in shown.items():
        print(f"{key + ':':24}{'none' if value is None else value}")
    return EXIT_OK


def cmd_group(args: argparse.Namespace, client: Client) -> int:
    cap = None if args.max_in_flight is NONE else args.max_in_flight
    answer = client.set_group_limit(args.queue, args.group, cap)
    if args.json:
        print_json(answer.to_dict())
    elif answer.max_in_flight is None:
        print(f"group {answer.group} of {args.queue}: the queue's group_max_in_flight applies")
    else:
        print(f"group {answer.group} of {args.queue}: at most {answer.max_in_flight} in flight")
    return EXIT_OK


def cmd_groups(args: argparse.Namespace, client: Client) -> int:
    rows, cursor = [], None
    while True:
        page = client.list_groups(args.queue, limit=MAX_PAGE, cursor=cursor)
        rows.extend(page.groups)
        cursor = page.next_cursor
        if cursor is None:
            break
    if not rows:
        require_queue(client, args.queue)
    if args.json:
        print_json({"groups": [row.to_dict() for row in rows]})
        return EXIT_OK
    if not rows:
        print(f"no groups in {args.queue}")
        return EXIT_OK

    table(
        ["GROUP", "WAITING", "ACTIVE", "CAP", "OWN CAP"],
        [[g.group, g.waiting, g.active, g.effective_max_in_flight, g.max_in_flight] for g in rows],
    )
    return EXIT_OK


def cmd_delete_queue(args: argparse.Namespace, client: Client) -> int:
    view = require_queue(client, args.queue)
    active = view.counts.active
    if active and not args.force:  # the service would refuse too (job_active): ask nothing
        raise Failed(
            f"queue {args.queue} has {active} job(s) in flight (job_active): wait for them, or "
            "add --force (their workers' calls then fail)"
        )
    confirm(f"delete queue {args.queue}: {_contents(client, view)}", yes=args.yes)
    client.delete_queue(args.queue, force=args.force)
    if args.json:
        print_json({"deleted": args.queue})
    else:
        print(f"queue {args.queue} deleted")
    return EXIT_OK


def _contents(client: Client, view: QueueInfo) -> str:
    """What deleting a queue takes with it: ``12 waiting, 3 active, 2 schedules (paused)``."""
    parts = [f"{getattr(view.counts, state)} {state}" for state in STATES if getattr(view.counts, state)]
    schedules = len(client.list_schedules(view.name))
    if schedules:
        parts.append(f"{schedules} schedule(s)")
    return (", ".join(parts) or "no jobs") + (" (paused)" if view.paused else "")


def cmd_delete(args: argparse.Namespace, client: Client) -> int:
    """Delete the jobs named (explicit ids: no question asked); say which could not be."""
    deleted: list[str] = []
    refused: dict[str, str] = {}
    for job_id in dict.fromkeys(job_id for listed in args.ids for job_id in listed):
        try:
            client.delete_job(args.queue, job_id)
            deleted.append(job_id)
        except JobNotFound:
            refused[job_id] = "no such job"
        except JobActive:
            refused[job_id] = "leased (active): cancel it, or let its worker finish"
    if refused and not deleted and known_queue(client, args.queue) is None:
        raise no_queue(args.queue)
    if args.json:
        print_json({"deleted": deleted, "not_deleted": refused})
    elif deleted:
        print(f"deleted {len(deleted)} job(s) of {args.queue}: {' '.join(deleted)}")
    if refused:
        raise Failed("not deleted: " + ", ".join(f"{job_id} ({why})" for job_id, why in refused.items()))
    return EXIT_OK


def cmd_job(args: argparse.Namespace, client: Client) -> int:
    job = client.get_job(args.queue, args.id)
    if args.json:
        print_json(job.to_dict())
        return EXIT_OK
    shown = job.to_dict()
    for key in ("id", "queue", "name", "state", "attempt", "max_attempts", "priority", "group", "worker"):
        print(f"{key + ':':14}{cell(shown.get(key))}")
    print(f"{'created:':14}{when(job.created_at)}")
    print(f"{'updated:':14}{when(job.updated_at)}")
    if job.lease_expires_at:
        print(f"{'lease left:':14}{duration(job.lease_expires_at - now_ms())}")
    print(f"{'finished:':14}{when(job.finished_at)}")
    print(f"{'payload:':14}{json_text(job.payload)}")
    print(f"{'result:':14}{json_text(job.result)}")
    if job.error:
        print("error:")
        print(job.error)
    return EXIT_OK


def cmd_jobs(args: argparse.Namespace, client: Client) -> int:
    """Up to --limit jobs, following the cursors; the cursor of the rest, if any, at the end."""
    jobs: list[Job] = []
    cursor = args.cursor
    while True:
        page = client.list_jobs(
            args.queue, args.state, limit=min(MAX_PAGE, args.limit - len(jobs)), cursor=cursor
        )
        jobs += page.jobs
        cursor = page.next_cursor
        if cursor is None or len(jobs) >= args.limit:
            break
    if not jobs:
        require_queue(client, args.queue)
    if args.json:
        print_json({"jobs": [job.to_dict() for job in jobs], "next_cursor": cursor})
        return EXIT_OK
    if not jobs:
        print(f"no {args.state} jobs in {args.queue}")
        return EXIT_OK
    with_error = args.state in ("failed", "cancelled")
    delayed = args.state == "delayed"
    rows = [
        [
            job.id,
            job.name,
            f"{job.attempt}/{job.max_attempts}",
            when(job.finished_at or job.updated_at),
        ]
        + ([summary(job.error, 48) or None] if with_error else [])
        + (delayed_cells(job.run_at, job.delay_reason) if delayed else [])
        for job in jobs
    ]
    headers = ["JOB", "NAME", "ATTEMPTS", "UPDATED", *(["ERROR"] if with_error else [])]
    table(headers + (DELAYED_HEADERS if delayed else []), rows)
    if cursor is not None:
        print(f"\nmore: emq jobs {args.queue} --state {args.state} --cursor {cursor}")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace, client: Client) -> int:
    answer = client.cancel(args.queue, args.id, reason=args.reason)
    if args.json:
        print_json(answer.to_dict())
    elif answer.state == "cancelled":
        print(f"job {answer.id} cancelled")
    elif answer.state == "active":
        print(f"job {answer.id} is running: cancellation requested (its worker stops it and fails it)")
    else:
        print(f"job {answer.id} is {answer.state} already; left as it is")
    return EXIT_OK


def cmd_wait(args: argparse.Namespace, client: Client) -> int:
    job = client.wait(args.queue, args.id, timeout_s=args.timeout)
    if args.json:
        print_json(job.to_dict())
    elif job.state == "completed":
        print(f"job {job.id} completed: {json_text(job.result)}")
    elif job.state in ("failed", "cancelled"):
        print(f"job {job.id} {job.state}: {summary(job.error)}")
    else:
        print(f"job {job.id} still {job.state} after {args.timeout:g} s")
    if job.state == "completed":
        return EXIT_OK
    return EXIT_FAILED if job.state in ("failed", "cancelled") else EXIT_PENDING


def json_text(value: Any) -> str:
    """A JSON value in text: compact JSON, and ``-`` for null."""
    return NULL if value is None else json.dumps(value, ensure_ascii=False)


_EVENT_DETAILS = ("state", "worker", "attempt", "reason", "after", "oldest")


def event_line(event: Event) -> str:
    """``<id> <time> <type> <job> key=value...``: the details an operator reads first."""
    shown = event.to_dict()
    details = [f"{key}={shown[key]}" for key in _EVENT_DETAILS if shown.get(key) is not None]
    if event.progress is not None:
        details.append(f"progress={json.dumps(event.progress, ensure_ascii=False)}")
    if event.error:
        details.append(f"error={summary(event.error, 60)!r}")
    head = [cell(event.event_id), when(event.at), event.type, cell(event.id)]
    return "  ".join(head + details)


def cmd_events(args: argparse.Namespace, client: Client) -> int:
    types = [kind for listed in args.type for kind in listed] if args.type else None
    for event in client.events(args.queue, after=args.after, types=types, job=args.job):
        if args.json:
            print_json({k: v for k, v in event.to_dict().items() if v is not None})
        else:
            print(event_line(event))
        sys.stdout.flush()  # a pipe too sees each event as it comes
    return EXIT_OK  # not reached: the feed goes on until Ctrl-C


COMMANDS: dict[str, Callable[[argparse.Namespace, Client], int]] = {
    "enqueue": cmd_enqueue,
    "stats": cmd_stats,
    "ledger": cmd_ledger,
    "workers": cmd_workers,
    "quiet": cmd_quiet,
    "failed": cmd_failed,
    "retry": cmd_retry,
    "pause": cmd_pause,
    "resume": cmd_pause,
    "delete-queue": cmd_delete_queue,
    "delete": cmd_delete,
    "settings": cmd_settings,
    "group": cmd_group,
    "groups": cmd_groups,
    "job": cmd_job,
    "jobs": cmd_jobs,
    "cancel": cmd_cancel,
    "wait": cmd_wait,
    "events": cmd_events,
}
