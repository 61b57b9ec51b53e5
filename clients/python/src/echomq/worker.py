"""``Worker``: lease jobs, run a handler on each, keep their leases, ack or fail them, in batches.

    def handle(job: echomq.JobContext) -> dict:
        send_email(**job.payload)
        return {"sent": True}          # the job's result (acked)

    echomq.Worker("emails", handle, concurrency=4).run()   # until SIGTERM/SIGINT

- The handler may be a plain function (run in a thread of its own) or a coroutine function
  (run as a task). At most ``concurrency`` run at once.
- Requests are batched. A lease asks for every free slot at once (``max_jobs``, a long poll of
  ``wait_ms`` when the queue is empty). Finished jobs' acks are gathered for ``ack_batch_s``
  (or until no handler is running, or a ``PIPELINE``-th of the slots is done) into ack-manies
  whose ``lease_next`` leases the jobs for the slots they free. Up to ``PIPELINE`` such requests
  are in flight at once, so the service and Redis work on one batch while this process runs the
  jobs of another (one batch at a time would leave each side idle while the others work).
  One heartbeat-many every
  ``heartbeat_s`` (default ``lease_ms / 3``) renews the leases of every job held.
- If the service answers that a lease is lost (or it could not be renewed before it ran out),
  the job is not ours any more: an async handler is cancelled, a sync handler sees
  ``job.cancelled`` / ``job.lease_lost`` become true, and its outcome is discarded - never acked.
- If a heartbeat answers ``cancel_requested`` (someone called ``cancel``), the handler is stopped
  the same way (``job.cancelled`` / ``job.cancel_requested`` become true) and the job is failed,
  which ends it ``cancelled`` (never retried) - not acked, even if the handler returns a value
  after that. A handler that had finished before the heartbeat said so is acked: an ack after a
  cancel request completes the job.
- ``job.report_progress(value)`` (any JSON, at most 64 KiB) is sent with the job's next renewal
  in the heartbeat-many (within ``heartbeat_s``; not sooner: progress costs no extra request),
  and only once: the latest value reported by then wins. It shows as the job view's
  ``progress`` and as a ``progress`` event.
- Returning acks with the return value as the result (any JSON-encodable value). Raising fails
  the attempt with the exception's text; an exception with ``retry = False`` dead-letters the job
  and one with ``retry_after_ms`` sets the delay before the next attempt (see ``JobError``).
- ``stop()`` (and SIGTERM/SIGINT under ``run()``) stops leasing and lets running handlers finish
  for up to ``grace_s`` seconds (default 30: what a deploy can wait), their leases still renewed.
  A handler that returned is always acked (or failed, if it raised), never released, and the
  acks gathered are sent before ``run()``/``arun()`` returns. Handlers still running after the
  grace are cancelled (async) or flagged (sync) and their jobs released: back to the front of
  the queue without spending an attempt. A lease request in flight is waited for and whatever
  it brings is released at once, never run. A second ``stop()`` skips the grace. A cancelled
  async handler gets ``cancel_wait_s`` (default 5) to unwind (e.g. stop a child process) before
  its job is released all the same.
- ``on_outcome(job, outcome, detail)``, if given, is called once per job when its outcome is
  settled: ``acked``, ``failed`` (detail: the job's state now), ``released``, ``lost`` or
  ``error`` (the service did not take the outcome; detail says why).
- Sessions (``session=True``, the default): the worker opens a session on the queue before its
  first lease and renews it on the heartbeat timer (every ``heartbeat_s``, at most a third of
  ``session_ttl_ms``, default 30 s), with ``info`` (host, pid, SDK version, plus
  ``session_info``) that ``GET .../workers`` shows. If the process dies, its session lapses
  after ``session_ttl_ms`` and the service gives its jobs back then, instead of when their
  leases run out. When a session heartbeat answers ``quiet`` (an operator called ``quiet``),
  the worker leases nothing more and finishes the jobs it runs; ``stop()`` still ends it. Once
  stopped and every job settled, it ends its session (``DELETE``), which also gives back any job
  it still holds. ``session=False`` keeps the v1 behaviour.
- Lease requests always carry a ``request_id``, so a lease repeated after a lost answer never
  leases twice; acks, fails and releases are repeated on lost connections and 503s while the
  lease may still be alive (the service answers a repeat as it answered the first).

How it works: a slot is taken from the moment a lease request asks for it (``_asked``) until
its job's handler ends (``_running``), so leases never ask for more than is free. One driver
coroutine (``_drive``) decides what to send next: the gathered acks when they are due (with a
``lease_next`` for the free slots), else a lease when slots are free; every request runs as a
task of its own and wakes the driver when it ends. Each job held is a ``_Held`` from its lease
until its outcome is settled (acked, failed, released or lost); the heartbeat task renews all
of them, and the wind-down (``_wind_down``) waits out the grace once stopped.
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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar, Union

import msgspec

from echomq._ops import USER_AGENT
from echomq.client import AsyncClient
from echomq.errors import (
    BackendUnavailable,
    ConnectionFailed,
    EchoMQError,
    Forbidden,
    InvalidRequest,
    JobError,
    JobNotFound,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
)
from echomq.models import AckItem, HeartbeatItem, LeaseAnswer, LeasedJob, LeaseNext

log = logging.getLogger("echomq.worker")

T = TypeVar("T")

MAX_ERROR_BYTES = 8 * 1024
MAX_PROGRESS_BYTES = 64 * 1024
DEFAULT_LEASE_MS = 30_000
DEFAULT_WAIT_MS = 5_000
DEFAULT_GRACE_S = 30.0
DEFAULT_ACK_BATCH_S = 0.005
MAX_LEASE_JOBS = 100  # the API's limit per lease
MAX_BATCH = 1000  # the API's limit per ack-many and heartbeat-many
MAX_BATCH_RESULT_BYTES = 256 * 1024  # well under the service's 1 MiB body limit
PIPELINE = 2  # ack-manies (each with its lease_next) a full worker keeps in flight
DEFAULT_SESSION_TTL_MS = 30_000
MIN_SESSION_TTL_MS, MAX_SESSION_TTL_MS = 1000, 300_000  # the API's range
END_SESSION_TIMEOUT_S = 10.0  # the DELETE of the session on stop: a dead service must not hold us
CANCEL_WAIT_S = 5.0  # how long cancelled async handlers get to unwind before their jobs are released
_FATAL = (Unauthorized, Forbidden, InvalidRequest, NotFound)  # retrying cannot help
_TRANSIENT = (ConnectionFailed, BackendUnavailable, TooManyRequests)  # a later try may succeed

Handler = Union[Callable[["JobContext"], Any], Callable[["JobContext"], Awaitable[Any]]]


def default_worker_id() -> str:
    """``<host>-<pid>-<random>``, reduced to the characters a worker name may have."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:80].strip("-.") or "worker"
    return f"{host}-{os.getpid()}-{random.randrange(16**4):04x}"


