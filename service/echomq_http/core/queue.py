"""JobQueues: every queue operation the API offers. A transition is one script call (through
its binding, core/bindings.py); a long operation is a loop of bounded script calls. The reads
are its base QueueReads' (core/reads.py), the calling of scripts QueueCalls' (core/calls.py).

Knows nothing of HTTP. Payloads and results pass through as raw JSON bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from msgspec import UNSET, Raw, UnsetType

from echomq_http.api.schemas.jobs import (
    CancelResponse,
    EnqueueRequest,
    EnqueueResponse,
    PromoteResponse,
)
from echomq_http.api.schemas.operations import GroupLimitResponse, QueueSettings
from echomq_http.api.schemas.working import (
    AckItem,
    AckItemResult,
    FailResponse,
    HeartbeatItem,
    HeartbeatItemResult,
    HeartbeatResponse,
    LeasedJob,
    SessionHeartbeatResponse,
)
from echomq_http.core import limits
from echomq_http.core.bindings import (
    Ack,
    Acked,
    AckLease,
    Cancel,
    Enqueue,
    Fail,
    Heartbeat,
    Lease,
    Leased,
    LeaseMerged,
    LeaseRequest,
    Redrive,
    Release,
    ReleaseWorker,
    Renewed,
    ScriptJob,
    Session,
    Sweep,
    refused,
)
from echomq_http.core.errors import JobActive, ScriptCode, problem_code_of, raise_for_code
from echomq_http.core.leasing import LeaseAsk, Leases, LeasesNotConfirmed
from echomq_http.core.merging import Merger
from echomq_http.core.reads import QueueReads
from echomq_http.core.views import ScriptSettings
from echomq_http.store.backends import WriteNotConfirmed
from echomq_http.store.keys import QUEUE_REGISTRY

FINAL_STATES = frozenset({"completed", "failed", "cancelled"})

# Steps of the long operations (operator release, redrive of all, queue deletion): each one
# script call short enough that other requests' calls get through between two of them.
RELEASE_STEP = 250  # ~12 ms a step on a slow 2-core VM at 100,000 in flight (docs/PERFORMANCE.md)
REDRIVE_STEP = 1000
DELETE_STEP = 1000
REQUEST_SCAN_COUNT = 1000  # keys one SCAN call looks at when a deleted queue's requests are found
# The work merged into one script call at most (core/merging.py), in jobs: 64 single enqueues or
# acks, or lease requests whose max_jobs and acks add up to 128 (a lease of 100 alone is never
# merged with more than a few), so that a merged call stays a bounded step of a few ms at most.
MERGE_MAX = 64
MERGE_MAX_LEASED = 128


def _lease_weight(request: LeaseRequest) -> int:
    """The jobs a lease request may touch: those it may lease, and those it acks."""
    acks, ask, _ = request
    return ask.max_jobs + len(acks)


def new_job_id() -> str:
    """A server-chosen id: random, so it can never take an id a client has used or will use."""
    return os.urandom(limits.GENERATED_ID_BYTES).hex()


def script_job(job: EnqueueRequest, job_id: str, traceparent: str | None) -> ScriptJob:
    """A job's options as include/store.lua reads them."""
    return ScriptJob(
        id=job_id,
        name=job.name or "",
        priority=job.priority,
        delay_ms=job.delay_ms,
        max_attempts=job.max_attempts,
        backoff_type=job.backoff.type if job.backoff else "exponential",
        backoff_ms=job.backoff.delay_ms if job.backoff else limits.DEFAULT_BACKOFF_MS,
        traceparent=traceparent,
        group=job.group,
    )


def _ack_results(acks: Sequence[AckItem], codes: Sequence[int]) -> list[AckItemResult]:
    return [
        AckItemResult(id=ack.id, ok=True, state="completed")
        if code > 0
        else AckItemResult(id=ack.id, ok=False, code=problem_code_of(code))  # type: ignore[arg-type]
        for ack, code in zip(acks, codes, strict=True)
    ]


_encode = msgspec.json.encode


@dataclass(frozen=True, slots=True)
class SweepReport:
    reclaimed: int = 0
    dead_lettered: int = 0
    promoted: int = 0
    deleted: int = 0
    schedules_due: int = 0  # queues the sweep found a schedule's run due in (fired next)
    outbox: int = 0  # queues whose outbox holds children's outcomes to deliver (delivered next)
    flows_due: int = 0  # queues holding a flow's creation cut short (made again next)
    runs_fired: int = 0  # schedule runs that made a job
    runs_skipped: int = 0  # schedule runs skipped (overlap "skip")

    def __add__(self, other: SweepReport) -> SweepReport:
        return SweepReport(
            *(getattr(self, field.name) + getattr(other, field.name) for field in dataclasses.fields(self))
        )


