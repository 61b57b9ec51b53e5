"""`emq`: run the service, and operate queues from a shell.

    emq serve                                  # the service (what `make serve` runs)
    emq enqueue QUEUE '{"to": "ada"}'          # one job; or --file jobs.jsonl (batches of 1000)
    emq stats [QUEUE]                          # counts of every queue, or of one
    emq ledger QUEUE                           # who holds what, and the lease time left
    emq failed QUEUE                           # the dead letter
    emq retry QUEUE [IDS...]                   # send dead-lettered jobs back to waiting
    emq pause QUEUE / emq resume QUEUE
    emq delete-queue QUEUE [--force]           # the queue and every job in it
    emq job QUEUE ID                           # one job
    emq work QUEUE -- COMMAND ARGS...          # run COMMAND for each job

Every command but `serve` talks to the service over HTTP: `--url` (default $EMQ_URL, else
http://127.0.0.1:8080), `--token` (default $EMQ_TOKEN), `--json` for output meant for scripts.
This module needs only httpx and the standard library; the service itself is imported by
`emq serve` alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NoReturn, TextIO
from urllib.parse import quote

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_LEASE_MS = 30_000
DEFAULT_WAIT_MS = 5_000
DEFAULT_KILL_GRACE_S = 5.0
MAX_BATCH = 1000
MAX_ERROR_BYTES = 8 * 1024
HTTP_TIMEOUT_S = 30.0
RETRIES = 4
USER_AGENT = "emq-cli"

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# --- HTTP --------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answer (problem details) or no answer at all (status 0)."""

    def __init__(self, status: int, code: str, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}" if status else detail)
        self.status, self.code, self.detail, self.retry_after_s = status, code, detail, retry_after_s


def _error_of(response: httpx.Response) -> ApiError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    retry_after: float | None = None
    with contextlib.suppress(ValueError):
        retry_after = float(response.headers.get("retry-after", ""))
    return ApiError(
        response.status_code,
        str(problem.get("code") or f"http_{response.status_code}"),
        str(problem.get("detail") or problem.get("title") or response.text[:200]),
        retry_after,
    )


def _retryable(error: Exception, idempotent: bool) -> bool:
    """Whether to repeat a call: always when nothing reached the service (no connection, 429),
    and after an ambiguous failure (503, a dropped connection) only when repeating is safe."""
    if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
        return True
    if isinstance(error, ApiError):
        return error.status == 429 or (error.status == 503 and idempotent)
    return isinstance(error, httpx.TransportError) and idempotent


def _delay(attempt: int, error: Exception) -> float:
    backoff = random.uniform(0, min(5.0, 0.2 * 2**attempt))
    hinted = getattr(error, "retry_after_s", None)
    return min(5.0, max(backoff, hinted)) if hinted else backoff


def _no_answer(method: str, path: str, error: httpx.TransportError) -> ApiError:
    return ApiError(0, "unreachable", f"{method} {path}: no answer from the service ({error!r})")


@dataclass
class Api:
    """Blocking calls for the one-shot commands."""

    url: str
    token: str | None
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.url, headers=_headers(self.token), timeout=HTTP_TIMEOUT_S)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        idempotent = method == "GET" if idempotent is None else idempotent
        attempt = 0
        while True:
            try:
                try:
                    response = self.http.request(method, path, json=body, params=params)
                except httpx.TransportError as error:
                    if not _retryable(error, idempotent) or attempt >= RETRIES:
                        raise _no_answer(method, path, error) from error
                    raise
                if response.status_code >= 400:
                    raise _error_of(response)
                return response.json() if response.content else None
            except (ApiError, httpx.TransportError) as error:
                if not _retryable(error, idempotent) or attempt >= RETRIES:
                    raise
                time.sleep(_delay(attempt, error))
                attempt += 1


class AsyncApi:
    """The same for `emq work`, on asyncio."""

    def __init__(self, url: str, token: str | None) -> None:
        self.http = httpx.AsyncClient(base_url=url, headers=_headers(token), timeout=HTTP_TIMEOUT_S)

    async def call(self, path: str, body: Any, *, idempotent: bool, extra_timeout_s: float = 0.0) -> Any:
        attempt = 0
        while True:
            try:
                try:
                    response = await self.http.post(path, json=body, timeout=HTTP_TIMEOUT_S + extra_timeout_s)
                except httpx.TransportError as error:
                    if not _retryable(error, idempotent) or attempt >= RETRIES:
                        raise _no_answer("POST", path, error) from error
                    raise
                if response.status_code >= 400:
                    raise _error_of(response)
                return response.json()
            except (ApiError, httpx.TransportError) as error:
                if not _retryable(error, idempotent) or attempt >= RETRIES:
                    raise
                await asyncio.sleep(_delay(attempt, error))
                attempt += 1

    async def aclose(self) -> None:
        await self.http.aclose()


