"""``Client`` (blocking) and ``AsyncClient`` (asyncio): the whole API, one method per endpoint.

Both take the service's base URL (default: ``$EMQ_URL``, else ``http://127.0.0.1:8080``) and a
bearer token (default: ``$EMQ_TOKEN``). Errors are raised as the exceptions of
``echomq.errors``; calls that are safe to repeat are retried on 503/429/lost connections
according to ``retry`` (a ``RetryPolicy``; ``NO_RETRIES`` turns it off).

``Client`` speaks HTTP through httpx; ``AsyncClient`` through aiohttp (about half httpx's CPU
per job for a worker; figures in ``echomq._http``), or through httpx when given an httpx
``transport``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Optional, TypeVar, Union, overload

import httpx
import msgspec

from echomq import _ops
from echomq import models as m
from echomq._events import IDLE_S, EventFeed
from echomq._http import AiohttpPool, Answer, HttpxAsyncPool, httpx_answer, httpx_failure, json_headers
from echomq._ops import DEFAULT_TIMEOUT_S, Op, RetryPolicy
from echomq.errors import EchoMQError

T = TypeVar("T")
UNSET: Any = msgspec.UNSET
QUEUES_PER_PAGE = 1000  # the service's most per page of GET /v1/queues: the fewest calls

__all__ = ["AsyncClient", "Client", "RetryPolicy"]


class _Base:
    def __init__(
        self,
        url: Optional[str],
        token: Optional[str],
        timeout: float,
        retry: Optional[RetryPolicy],
    ) -> None:
        self.url = _ops.default_url(url)
        self.token = _ops.default_token(token)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()


class Client(_Base):
    """Blocking client. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: Optional[RetryPolicy] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        super().__init__(url, token, timeout, retry)
        self._http = httpx.Client(
            base_url=self.url, headers=_ops.headers(self.token), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, op: Op[T]) -> T:
        attempt = 0
        while True:
            try:
                return op.read(self._send(op))
            except Exception as error:
                if not self.retry.should_retry(op, attempt, error):
                    raise
                time.sleep(self.retry.delay(attempt, error))
                attempt += 1

    def _send(self, op: Op[Any]) -> Answer:
        try:
            response = self._http.request(
                op.method,
                op.path,
                content=op.body,
                params=op.params,
                headers=json_headers(op.body, op.headers),
                timeout=self.timeout + op.long_poll_s,
            )
        except httpx.TransportError as error:
            raise httpx_failure(error, f"{op.method} {op.path}") from error
        return httpx_answer(response)

    # --- producing -----------------------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        id: Optional[str] = None,
        name: Optional[str] = None,
        priority: Optional[int] = None,
        delay_ms: Optional[int] = None,
        max_attempts: Optional[int] = None,
        backoff: Optional[m.Backoff] = None,
        traceparent: Optional[str] = None,
        group: Optional[str] = None,
    ) -> m.Enqueued:
        """Add a job. With ``id`` the call is idempotent: an existing job with that id is left
        as it is and answered with ``created=False``."""
        return self._call(
            _ops.enqueue(
                queue,
                payload,
                id=id,
                name=name,
                priority=priority,
                delay_ms=delay_ms,
                max_attempts=max_attempts,
                backoff=backoff,
                traceparent=traceparent,
                group=group,
            )
        )

    def create_flow(self, job: Union[m.FlowNode, Mapping[str, Any]]) -> list[m.FlowJob]:
        """Make a flow: ``job`` runs once all its ``children`` (jobs in any queues, each maybe
        with children of its own) have finished; the jobs made or found, root first. With every
        node's ``id`` given the call is idempotent (and retried safely); ``JobExists`` when a
        node's id is another job's (nothing is made)."""
        return self._call(_ops.create_flow(job))

    def enqueue_many(
        self,
        queue: str,
        jobs: Iterable[Union[m.NewJob, Mapping[str, Any]]],
        *,
        traceparent: Optional[str] = None,
    ) -> list[m.Enqueued]:
        """Add 1..1000 jobs in one request, all or none (a malformed item rejects them all)."""
        return self._call(_ops.enqueue_many(queue, jobs, traceparent))

    # --- working -------------------------------------------------------------------------------

    def lease(
        self,
        queue: str,
        worker: str,
        *,
        lease_ms: Optional[int] = None,
        max_jobs: Optional[int] = None,
        wait_ms: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> list[m.LeasedJob]:
        """Take up to ``max_jobs`` jobs; with ``wait_ms`` wait (long poll) until one comes. With
        ``request_id`` the call is safe to repeat (and is retried): a repeat answers what the
        first leased."""
        return self._call(
            _ops.lease(
                queue, worker, lease_ms=lease_ms, max_jobs=max_jobs, wait_ms=wait_ms, request_id=request_id
            )
        )

    def lease_answer(
        self,
        queue: str,
        worker: str,
        *,
        lease_ms: Optional[int] = None,
        max_jobs: Optional[int] = None,
        wait_ms: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> m.LeaseAnswer:
        """``lease``, answered whole: the jobs, and the ``retry_after_ms`` a queue's rate limit
        may add when it held the lease back."""
        return self._call(
            _ops.lease_answer(
                queue, worker, lease_ms=lease_ms, max_jobs=max_jobs, wait_ms=wait_ms, request_id=request_id
            )
        )

    def heartbeat(
        self, queue: str, id: str, lease_id: str, *, lease_ms: Optional[int] = None, progress: Any = UNSET
    ) -> m.Heartbeat:
        """Renew a lease (by its own length unless ``lease_ms``); ``LeaseLost`` if it is gone.
        ``progress`` (any JSON, at most 64 KiB) is stored on the job and sent as a progress
        event; left out, the last one stays."""
        return self._call(_ops.heartbeat(queue, id, lease_id, lease_ms, progress))

    def heartbeat_many(
        self, queue: str, leases: Iterable[Union[m.HeartbeatItem, Mapping[str, Any]]]
    ) -> list[m.HeartbeatOutcome]:
        """Renew 1..1000 leases in one request: an outcome per lease, in order (a lost one does
        not fail the others)."""
        return self._call(_ops.heartbeat_many(queue, leases))

    def ack(
        self,
        queue: str,
        id: str,
        lease_id: str,
        result: Any = UNSET,
        *,
        lease_next: Optional[Union[m.LeaseNext, Mapping[str, Any]]] = None,
    ) -> m.Acked:
        """Complete a job; ``LeaseLost`` when the lease is no longer this one. With
        ``lease_next`` (a lease call's fields) the same request then leases, and the answer's
        ``jobs`` are the jobs leased; a failed ack leases nothing."""
        return self._call(_ops.ack(queue, id, lease_id, result, lease_next))

    @overload
    def ack_many(
        self, queue: str, acks: Iterable[Union[m.AckItem, Mapping[str, Any]]], *, lease_next: None = None
    ) -> list[m.AckOutcome]: ...

    @overload
    def ack_many(
        self,
        queue: str,
        acks: Iterable[Union[m.AckItem, Mapping[str, Any]]],
        *,
        lease_next: Union[m.LeaseNext, Mapping[str, Any]],
    ) -> m.AckedMany: ...

    def ack_many(
        self,
        queue: str,
        acks: Iterable[Union[m.AckItem, Mapping[str, Any]]],
        *,
        lease_next: Optional[Union[m.LeaseNext, Mapping[str, Any]]] = None,
    ) -> Union[list[m.AckOutcome], m.AckedMany]:
        """Complete 1..1000 jobs: an outcome per ack, in order. With ``lease_next`` the same
        request then leases, and answers both (``AckedMany``)."""
        if lease_next is None:
            return self._call(_ops.ack_many(queue, acks))
        return self._call(_ops.ack_many_and_lease(queue, acks, lease_next))

    def fail(
        self,
        queue: str,
        id: str,
        lease_id: str,
        error: str,
        *,
        retry: Optional[bool] = None,
        retry_after_ms: Optional[int] = None,
    ) -> m.Failed:
        """Report a failed attempt: retried later, or dead-lettered (no attempts left or
        ``retry=False``). ``error`` is at most 8 KiB."""
        return self._call(_ops.fail(queue, id, lease_id, error, retry=retry, retry_after_ms=retry_after_ms))

    def release(self, queue: str, id: str, lease_id: str) -> m.Released:
        """Give a job back now, without spending an attempt."""
        return self._call(_ops.release(queue, id, lease_id))

    # --- reading -------------------------------------------------------------------------------

    def get_job(self, queue: str, id: str, *, wait_ms: Optional[int] = None) -> m.Job:
        """A job; with ``wait_ms`` (at most 60,000) answered as soon as it is completed, failed
        or cancelled, or after wait_ms as it is then (``wait`` waits longer)."""
        return self._call(_ops.get_job(queue, id, wait_ms))

    def wait(self, queue: str, id: str, *, timeout_s: float = 60.0) -> m.Job:
        """The job once it is completed, failed or cancelled, or as it is after ``timeout_s``
        (check its ``state``); ``JobNotFound`` if it is deleted. Waits past 60 s take several
        calls."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self._call(_ops.get_job(queue, id, _ops.wait_step_ms(deadline, time.monotonic())))
            if job.state in _ops.OUTCOMES or time.monotonic() >= deadline:
                return job

    def history(self, queue: str, *, minutes: int = 60) -> list[m.HistoryMinute]:
        """Per-minute counts (enqueued, completed, failed, reclaimed) of the last ``minutes``
        (1..1440), oldest first, the current minute last."""
        return self._call(_ops.history(queue, minutes))

    def events(
        self,
        queue: str,
        *,
        after: Optional[int] = None,
        types: Optional[Iterable[str]] = None,
        job: Optional[str] = None,
    ) -> Iterator[m.Event]:
        """The queue's events as they happen, for ever (close the generator, or break, to stop):
        after event id ``after`` (0: from the oldest kept; None: only new ones), only ``types``
        and/or one ``job``. A lost or ended stream is resumed from the last event received
        (Last-Event-ID), after a short pause. A ``resync`` event means events were lost (too old,
        or the queue was deleted): read the state again. Without ``after``, events between the
        call and the first one received are not resumed across a reconnection."""
        feed = EventFeed(queue, after, types, job)
        while True:
            error: Optional[EchoMQError] = None
            params, headers = feed.connect()
            try:
                with self._http.stream(
                    "GET",
                    feed.path,
                    params=params,
                    headers=headers,
                    timeout=httpx.Timeout(self.timeout, read=max(self.timeout, IDLE_S)),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        _ops.raise_for_problem(httpx_answer(response))
                    for chunk in response.iter_bytes():
                        yield from feed.read(chunk)
            except httpx.TransportError as lost:
                error = httpx_failure(lost, f"GET {feed.path}")
            except EchoMQError as problem:
                error = problem
            time.sleep(feed.pause_s(error))

    def queues(self, *, prefix: Optional[str] = None) -> list[m.QueueInfo]:
        """Every queue (whose name starts with ``prefix``), by name: the pages of list_queues
        followed to the last (the service holds at most EMQ_MAX_QUEUES)."""
        found: list[m.QueueInfo] = []
        cursor = None
        while True:
            page = self.list_queues(limit=QUEUES_PER_PAGE, cursor=cursor, prefix=prefix)
            found += page.queues
            cursor = page.next_cursor
            if cursor is None:
                return found

    def list_queues(
        self, *, limit: Optional[int] = None, cursor: Optional[str] = None, prefix: Optional[str] = None
    ) -> m.QueuePage:
        """A page of the queues by name; pass ``next_cursor`` as ``cursor`` for the next."""
        return self._call(_ops.list_queues(limit=limit, cursor=cursor, prefix=prefix))

    def queue(self, queue: str) -> m.QueueInfo:
        return self._call(_ops.get_queue(queue))

    def ledger(
        self,
        queue: str,
        *,
        worker: Optional[str] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
    ) -> list[m.LedgerEntry]:
        """The in-flight ledger, oldest lease first."""
        return self._call(_ops.ledger(queue, worker=worker, limit=limit, offset=offset))

    def workers(self, queue: str) -> list[m.WorkerHoldings]:
        return self._call(_ops.workers(queue))

    def failed(
        self, queue: str, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> m.FailedPage:
        """Dead-lettered jobs, most recently failed first."""
        return self._call(_ops.failed(queue, limit=limit, offset=offset))

    def list_jobs(
        self, queue: str, state: m.JobState, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> m.JobPage:
        """A page of the jobs in one state, in its order; pass ``next_cursor`` as ``cursor`` for
        the next page, until it is None."""
        return self._call(_ops.list_jobs(queue, state, limit=limit, cursor=cursor))

    def children(
        self, queue: str, id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> m.ChildPage:
        """A page of the job's children in the order they were added, each with its state and
        what it handed the job (``result``, or ``error``); pass ``next_cursor`` as ``cursor`` for
        the next page, until it is None."""
        return self._call(_ops.children(queue, id, limit=limit, cursor=cursor))

    # --- operating -----------------------------------------------------------------------------

    def cancel(self, queue: str, id: str, *, reason: Optional[str] = None) -> m.Cancelled:
        """Cancel a job: a waiting or delayed one at once (kept like a dead letter, ``reason`` as
        its error); an active one is flagged (``cancel_requested``) for its worker, whose fail
        or release then ends it cancelled (an ack still completes it). Idempotent."""
        return self._call(_ops.cancel(queue, id, reason))

    def promote(self, queue: str, id: str) -> m.Promoted:
        """Run a delayed job now (an enqueue's delay, or a retry's backoff): it is waiting at
        once, at the back of its priority. ``NotDelayed`` when it is in another state."""
        return self._call(_ops.promote(queue, id))

    def delete_job(self, queue: str, id: str) -> None:
        return self._call(_ops.delete_job(queue, id))

    def delete_queue(self, queue: str, *, force: bool = False) -> None:
        """Delete a queue with all its jobs; ``JobActive`` while jobs are in flight, unless ``force``."""
        return self._call(_ops.delete_queue(queue, force))

    def retry_failed(self, queue: str, ids: Optional[Iterable[str]] = None) -> list[str]:
        """Send dead-lettered jobs (all, or these) back to waiting with attempts reset."""
        return self._call(_ops.retry_failed(queue, ids))

    def release_worker(self, queue: str, worker: str) -> list[str]:
        """Give back every job a worker holds (declaring it dead)."""
        return self._call(_ops.release_worker(queue, worker))

    def get_settings(self, queue: str) -> m.QueueSettings:
        """The queue's settings (defaults for a queue never configured)."""
        return self._call(_ops.get_settings(queue))

    def put_settings(
        self,
        queue: str,
        *,
        max_in_flight: Optional[int] = None,
        group_max_in_flight: Optional[int] = None,
        rate_limit: _ops.RateLimitIn = None,
        max_stalls: Optional[int] = None,
        events: bool = True,
        completed_retention_s: Optional[int] = None,
        failed_retention_s: Optional[int] = None,
    ) -> m.QueueSettings:
        """Replace the queue's settings as a whole: an argument left out takes its default (no
        limit, events on, the service's retention). ``rate_limit``: ``RateLimit``, a mapping
        ``{"max", "per_ms"}`` or a ``(max, per_ms)`` tuple."""
        return self._call(
            _ops.put_settings(
                queue,
                max_in_flight=max_in_flight,
                group_max_in_flight=group_max_in_flight,
                rate_limit=rate_limit,
                max_stalls=max_stalls,
                events=events,
                completed_retention_s=completed_retention_s,
                failed_retention_s=failed_retention_s,
            )
        )

    def session_heartbeat(
        self,
        queue: str,
        worker: str,
        *,
        ttl_ms: Optional[int] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> m.Session:
        """Start or renew the worker's session: unless renewed within ttl_ms (default 30 s) it
        lapses, and every job the worker holds goes back as if its lease had expired."""
        return self._call(_ops.session_heartbeat(queue, worker, ttl_ms, info))

    def quiet(self, queue: str, worker: str) -> m.Quieted:
        """Quiet a worker (admin): it leases nothing more until its session ends."""
        return self._call(_ops.quiet(queue, worker))

    def end_session(self, queue: str, worker: str) -> list[str]:
        """End the worker's session, giving back every job it holds unspent; the ids given back."""
        return self._call(_ops.end_session(queue, worker))

    def pause(self, queue: str) -> m.Paused:
        return self._call(_ops.set_paused(queue, True))

    def resume(self, queue: str) -> m.Paused:
        return self._call(_ops.set_paused(queue, False))

    def set_group_limit(self, queue: str, group: str, max_in_flight: Optional[int]) -> m.GroupLimit:
        """Cap a group's jobs in flight at ``max_in_flight`` (None: back to the queue's
        group_max_in_flight). Idempotent."""
        return self._call(_ops.set_group_limit(queue, group, max_in_flight))

    def list_groups(
        self, queue: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> m.GroupPage:
        """A page of the queue's groups by name; pass ``next_cursor`` as ``cursor`` for the next."""
        return self._call(_ops.list_groups(queue, limit=limit, cursor=cursor))

    # --- schedules -----------------------------------------------------------------------------

    def put_schedule(
        self,
        queue: str,
        schedule: str,
        job: Union[m.ScheduleJob, Mapping[str, Any]],
        *,
        cron: Optional[str] = None,
        every_ms: Optional[int] = None,
        timezone: Optional[str] = None,
        start_at: Optional[int] = None,
        end_at: Optional[int] = None,
        limit: Optional[int] = None,
        overlap: Optional[m.Overlap] = None,
        paused: Optional[bool] = None,
    ) -> m.Schedule:
        """Create or replace a schedule: exactly one of ``cron`` (5 fields or a macro, read in
        ``timezone``, default UTC) or ``every_ms``; each run enqueues ``job`` (a ``ScheduleJob``
        or a mapping with its fields) once. The whole schedule is replaced: an argument left out
        takes its default. Replacing keeps the counts, and the next run when the timing is
        unchanged. ``start_at``/``end_at``: epoch ms. ``InvalidRequest`` says what is wrong."""
        return self._call(
            _ops.put_schedule(
                queue,
                schedule,
                job,
                cron=cron,
                every_ms=every_ms,
                timezone=timezone,
                start_at=start_at,
                end_at=end_at,
                limit=limit,
                overlap=overlap,
                paused=paused,
            )
        )

    def get_schedule(self, queue: str, schedule: str) -> m.Schedule:
        """A schedule with its next and last run; ``ScheduleNotFound`` if there is none."""
        return self._call(_ops.get_schedule(queue, schedule))

    def list_schedules(self, queue: str) -> list[m.Schedule]:
        """Every schedule of the queue, by name."""
        return self._call(_ops.list_schedules(queue))

    def delete_schedule(self, queue: str, schedule: str) -> None:
        """No more runs (the jobs it made stay); ``ScheduleNotFound`` if there is none."""
        return self._call(_ops.delete_schedule(queue, schedule))

    def trigger_schedule(self, queue: str, schedule: str) -> m.Enqueued:
        """Enqueue the schedule's job now, outside its timetable (its next run, runs and limit
        are untouched; a paused or ended schedule can be triggered). Each call makes one job."""
        return self._call(_ops.trigger_schedule(queue, schedule))

    # --- service -------------------------------------------------------------------------------

    def healthz(self) -> bool:
        return self._call(_ops.healthz())

    def readyz(self) -> bool:
        return self._call(_ops.readyz())

    def metrics(self) -> str:
        return self._call(_ops.metrics())

    def openapi(self) -> Any:
        return self._call(_ops.openapi())


class AsyncClient(_Base):
    """asyncio client, the same methods as ``Client`` as coroutines. Use ``async with``, or
    ``await aclose()``."""

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: Optional[RetryPolicy] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        super().__init__(url, token, timeout, retry)
        headers = _ops.headers(self.token)
        self._http: Union[AiohttpPool, HttpxAsyncPool] = (
            AiohttpPool(self.url, headers)
            if transport is None
            else HttpxAsyncPool(self.url, headers, transport)
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: Optional[type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, op: Op[T]) -> T:
        attempt = 0
        while True:
            try:
                answer = await self._http.send(
                    op.method,
                    op.path,
                    body=op.body,
                    params=op.params,
                    headers=op.headers,
                    timeout=self.timeout + op.long_poll_s,
                )
                return op.read(answer)
            except Exception as error:
                if not self.retry.should_retry(op, attempt, error):
                    raise
                await asyncio.sleep(self.retry.delay(attempt, error))
                attempt += 1

    # --- producing -----------------------------------------------------------------------------

    async def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        id: Optional[str] = None,
        name: Optional[str] = None,
        priority: Optional[int] = None,
        delay_ms: Optional[int] = None,
        max_attempts: Optional[int] = None,
        backoff: Optional[m.Backoff] = None,
        traceparent: Optional[str] = None,
        group: Optional[str] = None,
    ) -> m.Enqueued:
        return await self._call(
            _ops.enqueue(
                queue,
                payload,
                id=id,
                name=name,
                priority=priority,
                delay_ms=delay_ms,
                max_attempts=max_attempts,
                backoff=backoff,
                traceparent=traceparent,
                group=group,
            )
        )

    async def enqueue_many(
        self,
        queue: str,
        jobs: Iterable[Union[m.NewJob, Mapping[str, Any]]],
        *,
        traceparent: Optional[str] = None,
    ) -> list[m.Enqueued]:
        return await self._call(_ops.enqueue_many(queue, jobs, traceparent))

    # --- working -------------------------------------------------------------------------------

    async def lease(
        self,
        queue: str,
        worker: str,
        *,
        lease_ms: Optional[int] = None,
        max_jobs: Optional[int] = None,
        wait_ms: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> list[m.LeasedJob]:
        return await self._call(
            _ops.lease(
                queue, worker, lease_ms=lease_ms, max_jobs=max_jobs, wait_ms=wait_ms, request_id=request_id
            )
        )

    async def lease_answer(
        self,
        queue: str,
        worker: str,
        *,
        lease_ms: Optional[int] = None,
        max_jobs: Optional[int] = None,
        wait_ms: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> m.LeaseAnswer:
        """``lease``, answered whole: the jobs, and the ``retry_after_ms`` a queue's rate limit
        may add when it held the lease back."""
        return await self._call(
            _ops.lease_answer(
                queue, worker, lease_ms=lease_ms, max_jobs=max_jobs, wait_ms=wait_ms, request_id=request_id
            )
        )

    async def heartbeat(
        self, queue: str, id: str, lease_id: str, *, lease_ms: Optional[int] = None, progress: Any = UNSET
    ) -> m.Heartbeat:
        return await self._call(_ops.heartbeat(queue, id, lease_id, lease_ms, progress))

    async def heartbeat_many(
        self, queue: str, leases: Iterable[Union[m.HeartbeatItem, Mapping[str, Any]]]
    ) -> list[m.HeartbeatOutcome]:
        return await self._call(_ops.heartbeat_many(queue, leases))

    async def ack(
        self,
        queue: str,
        id: str,
        lease_id: str,
        result: Any = UNSET,
        *,
        lease_next: Optional[Union[m.LeaseNext, Mapping[str, Any]]] = None,
    ) -> m.Acked:
        return await self._call(_ops.ack(queue, id, lease_id, result, lease_next))

    @overload
    async def ack_many(
        self, queue: str, acks: Iterable[Union[m.AckItem, Mapping[str, Any]]], *, lease_next: None = None
    ) -> list[m.AckOutcome]: ...

    @overload
    async def ack_many(
        self,
        queue: str,
        acks: Iterable[Union[m.AckItem, Mapping[str, Any]]],
        *,
        lease_next: Union[m.LeaseNext, Mapping[str, Any]],
    ) -> m.AckedMany: ...

    async def ack_many(
        self,
        queue: str,
        acks: Iterable[Union[m.AckItem, Mapping[str, Any]]],
        *,
        lease_next: Optional[Union[m.LeaseNext, Mapping[str, Any]]] = None,
    ) -> Union[list[m.AckOutcome], m.AckedMany]:
        if lease_next is None:
            return await self._call(_ops.ack_many(queue, acks))
        return await self._call(_ops.ack_many_and_lease(queue, acks, lease_next))

    async def fail(
        self,
        queue: str,
        id: str,
        lease_id: str,
        error: str,
        *,
        retry: Optional[bool] = None,
        retry_after_ms: Optional[int] = None,
    ) -> m.Failed:
        return await self._call(
            _ops.fail(queue, id, lease_id, error, retry=retry, retry_after_ms=retry_after_ms)
        )

    async def release(self, queue: str, id: str, lease_id: str) -> m.Released:
        return await self._call(_ops.release(queue, id, lease_id))

    # --- reading -------------------------------------------------------------------------------

    async def get_job(self, queue: str, id: str, *, wait_ms: Optional[int] = None) -> m.Job:
        return await self._call(_ops.get_job(queue, id, wait_ms))

    async def wait(self, queue: str, id: str, *, timeout_s: float = 60.0) -> m.Job:
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self._call(_ops.get_job(queue, id, _ops.wait_step_ms(deadline, time.monotonic())))
            if job.state in _ops.OUTCOMES or time.monotonic() >= deadline:
                return job

    async def history(self, queue: str, *, minutes: int = 60) -> list[m.HistoryMinute]:
        return await self._call(_ops.history(queue, minutes))

    async def events(
        self,
        queue: str,
        *,
        after: Optional[int] = None,
        types: Optional[Iterable[str]] = None,
        job: Optional[str] = None,
    ) -> AsyncIterator[m.Event]:
        """As ``Client.events``, an async iterator (``async for``); ``aclose()`` it to stop at once."""
        feed = EventFeed(queue, after, types, job)
        while True:
            error: Optional[EchoMQError] = None
            params, headers = feed.connect()
            try:
                async with self._http.stream(
                    feed.path,
                    params=params,
                    headers=headers,
                    timeout=self.timeout,
                    idle_s=max(self.timeout, IDLE_S),
                ) as (answer, chunks):
                    _ops.raise_for_problem(answer)
                    async for chunk in chunks:
                        for event in feed.read(chunk):
                            yield event
            except EchoMQError as problem:
                error = problem
            await asyncio.sleep(feed.pause_s(error))

    async def queues(self, *, prefix: Optional[str] = None) -> list[m.QueueInfo]:
        found: list[m.QueueInfo] = []
        cursor = None
        while True:
            page = await self.list_queues(limit=QUEUES_PER_PAGE, cursor=cursor, prefix=prefix)
            found += page.queues
            cursor = page.next_cursor
            if cursor is None:
                return found

    async def list_queues(
        self, *, limit: Optional[int] = None, cursor: Optional[str] = None, prefix: Optional[str] = None
    ) -> m.QueuePage:
        return await self._call(_ops.list_queues(limit=limit, cursor=cursor, prefix=prefix))

    async def queue(self, queue: str) -> m.QueueInfo:
        return await self._call(_ops.get_queue(queue))

    async def ledger(
        self,
        queue: str,
        *,
        worker: Optional[str] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
    ) -> list[m.LedgerEntry]:
        return await self._call(_ops.ledger(queue, worker=worker, limit=limit, offset=offset))

    async def workers(self, queue: str) -> list[m.WorkerHoldings]:
        return await self._call(_ops.workers(queue))

    async def failed(
        self, queue: str, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> m.FailedPage:
        return await self._call(_ops.failed(queue, limit=limit, offset=offset))

    async def list_jobs(
        self, queue: str, state: m.JobState, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> m.JobPage:
        return await self._call(_ops.list_jobs(queue, state, limit=limit, cursor=cursor))

    async def children(
        self, queue: str, id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> m.ChildPage:
        return await self._call(_ops.children(queue, id, limit=limit, cursor=cursor))

    # --- operating -----------------------------------------------------------------------------

    async def cancel(self, queue: str, id: str, *, reason: Optional[str] = None) -> m.Cancelled:
        return await self._call(_ops.cancel(queue, id, reason))

    async def promote(self, queue: str, id: str) -> m.Promoted:
        return await self._call(_ops.promote(queue, id))

    async def create_flow(self, job: Union[m.FlowNode, Mapping[str, Any]]) -> list[m.FlowJob]:
        return await self._call(_ops.create_flow(job))

    async def delete_job(self, queue: str, id: str) -> None:
        return await self._call(_ops.delete_job(queue, id))

    async def delete_queue(self, queue: str, *, force: bool = False) -> None:
        return await self._call(_ops.delete_queue(queue, force))

    async def retry_failed(self, queue: str, ids: Optional[Iterable[str]] = None) -> list[str]:
        return await self._call(_ops.retry_failed(queue, ids))

    async def release_worker(self, queue: str, worker: str) -> list[str]:
        return await self._call(_ops.release_worker(queue, worker))

    async def get_settings(self, queue: str) -> m.QueueSettings:
        """The queue's settings (defaults for a queue never configured)."""
        return await self._call(_ops.get_settings(queue))

    async def put_settings(
        self,
        queue: str,
        *,
        max_in_flight: Optional[int] = None,
        group_max_in_flight: Optional[int] = None,
        rate_limit: _ops.RateLimitIn = None,
        max_stalls: Optional[int] = None,
        events: bool = True,
        completed_retention_s: Optional[int] = None,
        failed_retention_s: Optional[int] = None,
    ) -> m.QueueSettings:
        """Replace the queue's settings as a whole: an argument left out takes its default (no
        limit, events on, the service's retention). ``rate_limit``: ``RateLimit``, a mapping
        ``{"max", "per_ms"}`` or a ``(max, per_ms)`` tuple."""
        return await self._call(
            _ops.put_settings(
                queue,
                max_in_flight=max_in_flight,
                group_max_in_flight=group_max_in_flight,
                rate_limit=rate_limit,
                max_stalls=max_stalls,
                events=events,
                completed_retention_s=completed_retention_s,
                failed_retention_s=failed_retention_s,
            )
        )

    async def session_heartbeat(
        self,
        queue: str,
        worker: str,
        *,
        ttl_ms: Optional[int] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> m.Session:
        return await self._call(_ops.session_heartbeat(queue, worker, ttl_ms, info))

    async def quiet(self, queue: str, worker: str) -> m.Quieted:
        return await self._call(_ops.quiet(queue, worker))

    async def end_session(self, queue: str, worker: str) -> list[str]:
        return await self._call(_ops.end_session(queue, worker))

    async def pause(self, queue: str) -> m.Paused:
        return await self._call(_ops.set_paused(queue, True))

    async def resume(self, queue: str) -> m.Paused:
        return await self._call(_ops.set_paused(queue, False))

    async def set_group_limit(self, queue: str, group: str, max_in_flight: Optional[int]) -> m.GroupLimit:
        return await self._call(_ops.set_group_limit(queue, group, max_in_flight))

    async def list_groups(
        self, queue: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> m.GroupPage:
        return await self._call(_ops.list_groups(queue, limit=limit, cursor=cursor))

    # --- schedules -----------------------------------------------------------------------------

    async def put_schedule(
        self,
        queue: str,
        schedule: str,
        job: Union[m.ScheduleJob, Mapping[str, Any]],
        *,
        cron: Optional[str] = None,
        every_ms: Optional[int] = None,
        timezone: Optional[str] = None,
        start_at: Optional[int] = None,
        end_at: Optional[int] = None,
        limit: Optional[int] = None,
        overlap: Optional[m.Overlap] = None,
        paused: Optional[bool] = None,
    ) -> m.Schedule:
        return await self._call(
            _ops.put_schedule(
                queue,
                schedule,
                job,
                cron=cron,
                every_ms=every_ms,
                timezone=timezone,
                start_at=start_at,
                end_at=end_at,
                limit=limit,
                overlap=overlap,
                paused=paused,
            )
        )

    async def get_schedule(self, queue: str, schedule: str) -> m.Schedule:
        return await self._call(_ops.get_schedule(queue, schedule))

    async def list_schedules(self, queue: str) -> list[m.Schedule]:
        return await self._call(_ops.list_schedules(queue))

    async def delete_schedule(self, queue: str, schedule: str) -> None:
        return await self._call(_ops.delete_schedule(queue, schedule))

    async def trigger_schedule(self, queue: str, schedule: str) -> m.Enqueued:
        return await self._call(_ops.trigger_schedule(queue, schedule))

    # --- service -------------------------------------------------------------------------------

    async def healthz(self) -> bool:
        return await self._call(_ops.healthz())

    async def readyz(self) -> bool:
        return await self._call(_ops.readyz())

    async def metrics(self) -> str:
        return await self._call(_ops.metrics())

    async def openapi(self) -> Any:
        return await self._call(_ops.openapi())
