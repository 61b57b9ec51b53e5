"""The scripts as Python calls them: for each, its arguments encoded and its reply decoded.

The Lua↔Python contract is positional (ARGV and a flat reply, as each script's header says):
this module is the only place that reads it by position. core/queue.py and the tests' Lua
harness (tests/lua/conftest.py) call the scripts through these bindings alike. A binding is a
class named after its script (lua/<operation>.lua): ``operation``, whether the script writes
nothing (``read_only``: no WAIT in durable mode), ``args(...)`` (ARGV after the key prefix)
and ``reply(...)`` (the reply as named values).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec
from msgspec import UNSET, Raw, UnsetType

from echomq_http.api.schemas.inspection import Counts, GroupView, LedgerEntry, WorkerHoldings, WorkerSession
from echomq_http.api.schemas.working import LeasedJob
from echomq_http.core import limits
from echomq_http.core.errors import ScriptCode, raise_for_code
from echomq_http.core.leasing import LeaseAsk

_encode = msgspec.json.encode
NO_RESULT = b""  # an ack without a result
NEW_QUEUE_ARG = "new"  # enqueue: a queue with no keys yet is refused, to be admitted first


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def number(value: bytes | None) -> int | None:
    return None if value is None else int(value)


def refused(reply: list[Any], worker: str) -> None:
    """A script that acts for a worker answers its code alone when the worker name belongs to
    another token (lua/include/workers.lua claim_worker): raised here."""
    if len(reply) == 1:
        raise_for_code(reply[0], worker)


class Binding:
    operation: ClassVar[str]
    read_only: ClassVar[bool] = False


# --- the worker's loop -------------------------------------------------------------------------


class ScriptJob(msgspec.Struct, omit_defaults=True):
    """One job's options as include/store.lua reads them: enqueue's jobs (with their ids), and
    the job a schedule's runs make (no id: each run's is made then)."""

    name: str
    priority: int
    delay_ms: int
    max_attempts: int
    backoff_type: str
    backoff_ms: int
    id: str = ""
    traceparent: str | None = None
    group: str | None = None


class Stored(msgspec.Struct, frozen=True):
    """One job of an enqueue: its id, its state, and whether this call stored it."""

    id: str
    state: str
    created: bool


class Enqueue(Binding):
    operation = "enqueue"
    FIELDS = 3  # per job: id, state, created

    @staticmethod
    def args(
        jobs: Sequence[ScriptJob], payloads: Sequence[bytes], new_queue_refused: bool
    ) -> tuple[object, ...]:
        """The jobs' options as one JSON array, each payload, and, while the queue is not known to
        exist, the flag that makes a queue without keys refused (nothing stored)."""
        return (_encode(jobs), *payloads, *((NEW_QUEUE_ARG,) if new_queue_refused else ()))

    @staticmethod
    def reply(reply: list[Any]) -> tuple[int, list[Stored]]:
        """The first-of-queue code (1: the queue had no keys; NEW_QUEUE: refused) and each job's."""
        first_of_queue, *flat = reply
        step = Enqueue.FIELDS
        stored = [
            Stored(flat[i].decode(), flat[i + 1].decode(), flat[i + 2] == 1)
            for i in range(0, len(flat), step)
        ]
        return first_of_queue, stored


class Leased(msgspec.Struct, frozen=True):
    """What one try of a lease leased: its jobs; retry_after_ms, when the rate limit that held it
    back has room again (ms; 0: none did); stale, index entries it dropped."""

    jobs: list[LeasedJob]
    retry_after_ms: int
    stale: int


class LeaseOptions(msgspec.Struct):
    """A lease request as lua/lease.lua and lua/ack_lease.lua unpack it (one msgpack map)."""

    worker: str
    lease_ms: int
    max_jobs: int
    lease_ids: str  # a random id per job it may lease, concatenated
    request_id: str
    record_ms: int  # how long the request's record is kept
    owner: str  # the calling token's id, "" for none


_pack = msgspec.msgpack.Encoder().encode