def _headers(token: str | None) -> dict[str, str]:
    found = {"user-agent": USER_AGENT}
    if token:
        found["authorization"] = f"Bearer {token}"
    return found


def _q(queue: str) -> str:
    return f"/v1/queues/{_seg(queue)}"


def _seg(value: str) -> str:
    return quote(value, safe="")


# --- output ------------------------------------------------------------------------------------


def _print_json(value: Any) -> None:
    print(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [
        max(len(h), *(len(row[i]) for row in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    for row in [list(headers), *cells]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out
        )


def _duration(ms: float) -> str:
    seconds = abs(ms) / 1000
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _when(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _now_ms() -> float:
    # The service's times come from the Redis server's clock; this machine's clock is assumed
    # close to it (NTP). Lease times left are estimates to that precision.
    return time.time() * 1000


def _summary(text: str | None, width: int = 72) -> str:
    """An error in one line: its first line, and its last when that says something more."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0] if len(lines) == 1 or lines[-1] in lines[0] else f"{lines[0]}: {lines[-1]}"
    return line if len(line) <= width else line[: width - 1] + "…"


class Progress:
    """A progress bar on stderr: ``[#####-----] 4000/10000  40%  3512 jobs/s``."""

    def __init__(self, total: int | None, out: TextIO, enabled: bool) -> None:
        self.total, self.out, self.enabled = total, out, enabled
        self.done = 0
        self.width = 0
        self.started = time.monotonic()

    def advance(self, count: int) -> None:
        self.done += count
        if not self.enabled:
            return
        rate = self.done / max(time.monotonic() - self.started, 1e-6)
        if self.total:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "-" * (30 - filled)
            line = f"[{bar}] {self.done}/{self.total} {100 * self.done // self.total:3d}%  {rate:.0f} jobs/s"
        else:
            line = f"{self.done} jobs  {rate:.0f} jobs/s"
        self.out.write("\r" + line.ljust(self.width))  # spaces over a longer previous frame
        self.width = len(line)
        self.out.flush()

    def finish(self) -> None:
        if self.enabled and self.done:
            self.out.write("\n")
            self.out.flush()


# --- commands ----------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    if args.host:
        os.environ["HOST"] = args.host
    if args.port is not None:
        os.environ["PORT"] = str(args.port)
    from echomq_http.__main__ import main as serve_main  # only `serve` imports the service

    return serve_main()


JOB_OPTIONS = ("id", "name", "priority", "delay_ms", "max_attempts")


def _job_defaults(args: argparse.Namespace) -> dict[str, Any]:
    found = {name: getattr(args, name) for name in JOB_OPTIONS if getattr(args, name) is not None}
    found.pop("id", None)
    return found


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise UsageError(f"{where} is not JSON: {error}") from None


class UsageError(Exception):
    pass


def cmd_enqueue(args: argparse.Namespace, api: Api) -> int:
    if (args.payload is None) == (args.file is None):
        raise UsageError("give a JSON payload or --file FILE (one JSON value per line), not both")
    if args.file is None:
        body = {"payload": _parse_json(args.payload, "the payload"), **_job_defaults(args)}
        if args.id is not None:
            body["id"] = args.id
        answer = api.call("POST", f"{_q(args.queue)}/jobs", body, idempotent=args.id is not None)
        if args.json:
            _print_json(answer)
        elif answer["created"]:
            print(f"enqueued job {answer['id']} into {answer['queue']} ({answer['state']})")
        else:
            print(
                f"job {answer['id']} already exists in {answer['queue']} ({answer['state']}); left as it is"
            )
        return EXIT_OK
    if args.id is not None:
        raise UsageError("--id applies to a single job; in a file, give ids per line with --requests")
    return _enqueue_file(args, api)


def _lines(path: str) -> Iterator[tuple[int, str]]:
    stream: IO[str] = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    try:
        for number, line in enumerate(stream, 1):
            if line.strip():
                yield number, line
    finally:
        if stream is not sys.stdin:
            stream.close()


def _job_of_line(args: argparse.Namespace, number: int, line: str) -> dict[str, Any]:
    value = _parse_json(line, f"line {number}")
    defaults = _job_defaults(args)
    if not args.requests:
        return {"payload": value, **defaults}
    if not isinstance(value, dict) or "payload" not in value:
        raise UsageError(f"line {number}: with --requests each line is an object with a 'payload'")
    return {**defaults, **value}


def _enqueue_file(args: argparse.Namespace, api: Api) -> int:
    total: int | None = None
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
    batch: list[dict[str, Any]] = []
    first_line = 0

    def send() -> None:
        nonlocal created, existing
        path = f"{_q(args.queue)}/enqueue"
        idempotent = all("id" in job for job in batch)
        try:
            answer = api.call("POST", path, {"jobs": batch}, idempotent=idempotent)
        except ApiError as error:
            raise ApiError(
                error.status,
                error.code,
                f"the batch from line {first_line} was refused ({error.detail}); "
                f"{progress.done} job(s) before it were enqueued",
            ) from error
        made = sum(1 for job in answer["jobs"] if job["created"])
        created += made
        existing += len(answer["jobs"]) - made
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
    summary = {"queue": args.queue, "enqueued": progress.done, "created": created, "existing": existing}
    if args.json:
        _print_json(summary)
    else:
        print(
            f"enqueued {progress.done} job(s) into {args.queue} in {elapsed:.1f} s "
            f"({created} new, {existing} already there)"
        )
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, api: Api) -> int:
    if args.queue:
        views = [api.call("GET", _q(args.queue))]
        answer: Any = views[0]
    else:
        answer = api.call("GET", "/v1/queues")
        views = answer["queues"]
    if args.json:
        _print_json(answer)
        return EXIT_OK
    if not views:
        print("no queues")
        return EXIT_OK
    states = ("waiting", "delayed", "active", "completed", "failed")
    rows = [
        [view["name"], "yes" if view["paused"] else "no", *(view["counts"][state] for state in states)]
        for view in sorted(views, key=lambda view: view["name"])
    ]
    _table(["QUEUE", "PAUSED", *(state.upper() for state in states)], rows)
    return EXIT_OK


def cmd_ledger(args: argparse.Namespace, api: Api) -> int:
    params = {"worker": args.worker, "limit": args.limit}
    answer = api.call("GET", f"{_q(args.queue)}/active", params={k: v for k, v in params.items() if v})
    if args.json:
        _print_json(answer)
        return EXIT_OK
    jobs = answer["jobs"]
    if not jobs:
        print(f"nothing in flight in {args.queue}")
        return EXIT_OK
    now = _now_ms()
    rows = []
    for job in jobs:
        left = job["lease_expires_at"] - now
        rows.append(
            [
                job["id"],
                job["worker"],
                job["attempt"],
                _duration(now - job["leased_at"]),
                _duration(left) if left >= 0 else f"expired {_duration(left)} ago",
            ]
        )
    _table(["JOB", "WORKER", "ATTEMPT", "HELD FOR", "LEASE LEFT"], rows)
    holders: dict[str, int] = {}
    for job in jobs:
        holders[job["worker"]] = holders.get(job["worker"], 0) + 1
    print()
    print(f"{len(jobs)} job(s) in flight, held by {len(holders)} worker(s): ", end="")
    print(", ".join(f"{worker} ({count})" for worker, count in sorted(holders.items())))
    return EXIT_OK


def cmd_failed(args: argparse.Namespace, api: Api) -> int:
    params = {"limit": args.limit, "offset": args.offset}
    answer = api.call(
        "GET", f"{_q(args.queue)}/failed", params={k: v for k, v in params.items() if v is not None}
    )
    if args.json:
        _print_json(answer)
        return EXIT_OK
    jobs, total = answer["jobs"], answer["total"]
    if not total:
        print(f"no dead-lettered jobs in {args.queue}")
        return EXIT_OK
    offset = args.offset or 0
    shown = f"{offset + 1}-{offset + len(jobs)}" if jobs else "none"
    print(f"{total} dead-lettered job(s) in {args.queue}, most recent first (showing {shown})")
    rows = [
        [
            job["id"],
            f"{job['attempt']}/{job['max_attempts']}",
            _when(job["updated_at"]),
            _summary(job["error"]),
        ]
        for job in jobs
    ]
    _table(["JOB", "ATTEMPTS", "FAILED AT", "ERROR"], rows)
    return EXIT_OK


def cmd_retry(args: argparse.Namespace, api: Api) -> int:
    body = {"ids": args.ids} if args.ids else {}
    answer = api.call("POST", f"{_q(args.queue)}/failed/retry", body, idempotent=bool(args.ids))
    if args.json:
        _print_json(answer)
    elif answer["retried"]:
        print(f"retried {len(answer['retried'])} job(s): {' '.join(answer['retried'])}")
    else:
        print("nothing to retry" + (" (none of those ids is dead-lettered)" if args.ids else ""))
    return EXIT_OK


def cmd_pause(args: argparse.Namespace, api: Api) -> int:
    action = "pause" if args.command == "pause" else "resume"
    answer = api.call("POST", f"{_q(args.queue)}/{action}", idempotent=True)
    if args.json:
        _print_json(answer)
    else:
        print(f"queue {answer['name']} {'paused' if answer['paused'] else 'running'}")
    return EXIT_OK


def cmd_delete_queue(args: argparse.Namespace, api: Api) -> int:
    params = {"force": "true"} if args.force else None
    api.call("DELETE", _q(args.queue), params=params, idempotent=True)  # a deleted queue: 204 again
    if args.json:
        _print_json({"deleted": args.queue})
    else:
        print(f"queue {args.queue} deleted")
    return EXIT_OK


def cmd_job(args: argparse.Namespace, api: Api) -> int:
    answer = api.call("GET", f"{_q(args.queue)}/jobs/{_seg(args.id)}")
    if args.json:
        _print_json(answer)
        return EXIT_OK
    for key in ("id", "queue", "name", "state", "attempt", "max_attempts", "priority", "worker"):
        print(f"{key + ':':14}{answer.get(key)}")
    print(f"{'created:':14}{_when(answer.get('created_at'))}")
    print(f"{'updated:':14}{_when(answer.get('updated_at'))}")
    if answer.get("lease_expires_at"):
        print(f"{'lease left:':14}{_duration(answer['lease_expires_at'] - _now_ms())}")
    print(f"{'payload:':14}{json.dumps(answer.get('payload'), ensure_ascii=False)}")
    print(f"{'result:':14}{json.dumps(answer.get('result'), ensure_ascii=False)}")
    if answer.get("error"):
        print("error:")
        print(answer["error"])
    return EXIT_OK


# --- emq work ----------------------------------------------------------------------------------


def default_worker_id() -> str:
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:80].strip("-.") or "worker"
    return f"{host}-{os.getpid()}-{random.randrange(16**4):04x}"


def result_of(stdout: bytes) -> Any:
    """The command's stdout as the job's result: its JSON when it parses, else the text."""
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _tail(data: bytes, limit: int) -> str:
    if len(data) > limit:
        data = b"..." + data[-(limit - 3) :]
    return data.decode("utf-8", errors="ignore")


def error_of(returncode: int, stderr_tail: bytes) -> str:
    """The fail error of a command: how it ended, then the end of its stderr (within 8 KiB)."""
    if returncode < 0:
        try:
            head = f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            head = f"killed by signal {-returncode}"
    else:
        head = f"exit status {returncode}"
    text = stderr_tail.rstrip()
    if not text:
        return head
    return head + "\n" + _tail(text, MAX_ERROR_BYTES - len(head) - 1)


@dataclass
class Running:
    job: dict[str, Any]
    task: asyncio.Task[None] | None = None
    process: asyncio.subprocess.Process | None = None
    reason: str | None = None  # "lease_lost" | "stopped"
    killed: asyncio.Event = field(default_factory=asyncio.Event)


class CommandWorker:
    """Runs COMMAND once per job: payload on stdin, result from stdout, heartbeats meanwhile."""

    def __init__(self, args: argparse.Namespace, command: list[str]) -> None:
        self.queue: str = args.queue
        self.command = command
        self.worker_id: str = args.worker or default_worker_id()
        self.concurrency: int = args.concurrency
        self.lease_ms: int = args.lease_ms
        self.wait_ms: int = args.wait_ms
        self.kill_grace_s: float = args.kill_grace_s
        self.json_output: bool = args.json
        self.api = AsyncApi(args.url, args.token)
        self.running: dict[str, Running] = {}
        self.stopping = asyncio.Event()
        self.slot_freed = asyncio.Event()
        self.poll_settled = asyncio.Event()  # no lease request in flight
        self.poll_settled.set()
        self.counts = {"done": 0, "failed": 0, "lost": 0, "released": 0}

    # events: one line each on stdout (JSON lines with --json)
    def event(self, kind: str, job: dict[str, Any] | None = None, **fields: Any) -> None:
        if self.json_output:
            record: dict[str, Any] = {"event": kind}
            if job is not None:
                record.update(id=job["id"], attempt=job["attempt"])
            record.update(fields)
            _print_json(record)
        else:
            stamp = datetime.now().strftime("%H:%M:%S")
            subject = f"job {job['id']} (attempt {job['attempt']}) " if job is not None else ""
            detail = " ".join(f"{key}={value}" for key, value in fields.items())
            print(f"{stamp} {subject}{kind} {detail}".rstrip())
        sys.stdout.flush()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stopping.set)
        self.event("started", worker=self.worker_id, queue=self.queue, concurrency=self.concurrency)
        try:
            await self.lease_loop()
        except ApiError as error:
            print(f"emq work: {error}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            await self.stop_running()
            await self.api.aclose()
            self.event("stopped", **self.counts)
        return EXIT_OK

    async def lease_loop(self) -> None:
        stop_wait = asyncio.ensure_future(self.stopping.wait())
        failures = 0
        try:
            while not self.stopping.is_set():
                free = self.concurrency - len(self.running)
                if free <= 0:
                    self.slot_freed.clear()
                    slot = asyncio.ensure_future(self.slot_freed.wait())
                    await asyncio.wait({slot, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                    slot.cancel()
                    continue
                body = {
                    "worker": self.worker_id,
                    "lease_ms": self.lease_ms,
                    "max_jobs": free,
                    "wait_ms": self.wait_ms,
                }
                poll = asyncio.ensure_future(
                    self.api.call(
                        f"{_q(self.queue)}/lease", body, idempotent=False, extra_timeout_s=self.wait_ms / 1000
                    )
                )
                leased_at = time.monotonic()
                await asyncio.wait({poll, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done():
                    # Stopping during the long poll: cancelling it could lose a job leased at
                    # that instant, so let it answer (at most wait_ms) and give back what it
                    # brings. Stopped commands' jobs are released after that, or it could lease
                    # them again.
                    self.poll_settled.clear()
                    await asyncio.gather(self.stop_running(), self.release_polled(poll))
                    return
                try:
                    jobs = poll.result()["jobs"]
                except ApiError as error:
                    if error.status in (400, 401, 403, 404):
                        raise
                    failures += 1
                    delay = min(10.0, 0.2 * 2**failures) * random.uniform(0.5, 1.0)
                    self.event("lease-error", error=str(error), retry_in_s=round(delay, 1))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(stop_wait), delay)
                    continue
                failures = 0
                for job in jobs:
                    if self.stopping.is_set():
                        await self.release(job)
                        continue
                    running = Running(job)
                    running.task = asyncio.create_task(self.process(running, leased_at))
                    self.running[job["id"]] = running
        finally:
            stop_wait.cancel()

    async def release_polled(self, poll: asyncio.Future[Any]) -> None:
        try:
            jobs = (await poll)["jobs"]
        except ApiError:
            return
        finally:
            self.poll_settled.set()
        for job in jobs:
            await self.release(job)

    async def stop_running(self) -> None:
        """Stop the commands still running; their jobs are then released (see process)."""
        for running in self.running.values():
            running.reason = running.reason or "stopped"
        waits = [self.kill(running) for running in self.running.values()]
        waits += [running.task for running in self.running.values() if running.task is not None]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    async def kill(self, running: Running) -> None:
        """SIGTERM to the command's process group, SIGKILL after the grace period."""
        process = running.process
        running.killed.set()
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self.kill_grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    async def release(self, job: dict[str, Any]) -> None:
        path = f"{_q(self.queue)}/jobs/{_seg(job['id'])}/release"
        try:
            await self.api.call(path, {"lease_id": job["lease_id"]}, idempotent=False)
            self.counts["released"] += 1
            self.event("released", job)
        except ApiError as error:
            self.event("release-error", job, error=str(error))

    async def process(self, running: Running, leased_at: float) -> None:
        job = running.job
        started = time.monotonic()
        beats = asyncio.create_task(self.heartbeats(running, leased_at))
        try:
            returncode, stdout, stderr_tail = await self.execute(running)
        except OSError as error:  # the command could not be started
            returncode, stdout, stderr_tail = 127, b"", str(error).encode()
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
        try:
            seconds = round(time.monotonic() - started, 3)
            if running.reason == "lease_lost":  # never ack blindly
                self.counts["lost"] += 1
                self.event("lease-lost", job, seconds=seconds)
            elif running.reason == "stopped":
                await self.poll_settled.wait()
                await self.release(job)
            elif returncode == 0:
                await self.ack(job, result_of(stdout), seconds)
            else:
                await self.fail(job, error_of(returncode, stderr_tail), seconds, returncode)
        finally:
            self.running.pop(job["id"], None)
            self.slot_freed.set()

    async def execute(self, running: Running) -> tuple[int, bytes, bytes]:
        job = running.job
        env = {
            **os.environ,
            "EMQ_JOB_ID": job["id"],
            "EMQ_ATTEMPT": str(job["attempt"]),
            "EMQ_MAX_ATTEMPTS": str(job["max_attempts"]),
            "EMQ_FENCE": str(job["fence"]),
            "EMQ_QUEUE": job["queue"],
        }
        process = running.process = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: stopped as a whole, not by our Ctrl-C
        )
        if running.killed.is_set():  # stopped while it was starting
            await self.kill(running)
        assert process.stdin and process.stdout and process.stderr
        tail = bytearray()

        async def feed() -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.write(json.dumps(job["payload"]).encode() + b"\n")
                await process.stdin.drain()
                process.stdin.close()

        async def drain_stderr() -> None:
            while chunk := await process.stderr.read(65536):
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
                tail.extend(chunk)
                del tail[: max(0, len(tail) - MAX_ERROR_BYTES)]

        _, stdout, _ = await asyncio.gather(feed(), process.stdout.read(), drain_stderr())
        returncode = await process.wait()
        return returncode, stdout, bytes(tail)

    async def heartbeats(self, running: Running, leased_at: float) -> None:
        job = running.job
        path = f"{_q(self.queue)}/jobs/{_seg(job['id'])}/heartbeat"
        interval = self.lease_ms / 3000
        expires = leased_at + self.lease_ms / 1000
        delay = interval
        while True:
            await asyncio.sleep(delay)
            sent = time.monotonic()
            try:
                await self.api.call(
                    path, {"lease_id": job["lease_id"], "lease_ms": self.lease_ms}, idempotent=True
                )
                expires, delay = sent + self.lease_ms / 1000, interval
            except ApiError as error:
                if error.code in ("lease_lost", "job_not_found") or time.monotonic() >= expires:
                    running.reason = "lease_lost"
                    self.event("stopping-command", job, reason=error.code)
                    await self.kill(running)
                    return
                delay = min(interval, max(0.2, (expires - time.monotonic()) / 4))

    async def ack(self, job: dict[str, Any], result: Any, seconds: float) -> None:
        path = f"{_q(self.queue)}/jobs/{_seg(job['id'])}/ack"
        try:
            await self.api.call(path, {"lease_id": job["lease_id"], "result": result}, idempotent=True)
        except ApiError as error:
            if error.code in ("invalid_request", "payload_too_large"):
                await self.fail(
                    job, f"the service refused the command's output as a result: {error.detail}", seconds, 0
                )
                return
            if error.code in ("lease_lost", "job_not_found"):
                self.counts["lost"] += 1
                self.event("lease-lost", job, seconds=seconds)
                return
            self.event("ack-error", job, error=str(error))
            return
        self.counts["done"] += 1
        self.event("done", job, seconds=seconds)

    async def fail(self, job: dict[str, Any], error: str, seconds: float, returncode: int) -> None:
        path = f"{_q(self.queue)}/jobs/{_seg(job['id'])}/fail"
        try:
            answer = await self.api.call(
                path, {"lease_id": job["lease_id"], "error": error}, idempotent=False
            )
        except ApiError as problem:
            if problem.code in ("lease_lost", "job_not_found"):
                self.counts["lost"] += 1
                self.event("lease-lost", job, seconds=seconds)
            else:
                self.event("fail-error", job, error=str(problem))
            return
        self.counts["failed"] += 1
        self.event("failed", job, exit=returncode, seconds=seconds, now=answer["state"])


def cmd_work(args: argparse.Namespace, command: list[str]) -> int:
    if not command:
        raise UsageError("give the command after --: emq work QUEUE -- COMMAND ARGS...")
    if not 1 <= args.concurrency <= 100:
        raise UsageError("--concurrency must be 1..100")
    if not 1000 <= args.lease_ms <= 43_200_000:
        raise UsageError("--lease-ms must be 1000..43200000")
    if not 0 <= args.wait_ms <= 20_000:
        raise UsageError("--wait-ms must be 0..20000")

    async def main() -> int:
        return await CommandWorker(args, command).run()

    return asyncio.run(main())


# --- parsing -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("EMQ_URL") or DEFAULT_URL,
        help=f"the service's base URL (default: $EMQ_URL, else {DEFAULT_URL})",
    )
    common.add_argument(
        "--token", default=os.environ.get("EMQ_TOKEN") or None, help="bearer token (default: $EMQ_TOKEN)"
    )
    common.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of text")

    parser = argparse.ArgumentParser(
        prog="emq", description="EchoMQ HTTP: run the service, operate its queues."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve", help="run the service (as `python -m echomq_http`; settings from EMQ_* variables)"
    )
    serve.add_argument("--host", help="listen on this address (default: $HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen on this port (default: $PORT, else 8080)")

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

    ledger = commands.add_parser(
        "ledger", parents=[common], help="jobs in flight: who holds what, lease time left"
    )
    ledger.add_argument("queue")
    ledger.add_argument("--worker", help="only this worker's jobs")
    ledger.add_argument("--limit", type=int, help="at most this many (default 1000)")

    failed = commands.add_parser("failed", parents=[common], help="dead-lettered jobs, most recent first")
    failed.add_argument("queue")
    failed.add_argument("--limit", type=int, help="at most this many (default 100, at most 1000)")
    failed.add_argument("--offset", type=int, help="skip this many")

    retry = commands.add_parser(
        "retry", parents=[common], help="send dead-lettered jobs (all, or these) back to waiting"
    )
    retry.add_argument("queue")
    retry.add_argument("ids", nargs="*")

    for action in ("pause", "resume"):
        paused = commands.add_parser(
            action, parents=[common], help=f"{action} a queue (a paused queue leases nothing)"
        )
        paused.add_argument("queue")

    delete_queue = commands.add_parser(
        "delete-queue", parents=[common], help="delete a queue with all its jobs and keys"
    )
    delete_queue.add_argument("queue")
    delete_queue.add_argument(
        "--force", action="store_true", help="even with jobs in flight (their workers' calls then fail)"
    )

    job = commands.add_parser("job", parents=[common], help="show one job")
    job.add_argument("queue")
    job.add_argument("id")

    work = commands.add_parser(
        "work",
        parents=[common],
        usage="emq work [options] QUEUE -- COMMAND [ARGS...]",
        help="run a command for each job: emq work QUEUE -- COMMAND ARGS...",
        description=(
            "Lease jobs and run COMMAND for each: the payload (JSON) on its stdin, EMQ_JOB_ID, "
            "EMQ_ATTEMPT, EMQ_MAX_ATTEMPTS, EMQ_FENCE and EMQ_QUEUE in its environment. Exit 0 acks "
            "with its stdout as the result (JSON if it parses, else a string); another exit status "
            "fails the attempt with the end of its stderr. Leases are renewed while it runs. SIGTERM "
            "or SIGINT: take no more jobs, stop the commands still running and release their jobs."
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
        "--kill-grace-s",
        type=float,
        default=DEFAULT_KILL_GRACE_S,
        help="SIGTERM to SIGKILL delay when a command must stop (default %(default)s)",
    )
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace, Api], int]] = {
    "enqueue": cmd_enqueue,
    "stats": cmd_stats,
    "ledger": cmd_ledger,
    "failed": cmd_failed,
    "retry": cmd_retry,
    "pause": cmd_pause,
    "resume": cmd_pause,
    "delete-queue": cmd_delete_queue,
    "job": cmd_job,
}


def _fail(message: str, code: int) -> NoReturn:
    print(f"emq: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if argv[:1] == ["work"] and "--" in argv:  # everything after -- is the command, untouched
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "work":
            return cmd_work(args, command)
        api = Api(args.url.rstrip("/"), args.token)
        try:
            return COMMANDS[args.command](args, api)
        finally:
            api.http.close()
    except UsageError as error:
        _fail(str(error), EXIT_USAGE)
    except ApiError as error:
        _fail(str(error), EXIT_FAILED)
    except OSError as error:
        _fail(str(error), EXIT_FAILED)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
