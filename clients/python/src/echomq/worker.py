"""``Worker``: lease jobs (long poll), run a handler on each, heartbeat, ack or fail.

    def handle(job: echomq.JobContext) -> dict:
        send_email(**job.payload)
        return {"sent": True}          # the job's result (acked)

    echomq.Worker("emails", handle, concurrency=4).run()   # until SIGTERM/SIGINT

- The handler may be a plain function (run in a thread of its own) or a coroutine function
  (run as a task). At most ``concurrency`` run at once.
- While it runs, the lease is renewed every ``lease_ms / 3``. If the service answers that the
  lease is lost (or it could not be renewed before it ran out), the job is not ours any more: an
  async handler is cancelled, a sync handler sees ``job.cancelled`` / ``job.lease_lost`` become
  true, and its outcome is discarded - never acked or failed.
- Returning acks with the return value as the result (any JSON-encodable value). Raising fails
  the attempt with the exception's text; an exception with ``retry = False`` dead-letters the job
  and one with ``retry_after_ms`` sets the delay before the next attempt (see ``JobError``).
- ``stop()`` (and SIGTERM/SIGINT under ``run()``) stops leasing, lets running handlers finish for
  up to ``grace_s`` seconds, then cancels the rest and releases their leases (the jobs go back
  to the front of the queue without spending an attempt). A lease request in flight is waited
  for (at most ``wait_ms``) and whatever it brings is released too.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import re
import signal
import socket
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from echomq.client import AsyncClient
from echomq.errors import (
    APIError,
    ConnectionFailed,
    EchoMQError,
    Forbidden,
    InvalidRequest,
    JobNotFound,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from echomq.models import LeasedJob

log = logging.getLogger("echomq.worker")

MAX_ERROR_BYTES = 8 * 1024
DEFAULT_LEASE_MS = 30_000
DEFAULT_WAIT_MS = 5_000
_FATAL = (Unauthorized, Forbidden, InvalidRequest, NotFound)  # retrying cannot help

Handler = Callable[["JobContext"], Any] | Callable[["JobContext"], Awaitable[Any]]


def default_worker_id() -> str:
    """``<host>-<pid>-<random>``, reduced to the characters a worker name may have."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:80].strip("-.") or "worker"
    return f"{host}-{os.getpid()}-{random.randrange(16**4):04x}"