class Lease(Binding):
    operation = "lease"
    JOB_FIELDS = 10  # per leased job

    @staticmethod
    def args(ask: LeaseAsk, lease_ids: str | None = None) -> tuple[object, ...]:
        """The request packed, with a lease id per job it may lease (random unless given)."""
        return (Lease.packed(ask, lease_ids),)

    @staticmethod
    def packed(ask: LeaseAsk, lease_ids: str | None = None) -> bytes:
        return _pack(Lease.options(ask, lease_ids))

    @staticmethod
    def options(ask: LeaseAsk, lease_ids: str | None = None) -> LeaseOptions:
        ids = lease_ids if lease_ids is not None else os.urandom(limits.LEASE_ID_BYTES * ask.max_jobs).hex()
        return LeaseOptions(
            ask.worker, ask.lease_ms, ask.max_jobs, ids, ask.request_id, ask.record_ttl_ms, ask.owner
        )

    @staticmethod
    def reply(queue: str, reply: list[Any]) -> Leased:
        """A refusal (the worker name is another token's) raises WorkerOwned."""
        stale, retry_after_ms, *fields = reply
        jobs = [
            LeasedJob(
                id=fields[i].decode(),
                queue=queue,
                name=text(fields[i + 1]) or None,
                payload=Raw(fields[i + 2]),
                attempt=fields[i + 3],
                max_attempts=fields[i + 4],
                lease_id=fields[i + 5].decode(),
                lease_expires_at=fields[i + 6],
                fence=fields[i + 7],
                enqueued_at=fields[i + 8],
                traceparent=text(fields[i + 9]),
            )
            for i in range(0, len(fields), Lease.JOB_FIELDS)
        ]
        return Leased(jobs, retry_after_ms, stale)


class Acked(msgspec.Struct, frozen=True):
    """Per ack, in order: its code (1: completed now) and how long the job was held (ms)."""

    codes: list[int]
    held_ms: list[int]


AckEntry = tuple[str, str, Raw | UnsetType]  # id, lease id, result


class Ack(Binding):
    operation = "ack"
    FIELDS = 2  # per ack: code, held ms

    @staticmethod
    def args(acks: Sequence[AckEntry]) -> tuple[object, ...]:
        """[id, lease_id] pairs as JSON, then each result ("" for none)."""
        pairs = _encode([(job_id, lease_id) for job_id, lease_id, _ in acks])
        return (pairs, *(NO_RESULT if result is UNSET else bytes(result) for _, _, result in acks))

    @staticmethod
    def reply(reply: list[Any]) -> Acked:
        return Acked(reply[:: Ack.FIELDS], reply[1 :: Ack.FIELDS])


class AckLease(Binding):
    """Acks, then a try of a lease request, in one call (lua/ack_lease.lua)."""

    operation = "ack-lease"

    @staticmethod
    def args(
        acks: Sequence[AckEntry], ask: LeaseAsk, only_if_all_taken: bool, lease_ids: str | None = None
    ) -> tuple[object, ...]:
        pairs, *results = Ack.args(acks)
        return (pairs, Lease.packed(ask, lease_ids), "1" if only_if_all_taken else "0", *results)

    @staticmethod
    def split(acks: int) -> int:
        """Where the lease part of a reply starts: after the acks' entries."""
        return acks * Ack.FIELDS

    @staticmethod
    def reply(queue: str, acks: int, reply: list[Any]) -> tuple[Acked, Leased | None]:
        """The acks' part, and the lease's (None when it did not lease: only_if_all_taken and an ack
        was refused)."""
        split = AckLease.split(acks)
        acked = Ack.reply(reply[:split])
        return acked, Lease.reply(queue, reply[split:]) if len(reply) > split else None


class MergedEntry(msgspec.Struct):
    """One lease request of a merged call, with the acks it carries (lua/lease_merged.lua)."""

    acks: list[tuple[str, str]]
    ask: LeaseOptions
    all_taken: bool


LeaseRequest = tuple[Sequence[AckEntry], LeaseAsk, bool]  # acks (none: a plain lease), ask, all_taken


