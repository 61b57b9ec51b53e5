"""`emq work QUEUE -- COMMAND ARGS...`: an ``echomq.Worker`` whose handler runs COMMAND per job.

Leasing, batching, heartbeats, lost-lease cancellation and the stop with its grace period are
the Worker's; this module only turns a job into a process (payload on stdin, result from
stdout, exit status to ack or fail) and prints one event line per job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from echomq.cli._commands import EXIT_FAILED, EXIT_OK, UsageError
from echomq.cli._output import print_json
from echomq.errors import EchoMQError, JobError
from echomq.worker import MAX_ERROR_BYTES, JobContext, Worker


def result_of(stdout: bytes) -> Any:
    """The command's stdout as the job's result: its JSON when it parses, else the text."""
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


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
    limit = MAX_ERROR_BYTES - len(head) - 1
    if len(text) > limit:
        text = b"..." + text[-(limit - 3) :]
    return head + "\n" + text.decode("utf-8", errors="ignore")


class Events:
    """One line per event on stdout: text, or JSON lines with --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.ran: dict[str, tuple[float, int]] = {}  # job id: (seconds, exit status) of its command

    def emit(self, kind: str, job: Optional[JobContext] = None, **fields: Any) -> None:
        if self.as_json:
            record: dict[str, Any] = {"event": kind}
            if job is not None:
                record.update(id=job.id, attempt=job.attempt)
            record.update(fields)
            print_json(record)
        else:
            stamp = datetime.now().strftime("%H:%M:%S")
            subject = f"job {job.id} (attempt {job.attempt}) " if job is not None else ""
            detail = " ".join(f"{key}={value}" for key, value in fields.items())
            print(f"{stamp} {subject}{kind} {detail}".rstrip())
        sys.stdout.flush()

    def outcome(self, job: JobContext, outcome: str, detail: str) -> None:
        """The Worker's on_outcome: a job's end, as the service recorded it."""
        seconds, returncode = self.ran.pop(job.id, (None, None))
        timing = {} if seconds is None else {"seconds": seconds}
        if outcome == "acked":
            self.emit("done", job, **timing)
        elif outcome == "failed":
            self.emit("failed", job, exit=returncode, **timing, now=detail)
        elif outcome == "lost":
            self.emit("lease-lost", job, **timing)
        elif outcome == "released":
            self.emit("released", job)
        else:
            self.emit("error", job, error=detail)


