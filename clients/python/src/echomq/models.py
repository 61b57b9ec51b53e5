"""Typed bodies of the EchoMQ HTTP API (v1) as msgspec Structs.

Responses are decoded and checked against these types; fields the service adds later are
ignored, so an older client keeps working. Times are epoch milliseconds on the Redis server's
clock (not this machine's).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import msgspec

JobState = Literal["waiting", "delayed", "active", "completed", "failed", "cancelled", "waiting_children"]
OnFailure = Literal["fail", "ignore"]  # what a flow's child's dead letter does to its parent
DelayReason = Literal["delay", "retry"]  # an enqueue's delay_ms, or a failed attempt's backoff
BackoffType = Literal["fixed", "exponential"]
Overlap = Literal["allow", "skip"]


class _Model(msgspec.Struct, frozen=True, kw_only=True):
    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


# --- requests -------------------------------------------------------------------------------


class Backoff(_Model, omit_defaults=True):
    """How a failed job waits before its next attempt (the default is exponential from 1 s)."""

    type: BackoffType
    delay_ms: int


class NewJob(_Model, omit_defaults=True):
    """One job to enqueue. Fields left out take the service's defaults (priority 0,
    max_attempts 3, no delay). Give ``id`` to make the enqueue idempotent (and retried safely)."""

    payload: Any
    id: Optional[str] = None
    name: Optional[str] = None
    priority: Optional[int] = None
    delay_ms: Optional[int] = None
    max_attempts: Optional[int] = None
    backoff: Optional[Backoff] = None
    group: Optional[str] = None


class FlowNode(NewJob, omit_defaults=True, kw_only=True):
    """A job of a flow: an enqueue's fields, the queue it goes to, and the ``children`` (in any
    queues) that must all finish before it runs; ``on_failure`` says what this job's dead letter
    does to its parent (``fail``, the default, fails it; ``ignore`` counts it as finished)."""

    queue: str
    children: Optional[list[FlowNode]] = None
    on_failure: Optional[OnFailure] = None


class ScheduleJob(_Model, omit_defaults=True):
    """The job each run of a schedule enqueues: an enqueue's fields without ``id`` and
    ``delay_ms`` (a run's job id is made from the schedule's name and the run's time). Fields
    left out take the service's defaults, as on enqueue."""

    payload: Any
    name: Optional[str] = None
    priority: Optional[int] = None
    max_attempts: Optional[int] = None
    backoff: Optional[Backoff] = None
    group: Optional[str] = None


class AckItem(_Model, omit_defaults=True):
    """One entry of an ack-many call."""

    id: str
    lease_id: str
    result: Any = msgspec.UNSET


class LeaseNext(_Model, omit_defaults=True):
    """The lease an ack makes once it is done (``lease_next``): the fields of a lease call.
    Fields left out take the service's defaults."""

    worker: str
    lease_ms: Optional[int] = None
    max_jobs: Optional[int] = None
    wait_ms: Optional[int] = None
    request_id: Optional[str] = None


class HeartbeatItem(_Model, omit_defaults=True):
    """One lease of a heartbeat-many call; without ``lease_ms`` it is renewed by its own length.
    ``progress`` (any JSON, at most 64 KiB) is stored on the job; left out, the last one stays."""

    id: str
    lease_id: str
    lease_ms: Optional[int] = None
    progress: Any = msgspec.UNSET


# --- responses ------------------------------------------------------------------------------


class Enqueued(_Model):
    """Answer to an enqueue: ``created`` is False when a job with that id already existed
    (then ``state`` is the stored job's current state)."""

    id: str
    queue: str
    state: JobState
    created: bool


class LeasedJob(_Model):
    """A job this worker now holds until ``lease_expires_at`` (unless renewed by heartbeats)."""

    id: str
    queue: str
    name: Optional[str]
    payload: Any
    attempt: int
    max_attempts: int
    lease_id: str
    lease_expires_at: int
    fence: int
    enqueued_at: int
    traceparent: Optional[str] = None


class Heartbeat(_Model):
    """A renewed lease; ``cancel_requested``: stop working on the job and fail it (it then ends
    cancelled); an ack still completes it."""

    id: str
    lease_id: str
    lease_expires_at: int
    cancel_requested: bool = False


class HeartbeatOutcome(_Model):
    """One answer of heartbeat-many: ``ok`` with the renewed lease (``lease_expires_at``), or not
    ok with ``code`` (``lease_lost``, ``job_not_found``, or ``forbidden``: the job's worker name
    belongs to another token)."""

    id: str
    ok: bool
    lease_id: Optional[str] = None
    lease_expires_at: Optional[int] = None
    cancel_requested: Optional[bool] = False
    code: Optional[str] = None


class Acked(_Model):
    """Answer to an ack; ``jobs`` holds what its ``lease_next`` leased (None without one)."""

    id: str
    state: Literal["completed"]
    jobs: Optional[list[LeasedJob]] = None
    retry_after_ms: Optional[int] = None  # lease_next held back by the queue's rate limit


class AckOutcome(_Model):
    """One answer of ack-many: ``ok`` with ``state``, or not ok with ``code``
    (``lease_lost`` or ``job_not_found``)."""

    id: str
    ok: bool
    state: Optional[Literal["completed"]] = None
    code: Optional[str] = None


class AckedMany(_Model):
    """Answer to an ack-many with ``lease_next``: each ack's outcome, and the jobs leased after."""

    results: list[AckOutcome]
    jobs: list[LeasedJob] = msgspec.field(default_factory=list)  # always there with lease_next
    retry_after_ms: Optional[int] = None  # lease_next held back by the queue's rate limit


class Failed(_Model):
    """Answer to a fail: where the job went (``waiting``/``delayed`` to be retried, ``failed``,
    the dead letter, or ``cancelled`` when its cancellation was requested) and the attempt that
    failed."""

    id: str
    state: Literal["waiting", "delayed", "failed", "cancelled"]
    attempt: int


class Released(_Model):
    """Answer to a release: ``waiting``, or ``cancelled`` when its cancellation was requested."""

    id: str
    state: Literal["waiting", "cancelled"]


class JobRef(_Model):
    """A job named by its queue and id (a flow's parent)."""

    queue: str
    id: str


class ChildCounts(_Model):
    """A flow's parent's children by how they stand."""

    total: int
    pending: int
    completed: int
    failed: int  # dead-lettered, cancelled or deleted before finishing, under on_failure fail
    ignored: int  # the same under on_failure ignore


class FlowJob(_Model):
    """One job of a flow as its creation made or found it."""

    queue: str
    id: str
    state: JobState


class _Flow(_Model):
    jobs: list[FlowJob]


ChildState = Literal[
    "waiting", "delayed", "active", "completed", "failed", "cancelled", "waiting_children", "deleted"
]


class Child(_Model, kw_only=True):
    """One child of a job: its state now (once it is gone, the state it finished in, or
    ``deleted``), and the ``result`` it handed its parent when it completed, or the ``error``."""

    queue: str
    id: str
    state: ChildState
    result: Any = None
    error: Optional[str] = None


class ChildPage(_Model):
    """A page of a job's children in the order they were added; pass ``next_cursor`` as
    ``cursor`` for the next, until it is None."""

    children: list[Child]
    next_cursor: Optional[str]


class Job(_Model):
    """A stored job as ``GET /v1/queues/{queue}/jobs/{id}`` shows it."""

    id: str
    queue: str
    name: Optional[str]
    state: JobState
    payload: Any
    result: Any
    error: Optional[str]
    attempt: int
    max_attempts: int
    priority: int
    created_at: int
    updated_at: int
    worker: Optional[str]
    lease_expires_at: Optional[int]
    progress: Any = None  # the last progress a heartbeat reported
    cancel_requested: bool = False
    group: Optional[str] = None
    stalls: int = 0
    schedule: Optional[str] = None
    finished_at: Optional[int] = None  # completed, failed or cancelled at
    run_at: Optional[int] = None  # only while delayed: when it becomes waiting (epoch ms)
    delay_reason: Optional[DelayReason] = None  # only while delayed: why
    parent: Optional[JobRef] = None  # the job that waits for this one (a flow's parent)
    children: Optional[ChildCounts] = None  # a parent's children by how they stand


class Schedule(_Model, kw_only=True):
    """A schedule as ``GET .../schedules/{schedule}`` shows it: the fields it was put with and
    where its runs stand. ``next_run_at`` is None while it is paused or once it ended (``limit``
    runs made or ``end_at`` passed); ``runs`` counts runs that made a job (not triggers, not
    ``skipped`` runs)."""

    schedule: str
    queue: str
    job: ScheduleJob
    cron: Optional[str] = None
    every_ms: Optional[int] = None
    timezone: str = "UTC"
    start_at: Optional[int] = None
    end_at: Optional[int] = None
    limit: Optional[int] = None
    overlap: Overlap = "allow"
    paused: bool = False
    next_run_at: Optional[int]
    last_run_at: Optional[int]
    last_job_id: Optional[str]
    runs: int
    skipped: int = 0
    created_at: int
    updated_at: int


class Counts(_Model):
    waiting: int
    delayed: int
    active: int
    completed: int
    failed: int
    cancelled: int = 0
    waiting_children: int = 0  # a flow's parents waiting for their children


class QueueInfo(_Model):
    name: str
    paused: bool
    counts: Counts


class QueuePage(_Model):
    """A page of the queues by name; ``next_cursor`` (None on the last page) asks for the next."""

    queues: list[QueueInfo]
    next_cursor: Optional[str] = None


class Paused(_Model):
    name: str
    paused: bool


class GroupLimit(_Model):
    """A group's own cap on its jobs in flight (None: the queue's group_max_in_flight applies)."""

    group: str
    max_in_flight: Optional[int]


class GroupInfo(_Model):
    """One group of a queue: its waiting jobs, its jobs in flight, its own cap and the cap that
    applies (None: no cap)."""

    group: str
    waiting: int
    active: int
    max_in_flight: Optional[int]
    effective_max_in_flight: Optional[int]


class GroupPage(_Model):
    """A page of a queue's groups by name; ``next_cursor`` (None on the last page) asks for the next."""

    groups: list[GroupInfo]
    next_cursor: Optional[str]


class LedgerEntry(_Model):
    """One in-flight lease: who holds the job, since when, until when."""

    id: str
    worker: str
    attempt: int
    leased_at: int
    lease_expires_at: int


class WorkerSession(_Model):
    """A worker's live session: ``state`` running or quiet; ``info`` the JSON object its
    heartbeats sent (or None)."""

    state: str
    started_at: int
    last_seen_at: int
    expires_at: int
    info: Optional[dict[str, Any]] = None


class WorkerHoldings(_Model):
    """A worker holding jobs or with a live session: the ids it holds and its session."""

    worker: str
    jobs: list[str]
    session: Optional[WorkerSession] = None


class Session(_Model):
    """Answer to a session heartbeat: when the session lapses unless renewed, and its state
    (``quiet``: an operator quieted the worker; lease nothing more, finish what it holds)."""

    worker: str
    session_expires_at: int
    state: str


class Quieted(_Model):
    worker: str
    state: str


class FailedPage(_Model):
    jobs: list[Job]
    total: int


class JobPage(_Model):
    """A page of the jobs in one state; ``next_cursor`` (None on the last page) asks for the next."""

    jobs: list[Job]
    next_cursor: Optional[str]


class Promoted(_Model):
    """Answer to a promote: the delayed job is waiting now."""

    id: str
    state: Literal["waiting"]


class Cancelled(_Model):
    """Answer to a cancel: the job's state now (``cancelled`` at once unless it was active;
    an active job stays active with ``cancel_requested`` until its worker fails or acks it)."""

    id: str
    state: JobState
    cancel_requested: bool


class HistoryMinute(_Model):
    """One minute of a queue's history (``at``: the minute's start, epoch ms)."""

    at: int
    enqueued: int
    completed: int
    failed: int
    reclaimed: int


EventType = Literal[
    "enqueued",
    "leased",
    "progress",
    "completed",
    "retrying",
    "failed",
    "released",
    "reclaimed",
    "cancel_requested",
    "cancelled",
    "promoted",
    "deleted",
    "children_completed",
    "paused",
    "resumed",
    "resync",
]


class Event(_Model):
    """One event of a queue's feed (``Client.events``). ``event_id`` is the SSE id (None on a
    ``resync``, which says the events after ``after`` up to ``oldest`` are lost: read the state
    again). ``id`` is the job's (None on paused/resumed); the other fields are those of its type,
    None when it has none."""

    type: str  # an EventType; a str so that a type the service adds later still decodes
    queue: str
    event_id: Optional[int] = None
    id: Optional[str] = None
    at: Optional[int] = None
    state: Optional[str] = None
    worker: Optional[str] = None
    attempt: Optional[int] = None
    fence: Optional[int] = None
    lease_expires_at: Optional[int] = None
    progress: Any = None
    progress_truncated: Optional[bool] = None  # progress too large for an event: read the job
    error: Optional[str] = None
    reason: Optional[str] = None
    redriven: Optional[bool] = None
    after: Optional[int] = None
    oldest: Optional[int] = None


# --- envelopes (internal: the client returns their contents) ---------------------------------


class _EnqueueMany(_Model):
    jobs: list[Enqueued]


class _Leased(_Model):
    jobs: list[LeasedJob]


class LeaseAnswer(_Model):
    """A lease's whole answer: its jobs, and ``retry_after_ms`` when the queue's rate limit held
    it back (milliseconds until the window has room again; None otherwise)."""

    jobs: list[LeasedJob]
    retry_after_ms: Optional[int] = None


class _AckMany(_Model):
    results: list[AckOutcome]


class _HeartbeatMany(_Model):
    results: list[HeartbeatOutcome]


class _Ledger(_Model):
    jobs: list[LedgerEntry]


class _Workers(_Model):
    workers: list[WorkerHoldings]


class _History(_Model):
    minutes: list[HistoryMinute]


class _Schedules(_Model):
    schedules: list[Schedule]


class _Redriven(_Model):
    retried: list[str]


class _WorkerReleased(_Model):
    released: list[str]


class Problem(_Model):
    """An RFC 9457 problem detail as the service sends it."""

    type: str = "about:blank"
    title: str = ""
    status: int = 0
    detail: str = ""
    code: str = ""


# --- queue settings -----------------------------------------------------------------------------


class RateLimit(_Model):
    """At most ``max`` leased jobs in any window of ``per_ms`` milliseconds (1000..86400000)."""

    max: int
    per_ms: int


class QueueSettings(_Model):
    """A queue's settings (``GET``/``PUT .../settings``); None = no limit / the service's retention."""

    max_in_flight: Optional[int] = None
    group_max_in_flight: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    max_stalls: Optional[int] = None
    events: bool = True
    completed_retention_s: Optional[int] = None
    failed_retention_s: Optional[int] = None
