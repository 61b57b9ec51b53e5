"""`emq history` (a queue's counts per minute) and `emq search` (jobs holding a text).

The API has no search: `search` reads the job listing page by page, state by state, and looks
for the text in each job itself, reading at most ``--scan`` jobs, so that a search of a large
queue stays bounded (the dashboard's search is bounded the same way, on the service's side).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any, Optional

from echomq.cli._commands import EXIT_OK, MAX_PAGE, STATES, UsageError, require_queue
from echomq.cli._output import print_json, summary, table, when
from echomq.client import Client
from echomq.models import Job

MAX_HISTORY_MINUTES = 1440  # the API's limit
DEFAULT_MATCHES = 20
DEFAULT_SCAN = 10_000
# Where a search looks first: the jobs an operator usually hunts for, then the rest.
SEARCH_ORDER = ("failed", "cancelled", "delayed", "waiting", "active", "completed")


def add_parsers(commands: Any, common: argparse.ArgumentParser, comma_list: Callable[..., Any]) -> None:
    history = commands.add_parser(
        "history",
        parents=[common],
        help="a queue's jobs enqueued, completed, failed and reclaimed, per minute",
    )
    history.add_argument("queue")
    history.add_argument(
        "--minutes",
        type=int,
        default=60,
        help=f"this many minutes back, 1..{MAX_HISTORY_MINUTES} (default 60)",
    )

    search = commands.add_parser(
        "search",
        parents=[common],
        help="jobs whose id, name, payload, result or error holds TEXT",
        description="Reads the queue's jobs state by state (failed, cancelled, delayed, waiting, "
        "active, completed, or --state) and shows those holding TEXT (any case) in their id, name, "
        "payload, result or error. The service has no search of its own: this reads at most --scan "
        "jobs, and says so when it stopped before the end.",
    )
    search.add_argument("queue")
    search.add_argument("text")
    search.add_argument(
        "--state",
        type=comma_list(STATES),
        action="append",
        metavar="STATE[,STATE...]",
        help="only these states (repeatable, or comma-separated)",
    )
    search.add_argument(
        "--limit", type=int, default=DEFAULT_MATCHES, help="show at most this many jobs (default %(default)s)"
    )
    search.add_argument(
        "--scan", type=int, default=DEFAULT_SCAN, help="read at most this many jobs (default %(default)s)"
    )


def cmd_history(args: argparse.Namespace, client: Client) -> int:
    if not 1 <= args.minutes <= MAX_HISTORY_MINUTES:
        raise UsageError(f"--minutes must be 1..{MAX_HISTORY_MINUTES}")
    minutes = client.history(args.queue, minutes=args.minutes)
    if not any(m.enqueued or m.completed or m.failed or m.reclaimed for m in minutes):
        require_queue(client, args.queue)
    if args.json:
        print_json({"minutes": [minute.to_dict() for minute in minutes]})
        return EXIT_OK
    counted = ("enqueued", "completed", "failed", "reclaimed")
    table(
        ["MINUTE", *(name.upper() for name in counted)],
        [[when(minute.at), *(getattr(minute, name) for name in counted)] for minute in minutes],
    )
    totals = ", ".join(f"{sum(getattr(m, name) for m in minutes)} {name}" for name in counted)
    print(f"\nlast {len(minutes)} minute(s) of {args.queue}: {totals}")
    return EXIT_OK


def _holds(job: Job, text: str) -> bool:
    fields = [job.id, job.name, job.error]
    fields += [json.dumps(value, ensure_ascii=False) for value in (job.payload, job.result)]
    return any(text in field.lower() for field in fields if field)  # (a null reads "null")


def _jobs(client: Client, queue: str, states: tuple[str, ...]) -> Iterator[Job]:
    for state in states:
        cursor: Optional[str] = None
        while True:
            page = client.list_jobs(queue, state, limit=MAX_PAGE, cursor=cursor)
            yield from page.jobs
            cursor = page.next_cursor
            if cursor is None:
                break


def cmd_search(args: argparse.Namespace, client: Client) -> int:
    if args.limit < 1 or args.scan < 1:
        raise UsageError("--limit and --scan must be at least 1")
    chosen = {state for listed in args.state or [] for state in listed}
    states = tuple(state for state in SEARCH_ORDER if not chosen or state in chosen)
    text = args.text.lower()
    found: list[Job] = []
    scanned = 0
    complete = True
    for job in _jobs(client, args.queue, states):
        if scanned >= args.scan or len(found) >= args.limit:
            complete = False
            break
        scanned += 1
        if _holds(job, text):
            found.append(job)
    if not scanned:
        require_queue(client, args.queue)
    if args.json:
        print_json({"jobs": [job.to_dict() for job in found], "scanned": scanned, "complete": complete})
        return EXIT_OK
    if found:
        rows = [
            [
                job.id,
                job.state,
                job.name,
                when(job.finished_at or job.updated_at),
                summary(job.error, 48) or None,
            ]
            for job in found
        ]
        table(["JOB", "STATE", "NAME", "UPDATED", "ERROR"], rows)
        print()
    print(f"{len(found)} job(s) of {args.queue} hold {args.text!r}; {scanned} job(s) read", end="")
    if complete:
        print(f" ({', '.join(states)}: all of them)")
    elif len(found) >= args.limit:
        print(f"; stopped at --limit {args.limit}")
    else:
        print(f"; stopped at --scan {args.scan}, the rest not searched")
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Client], int]] = {
    "history": cmd_history,
    "search": cmd_search,
}
