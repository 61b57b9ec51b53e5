"""`emq`: operate the queues of an EchoMQ HTTP service from a shell, and run commands as workers.

    emq enqueue QUEUE '{"to": "ada"}'          # one job; or --file jobs.jsonl (batches of 1000)
    emq stats [QUEUE] [--prefix P]             # counts of every queue, or of one
    emq ledger QUEUE                           # who holds what, and the lease time left
    emq failed QUEUE                           # the dead letter
    emq retry QUEUE [IDS...]                   # dead-lettered jobs back to waiting (no ids: all,
                                               # once confirmed)
    emq pause QUEUE / emq resume QUEUE
    emq delete-queue QUEUE [--force]           # the queue and every job in it (confirmed)
    emq delete QUEUE ID...                     # these jobs
    emq settings QUEUE [--max-in-flight N --rate MAX/PER_MS ...]  # show, or change some settings
    emq group QUEUE GROUP --max-in-flight N|none  # a group's own cap on its jobs in flight
    emq groups QUEUE                           # the groups: waiting, in flight, caps
    emq schedule QUEUE NAME --cron '*/5 * * * *' --tz Europe/Berlin --payload '{...}'
                                               # or --every-ms N; without either: show it
    emq schedules QUEUE                        # the schedules: timing, next and last run, counts
    emq unschedule QUEUE NAME                  # delete a schedule (its jobs stay)
    emq trigger QUEUE NAME                     # one job of the schedule now
    emq job QUEUE ID                           # one job
    emq jobs QUEUE --state S [--limit N]       # the jobs in one state, in its order
    emq search QUEUE TEXT [--state S,S]        # jobs holding TEXT (read client-side, bounded)
    emq history QUEUE [--minutes N]            # enqueued, completed, failed, reclaimed per minute
    emq wait QUEUE ID [--timeout S]            # until the job is completed, failed or cancelled
    emq cancel QUEUE ID [--reason R]           # cancel a job (a running one: its worker stops)
    emq promote QUEUE ID                       # run a delayed job (a delay or a retry's backoff) now
    emq events QUEUE [--type T...] [--job ID]  # follow what happens, until Ctrl-C
    emq work QUEUE -- COMMAND ARGS...          # run COMMAND for each job (an echomq.Worker)
    emq serve                                  # the service itself, when echomq-http is installed

Every command but `serve` talks to the service through ``echomq.Client`` (or the ``Worker``):
`--url` (default $EMQ_URL, else http://127.0.0.1:8080), `--token` (default $EMQ_TOKEN),
`--json` for output meant for scripts, `--utc` for times in UTC (else local, with the zone).
Commands that delete or re-queue in bulk ask first on a terminal, and refuse without one unless
given `--yes`. A queue, job or id that does not exist is an error (exit 1), not an empty answer.
`serve` belongs to the server package: it registers itself under the entry point group
``echomq.cli`` and this parser hands its arguments over.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, NoReturn, Optional, get_args

from echomq import __version__
from echomq._ops import DEFAULT_URL, default_url
from echomq.cli import _delayed, _lookups, _schedules
from echomq.cli._commands import (
    COMMANDS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    MAX_BATCH,
    NONE,
    Failed,
    UsageError,
    missing_job,
)
from echomq.cli._confirm import CannotAsk, NotConfirmed
from echomq.cli._output import show_times_in_utc
from echomq.client import Client
from echomq.errors import ConnectionFailed, EchoMQError, Forbidden, JobNotFound, Unauthorized
from echomq.models import EventType, JobState
from echomq.worker import DEFAULT_GRACE_S, DEFAULT_LEASE_MS, DEFAULT_WAIT_MS

__all__ = ["main"]

DEFAULT_KILL_GRACE_S = 5.0
JOB_STATES = get_args(JobState)
EVENT_TYPES = [kind for kind in get_args(EventType) if kind != "resync"]
PLUGINS = "echomq.cli"  # entry point group: commands other packages add (the server's `serve`)
ALL_COMMANDS = {**COMMANDS, **_schedules.COMMANDS, **_lookups.COMMANDS, **_delayed.COMMANDS}
# The server is not on PyPI: it is installed from a checkout of this repository.
SERVER_HINT = (
    "the server is not installed: install the server package from a checkout of the EchoMQ HTTP "
    "repository (pip install PATH_OF_THE_CHECKOUT, its top folder; `make serve` there runs it)"
)


def _plugin(name: str) -> Optional[Callable[[list[str]], int]]:
    found = entry_points()
    group = found.select(group=PLUGINS) if hasattr(found, "select") else found.get(PLUGINS, [])  # 3.9
    for entry in group:
        if entry.name == name:
            return entry.load()
    return None


def _serve(argv: list[str]) -> int:
    serve = _plugin("serve")
    if serve is None:
        _fail(SERVER_HINT, EXIT_USAGE)
    return serve(argv)


def _global_options(after_command: bool) -> argparse.ArgumentParser:
    """--url, --token, --json and --utc, taken before the command and after it. After it they
    default to nothing at all, so that `emq --url X stats` keeps the X given before."""
    options = argparse.ArgumentParser(add_help=False)

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_command else value

    options.add_argument(
        "--url",
        default=default(os.environ.get("EMQ_URL") or DEFAULT_URL),
        help=f"the service's base URL (default: $EMQ_URL, else {DEFAULT_URL})",
    )
    options.add_argument(
        "--token",
        default=default(os.environ.get("EMQ_TOKEN") or None),
        help="bearer token (default: $EMQ_TOKEN)",
    )
    options.add_argument(
        "--json", action="store_true", default=default(False), help="print JSON (for scripts) instead of text"
    )
    options.add_argument(
        "--utc",
        action="store_true",
        default=default(False),
        help="times in UTC (default: local time, zone shown)",
    )
    return options


def _parser() -> argparse.ArgumentParser:
    common = _global_options(after_command=True)
    asks = argparse.ArgumentParser(add_help=False)  # the commands that confirm before they act
    asks.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="do it without asking (needed when stdin is not a terminal)",
    )

    parser = argparse.ArgumentParser(
        prog="emq",
        description="EchoMQ HTTP: operate its queues, run workers.",
        parents=[_global_options(after_command=False)],
    )
    parser.add_argument("--version", action="version", version=f"emq (echomq-client) {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # Listed for --help only: main() hands `serve ...` to the server package before parsing.
    commands.add_parser("serve", help="run the service (needs the server package, echomq-http)")

    enqueue = commands.add_parser("enqueue", parents=[common], help="add one job, or a file of jobs")
    enqueue.add_argument("queue")
    enqueue.add_argument("payload", nargs="?", help="the job's payload, as JSON")
    enqueue.add_argument("--file", "-f", help="one payload (JSON) per line; - reads standard input")
    enqueue.add_argument(
        "--requests",
        action="store_true",
        help='each line of --file is a whole enqueue request: {"payload": ..., "id": ...}',
    )
    enqueue.add_argument("--id", help="the job's id (makes the enqueue idempotent)")
    enqueue.add_argument("--name", help="the job's name")
    enqueue.add_argument("--priority", type=int, help="0..1000, higher first (default 0)")
    enqueue.add_argument("--delay-ms", type=int, help="wait this long before it can be leased")
    enqueue.add_argument("--max-attempts", type=int, help="1..1000 (default 3)")
    enqueue.add_argument("--group", help="the job's group (leased round-robin across groups)")
    enqueue.add_argument(
        "--batch-size",
        type=int,
        default=MAX_BATCH,
        choices=range(1, MAX_BATCH + 1),
        metavar="N",
        help="jobs per request with --file (1..1000, default 1000)",
    )
    bar = enqueue.add_mutually_exclusive_group()
    bar.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    bar.add_argument("--no-progress", dest="progress", action="store_false")

    stats = commands.add_parser("stats", parents=[common], help="counts of every queue, or of one")
    stats.add_argument("queue", nargs="?")
    stats.add_argument("--prefix", default="", help="only the queues whose name starts with this")

    ledger = commands.add_parser(
        "ledger", parents=[common], help="jobs in flight: who holds what, lease time left"
    )
    ledger.add_argument("queue")
    ledger.add_argument("--worker", help="only this worker's jobs")
    ledger.add_argument("--limit", type=int, help="at most this many (default 1000)")

    workers = commands.add_parser(
        "workers",
        parents=[common],
        help="workers holding jobs or with a session: jobs held, session state, info",
    )
    workers.add_argument("queue")

    quiet = commands.add_parser(
        "quiet",
        parents=[common],
        help="quiet a worker: it leases nothing more and finishes its jobs (admin)",
        description="The worker's lease requests lease nothing until its session ends; its session "
        "heartbeats tell it so, and an SDK Worker then finishes the jobs it runs. Fails (exit 1) "
        "when the worker has no live session.",
    )
    quiet.add_argument("queue")
    quiet.add_argument("worker")

    failed = commands.add_parser("failed", parents=[common], help="dead-lettered jobs, most recent first")
    failed.add_argument("queue")
    failed.add_argument("--limit", type=int, help="at most this many (default 100, at most 1000)")
    failed.add_argument("--offset", type=int, help="skip this many")

    retry = commands.add_parser(
        "retry",
        parents=[common, asks],
        help="send dead-lettered jobs back to waiting: these ids, or EVERY dead letter without ids",
        description="Sends the dead-lettered jobs given back to waiting, attempts reset; ids that "
        "were not retried (no such job, or not dead-lettered) are named, with exit status 1. "
        "Without ids it re-queues EVERY dead-lettered job of the queue: on a terminal it says how "
        "many and asks first; without one it refuses unless --yes.",
    )
    retry.add_argument("queue")
    retry.add_argument("ids", nargs="*", type=_ids, metavar="ID", help="job ids (or ID,ID,...)")

    for action in ("pause", "resume"):
        paused = commands.add_parser(
            action, parents=[common], help=f"{action} a queue (a paused queue leases nothing)"
        )
        paused.add_argument("queue")

    delete_queue = commands.add_parser(
        "delete-queue",
        parents=[common, asks],
        help="delete a queue with all its jobs, schedules and keys",
        description="Deletes the queue and everything in it. On a terminal it shows what that is "
        "(jobs per state, schedules) and asks first; without one it refuses unless --yes. An "
        "unknown queue is an error.",
    )
    delete_queue.add_argument("queue")
    delete_queue.add_argument(
        "--force", action="store_true", help="even with jobs in flight (their workers' calls then fail)"
    )

    _settings_parser(commands, common)
    group = commands.add_parser(
        "group", parents=[common], help="set or clear a group's own cap on its jobs in flight"
    )
    group.add_argument("queue")
    group.add_argument("group")
    group.add_argument(
        "--max-in-flight",
        required=True,
        type=_count_or_none(1),
        metavar="N|none",
        help="at most N of the group's jobs in flight; none: the queue's group_max_in_flight",
    )
    groups = commands.add_parser("groups", parents=[common], help="a queue's groups, by name")
    groups.add_argument("queue")
    _schedules.add_parsers(commands, common)
    _delayed.add_parsers(commands, common)

    delete = commands.add_parser(
        "delete",
        parents=[common],
        help="delete these jobs (not leased ones)",
        description="Deletes each job given (waiting, delayed, completed, failed or cancelled; a "
        "leased one is refused). The ids that could not be deleted are named, with exit status 1.",
    )
    delete.add_argument("queue")
    delete.add_argument("ids", nargs="+", type=_ids, metavar="ID", help="job ids (or ID,ID,...)")
    _lookups.add_parsers(commands, common, _comma_list)

    job = commands.add_parser("job", parents=[common], help="show one job")
    job.add_argument("queue")
    job.add_argument("id")

    jobs = commands.add_parser(
        "jobs",
        parents=[common],
        help="the jobs in one state",
        description="The jobs in one state, in its order (waiting: next leased first; delayed: due "
        "first; active: oldest lease first; completed, failed, cancelled: most recently finished "
        "first). Pages are followed until --limit jobs are shown; if more remain, the last line "
        "gives the command that shows the next ones (--cursor).",
    )
    jobs.add_argument("queue")
    jobs.add_argument("--state", required=True, choices=JOB_STATES)
    jobs.add_argument("--limit", type=int, default=100, help="show at most this many (default %(default)s)")
    jobs.add_argument("--cursor", help="go on from where a previous listing stopped")

    wait = commands.add_parser(
        "wait",
        parents=[common],
        help="wait for a job's outcome",
        description="Wait until the job is completed (exit 0), failed or cancelled (exit 1), or "
        "--timeout seconds have passed (exit 3, its state printed).",
    )
    wait.add_argument("queue")
    wait.add_argument("id")
    wait.add_argument("--timeout", type=float, default=60.0, help="seconds (default %(default)s)")

    cancel = commands.add_parser(
        "cancel",
        parents=[common],
        help="cancel a job",
        description="A waiting or delayed job is cancelled at once; a running one is flagged, and "
        "its worker stops it and fails it (it then ends cancelled, never retried). A finished job "
        "is left as it is.",
    )
    cancel.add_argument("queue")
    cancel.add_argument("id")
    cancel.add_argument("--reason", help="kept as the job's error (at most 1 KiB)")

    events = commands.add_parser(
        "events",
        parents=[common],
        help="follow a queue's events until Ctrl-C",
        description="One line per event as it happens: id, time, type, job, details. A lost "
        "connection is resumed from the last event shown; a resync line means events were lost "
        "(too old, or the queue was deleted).",
    )
    events.add_argument("queue")
    events.add_argument(
        "--type",
        action="append",
        type=_comma_list(EVENT_TYPES),
        metavar="TYPE[,TYPE...]",
        help=f"only these types (repeatable, or comma-separated): {', '.join(EVENT_TYPES)}",
    )
    events.add_argument("--job", help="only this job's events")
    events.add_argument(
        "--after", type=int, help="from after this event id (0: the oldest kept; default: new events only)"
    )

    work = commands.add_parser(
        "work",
        parents=[common],
        usage="emq work [options] QUEUE -- COMMAND [ARGS...]",
        help="run a command for each job: emq work QUEUE -- COMMAND ARGS...",
        description=(
            "Lease jobs and run COMMAND for each: the payload (JSON) on its stdin, EMQ_JOB_ID, "
            "EMQ_ATTEMPT, EMQ_MAX_ATTEMPTS, EMQ_FENCE and EMQ_QUEUE in its environment. Exit 0 acks "
            "with its stdout as the result (JSON if it parses, else a string); another exit status "
            "fails the attempt with the end of its stderr. Leases are renewed while it runs; a "
            "command whose lease is lost is stopped. SIGTERM or SIGINT: take no more jobs, let the "
            "commands running finish for up to --grace-s seconds, then stop the rest and release "
            "their jobs (a second signal skips the wait). It runs on echomq.Worker."
        ),
    )
    work.add_argument("queue")
    work.add_argument("--concurrency", "-c", type=int, default=1, help="commands at once (default 1)")
    work.add_argument(
        "--lease-ms", type=int, default=DEFAULT_LEASE_MS, help="lease length (default %(default)s)"
    )
    work.add_argument(
        "--wait-ms",
        type=int,
        default=DEFAULT_WAIT_MS,
        help="long poll per lease request (default %(default)s)",
    )
    work.add_argument("--worker", help="worker name (default: host-pid-random)")
    work.add_argument(
        "--grace-s",
        type=float,
        default=DEFAULT_GRACE_S,
        help="on SIGTERM/SIGINT, how long running commands may finish (default %(default)s)",
    )
    work.add_argument(
        "--kill-grace-s",
        type=float,
        default=DEFAULT_KILL_GRACE_S,
        help="SIGTERM to SIGKILL delay when a command must stop (default %(default)s)",
    )
    return parser


def _comma_list(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An option's value as the API takes it: one item, or several separated by commas."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in allowed]
        if unknown or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(unknown) or repr(text)}: not one of {', '.join(allowed)}"
            )
        return items

    return parse


def _ids(text: str) -> list[str]:
    """Job ids: one, or several separated by commas (an id never holds a comma)."""
    return [item for item in text.split(",") if item]


def _count_or_none(low: int) -> Callable[[str], object]:
    def parse(text: str) -> object:
        if text.lower() == "none":
            return NONE
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number or 'none': {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {value}")
        return value

    return parse


def _rate(text: str) -> object:
    if text.lower() == "none":
        return NONE
    most, _, per_ms = text.partition("/")
    try:
        return (int(most), int(per_ms))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not MAX/PER_MS (e.g. 100/1000) or 'none': {text!r}") from None


def _on_off(text: str) -> bool:
    if text.lower() not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"on or off, not {text!r}")
    return text.lower() == "on"


def _settings_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    settings = commands.add_parser(
        "settings",
        parents=[common],
        help="show a queue's settings, or change some of them",
        description="Without options: show the queue's settings. With options: read the settings, "
        "change the ones given and write the whole set back (PUT); the settings not given keep "
        "their current value. 'none' clears a limit (or a retention: back to the service's).",
    )
    settings.add_argument("queue")
    limits = (
        ("--max-in-flight", 1, "at most N of the queue's jobs in flight at once"),
        ("--group-max-in-flight", 1, "at most N jobs of each group in flight at once"),
        ("--max-stalls", 0, "dead-letter a job whose lease expired more than N times"),
        ("--completed-retention-s", 0, "keep the queue's completed jobs N seconds"),
        ("--failed-retention-s", 0, "keep the queue's dead-lettered and cancelled jobs N seconds"),
    )
    for option, low, text in limits:
        settings.add_argument(option, type=_count_or_none(low), metavar="N|none", help=text)
    settings.add_argument(
        "--rate", type=_rate, metavar="MAX/PER_MS|none", help="at most MAX leased jobs per PER_MS ms window"
    )
    settings.add_argument("--events", type=_on_off, metavar="on|off", help="the queue's events on or off")


def _fail(message: str, code: int) -> NoReturn:
    print(f"emq: {message}", file=sys.stderr)
    raise SystemExit(code)


def _auth_problem(error: EchoMQError, token: Optional[str]) -> str:
    """A 401/403 in the CLI's terms: where its token comes from, not the HTTP header."""
    head = f"{error.status} {error.code}"
    if isinstance(error, Unauthorized) and token:
        return f"{head}: the token given (--token or $EMQ_TOKEN) is not accepted"
    if isinstance(error, Unauthorized):
        return f"{head}: this service needs a token: pass --token TOKEN or set $EMQ_TOKEN"
    return f"{head}: {error.detail or error.title} (the token of --token or $EMQ_TOKEN)"