class LeaseMerged(Binding):
    """Several lease requests, each with its acks, in one call (lua/lease_merged.lua): each
    answers what lease.lua (no acks) or ack_lease.lua would have answered alone."""

    operation = "lease-merged"

    @staticmethod
    def args(requests: Sequence[LeaseRequest]) -> tuple[object, ...]:
        entries = [
            MergedEntry([(job_id, lease_id) for job_id, lease_id, _ in acks], Lease.options(ask), all_taken)
            for acks, ask, all_taken in requests
        ]
        results = [
            NO_RESULT if result is UNSET else bytes(result) for acks, _, _ in requests for *_, result in acks
        ]
        return (_pack(entries), *results)

    @staticmethod
    def reply(reply: list[Any]) -> list[list[Any]]:
        """Each entry's answer, as its own script would have replied."""
        answers, at = [], 0
        while at < len(reply):
            size = reply[at]
            answers.append(reply[at + 1 : at + 1 + size])
            at += 1 + size
        return answers


Renewal = tuple[str, str, int | None, Raw | UnsetType]  # id, lease id, lease_ms (None: its own), progress


def compact(value: Raw | UnsetType) -> str:
    """JSON text without layout (a progress is one line of an event), or "" for none."""
    if value is UNSET:
        return ""
    return _encode(msgspec.json.decode(value)).decode()  # type: ignore[arg-type]


class Renewed(msgspec.Struct, frozen=True):
    code: int
    lease_expires_at: int
    cancel_requested: bool


class Heartbeat(Binding):
    operation = "heartbeat"
    FIELDS = 3  # per lease: code, new lease_expires_at, cancel requested

    @staticmethod
    def args(leases: Sequence[Renewal], owner: str) -> tuple[object, ...]:
        entries = [
            (job_id, lease_id, lease_ms or 0, compact(progress))
            for job_id, lease_id, lease_ms, progress in leases
        ]
        return (_encode(entries), owner)

    @staticmethod
    def reply(reply: list[Any]) -> list[Renewed]:
        step = Heartbeat.FIELDS
        return [
            Renewed(code, expires_at, cancel == 1)
            for code, expires_at, cancel in zip(reply[::step], reply[1::step], reply[2::step], strict=True)
        ]


class FailOptions(msgspec.Struct, omit_defaults=True):
    retry: bool
    retry_after_ms: int | None = None


class Fail(Binding):
    operation = "fail"

    @staticmethod
    def args(
        job_id: str, lease_id: str, error: str, retry: bool, retry_after_ms: int | None
    ) -> tuple[object, ...]:
        return (job_id, lease_id, _encode(FailOptions(retry=retry, retry_after_ms=retry_after_ms)), error)

    @staticmethod
    def reply(job_id: str, reply: list[Any]) -> tuple[str, int]:
        """The job's state after the failure and the attempt that failed; a refusal raises."""
        raise_for_code(reply[0], job_id)
        return reply[1].decode(), reply[2]


class Release(Binding):
    operation = "release"
    AS_CANCELLED = 3  # the job ended cancelled (its cancellation was requested)

    @staticmethod
    def args(
        leases: Sequence[tuple[str, str]], worker: str | None = None, request_id: str = ""
    ) -> tuple[object, ...]:
        """[id, lease_id] pairs; with the worker and request id, a give-back: the request is
        forgotten, and jobs a retry of it was answered stay leased."""
        pairs = _encode(list(leases))
        return (pairs,) if worker is None else (pairs, worker, request_id)

    @staticmethod
    def reply(reply: list[Any]) -> list[int]:
        return reply


@dataclass(frozen=True, slots=True)
class ReleasedStep:
    bound: bytes | str
    more: bool
    stale: int
    offset: int
    released: list[str]


class ReleaseWorker(Binding):
    operation = "release-worker"

    @staticmethod
    def args(
        worker: str, bound: bytes | str, step: int, offset: int, end_session: bool, owner: str
    ) -> tuple[object, ...]:
        return (worker, bound, step, offset, "1" if end_session else "0", owner)

    @staticmethod
    def reply(worker: str, reply: list[Any]) -> ReleasedStep:
        refused(reply, worker)
        bound, more, stale, offset, *released = reply
        return ReleasedStep(bound, bool(more), stale, offset, [job_id.decode() for job_id in released])


class Session(Binding):
    operation = "session"

    @staticmethod
    def args(worker: str, ttl_ms: int, info: Raw | UnsetType, owner: str) -> tuple[object, ...]:
        return (worker, ttl_ms, compact(info), owner)

    @staticmethod
    def reply(worker: str, reply: list[Any]) -> tuple[int, str]:
        """The session's new expiry and its state."""
        refused(reply, worker)
        expires_at, state = reply
        return expires_at, state.decode()