def error_text(error: BaseException, limit: int = MAX_ERROR_BYTES) -> str:
    """``Type: message`` first, then as much of the traceback's end as fits in ``limit`` bytes;
    the message alone for an exception with ``plain = True`` (a ``JobError``, by default)."""
    try:
        message = str(error)
    except Exception:  # an exception whose __str__ raises still fails its job
        message = "<str() failed>"
    if getattr(error, "plain", False) is True:
        return message.encode()[:limit].decode(errors="ignore")
    head = f"{type(error).__name__}: {message}".encode()[: limit // 4].decode(errors="ignore")
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__)).encode()
    room = limit - len(head.encode()) - 2
    if len(trace) > room:
        trace = b"..." + trace[-(room - 3) :]
    return head + "\n\n" + trace.decode(errors="ignore")


def backoff_s(attempt: int) -> float:
    """Exponential from 0.2 s up to 5 s, with jitter."""
    return min(5.0, 0.2 * 2**attempt) * random.uniform(0.5, 1.0)


async def wait_at_most(event: asyncio.Event, timeout: float) -> None:
    """Until ``event`` is set, or ``timeout`` seconds. The timer sets the event itself: cheaper
    than wait_for's task (this runs for every batch), and callers look again after any wake."""
    timer = asyncio.get_running_loop().call_later(max(0.0, timeout), event.set)
    try:
        await event.wait()
    finally:
        timer.cancel()


def matched(items: list[T], outcomes: list[Any]) -> Iterable[tuple[T, Any]]:
    """Items with the service's outcomes, one each, in order (zip's strict needs 3.10)."""
    if len(items) != len(outcomes):
        raise ValueError(f"{len(outcomes)} outcomes for {len(items)} items")
    return zip(items, outcomes)