def _run(args: argparse.Namespace, command: list[str]) -> int:
    url = default_url(args.url)
    try:
        if args.command == "work":
            from echomq.cli._work import cmd_work  # asyncio and subprocesses: only for `work`

            return cmd_work(args, command)
        with Client(url, token=args.token) as client:
            try:
                return ALL_COMMANDS[args.command](args, client)
            except JobNotFound:
                if getattr(args, "id", None) is None:
                    raise
                raise missing_job(client, args.queue, args.id) from None
    except (UsageError, CannotAsk) as error:
        _fail(str(error), EXIT_USAGE)
    except ConnectionFailed as error:
        doing = "cannot reach" if not error.sent else "no answer from"
        _fail(f"{doing} EchoMQ at {_site(url)}: {error.reason}", EXIT_FAILED)
    except (Unauthorized, Forbidden) as error:
        _fail(_auth_problem(error, args.token), EXIT_FAILED)
    except BrokenPipeError:
        raise  # not a failure of the command: main() ends quietly
    except (EchoMQError, Failed, NotConfirmed, OSError) as error:
        _fail(str(error), EXIT_FAILED)
    except KeyboardInterrupt:
        return 130


def _site(url: str) -> str:
    """The base URL without what a user may have put in it that should not be printed."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: its reader is gone, and the interpreter's last flush at exit
    must not fail (and print a traceback) again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (redirected in-process): nothing flushes it
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return _serve(argv[1:])
    command: list[str] = []
    split = argv.index("--") if "--" in argv else -1
    if split >= 0 and "work" in argv[:split]:  # everything after -- is the command, untouched
        argv, command = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(argv)
    show_times_in_utc(args.utc)
    try:
        status = _run(args, command)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
    except BrokenPipeError:
        # `emq jobs q | head -1`: the reader has what it wanted; as for cat or grep, not an error.
        _quiet_stdout()
        return EXIT_OK
    return status