# --- reads -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRead:
    """A job's hash (None: there is none), and the number of the queue's last event."""

    fields: dict[bytes, bytes] | None
    position: int


class Job(Binding):
    operation = "job"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> JobRead:
        position, *flat = reply
        fields = dict(zip(flat[::2], flat[1::2], strict=True)) if flat else None
        return JobRead(fields, int(position))


class QueueCounts(Binding):
    operation = "counts"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> tuple[bool, Counts]:
        paused, *counts = reply
        return paused == 1, Counts(*counts)


class Ledger(Binding):
    operation = "ledger"
    read_only = True
    FIELDS = 5

    @staticmethod
    def reply(reply: list[Any]) -> list[LedgerEntry]:
        return [
            LedgerEntry(
                id=reply[i].decode(),
                worker=reply[i + 1].decode(),
                attempt=int(reply[i + 2]),
                leased_at=int(reply[i + 3]),
                lease_expires_at=int(reply[i + 4]),
            )
            for i in range(0, len(reply), Ledger.FIELDS)
        ]


def _session(fields: list[Any]) -> WorkerSession | None:
    """A session as lua/workers.lua answers it ([] when the worker has no live session)."""
    if not fields:
        return None
    state, started_at, last_seen_at, expires_at, info = fields
    return WorkerSession(
        state=state.decode(),
        started_at=started_at,
        last_seen_at=last_seen_at,
        expires_at=expires_at,
        info=None if info is None else Raw(info),
    )


class Workers(Binding):
    operation = "workers"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> list[WorkerHoldings]:
        return [
            WorkerHoldings(
                worker=worker.decode(), jobs=[job_id.decode() for job_id in ids], session=_session(session)
            )
            for worker, ids, session in reply
        ]


class Groups(Binding):
    operation = "groups"
    read_only = True
    FIELDS = 4  # per group: name, waiting, active, its own max_in_flight ("" for none)

    @staticmethod
    def reply(reply: list[Any]) -> tuple[list[GroupView], bool]:
        """The page's groups and whether more follow."""
        queue_cap, more, *flat = reply
        default = int(queue_cap) if queue_cap else None
        views = []
        for i in range(0, len(flat), Groups.FIELDS):
            own = int(flat[i + 3]) if flat[i + 3] else None
            views.append(
                GroupView(
                    group=flat[i].decode(),
                    waiting=flat[i + 1],
                    active=flat[i + 2],
                    max_in_flight=own,
                    effective_max_in_flight=own if own is not None else default,
                )
            )
        return views, bool(more)


def sized_ids(listing: list[Any]) -> list[tuple[str, int]]:
    """A listing script's flat {id, payload bytes, ...} as (id, bytes) pairs."""
    return [(job_id.decode(), size) for job_id, size in zip(listing[::2], listing[1::2], strict=True)]


class FailedPage(Binding):
    operation = "failed-page"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> tuple[list[tuple[str, int]], int]:
        """The page's (id, payload bytes) and the dead letters' total."""
        total, *listing = reply
        return sized_ids(listing), total


class ListJobs(Binding):
    operation = "list-jobs"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> tuple[list[tuple[str, int]], Any]:
        """The page's (id, payload bytes) and where the script stopped (its cursor, raw)."""
        listing, script_cursor = reply
        return sized_ids(listing), script_cursor


class SearchJobs(Binding):
    operation = "search-jobs"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> tuple[list[str], int, int]:
        """The ids found, where the next step starts, and the state's number of entries."""
        next_offset, total, *ids = reply
        return [job_id.decode() for job_id in ids], next_offset, total


# --- operations and the sweep ------------------------------------------------------------------


class Cancel(Binding):
    operation = "cancel"

    @staticmethod
    def reply(job_id: str, reply: Any) -> tuple[str, bool]:
        """The job's state and whether its cancellation waits for its worker; a refusal raises."""
        if isinstance(reply, int):
            raise_for_code(reply, job_id)
        state, requested = reply
        return state.decode(), requested == 1