class JobQueues(QueueReads):
    """All queues of one Redis server: every operation the API offers."""

    # Concurrent single enqueues, acks and lease requests of a queue made in the same event-loop
    # turn, run as one script call of each kind (core/merging.py) while self.merging is on.
    @functools.cached_property
    def _merged_enqueues(self) -> Merger[tuple[EnqueueRequest, ScriptJob], EnqueueResponse]:
        return Merger(self._enqueue_all, MERGE_MAX)

    @functools.cached_property
    def _merged_acks(self) -> Merger[tuple[str, str, Raw | UnsetType], int]:
        return Merger(self._ack_all, MERGE_MAX)

    @functools.cached_property
    def _merged_leases(self) -> Merger[LeaseRequest, tuple[list[int], Leases | None]]:
        return Merger(self._lease_all, MERGE_MAX_LEASED, _lease_weight)

    async def aclose(self) -> None:
        for name in ("_merged_enqueues", "_merged_acks", "_merged_leases"):
            if name in self.__dict__:  # made on first use
                await self.__dict__[name].aclose()
        await super().aclose()

    async def enqueue(
        self, queue: str, jobs: Sequence[EnqueueRequest], traceparent: str | None = None
    ) -> list[EnqueueResponse]:
        options = [script_job(job, job.id or new_job_id(), traceparent) for job in jobs]
        if self.merging and len(jobs) == 1:
            return [await self._merged_enqueues(queue, (jobs[0], options[0]))]
        return await self._enqueue_now(queue, jobs, options)

    async def _enqueue_all(
        self, queue: str, items: list[tuple[EnqueueRequest, ScriptJob]]
    ) -> list[EnqueueResponse]:
        """Merged single enqueues, as one enqueue of them all."""
        return await self._enqueue_now(queue, [job for job, _ in items], [options for _, options in items])

    async def _enqueue_now(
        self, queue: str, jobs: Sequence[EnqueueRequest], options: Sequence[ScriptJob]
    ) -> list[EnqueueResponse]:
        payloads = [bytes(job.payload) for job in jobs]
        # A queue that has keys is listed: one call. A new one is refused by the script (nothing
        # stored), admitted within the cap, and then started by a second call.
        first_of_queue, stored = Enqueue.reply(
            await self._call("enqueue", queue, *Enqueue.args(options, payloads, new_queue_refused=True))
        )
        if first_of_queue == ScriptCode.NEW_QUEUE:
            await self._admit(queue)
            first_of_queue, stored = Enqueue.reply(
                await self._call("enqueue", queue, *Enqueue.args(options, payloads, new_queue_refused=False))
            )
            if first_of_queue:
                # Listed again now, after the script, so that a deletion of the queue that ran
                # since its admission cannot leave it out of the registry (delete_queue checks
                # the queue is still empty after removing its entry).
                await self._register(queue)
        answers = []
        for job, job_options, one in zip(jobs, options, stored, strict=True):
            if job.id is None:
                # An id the service made is new by construction: a re-sent call (which finds
                # the job its first run stored) answers what the first run did.
                state = "delayed" if job_options.delay_ms > 0 else "waiting"
                answers.append(EnqueueResponse(id=job_options.id, queue=queue, state=state, created=True))
            else:
                answers.append(EnqueueResponse(id=one.id, queue=queue, state=one.state, created=one.created))  # type: ignore[arg-type]
        self.telemetry.record_enqueued(queue, sum(one.created for one in stored))
        return answers

    async def lease(
        self, queue: str, worker: str, lease_ms: int, max_jobs: int, request_id: str | None = None
    ) -> list[LeasedJob]:
        """Lease up to max_jobs, at once: the jobs of lease_answer."""
        return (await self.lease_answer(queue, LeaseAsk.of(worker, lease_ms, max_jobs, request_id))).jobs

    async def lease_answer(self, queue: str, ask: LeaseAsk) -> Leases:
        """One try of a lease request (core/leasing.py runs its waits): up to max_jobs, fewer
        when the queue's max_in_flight or rate_limit hold it back. The same request id re-sent
        answers the jobs the first run leased instead of leasing more (lua/lease.lua).
        WorkerOwned when the worker name belongs to another token than ask.owner;
        LeasesNotConfirmed, with the jobs, when no replica confirmed the write (durable mode)."""
        _, leases = await self._lease_request(queue, ((), ask, False))
        return leases  # type: ignore[return-value]  # a lease without acks always leases

    async def _lease_request(
        self, queue: str, request: LeaseRequest, job_id: str | None = None
    ) -> tuple[list[int], Leases | None]:
        """A lease request with the acks it carries (none for a plain lease): merged with the
        others of the moment, or alone."""
        if self.merging:
            return await self._merged_leases(queue, request)
        acks, ask, all_taken = request
        return await self._ack_and_lease(queue, acks, ask, only_if_all_taken=all_taken, job_id=job_id)

    async def _lease_all(
        self, queue: str, requests: list[LeaseRequest]
    ) -> list[tuple[list[int], Leases | None] | Exception]:
        """Merged lease requests, in one script call (lua/lease_merged.lua); one alone is sent
        as it would have been unmerged."""
        if len(requests) == 1:
            acks, ask, all_taken = requests[0]
            try:
                return [await self._ack_and_lease(queue, acks, ask, only_if_all_taken=all_taken)]
            except Exception as error:
                return [error]
        unconfirmed: WriteNotConfirmed | None = None
        try:
            reply = await self._call("lease-merged", queue, *LeaseMerged.args(requests))
        except WriteNotConfirmed as error:
            if not isinstance(error.reply, list):
                raise
            unconfirmed, reply = error, error.reply
        outcomes: list[tuple[list[int], Leases | None] | Exception] = []
        for (acks, ask, _), answer in zip(requests, LeaseMerged.reply(reply), strict=True):
            if unconfirmed is not None:
                own = WriteNotConfirmed(str(unconfirmed), answer)
                outcomes.append(self._unconfirmed(queue, own, AckLease.split(len(acks))))
                continue
            try:
                outcomes.append(self._lease_outcome(queue, acks, ask, answer))
            except Exception as error:  # the worker name is another token's
                outcomes.append(error)
        return outcomes

    def _lease_outcome(
        self, queue: str, acks: Sequence[tuple[str, str, Raw | UnsetType]], ask: LeaseAsk, reply: list[object]
    ) -> tuple[list[int], Leases | None]:
        """What an ack-lease (or, without acks, a lease) script's reply says: each ack's code, and
        the jobs leased (None when it did not lease)."""
        refused(reply, ask.worker)
        acked, leased = AckLease.reply(queue, len(acks), reply)
        codes = self._completed(queue, acked) if acks else []
        return codes, None if leased is None else self._leased(queue, leased)

    def _unconfirmed(self, queue: str, unconfirmed: WriteNotConfirmed, skip: int) -> LeasesNotConfirmed:
        """The jobs an unconfirmed lease write leased: its reply after skip entries (a reply of
        one entry is a refusal: nothing was leased)."""
        reply = unconfirmed.reply if isinstance(unconfirmed.reply, list) else []
        lease_reply = reply[skip:]
        jobs = Lease.reply(queue, lease_reply).jobs if len(lease_reply) > 1 else []
        return LeasesNotConfirmed(unconfirmed, jobs)

    async def _ack_and_lease(
        self,
        queue: str,
        acks: Sequence[tuple[str, str, Raw | UnsetType]],
        ask: LeaseAsk,
        *,
        only_if_all_taken: bool,
        job_id: str | None = None,
    ) -> tuple[list[int], Leases | None]:
        """Acks, then a try of the lease request, in one script call (lua/ack_lease.lua; with no
        acks, lua/lease.lua): each ack's code, and the jobs leased (None when it did not lease:
        only_if_all_taken and an ack was refused). WorkerOwned, nothing acked, when the lease's
        worker name belongs to another token than ask.owner's; LeasesNotConfirmed as
        lease_answer."""
        try:
            if acks:
                args = AckLease.args(acks, ask, only_if_all_taken)
                reply = await self._call("ack-lease", queue, *args, job_id=job_id)
            else:
                reply = await self._call("lease", queue, *Lease.args(ask))
        except WriteNotConfirmed as unconfirmed:
            raise self._unconfirmed(queue, unconfirmed, AckLease.split(len(acks))) from None
        return self._lease_outcome(queue, acks, ask, reply)

    def _leased(self, queue: str, leased: Leased) -> Leases:
        self.telemetry.record_stale(queue, leased.stale)
        self.telemetry.record_leased(queue, len(leased.jobs))
        return Leases(leased.jobs, leased.retry_after_ms)

    async def _renewals(
        self,
        queue: str,
        leases: Sequence[tuple[str, str, int | None, Raw | UnsetType]],
        job_id: str | None = None,
        owner: str = "",
    ) -> list[Renewed]:
        """What became of each lease given, in order; owner: the calling token's id ("" for none)."""
        return Heartbeat.reply(
            await self._call("heartbeat", queue, *Heartbeat.args(leases, owner), job_id=job_id)
        )

    async def heartbeat(
        self,
        queue: str,
        job_id: str,
        lease_id: str,
        lease_ms: int | None,
        progress: Raw | UnsetType = UNSET,
        owner: str = "",
    ) -> HeartbeatResponse:
        (renewed,) = await self._renewals(
            queue, [(job_id, lease_id, lease_ms, progress)], job_id=job_id, owner=owner
        )
        raise_for_code(renewed.code, job_id)
        return HeartbeatResponse(
            id=job_id,
            lease_id=lease_id,
            lease_expires_at=renewed.lease_expires_at,
            cancel_requested=renewed.cancel_requested,
        )

    async def heartbeat_many(
        self, queue: str, leases: Sequence[HeartbeatItem], owner: str = ""
    ) -> list[HeartbeatItemResult]:
        renewals = await self._renewals(
            queue, [(item.id, item.lease_id, item.lease_ms, item.progress) for item in leases], owner=owner
        )
        return [
            HeartbeatItemResult(
                id=item.id,
                ok=True,
                lease_id=item.lease_id,
                lease_expires_at=renewed.lease_expires_at,
                cancel_requested=renewed.cancel_requested,
            )
            if renewed.code > 0
            else HeartbeatItemResult(id=item.id, ok=False, code=problem_code_of(renewed.code))  # type: ignore[arg-type]
            for item, renewed in zip(leases, renewals, strict=True)
        ]

    async def _ack_codes(
        self, queue: str, acks: Sequence[tuple[str, str, Raw | UnsetType]], job_id: str | None = None
    ) -> list[int]:
        return self._completed(
            queue, Ack.reply(await self._call("ack", queue, *Ack.args(acks), job_id=job_id))
        )

    def _completed(self, queue: str, acked: Acked) -> list[int]:
        """The acks' codes, their completions counted."""
        self.telemetry.record_completed(
            queue, (ms for code, ms in zip(acked.codes, acked.held_ms, strict=True) if code == 1)
        )
        return acked.codes

    async def ack_one(self, queue: str, job_id: str, lease_id: str, result: Raw | UnsetType) -> None:
        if self.merging:
            code = await self._merged_acks(queue, (job_id, lease_id, result))
        else:
            (code,) = await self._ack_codes(queue, [(job_id, lease_id, result)], job_id=job_id)
        raise_for_code(code, job_id)

    async def _ack_all(self, queue: str, acks: list[tuple[str, str, Raw | UnsetType]]) -> list[int]:
        """Merged single acks, as one ack of them all: each its own code."""
        return await self._ack_codes(queue, acks)

    async def ack(self, queue: str, acks: Sequence[AckItem]) -> list[AckItemResult]:
        codes = await self._ack_codes(queue, [(ack.id, ack.lease_id, ack.result) for ack in acks])
        return _ack_results(acks, codes)

    async def ack_one_and_lease(
        self,
        queue: str,
        job_id: str,
        lease_id: str,
        result: Raw | UnsetType,
        ask: LeaseAsk,
    ) -> Leases:
        """ack_one, then (only if the ack was taken) a try of the lease request, in one script call."""
        (code,), leases = await self._lease_request(
            queue, ([(job_id, lease_id, result)], ask, True), job_id=job_id
        )
        raise_for_code(code, job_id)
        return leases or Leases([])

    async def ack_and_lease(
        self, queue: str, acks: Sequence[AckItem], ask: LeaseAsk
    ) -> tuple[list[AckItemResult], Leases]:
        """ack, then a try of the lease request whatever the acks' codes, in one script call."""
        codes, leases = await self._lease_request(
            queue, ([(ack.id, ack.lease_id, ack.result) for ack in acks], ask, False)
        )
        return _ack_results(acks, codes), leases or Leases([])

    async def fail(
        self,
        queue: str,
        job_id: str,
        lease_id: str,
        error: str,
        retry: bool,
        retry_after_ms: int | None,
    ) -> FailResponse:
        args = Fail.args(job_id, lease_id, error, retry, retry_after_ms)
        state, attempt = Fail.reply(job_id, await self._call("fail", queue, *args, job_id=job_id))
        if state != "cancelled":
            self.telemetry.record_failed(queue, state)
        return FailResponse(id=job_id, state=state, attempt=attempt)  # type: ignore[arg-type]

    async def release(self, queue: str, job_id: str, lease_id: str) -> str:
        """The job's state after the release: waiting, or cancelled (its cancellation was requested)."""
        (code,) = Release.reply(
            await self._call("release", queue, *Release.args([(job_id, lease_id)]), job_id=job_id)
        )
        raise_for_code(code, job_id)
        return "cancelled" if code == Release.AS_CANCELLED else "waiting"

    async def give_back(self, queue: str, jobs: Sequence[LeasedJob], worker: str, request_id: str) -> None:
        """The jobs a lease request leased, whose answer never reached its client, back to
        waiting, unspent, and the request forgotten so that a retry of it leases anew; in one
        call, which leaves them leased if a retry of the request was answered them meanwhile."""
        if jobs:
            leases = [(job.id, job.lease_id) for job in jobs]
            await self._call("release", queue, *Release.args(leases, worker, request_id))

    async def release_worker(
        self, queue: str, worker: str, end_session: bool = False, owner: str = ""
    ) -> list[str]:
        """Every job the worker holds back to waiting, oldest lease first in line: bounded steps
        from the newest lease to the oldest, up to the fence of the first step's time. With
        end_session, the first step also ends the worker's session (a clean shutdown). owner:
        the calling token's id ("" for none): WorkerOwned when the name is another token's."""
        steps: list[list[str]] = []
        bound: bytes | str = ""
        offset = 0
        while True:
            args = ReleaseWorker.args(worker, bound, RELEASE_STEP, offset, end_session, owner)
            step = ReleaseWorker.reply(worker, await self._call("release-worker", queue, *args))
            self.telemetry.record_stale(queue, step.stale)
            steps.append(step.released)
            bound, offset = step.bound, step.offset
            if not step.more:
                break
        return [job_id for step in reversed(steps) for job_id in step]

    async def session_heartbeat(
        self, queue: str, worker: str, ttl_ms: int, info: Raw | UnsetType, owner: str = ""
    ) -> SessionHeartbeatResponse:
        """Start or renew the worker's session (lua/session.lua); owner: the calling token's
        id ("" for none): WorkerOwned when the worker name belongs to another token."""
        reply = await self._call("session", queue, *Session.args(worker, ttl_ms, info, owner))
        expires_at, state = Session.reply(worker, reply)
        return SessionHeartbeatResponse(worker=worker, session_expires_at=expires_at, state=state)  # type: ignore[arg-type]

    async def quiet(self, queue: str, worker: str) -> None:
        """The worker's live session turns quiet; NoSession when it has none."""
        raise_for_code(await self._call("quiet", queue, worker), worker)

    async def end_session(self, queue: str, worker: str, owner: str = "") -> list[str]:
        """End the worker's session and give back every job it holds, unspent."""
        return await self.release_worker(queue, worker, end_session=True, owner=owner)

    async def delete(self, queue: str, job_id: str) -> None:
        raise_for_code(await self._call("delete", queue, job_id, job_id=job_id), job_id)

    async def delete_queue(self, queue: str, force: bool) -> None:
        """Every key of the queue, in bounded steps, then its registry entry. The registry is
        another slot's key (on a Cluster), so it is dropped after the data and then checked:
        an enqueue that recreated the queue meanwhile registers it again, or is seen here."""
        first = True
        while True:
            done = await self._call(
                "delete-queue", queue, "1" if force else "0", "1" if first else "0", DELETE_STEP
            )
            if done == ScriptCode.JOB_ACTIVE:
                raise JobActive(f"queue {queue!r} has jobs in flight: delete it with force=true")
            if done == 1:
                break
            first = False
        await self._forget_requests(queue)
        async with self._gate:
            await self.client.srem(QUEUE_REGISTRY, queue)
            queue_keys = self.keys(queue)
            recreated = await self.client.exists(
                queue_keys.meta, queue_keys.wait, queue_keys.prio, queue_keys.delayed, queue_keys.active
            )
        if recreated:
            await self._register(queue)

    async def _forget_requests(self, queue: str) -> None:
        """The queue's lease request records are keys of their own that expire by themselves
        (lua/include/lease.lua), listed nowhere a script could reach in bounded steps: a deleted
        queue's are found by SCAN on the queue's node, a page (REQUEST_SCAN_COUNT keys looked
        at) per call, and unlinked. It costs about one call per REQUEST_SCAN_COUNT keys of that
        node, only when a queue is deleted."""
        queue_keys = self.keys(queue)
        node = self.backend.node_of(queue_keys.meta)
        cursor = 0
        while True:
            async with self._gate:
                cursor, found = await node.execute_command(
                    "SCAN", cursor, "MATCH", queue_keys.request_pattern, "COUNT", REQUEST_SCAN_COUNT
                )
                if found:
                    await self.client.unlink(*found)
            if int(cursor) == 0:
                return

    async def cancel(self, queue: str, job_id: str, reason: str | None) -> CancelResponse:
        reply = await self._call("cancel", queue, job_id, reason or "", job_id=job_id)
        state, requested = Cancel.reply(job_id, reply)
        return CancelResponse(id=job_id, state=state, cancel_requested=requested)  # type: ignore[arg-type]

    async def promote(self, queue: str, job_id: str) -> PromoteResponse:
        """A delayed job becomes waiting now (lua/promote.lua); NotDelayed when it is in
        another state."""
        raise_for_code(await self._call("promote", queue, job_id, job_id=job_id), job_id)
        return PromoteResponse(id=job_id, state="waiting")

    async def put_settings(self, queue: str, settings: QueueSettings) -> QueueSettings:
        """Replace the queue's settings (lua/settings.lua). The queue is registered: a queue
        configured before its first job is listed, as a paused one is."""
        await self._admit(queue)
        rate = settings.rate_limit
        fields = ScriptSettings(
            max_in_flight=settings.max_in_flight,
            group_max_in_flight=settings.group_max_in_flight,
            rate_max=rate.max if rate else None,
            rate_per_ms=rate.per_ms if rate else None,
            max_stalls=settings.max_stalls,
            events_off=None if settings.events else 1,
            completed_retention_s=settings.completed_retention_s,
            failed_retention_s=settings.failed_retention_s,
        )
        await self._call("settings", queue, _encode(fields))
        return settings

    async def set_paused(self, queue: str, paused: bool) -> bool:
        await self._admit(queue)
        return await self._call("set-paused", queue, "1" if paused else "0") == 1

    async def redrive(self, queue: str, ids: Sequence[str] | None) -> list[str]:
        """The listed dead letters, or all of them in bounded steps (each one script call, the
        oldest failures first, up to those that failed before the first step)."""
        if ids is not None:
            if not ids:
                return []
            _, _, _, redriven = Redrive.reply(await self._call("redrive", queue, *Redrive.args(ids, 0, "")))
            return redriven
        redriven_all: list[str] = []
        bound: bytes | str = ""
        kept = 0
        while True:
            reply = await self._call("redrive", queue, *Redrive.args(None, REDRIVE_STEP, bound, kept))
            bound, read, kept_now, redriven = Redrive.reply(reply)
            kept += kept_now
            redriven_all.extend(redriven)
            if read < REDRIVE_STEP:
                return redriven_all

    async def set_group_limit(self, queue: str, group: str, max_in_flight: int | None) -> GroupLimitResponse:
        """A group's own cap on its jobs in flight (None: the queue's group_max_in_flight)."""
        await self._call("set-group", queue, group, "" if max_in_flight is None else max_in_flight)
        return GroupLimitResponse(group=group, max_in_flight=max_in_flight)

    async def sweep_queue(self, queue: str, max_steps: int, budget_s: float = math.inf) -> SweepReport:
        """Bounded steps until nothing is left to do, or max_steps ran, or budget_s passed. Each
        step reads one window of the ledger; the next goes on where it stopped."""
        report = SweepReport()
        offset = 0
        deadline = time.monotonic() + budget_s
        for _ in range(max_steps):
            step = Sweep.reply(await self._call("sweep", queue, self.sweep_batch, offset))
            report += SweepReport(
                step.reclaimed,
                step.dead_lettered,
                step.promoted,
                step.deleted,
                step.schedules_due,
                outbox=1 if step.outbox else 0,
                flows_due=step.flows_due,
            )
            self.telemetry.record_sweep(queue, step.reclaimed, step.dead_lettered)
            self.telemetry.record_stale(queue, step.stale)
            offset = step.offset
            if not step.more or time.monotonic() > deadline:
                break
        return report