class RunCommand:
    """The handler: runs the command for one job; its exit status decides ack or fail."""

    def __init__(self, command: list[str], kill_grace_s: float, events: Events) -> None:
        self.command = command
        self.kill_grace_s = kill_grace_s
        self.events = events

    async def __call__(self, job: JobContext) -> Any:
        started = time.monotonic()
        starting = asyncio.ensure_future(self._start(job))
        process: Optional[asyncio.subprocess.Process] = None
        try:
            try:
                process = await asyncio.shield(starting)
            except OSError as error:  # the command could not be started
                returncode, stdout, stderr_tail = 127, b"", str(error).encode()
            else:
                returncode, stdout, stderr_tail = await self._communicate(process, job)
        except asyncio.CancelledError:
            # The Worker cancels a handler whose lease is lost, or still running after the grace.
            if job.lease_lost:
                self.events.emit("stopping-command", job, reason="lease_lost")
            if process is None:
                with contextlib.suppress(OSError):
                    process = await starting  # cancelled while it started: stop it all the same
            if process is not None:
                await self._stop(process)
            raise
        finally:
            if process is not None and process.returncode is None:  # cancelled again while stopping
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        self.events.ran[job.id] = (round(time.monotonic() - started, 3), returncode)
        if returncode != 0:
            raise JobError(error_of(returncode, stderr_tail), plain=True)
        return result_of(stdout)

    async def _start(self, job: JobContext) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            "EMQ_JOB_ID": job.id,
            "EMQ_ATTEMPT": str(job.attempt),
            "EMQ_MAX_ATTEMPTS": str(job.max_attempts),
            "EMQ_FENCE": str(job.fence),
            "EMQ_QUEUE": job.queue,
        }
        return await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: stopped as a whole, not by our Ctrl-C
        )

    async def _communicate(
        self, process: asyncio.subprocess.Process, job: JobContext
    ) -> tuple[int, bytes, bytes]:
        assert process.stdin and process.stdout and process.stderr
        stdin, stderr = process.stdin, process.stderr
        tail = bytearray()

        async def feed() -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write(json.dumps(job.payload).encode() + b"\n")
                await stdin.drain()
                stdin.close()

        async def drain_stderr() -> None:
            while True:
                chunk = await stderr.read(65536)
                if not chunk:
                    return
                sys.stderr.buffer.write(chunk)  # passed through, and its end kept for the error
                sys.stderr.buffer.flush()
                tail.extend(chunk)
                del tail[: max(0, len(tail) - MAX_ERROR_BYTES)]

        _, stdout, _ = await asyncio.gather(feed(), process.stdout.read(), drain_stderr())
        return await process.wait(), stdout, bytes(tail)

    async def _stop(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM to the command's process group, SIGKILL after the kill grace."""
        if process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        waiting = asyncio.ensure_future(process.wait())
        await asyncio.wait({waiting}, timeout=self.kill_grace_s)
        if not waiting.done():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await waiting


def check_runnable(program: str) -> None:
    """Refuse, before anything is leased, a program the OS could not start: each job would fail
    (exit 127) until it reached the dead letter. Looked up as exec does: a name with a slash is
    a path, any other name is searched in PATH."""
    if shutil.which(program) is not None:
        return
    if os.sep not in program:
        why = "not found in PATH (or not executable there)"
    elif not Path(program).exists():
        why = "no such file"
    elif Path(program).is_dir():
        why = "a directory"
    else:
        why = "not executable (chmod +x it, or run it through its interpreter)"
    raise UsageError(f"cannot run {program}: {why}; nothing was leased")


def cmd_work(args: argparse.Namespace, command: list[str]) -> int:
    if not command:
        raise UsageError("give the command after --: emq work QUEUE -- COMMAND ARGS...")
    check_runnable(command[0])
    if not 1 <= args.concurrency <= 100:
        raise UsageError("--concurrency must be 1..100")
    if not 1000 <= args.lease_ms <= 43_200_000:
        raise UsageError("--lease-ms must be 1000..43200000")
    if not 0 <= args.wait_ms <= 20_000:
        raise UsageError("--wait-ms must be 0..20000")
    if args.grace_s < 0 or args.kill_grace_s < 0:
        raise UsageError("--grace-s and --kill-grace-s must be 0 or more")
    # The Worker's log (start, stop, failed jobs, lease trouble) on stderr; events go to stdout.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="emq work: %(message)s")
    events = Events(args.json)
    worker = Worker(
        args.queue,
        RunCommand(command, args.kill_grace_s, events),
        url=args.url,
        token=args.token,
        worker_id=args.worker,
        concurrency=args.concurrency,
        lease_ms=args.lease_ms,
        wait_ms=args.wait_ms,
        grace_s=args.grace_s,
        cancel_wait_s=args.kill_grace_s + 1,  # time to SIGTERM, then SIGKILL, a command
        on_outcome=events.outcome,
    )
    events.emit("started", worker=worker.worker_id, queue=args.queue, concurrency=args.concurrency)
    status = EXIT_OK
    try:
        worker.run()
    except EchoMQError as error:  # refused for good (auth, bad queue name): retrying cannot help
        print(f"emq work: {error}", file=sys.stderr)
        status = EXIT_FAILED
    stats = worker.stats
    events.emit("stopped", done=stats.acked, failed=stats.failed, lost=stats.lost, released=stats.released)
    return status