class Redrive(Binding):
    operation = "redrive"

    @staticmethod
    def args(ids: Sequence[str] | None, step: int, bound: bytes | str, kept: int = 0) -> tuple[object, ...]:
        """The listed dead letters (ids), or a step of all of them from bound, after the `kept`
        entries the steps before left in place."""
        if ids is not None:
            return (_encode(list(ids)), 0, "", 0)
        return (b"[]", step, bound, kept)

    @staticmethod
    def reply(reply: list[Any]) -> tuple[bytes | str, int, int, list[str]]:
        """Where the next step starts, how many entries this one read and kept, and the ids
        redriven."""
        bound, read, kept, *redriven = reply
        return bound, read, kept, [job_id.decode() for job_id in redriven]


@dataclass(frozen=True, slots=True)
class SweptStep:
    reclaimed: int
    dead_lettered: int
    promoted: int
    deleted: int
    more: bool
    stale: int
    offset: int
    schedules_due: int
    outbox: int
    flows_due: int


class Sweep(Binding):
    operation = "sweep"

    @staticmethod
    def reply(reply: list[Any]) -> SweptStep:
        reclaimed, dead, promoted, deleted, more, stale, offset, schedules_due, outbox, flows_due = reply
        return SweptStep(
            reclaimed, dead, promoted, deleted, bool(more), stale, offset, schedules_due, outbox, flows_due
        )


# --- schedules (core/schedules.py) -------------------------------------------------------------


def fields_of(flat: list[Any]) -> dict[bytes, bytes]:
    """A hash read as a flat {field, value, ...} list."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


class Schedule(Binding):
    operation = "schedule"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> tuple[int, dict[bytes, bytes]]:
        """The Redis clock (ms) and the schedule's hash ({} when there is none)."""
        now, *flat = reply
        return now, fields_of(flat)


class PutSchedule(Binding):
    operation = "put-schedule"

    @staticmethod
    def args(
        name: str,
        version: bytes,
        next_run: int | None,
        now: int,
        values: dict[str, str | bytes],
        absent: list[str],
    ) -> tuple[object, ...]:
        """A compare-and-set against the version read: the fields to set, then those to delete."""
        pairs = [item for field_value in values.items() for item in field_value]
        return (name, version, "" if next_run is None else next_run, now, len(values), *pairs, *absent)

    @staticmethod
    def reply(reply: Any) -> tuple[bool, dict[bytes, bytes]] | None:
        """Whether it created the schedule, and its hash; None when it moved since the read."""
        if reply == ScriptCode.SCHEDULE_MOVED:
            return None
        created, *flat = reply
        return created == 1, fields_of(flat)


class ScheduleList(Binding):
    operation = "schedules"
    read_only = True

    @staticmethod
    def reply(reply: list[Any]) -> tuple[list[tuple[str, dict[bytes, bytes]]], bool]:
        """A page of (name, hash) and whether more follow."""
        more, *flat = reply
        page, i = [], 0
        while i < len(flat):
            name, count = flat[i].decode(), flat[i + 1]
            page.append((name, fields_of(flat[i + 2 : i + 2 + count])))
            i += 2 + count
        return page, bool(more)


class TriggerSchedule(Binding):
    operation = "trigger-schedule"

    @staticmethod
    def reply(name: str, reply: Any) -> tuple[str, bool]:
        """The job's state and whether it was made now; a refusal raises."""
        if isinstance(reply, int):
            raise_for_code(reply, name)
        state, created = reply
        return state.decode(), created == 1


@dataclass(frozen=True, slots=True)
class DueRun:
    schedule: str
    run_at: int
    clock: bytes  # the schedule's Clock, as stored


class DueSchedules(Binding):
    operation = "due-schedules"
    read_only = True
    FIELDS = 3  # per run: schedule, run_at, clock

    @staticmethod
    def reply(reply: list[Any]) -> tuple[int, list[DueRun]]:
        now, *flat = reply
        runs = [DueRun(flat[i].decode(), int(flat[i + 1]), flat[i + 2]) for i in range(0, len(flat), 3)]
        return now, runs


class FireSchedules(Binding):
    operation = "fire-schedules"
    FIRED, SKIPPED = 1, 2  # per run's outcome

    @staticmethod
    def args(runs: Sequence[tuple[str, int, int | None, str]]) -> tuple[object, ...]:
        """Per run: the schedule, its run time, the one after it (None: no more), the job's id."""
        flat = [
            item
            for schedule, run_at, following, job_id in runs
            for item in (schedule, run_at, "" if following is None else following, job_id)
        ]
        return (len(runs), *flat)