class JobContext:
    """What a handler gets: the leased job, and whether it should stop working on it."""

    def __init__(self, job: LeasedJob) -> None:
        self.job = job
        self._cancel = threading.Event()
        self._reason: Optional[str] = None
        self._lock = threading.Lock()  # sync handlers report progress from their own threads
        self._progress: Any = msgspec.UNSET  # reported, not sent yet

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def name(self) -> Optional[str]:
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
    def traceparent(self) -> Optional[str]:
        return self.job.traceparent

    @property
    def lease_lost(self) -> bool:
        """The lease is gone: whatever this handler does now will not be acked."""
        return self._reason == "lease_lost"

    @property
    def cancel_requested(self) -> bool:
        """The job was cancelled (``Client.cancel``): whatever this handler does now fails it."""
        return self._reason == "cancel_requested"

    @property
    def cancelled(self) -> bool:
        """Stop working on this job: its lease was lost, its cancellation was requested, or the
        worker stopped and the grace period is over."""
        return self._cancel.is_set()

    def report_progress(self, value: Any) -> None:
        """Report how far the job has got (any JSON value, at most 64 KiB): sent with its next
        heartbeat, the latest value reported by then. Raises TypeError/ValueError at once for a
        value that cannot be sent."""
        encoded = msgspec.json.encode(value)
        if len(encoded) > MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is {len(encoded)} bytes as JSON, more than {MAX_PROGRESS_BYTES}")
        with self._lock:
            self._progress = msgspec.Raw(encoded)

    def _take_progress(self) -> Any:
        with self._lock:
            progress, self._progress = self._progress, msgspec.UNSET
            return progress

    def _keep_progress(self, progress: Any) -> None:
        """A heartbeat did not go through: its progress goes with the next, unless newer came."""
        with self._lock:
            if self._progress is msgspec.UNSET:
                self._progress = progress

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """For sync handlers: sleep up to ``timeout`` seconds, waking early when cancelled."""
        return self._cancel.wait(timeout)

    def _cancel_with(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._cancel.set()

    def __repr__(self) -> str:
        return f"<JobContext {self.queue}/{self.id} attempt {self.attempt}>"


@dataclass
class WorkerStats:
    acked: int = 0
    failed: int = 0
    lost: int = 0  # lease lost: outcome discarded
    released: int = 0
    errors: list[str] = field(default_factory=list)  # acks/fails the service did not take


@dataclass(eq=False)
class _Held:
    """A job whose lease this worker holds, from its lease until its outcome is settled."""

    context: JobContext
    renewed_at: float  # monotonic: when the request that leased or last renewed it was sent
    expires_at: float  # monotonic, by this machine's clock: renewed_at + the lease's length
    running: bool = True  # the handler has not finished (its slot is taken)
    settled: bool = False  # acked, failed, released or lost: nothing more to do
    task: Optional[asyncio.Task[Any]] = None  # an async handler's task

    @property
    def job(self) -> LeasedJob:
        return self.context.job


@dataclass(eq=False)
class _Lease:
    """One lease request; repeated with the same request_id after a lost answer."""

    request_id: str
    max_jobs: int
    wait_ms: int


class Worker:
    """Runs ``handler`` on the jobs of ``queue``. See the module docstring."""

    def __init__(
        self,
        queue: str,
        handler: Handler,
        *,
        client: Optional[AsyncClient] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        worker_id: Optional[str] = None,
        concurrency: int = 1,
        lease_ms: int = DEFAULT_LEASE_MS,
        wait_ms: int = DEFAULT_WAIT_MS,
        grace_s: float = DEFAULT_GRACE_S,
        heartbeat_s: Optional[float] = None,
        ack_batch_s: float = DEFAULT_ACK_BATCH_S,
        cancel_wait_s: float = CANCEL_WAIT_S,
        on_outcome: Optional[Callable[[JobContext, str, str], None]] = None,
        session: bool = True,
        session_ttl_ms: int = DEFAULT_SESSION_TTL_MS,
        session_info: Optional[Mapping[str, Any]] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not MIN_SESSION_TTL_MS <= session_ttl_ms <= MAX_SESSION_TTL_MS:
            raise ValueError(f"session_ttl_ms must be in {MIN_SESSION_TTL_MS}..{MAX_SESSION_TTL_MS}")
        self.queue = queue
        self.handler = handler
        self.worker_id = worker_id or default_worker_id()
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.grace_s = grace_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else lease_ms / 3000
        self.ack_batch_s = ack_batch_s
        self.cancel_wait_s = cancel_wait_s
        self.on_outcome = on_outcome
        self.session = session
        self.session_ttl_ms = session_ttl_ms
        self.session_info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "sdk": USER_AGENT,
            **(session_info or {}),
        }
        self.session_state: Optional[str] = None  # running or quiet, as the last session heartbeat said
        self.stats = WorkerStats()
        self._client = client
        self._url, self._token = url, token
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - an object with an async __call__
        )
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_requested = False
        self._hurry_requested = False
        self._reset()

    def _reset(self) -> None:
        self._held: dict[str, _Held] = {}
        self._running = 0  # handlers running: slots taken
        self._asked = 0  # slots promised to lease requests in flight
        self._outbox: list[tuple[_Held, AckItem]] = []  # acks gathered, not sent yet
        self._outbox_bytes = 0
        self._outbox_since = 0.0
        self._requests: set[asyncio.Task[Any]] = set()  # every request of ours in flight
        self._leases = 0  # leases in flight (alone or as an ack's lease_next)
        self._polling = False  # a lease alone (a long poll) is in flight
        self._lease_retries: list[_Lease] = []  # leases whose answers were lost
        self._lease_failures = 0
        self._lease_after = 0.0  # monotonic: no lease before (backing off)
        self._fatal: Optional[EchoMQError] = None
        self._request_ids = (f"{os.urandom(6).hex()}-{n}" for n in range(1 << 62))
        self._wake: Optional[asyncio.Event] = None
        self._stopping: Optional[asyncio.Event] = None
        self._wound_down = False
        self._quiet = False  # the session said quiet: lease nothing more
        self._session_opened = False

    # --- control -------------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Work until ``stop()`` or SIGTERM/SIGINT; then finish or give back what is still held."""
        return asyncio.run(self.arun(handle_signals=True))

    def stop(self) -> None:
        """Stop taking jobs (safe from any thread and from signal handlers). A second call
        skips the grace period."""
        if self._stop_requested:
            self._hurry_requested = True
        self._stop_requested = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._begin_stop()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        if self._stopping is None:
            return
        if not self._stopping.is_set():
            self._stopping.set()
            log.info("worker %s: stopping; %d job(s) running", self.worker_id, self._running)
        if self._hurry_requested:
            self._handler_ended.set()  # wakes the grace period's wait
        self._poke()

    async def arun(self, *, handle_signals: bool = False) -> WorkerStats:
        """The worker as a coroutine; with ``handle_signals`` SIGTERM/SIGINT call ``stop()``."""
        self._loop = asyncio.get_running_loop()
        self._reset()
        # Made in the loop that uses them: on Python 3.9 an Event binds to the loop current when
        # it is made, and there may be none (or another) when the Worker is constructed.
        self._wake, self._stopping = asyncio.Event(), asyncio.Event()
        self._no_lease = asyncio.Event()  # set while no lease (alone or as lease_next) is in flight
        self._no_lease.set()
        self._handler_ended = asyncio.Event()  # a slot was freed, or a second stop() came
        self._api = self._client or AsyncClient(self._url, token=self._token)
        installed = self._install_signals() if handle_signals else []
        log.info(
            "worker %s: working on queue %s at %s (concurrency %d)",
            self.worker_id,
            self.queue,
            self._api.url,
            self.concurrency,
        )
        if self._stop_requested:
            self._begin_stop()
        else:
            await self._session_beat()  # open the session before the first lease
        beats = asyncio.create_task(self._heartbeats(), name="emq-heartbeats")
        winding = asyncio.create_task(self._wind_down(), name="emq-wind-down")
        try:
            await self._drive()
        except asyncio.CancelledError:
            # Cancelled from outside: no grace, but still settle what is held before going. The
            # wind-down runs here, not in its task: when the loop shuts down (asyncio.run's end)
            # every task is cancelled at once, that one too, and the driver would wait for it.
            self._hurry_requested = self._stop_requested = True
            self._begin_stop()
            winding.cancel()
            if not self._wound_down:
                await self._wind_down()
            await self._drive()
            raise
        finally:
            winding.cancel()
            beats.cancel()
            for task in (winding, beats):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for signum in installed:
                self._loop.remove_signal_handler(signum)
            await self._end_session()
            if self._client is None:
                await self._api.aclose()
            log.info("worker %s: stopped (%s)", self.worker_id, self.stats)
        if self._fatal is not None:
            raise self._fatal
        return self.stats

    def _install_signals(self) -> list[int]:
        assert self._loop is not None
        installed = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                self._loop.add_signal_handler(signum, self.stop)
                installed.append(signum)
        return installed

    # --- the driver: what to send next -----------------------------------------------------------

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _free_slots(self) -> int:
        return self.concurrency - self._running - self._asked

    @property
    def _is_stopping(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def _drive(self) -> None:
        """Sends batches of acks and leases as slots free up, until stopped and settled."""
        assert self._wake is not None
        while True:
            self._wake.clear()
            if self._flush_in() == 0:
                self._flush()
            if self._may_lease():
                self._polling = True
                self._spawn(self._lease(self._reserve_lease(self.wait_ms)))
            if self._is_stopping and self._wound_down:
                if self._lease_retries and not self._leases:
                    self._spawn(self._collect_lost_leases())
                if not self._outbox and not self._requests:
                    return
            await self._sleep(self._flush_in(), self._backing_off_for())

    async def _sleep(self, *delays: Optional[float]) -> None:
        assert self._wake is not None
        timeout = min((delay for delay in delays if delay is not None), default=None)
        if timeout is None:
            await self._wake.wait()
            return
        await wait_at_most(self._wake, timeout)

    def _flush_in(self) -> Optional[float]:
        """Seconds until the gathered acks are sent (0: now); None when there are none."""
        if not self._outbox:
            return None
        full = len(self._outbox) >= MAX_BATCH or self._outbox_bytes >= MAX_BATCH_RESULT_BYTES
        if full or len(self._outbox) >= self._share() or self._running == 0 or self._is_stopping:
            return 0.0  # nothing else will finish soon, or nothing may wait
        return max(0.0, self._outbox_since + self.ack_batch_s - time.monotonic())

    def _share(self) -> int:
        """The acks worth a request of their own: a PIPELINE-th of the slots."""
        return max(1, -(-self.concurrency // PIPELINE))

    def _backing_off_for(self) -> Optional[float]:
        left = self._lease_after - time.monotonic()
        return left if left > 0 and self._wants_lease() and not self._polling else None

    def _wants_lease(self) -> bool:
        return not self._is_stopping and not self._quiet and self._fatal is None and self._free_slots() > 0

    def _may_lease(self) -> bool:
        # Gathered acks carry the next lease themselves (lease_next) when they are sent.
        return (
            self._wants_lease()
            and not self._polling
            and not self._outbox
            and time.monotonic() >= self._lease_after
        )

    def _reserve_lease(self, wait_ms: int, most: int = MAX_LEASE_JOBS) -> _Lease:
        """The next lease request, its slots taken from now until it is answered."""
        if self._lease_retries and self._lease_retries[0].max_jobs <= self._free_slots():
            lease = self._lease_retries.pop(0)  # the same request_id: it answers what it took, never more
        else:
            lease = _Lease(next(self._request_ids), min(self._free_slots(), most, MAX_LEASE_JOBS), wait_ms)
        self._leases += 1
        self._no_lease.clear()
        self._asked += lease.max_jobs
        return lease

    def _unreserve(self, lease: _Lease) -> None:
        self._leases -= 1
        if not self._leases:
            self._no_lease.set()
        self._asked -= lease.max_jobs

    def _spawn(self, request: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(request)
        self._requests.add(task)
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[Any]) -> None:
        self._requests.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker %s: request failed", self.worker_id, exc_info=task.exception())
        self._poke()

    # --- leasing ---------------------------------------------------------------------------------

    def _send_lease(self, lease: _Lease, wait_ms: int) -> Awaitable[LeaseAnswer]:
        return self._api.lease_answer(
            self.queue,
            self.worker_id,
            lease_ms=self.lease_ms,
            max_jobs=lease.max_jobs,
            wait_ms=wait_ms,
            request_id=lease.request_id,
        )

    def _hold_off(self, jobs: list[LeasedJob], retry_after_ms: Optional[int]) -> None:
        """The queue's rate limit held a lease back and said when its window has room again:
        no lease before then (rather than asking again and again for nothing)."""
        if not jobs and retry_after_ms:
            self._lease_after = max(self._lease_after, time.monotonic() + retry_after_ms / 1000)

    async def _lease(self, lease: _Lease) -> None:
        sent_at = time.monotonic()
        try:
            answer = await self._send_lease(lease, lease.wait_ms)
        except _FATAL as error:
            log.error("worker %s: lease refused (%s); stopping", self.worker_id, error)
            self._fatal = error
            self.stop()
            return
        except EchoMQError as error:
            self._lease_failed(lease, error)
            return
        finally:
            self._polling = False
            self._unreserve(lease)
        self._lease_failures = 0
        self._hold_off(answer.jobs, answer.retry_after_ms)
        self._take(answer.jobs, sent_at)

    def _lease_failed(self, lease: _Lease, error: EchoMQError) -> None:
        # The answer may be lost after the service leased: the next lease repeats this one.
        self._lease_retries.append(lease)
        self._lease_failures += 1
        delay = backoff_s(self._lease_failures)
        self._lease_after = time.monotonic() + delay
        log.warning("worker %s: lease failed (%s); trying again in %.1f s", self.worker_id, error, delay)

    def _take(self, jobs: Iterable[LeasedJob], sent_at: float) -> None:
        """Jobs a lease brought: started, or released at once when the worker is stopping."""
        expires_at = sent_at + self.lease_ms / 1000
        for job in jobs:
            held = _Held(JobContext(job), sent_at, expires_at, running=not self._is_stopping)
            self._held[job.id] = held
            if held.running:
                self._running += 1
                self._start(held)
            else:
                self._give_back(held)

    # --- running handlers ------------------------------------------------------------------------

    def _start(self, held: _Held) -> None:
        context = held.context
        if self._is_async:
            task = asyncio.ensure_future(self.handler(context))  # type: ignore[arg-type]
            task.add_done_callback(lambda done: self._async_finished(held, done))
            held.task = task
            return
        loop = asyncio.get_running_loop()

        def run() -> None:
            try:
                result, error = self.handler(context), None
            except BaseException as raised:
                result, error = None, raised
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(self._sync_finished, held, result, error)

        # A daemon thread: a handler that ignores cancellation cannot hold the process open.
        threading.Thread(target=run, name=f"emq-job-{context.id}", daemon=True).start()

    def _async_finished(self, held: _Held, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._finished(held, None, asyncio.CancelledError("the handler was cancelled"))
        else:
            error = task.exception()
            self._finished(held, task.result() if error is None else None, error)

    def _sync_finished(self, held: _Held, result: Any, error: Optional[BaseException]) -> None:
        if inspect.isawaitable(result):  # a plain function that returned a coroutine
            task = asyncio.ensure_future(result)
            task.add_done_callback(lambda done: self._async_finished(held, done))
            held.task = task
            return
        self._finished(held, result, error)

    def _finished(self, held: _Held, result: Any, error: Optional[BaseException]) -> None:
        """A handler ended: its outcome is gathered (ack) or sent (fail), or discarded."""
        if held.settled:
            return  # released or lost already (a sync handler that ended after the grace)
        self._free_slot(held)
        reason = held.context._reason
        if reason == "lease_lost":
            self._settle(held, "lost", "lease lost while the handler ran; outcome discarded")
        elif reason == "cancel_requested":  # failed: the service ends it cancelled
            self._spawn(
                self._fail(
                    held, JobError("cancelled while running (cancel requested)", retry=False, plain=True)
                )
            )
        elif isinstance(error, asyncio.CancelledError) and reason == "stopped":
            self._give_back(held)
        elif error is not None:
            self._spawn(self._fail(held, error))
        else:
            self._gather(held, result)
        self._poke()

    def _free_slot(self, held: _Held) -> None:
        if held.running:
            held.running = False
            self._running -= 1
            self._handler_ended.set()

    def _settle(self, held: _Held, outcome: str, why: str = "") -> None:
        held.settled = True
        self._free_slot(held)
        if self._held.get(held.job.id) is held:
            del self._held[held.job.id]
        if outcome == "acked":
            self.stats.acked += 1
        elif outcome == "failed":
            self.stats.failed += 1
        elif outcome == "released":
            self.stats.released += 1
        elif outcome == "lost":
            self.stats.lost += 1
            log.warning("job %s: %s", held.job.id, why)
        else:  # "error": the service did not take the outcome; the lease will run out
            self.stats.errors.append(f"{held.job.id}: {why}")
            log.error("job %s: %s; its lease will run out and it will come back", held.job.id, why)
        if self.on_outcome is not None:
            try:
                self.on_outcome(held.context, outcome, why)
            except Exception:  # an observer's bug must not stop the worker
                log.exception("worker %s: on_outcome", self.worker_id)

    # --- acks, fails, releases -------------------------------------------------------------------

    def _gather(self, held: _Held, result: Any) -> None:
        job = held.job
        if result is None:
            item = AckItem(id=job.id, lease_id=job.lease_id, result=None)
        else:
            try:
                encoded = msgspec.json.encode(result)
            except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as error:
                self._spawn(self._fail(held, TypeError(f"the handler's result is not JSON: {error}")))
                return
            item = AckItem(id=job.id, lease_id=job.lease_id, result=msgspec.Raw(encoded))
            self._outbox_bytes += len(encoded)
        if not self._outbox:
            self._outbox_since = time.monotonic()
        self._outbox.append((held, item))

    def _flush(self) -> None:
        """Send the gathered acks: a share of the slots' worth per ack-many (PIPELINE), each
        with a lease_next for its part of the free slots."""
        outbox, self._outbox, self._outbox_bytes = self._outbox, [], 0
        size = min(MAX_BATCH, self._share())
        batches = [outbox[start : start + size] for start in range(0, len(outbox), size)]
        for left, batch in zip(range(len(batches), 0, -1), batches):
            wanted = -(-self._free_slots() // left)  # this batch's part of the free slots
            lease = self._reserve_lease(0, wanted) if wanted > 0 and self._wants_lease() else None
            self._spawn(self._send_acks(batch, lease))

    async def _send_acks(self, batch: list[tuple[_Held, AckItem]], lease: Optional[_Lease]) -> None:
        items = [item for _, item in batch]
        holds = [held for held, _ in batch]
        sent_at = time.monotonic()
        try:
            if lease is None:
                outcomes, jobs = await self._persist(lambda: self._api.ack_many(self.queue, items), holds), []
            else:
                next_lease = LeaseNext(
                    worker=self.worker_id,
                    lease_ms=self.lease_ms,
                    max_jobs=lease.max_jobs,
                    wait_ms=0,
                    request_id=lease.request_id,
                )
                both = await self._persist(
                    lambda: self._api.ack_many(self.queue, items, lease_next=next_lease), holds
                )
                outcomes, jobs = both.results, both.jobs
                self._hold_off(jobs, both.retry_after_ms)
        except (InvalidRequest, PayloadTooLarge):
            # The batch as a whole was refused (nothing was done): each ack on its own.
            for held, item in batch:
                self._spawn(self._ack_alone(held, item))
            return
        except EchoMQError as error:
            if lease is not None:
                self._lease_retries.append(lease)  # it may have leased: the next lease repeats it
            for held, _ in batch:
                self._settle(held, "error", f"ack not taken ({error})")
            return
        finally:
            if lease is not None:
                self._unreserve(lease)
        for (held, _), outcome in matched(batch, outcomes):
            if outcome.ok:
                self._settle(held, "acked")
            else:
                self._settle(held, "lost", f"not acked, {outcome.code}")
        self._take(jobs, sent_at)

    async def _ack_alone(self, held: _Held, item: AckItem) -> None:
        job = held.job
        try:
            await self._persist(lambda: self._api.ack(self.queue, job.id, job.lease_id, item.result), [held])
            self._settle(held, "acked")
        except (LeaseLost, JobNotFound) as error:
            self._settle(held, "lost", f"not acked, {error.code}")
        except (InvalidRequest, PayloadTooLarge) as error:
            await self._fail(held, ValueError(f"the service refused the result: {error.detail}"))
        except EchoMQError as error:
            self._settle(held, "error", f"ack not taken ({error})")

    async def _fail(self, held: _Held, error: BaseException) -> None:
        job = held.job
        retry = getattr(error, "retry", None)
        retry_after = getattr(error, "retry_after_ms", None)
        text = error_text(error)
        try:
            failed = await self._persist(
                lambda: self._api.fail(
                    self.queue,
                    job.id,
                    job.lease_id,
                    text,
                    retry=False if retry is False else None,
                    retry_after_ms=int(retry_after) if isinstance(retry_after, (int, float)) else None,
                ),
                [held],
            )
            self._settle(held, "failed", failed.state)
            head = text.split("\n", 1)[0]
            log.info("job %s: attempt %d failed: %s (now %s)", job.id, failed.attempt, head, failed.state)
        except (LeaseLost, JobNotFound) as lost:
            self._settle(held, "lost", f"failure not recorded, {lost.code}")
        except EchoMQError as problem:
            self._settle(held, "error", f"fail not taken ({problem})")
        except Exception as bug:  # say an exception whose __str__ raises: never hold (and renew) it for ever
            log.exception("job %s: could not report its failure", job.id)
            self._settle(held, "error", f"fail not sent ({bug!r})")

    def _give_back(self, held: _Held) -> None:
        """Release the job; whatever its handler does from now on is discarded."""
        held.settled = True
        self._free_slot(held)
        self._spawn(self._release(held))

    async def _release(self, held: _Held) -> None:
        job = held.job
        await self._no_lease.wait()  # else the lease in flight could take the job straight back
        try:
            await self._persist(lambda: self._api.release(self.queue, job.id, job.lease_id), [held])
            self._settle(held, "released")
            log.info("job %s: released", job.id)
        except (LeaseLost, JobNotFound) as lost:
            self._settle(held, "lost", f"not released, {lost.code}")
        except EchoMQError as problem:
            self._settle(held, "error", f"release not taken ({problem})")

    async def _persist(self, call: Callable[[], Awaitable[T]], holds: Iterable[_Held]) -> T:
        """call(), again after transient errors while a lease of the batch may still be alive
        (the client has retried already). Safe: the service answers a repeated ack, fail or
        release (same lease) as it answered the first, and a lease_next repeats by request_id."""
        attempt = 0
        while True:
            try:
                return await call()
            except _TRANSIENT as error:
                if not any(time.monotonic() < held.expires_at for held in holds):
                    raise
                delay = backoff_s(attempt)
                attempt += 1
                log.warning("worker %s: %s; trying again in %.1f s", self.worker_id, error, delay)
                await asyncio.sleep(delay)

    # --- leases: renewals --------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        """Every tick, the session heartbeat, and one heartbeat-many renews every lease held that
        is due (every heartbeat_s); sooner after a failure."""
        delay = self._tick_s()
        while True:
            await asyncio.sleep(delay)
            self._lose_expired()
            delay = self._tick_s()
            session = asyncio.ensure_future(self._session_beat())  # alongside: neither waits for the other
            due = [held for held in self._held.values() if not held.settled and self._renewal_due(held)]
            for start in range(0, len(due), MAX_BATCH):
                try:
                    renewed = await self._renew(due[start : start + MAX_BATCH])
                except Exception:  # a bug must not end the renewals of every lease
                    log.exception("worker %s: heartbeat", self.worker_id)
                    renewed = False
                if not renewed:
                    delay = self._retry_delay()
            try:
                if not await session:
                    delay = min(delay, self._retry_delay())
            except Exception:  # a bug must not end the renewals
                log.exception("worker %s: session heartbeat", self.worker_id)

    def _tick_s(self) -> float:
        """The heartbeat timer: every heartbeat_s, and at least three times per session ttl."""
        if not self.session:
            return self.heartbeat_s
        return min(self.heartbeat_s, self.session_ttl_ms / 3000)

    # --- the session -----------------------------------------------------------------------------

    async def _session_beat(self) -> bool:
        """Start or renew the session (nothing without sessions); False when it failed."""
        if not self.session:
            return True
        try:
            answer = await self._api.session_heartbeat(
                self.queue, self.worker_id, ttl_ms=self.session_ttl_ms, info=self.session_info
            )
        except EchoMQError as error:
            log.warning("worker %s: session heartbeat failed (%s)", self.worker_id, error)
            return False
        self._session_opened = True
        self.session_state = answer.state
        if answer.state == "quiet" and not self._quiet:
            log.info(
                "worker %s: quieted; leasing nothing more, finishing %d job(s)", self.worker_id, self._running
            )
            self._quiet = True
            self._poke()
        return True

    async def _end_session(self) -> None:
        """Once stopped: end the session, which gives back any job still held (there should be
        none: every job was acked, failed or released by now)."""
        if not self._session_opened:
            return
        self._session_opened = False
        try:
            released = await asyncio.wait_for(
                self._api.end_session(self.queue, self.worker_id), END_SESSION_TIMEOUT_S
            )
        except (EchoMQError, asyncio.TimeoutError) as error:
            log.warning("worker %s: could not end its session (%r); it will lapse", self.worker_id, error)
            return
        if released:
            log.warning("worker %s: ending its session gave back %s", self.worker_id, released)

    def _renewal_due(self, held: _Held) -> bool:
        return time.monotonic() - held.renewed_at >= self.heartbeat_s / 2

    async def _renew(self, due: list[_Held]) -> bool:
        sent_at = time.monotonic()
        leases = self._heartbeat_items(due)
        try:
            outcomes = await self._api.heartbeat_many(self.queue, leases)
        except (InvalidRequest, PayloadTooLarge) as error:
            # A progress the service refuses (say nested too deep) is dropped: the renewals
            # must go through.
            log.warning("worker %s: heartbeat refused (%s); progress dropped", self.worker_id, error)
            return False
        except EchoMQError as error:
            log.warning("worker %s: heartbeat failed (%s)", self.worker_id, error)
            for held, lease in zip(due, leases):
                if lease.progress is not msgspec.UNSET:
                    held.context._keep_progress(lease.progress)
            return False
        for held, outcome in matched(due, outcomes):
            if outcome.ok:
                held.renewed_at, held.expires_at = sent_at, sent_at + self.lease_ms / 1000
                if outcome.cancel_requested:
                    self._cancel_requested(held)
            elif held.running:  # a finished job's ack or fail will say what became of it
                self._lose(held, f"heartbeat answered {outcome.code}")
        return True

    @staticmethod
    def _heartbeat_items(due: list[_Held]) -> list[HeartbeatItem]:
        """The renewals, with the progress reported since the last, up to MAX_BATCH_RESULT_BYTES
        of it (the body limit): the rest stays for the next heartbeat."""
        room = MAX_BATCH_RESULT_BYTES
        items = []
        for held in due:
            progress = held.context._take_progress() if room > 0 else msgspec.UNSET
            if progress is not msgspec.UNSET:
                room -= len(progress)
            items.append(HeartbeatItem(id=held.job.id, lease_id=held.job.lease_id, progress=progress))
        return items

    def _cancel_requested(self, held: _Held) -> None:
        """Stop the handler of a job whose cancellation was requested; once it ends, the job is
        failed (see _finished). One that finished already is acked as it is."""
        if not held.running or held.context.cancelled or (held.task is not None and held.task.done()):
            return
        log.info("job %s: cancellation requested; stopping its handler", held.job.id)
        held.context._cancel_with("cancel_requested")
        if held.task is not None:
            held.task.cancel()

    def _retry_delay(self) -> float:
        soonest = min((held.expires_at for held in self._held.values()), default=None)
        if soonest is None:
            return self.heartbeat_s
        return min(self.heartbeat_s, max(0.2, (soonest - time.monotonic()) / 4))

    def _lose_expired(self) -> None:
        now = time.monotonic()
        for held in list(self._held.values()):
            if held.running and now >= held.expires_at:
                self._lose(held, "the lease ran out without a renewal")

    def _lose(self, held: _Held, why: str) -> None:
        """The job is not ours any more: stop its handler; its outcome will be discarded."""
        log.warning("job %s: %s; stopping its handler", held.job.id, why)
        held.context._cancel_with("lease_lost")
        if held.task is not None:
            held.task.cancel()  # settled as lost when the task ends
        else:
            self._settle(held, "lost", f"{why}; outcome discarded")  # a thread cannot be stopped
        self._poke()

    # --- stopping --------------------------------------------------------------------------------

    async def _wind_down(self) -> None:
        """Once stopped: let handlers finish within the grace, then cancel the rest and release
        their jobs."""
        assert self._stopping is not None
        await self._stopping.wait()
        if self._running:
            log.info(
                "worker %s: waiting up to %.1f s for %d job(s)", self.worker_id, self.grace_s, self._running
            )
        await self._until_handlers_end(self.grace_s, interruptible=True)
        for held in self._running_jobs():
            held.context._cancel_with("stopped")
            if held.task is not None:
                held.task.cancel()  # released once it ends cancelled (acked if it returns all the same)
            else:  # a thread cannot be stopped: its job is released now, its outcome discarded
                self._give_back(held)
        await self._until_handlers_end(self.cancel_wait_s, interruptible=False)
        for held in self._running_jobs():
            log.warning("job %s: its handler ignores cancellation; released all the same", held.job.id)
            self._give_back(held)
        self._wound_down = True
        self._poke()

    def _running_jobs(self) -> list[_Held]:
        return [held for held in self._held.values() if held.running]

    async def _until_handlers_end(self, timeout: float, *, interruptible: bool) -> None:
        """Until no handler runs or timeout passes; if interruptible, also until a second stop()."""
        deadline = time.monotonic() + timeout
        while self._running > 0 and not (interruptible and self._hurry_requested):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._handler_ended.clear()
            await wait_at_most(self._handler_ended, left)

    async def _collect_lost_leases(self) -> None:
        """Leases whose answers were lost may hold jobs: the same request_id answers them, to be
        released now instead of when their leases run out."""
        leases, self._lease_retries = self._lease_retries, []
        for lease in leases:
            sent_at = time.monotonic()
            try:
                answer = await self._send_lease(lease, 0)
            except EchoMQError as error:
                log.warning("worker %s: could not collect a lost lease (%s)", self.worker_id, error)
                continue
            self._take(answer.jobs, sent_at)