def error_text(error: BaseException, limit: int = MAX_ERROR_BYTES) -> str:
    """``Type: message`` first, then as much of the traceback's end as fits in ``limit`` bytes."""
    head = f"{type(error).__name__}: {error}".encode()[: limit // 4].decode(errors="ignore")
    trace = "".join(traceback.format_exception(error)).encode()
    room = limit - len(head.encode()) - 2
    if len(trace) > room:
        trace = b"..." + trace[-(room - 3) :]
    return head + "\n\n" + trace.decode(errors="ignore")


class JobContext:
    """What a handler gets: the leased job, and whether it should stop working on it."""

    def __init__(self, job: LeasedJob) -> None:
        self.job = job
        self._cancel = threading.Event()
        self._reason: str | None = None
        self._future: asyncio.Future[Any] | None = None

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def name(self) -> str | None:
        return self.job.name

    @property
    def payload(self) -> Any:
        return self.job.payload

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def max_attempts(self) -> int:
        return self.job.max_attempts

    @property
    def fence(self) -> int:
        return self.job.fence

    @property
    def lease_id(self) -> str:
        return self.job.lease_id

    @property
    def traceparent(self) -> str | None:
        return self.job.traceparent

    @property
    def lease_lost(self) -> bool:
        """The lease is gone: whatever this handler does now will not be acked."""
        return self._reason == "lease_lost"

    @property
    def cancelled(self) -> bool:
        """Stop working on this job: its lease was lost, or the worker is stopping."""
        return self._cancel.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """For sync handlers: sleep up to ``timeout`` seconds, waking early when cancelled."""
        return self._cancel.wait(timeout)

    def _cancel_with(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._cancel.set()
        if self._future is not None and not self._future.done():
            self._future.cancel()

    def __repr__(self) -> str:
        return f"<JobContext {self.queue}/{self.id} attempt {self.attempt}>"


@dataclass
class WorkerStats:
    acked: int = 0
    failed: int = 0
    lost: int = 0  # lease lost: outcome discarded
    released: int = 0
    errors: list[str] = field(default_factory=list)  # acks/fails the service did not take


class Worker:
    """Runs ``handler`` on the jobs of ``queue``. See the module docstring."""

    def __init__(
        self,
        queue: str,
        handler: Handler,
        *,
        client: AsyncClient | None = None,
        url: str | None = None,
        token: str | None = None,
        worker_id: str | None = None,
        concurrency: int = 1,
        lease_ms: int = DEFAULT_LEASE_MS,
        wait_ms: int = DEFAULT_WAIT_MS,
        grace_s: float = 0.0,
        heartbeat_s: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queue = queue
        self.handler = handler
        self.worker_id = worker_id or default_worker_id()
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.grace_s = grace_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else lease_ms / 3000
        self.stats = WorkerStats()
        self._client = client
        self._url, self._token = url, token
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - an object with an async __call__
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_requested = False
        self._running: dict[str, tuple[JobContext, asyncio.Task[None]]] = {}
        self._slot_freed: asyncio.Event | None = None
        self._poll_settled: asyncio.Event | None = None  # no lease request in flight

    # --- control -------------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Work until ``stop()`` or SIGTERM/SIGINT; then give back what is still held."""
        return asyncio.run(self.arun(handle_signals=True))

    def stop(self) -> None:
        """Stop taking jobs (safe from any thread and from signal handlers). A second call
        skips the grace period."""
        if self._stop_requested:
            self.grace_s = 0.0
        self._stop_requested = True
        loop, stopping = self._loop, self._stopping
        if loop is None or stopping is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            stopping.set()
        else:
            loop.call_soon_threadsafe(stopping.set)

    async def arun(self, *, handle_signals: bool = False) -> WorkerStats:
        """The worker as a coroutine; with ``handle_signals`` SIGTERM/SIGINT call ``stop()``."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._poll_settled = asyncio.Event()
        self._poll_settled.set()
        if self._stop_requested:
            self._stopping.set()
        client = self._client or AsyncClient(self._url, token=self._token)
        installed: list[int] = []
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    self._loop.add_signal_handler(signum, self.stop)
                    installed.append(signum)
        log.info(
            "worker %s: working on queue %s (concurrency %d)", self.worker_id, self.queue, self.concurrency
        )
        try:
            await self._lease_loop(client)
        finally:
            for signum in installed:
                self._loop.remove_signal_handler(signum)
            await self._give_back_running(client)
            if self._client is None:
                await client.aclose()
            log.info("worker %s: stopped (%s)", self.worker_id, self.stats)
        return self.stats

    # --- the loop ------------------------------------------------------------------------------

    async def _lease_loop(self, client: AsyncClient) -> None:
        assert self._stopping is not None and self._slot_freed is not None
        stop_wait = asyncio.ensure_future(self._stopping.wait())
        failures = 0
        try:
            while not self._stopping.is_set():
                free = self.concurrency - len(self._running)
                if free <= 0:
                    self._slot_freed.clear()
                    slot = asyncio.ensure_future(self._slot_freed.wait())
                    await asyncio.wait({slot, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                    slot.cancel()
                    continue
                poll = asyncio.ensure_future(
                    client.lease(
                        self.queue,
                        self.worker_id,
                        lease_ms=self.lease_ms,
                        max_jobs=free,
                        wait_ms=self.wait_ms,
                    )
                )
                polled_at = time.monotonic()
                await asyncio.wait({poll, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done():
                    # Stopping while the long poll waits: cancelling it could lose jobs the
                    # service leases at that instant, so let it answer while the running jobs
                    # are wound down, and give back whatever it brings. Running jobs are released
                    # only once it has answered, or it could lease them again.
                    self._poll_settled.clear()
                    await asyncio.gather(self._give_back_running(client), self._give_back_poll(client, poll))
                    return
                try:
                    jobs = poll.result()
                except _FATAL:
                    raise
                except EchoMQError as error:
                    failures += 1
                    delay = min(10.0, 0.2 * 2**failures) * random.uniform(0.5, 1.0)
                    log.warning("lease failed (%s); trying again in %.1f s", error, delay)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(stop_wait), delay)
                    continue
                failures = 0
                for job in jobs:
                    if self._stopping.is_set():
                        await self._release(client, job)
                    else:
                        self._start(client, job, polled_at)
        finally:
            stop_wait.cancel()

    def _start(self, client: AsyncClient, job: LeasedJob, leased_at: float) -> None:
        context = JobContext(job)
        task = asyncio.create_task(self._process(client, context, leased_at), name=f"emq-job-{job.id}")
        self._running[job.id] = (context, task)

    async def _give_back_poll(self, client: AsyncClient, poll: asyncio.Future[list[LeasedJob]]) -> None:
        assert self._poll_settled is not None
        try:
            jobs = await poll
        except EchoMQError:
            return
        finally:
            self._poll_settled.set()
        for job in jobs:
            await self._release(client, job)

    async def _give_back_running(self, client: AsyncClient) -> None:
        """Let running jobs finish within the grace period, then cancel and release the rest."""
        if not self._running:
            return
        tasks = [task for _, task in self._running.values()]
        if self.grace_s > 0:
            log.info("waiting up to %.1f s for %d running job(s)", self.grace_s, len(tasks))
            await asyncio.wait(tasks, timeout=self.grace_s)
        for context, _ in list(self._running.values()):
            context._cancel_with("stopped")
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _release(self, client: AsyncClient, job: LeasedJob) -> None:
        try:
            await client.release(job.queue, job.id, job.lease_id)
            self.stats.released += 1
            log.info("released job %s", job.id)
        except EchoMQError as error:
            log.warning("could not release job %s (%s); its lease will run out", job.id, error)

    # --- one job -------------------------------------------------------------------------------

    def _begin(self, context: JobContext) -> asyncio.Future[Any]:
        if self._is_async:
            return asyncio.ensure_future(self.handler(context))  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def run() -> None:
            try:
                result, error = self.handler(context), None
            except BaseException as raised:
                result, error = None, raised
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(settle, result, error)

        # A daemon thread: a handler that ignores cancellation cannot hold the process open.
        threading.Thread(target=run, name=f"emq-job-{context.id}", daemon=True).start()
        return future

    async def _process(self, client: AsyncClient, context: JobContext, leased_at: float) -> None:
        job = context.job
        future = context._future = self._begin(context)
        beats = asyncio.create_task(self._heartbeats(client, context, leased_at))
        outcome: tuple[str, Any] | None = None
        try:
            try:
                result = await future
                if inspect.isawaitable(result):  # a plain function that returned a coroutine
                    result = await result
                outcome = ("ack", result)
            except asyncio.CancelledError:
                if context._reason is None:
                    raise  # this task itself was cancelled
            except Exception as error:
                outcome = ("fail", error)
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
            self._running.pop(job.id, None)
            if self._slot_freed is not None:
                self._slot_freed.set()
        # Never ack blindly: a lease found lost while the handler ran means another worker may
        # hold the job now, whatever the handler returned.
        if context.lease_lost:
            self.stats.lost += 1
            log.warning("job %s: lease lost; outcome discarded", job.id)
            return
        if outcome is None:  # cancelled because the worker is stopping
            if self._poll_settled is not None:
                await self._poll_settled.wait()
            await self._release(client, job)
            return
        kind, value = outcome
        if kind == "ack":
            await self._ack(client, job, value)
        else:
            await self._fail(client, job, value)

    async def _ack(self, client: AsyncClient, job: LeasedJob, result: Any) -> None:
        try:
            msgspec.json.encode(result)
        except (TypeError, ValueError, msgspec.EncodeError) as error:
            await self._fail(client, job, TypeError(f"the handler's result is not JSON: {error}"))
            return
        try:
            await client.ack(job.queue, job.id, job.lease_id, result)
            self.stats.acked += 1
            log.info("job %s: done", job.id)
        except (LeaseLost, JobNotFound) as error:
            self.stats.lost += 1
            log.warning("job %s: not acked, %s", job.id, error.code)
        except (InvalidRequest, PayloadTooLarge) as error:
            await self._fail(client, job, ValueError(f"the service refused the result: {error.detail}"))
        except EchoMQError as error:
            self.stats.errors.append(f"ack {job.id}: {error}")
            log.error("job %s: ack failed (%s); the lease will run out and the job come back", job.id, error)

    async def _fail(self, client: AsyncClient, job: LeasedJob, error: BaseException) -> None:
        retry = getattr(error, "retry", None)
        retry_after = getattr(error, "retry_after_ms", None)
        try:
            failed = await client.fail(
                job.queue,
                job.id,
                job.lease_id,
                error_text(error),
                retry=False if retry is False else None,
                retry_after_ms=int(retry_after) if isinstance(retry_after, (int, float)) else None,
            )
            self.stats.failed += 1
            log.info("job %s: attempt %d failed (%s), now %s", job.id, failed.attempt, error, failed.state)
        except (LeaseLost, JobNotFound) as lost:
            self.stats.lost += 1
            log.warning("job %s: failure not recorded, %s", job.id, lost.code)
        except EchoMQError as problem:
            self.stats.errors.append(f"fail {job.id}: {problem}")
            log.error("job %s: fail not recorded (%s); the lease will run out", job.id, problem)

    async def _heartbeats(self, client: AsyncClient, context: JobContext, leased_at: float) -> None:
        job = context.job
        expires = leased_at + self.lease_ms / 1000  # by this machine's clock, conservatively
        delay = self.heartbeat_s
        while True:
            await asyncio.sleep(delay)
            sent = time.monotonic()
            try:
                await client.heartbeat(job.queue, job.id, job.lease_id, lease_ms=self.lease_ms)
                expires, delay = sent + self.lease_ms / 1000, self.heartbeat_s
            except (LeaseLost, JobNotFound) as error:
                log.warning("job %s: heartbeat answered %s; stopping its handler", job.id, error.code)
                context._cancel_with("lease_lost")
                return
            except (APIError, ConnectionFailed) as error:
                if time.monotonic() >= expires:
                    log.warning("job %s: lease ran out without a renewal (%s)", job.id, error)
                    context._cancel_with("lease_lost")
                    return
                delay = min(self.heartbeat_s, max(0.2, (expires - time.monotonic()) / 4))
                log.warning("job %s: heartbeat failed (%s); again in %.1f s", job.id, error, delay)