# --- flows -------------------------------------------------------------------------------------


class ScriptFlowNode(ScriptJob, omit_defaults=True):
    """One node of a flow as lua/create_flow.lua reads it: a job's options, its link to its parent
    ("<parent's prefix> <parent id> <token>"), its policy, its declared children
    (["<queue> <id>", "fail"|"ignore"]) and, for a parent, the token it gets if made now."""

    parent: str | None = None
    on_failure: str | None = None
    children: list[tuple[str, str]] | None = None
    token: str | None = None


class FlowNodeMade(msgspec.Struct, frozen=True):
    """A node as the call found or made it: its state ("" when the check found no job), its
    kids_token ("" for a leaf), and whether this call made it."""

    state: str
    token: str
    created: bool


CHECK_ONLY_ARG = "check"


class CreateFlow(Binding):
    operation = "create-flow"
    FIELDS = 3  # per node: state, token, created

    @staticmethod
    def args(
        nodes: Sequence[ScriptFlowNode], payloads: Sequence[bytes], check_only: bool
    ) -> tuple[object, ...]:
        """The nodes as one JSON array and each payload; check_only: only look (nothing written)."""
        return (_encode(nodes), *payloads, *((CHECK_ONLY_ARG,) if check_only else ()))

    @staticmethod
    def reply(reply: list[Any], ids: Sequence[str]) -> list[FlowNodeMade]:
        """Each node's; JobExists naming the first node whose id is another job's."""
        if reply and reply[0] == ScriptCode.JOB_EXISTS:
            raise_for_code(reply[0], ids[reply[1] - 1])
        step = CreateFlow.FIELDS
        return [
            FlowNodeMade(reply[i].decode(), reply[i + 1].decode(), reply[i + 2] == 1)
            for i in range(0, len(reply), step)
        ]


DROP_RECORD, PUT_OFF_RECORD = "", "later"


class FlowRecord(Binding):
    operation = "flow-record"

    @staticmethod
    def args(root_id: str, request: bytes | str) -> tuple[object, ...]:
        """Keep the request (its ids filled in), or DROP_RECORD, or PUT_OFF_RECORD."""
        return (root_id, request)


class Deliver(Binding):
    operation = "deliver"

    @staticmethod
    def args(entries: Sequence[bytes]) -> tuple[object, ...]:
        return tuple(entries)


class OutboxDone(Binding):
    operation = "outbox-done"

    @staticmethod
    def args(entries: Sequence[bytes]) -> tuple[object, ...]:
        return tuple(entries)


OUTBOX_FIELD_SEPARATOR = b"\n"  # include/flows.lua FIELD_SEPARATOR; the parent's prefix first


def parent_prefix_of(entry: bytes) -> str:
    """The key prefix of the parent an outbox entry is for."""
    return entry.split(OUTBOX_FIELD_SEPARATOR, 1)[0].decode()


class ChildOutcome(msgspec.Struct, frozen=True):
    """A child as its parent knows it: its queue and id, its status (p pending, c completed, f
    dead-lettered, x cancelled, d deleted before finishing) and what it handed the parent."""

    queue: str
    id: str
    status: str
    detail: bytes


class Children(Binding):
    operation = "children"
    read_only = True

    @staticmethod
    def args(parent_id: str, after: int, limit: int) -> tuple[object, ...]:
        return (parent_id, after, limit)

    @staticmethod
    def reply(reply: list[Any], parent_id: str) -> tuple[int, list[ChildOutcome]]:
        """Where the next page starts (0: this is the last) and the page's children."""
        if reply and reply[0] == ScriptCode.JOB_NOT_FOUND and len(reply) == 1:
            raise_for_code(reply[0], parent_id)
        next_after, *flat = reply
        children = []
        for i in range(0, len(flat), 3):
            queue, child_id = flat[i].decode().split(" ")
            children.append(ChildOutcome(queue, child_id, flat[i + 1].decode(), flat[i + 2]))
        return next_after, children


# The scripts that write nothing (their functions say so; no WAIT after them in durable mode).
READ_ONLY_OPERATIONS = frozenset(
    {binding.operation for binding in Binding.__subclasses__() if binding.read_only}
)
