"""The bodies of the Working operations (api/working.py): lease, heartbeat, ack, fail,
release, and the worker's session."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from echomq_http.api.schemas.common import (
    NAME_RULE,
    CancelRequested,
    DelayMs,
    HeartbeatItemCode,
    ItemCode,
    JobId,
    JobIdIn,
    LeaseExpiresAt,
    LeaseIdIn,
    LeaseIdOut,
    LeaseMs,
    MaxAttemptsOut,
    Name,
    Progress,
    QueueName,
    RenewLeaseMs,
    Result,
    RetryAfterMs,
    SessionStateOut,
    StrictBody,
    require_names,
    require_plain_json,
)
from echomq_http.core import limits


class LeaseRequest(StrictBody):
    """A request for up to max_jobs waiting jobs."""

    worker: Annotated[
        Name,
        Meta(
            description="the worker's name: the ledger and the job view show who holds a job, and an "
            f"operator can release all of a worker's jobs by it ({NAME_RULE})"
        ),
    ]
    lease_ms: Annotated[
        LeaseMs,
        Meta(
            description="the lease's length, 1 s to 12 h: renew it with a heartbeat before it ends, or the "
            "stalled sweep gives the job back to waiting (the attempt counted) once it has expired"
        ),
    ] = limits.DEFAULT_LEASE_MS
    max_jobs: Annotated[
        int,
        Meta(
            ge=1,
            le=limits.MAX_JOBS_PER_LEASE,
            description="at most this many jobs, 1-100; fewer when fewer are waiting",
        ),
    ] = 1
    wait_ms: Annotated[
        int,
        Meta(
            ge=0,
            le=limits.MAX_WAIT_MS,
            description="long poll: when no job can be leased now, wait up to this many milliseconds "
            "(at most 20 s) for one; the answer comes as soon as a job is leased, or with no jobs "
            "when the time is up or the service is shutting down. 0: answer at once",
        ),
    ] = 0
    request_id: Annotated[
        Name | None,
        Meta(
            description="makes the lease idempotent: the same worker and request_id within 5 "
            "minutes leases nothing new and answers the jobs the first request leased that it "
            "still holds (same lease ids and fences)"
        ),
    ] = None

    def __post_init__(self) -> None:
        require_names(self.worker, self.request_id)


class LeasedJob(Struct):
    """A job leased to the worker: work on it, then ack, fail or release it with its lease_id
    (heartbeat to keep it longer than lease_ms)."""

    id: JobId
    queue: QueueName
    name: Annotated[str | None, Meta(description="the name given at enqueue, or null")]
    payload: Annotated[Raw, Meta(description="the payload, exactly as enqueued")]
    attempt: Annotated[
        int,
        Meta(
            description="this attempt's number: 1 on the first lease, one more with each lease after a "
            "failed attempt or an expired lease (a released job's next lease keeps the number)"
        ),
    ]
    max_attempts: MaxAttemptsOut
    lease_id: LeaseIdOut
    lease_expires_at: LeaseExpiresAt
    fence: Annotated[
        int,
        Meta(
            description="grows with every lease in the queue and never goes back: a later lease has a "
            "higher fence. A fencing token for the job's side effects (refuse writes of an older fence)"
        ),
    ]
    enqueued_at: Annotated[int, Meta(description="when the job was enqueued (epoch ms, Redis clock)")]
    traceparent: Annotated[
        str | None,
        Meta(
            description="the producer's W3C trace context (its traceparent header at enqueue, or the "
            "enqueue's span), to continue its trace; null when there is none"
        ),
    ] = None


class LeaseResponse(Struct):
    """The jobs leased."""

    jobs: Annotated[
        list[LeasedJob],
        Meta(
            description="highest priority first, then first in line; empty when no job could be leased "
            "within wait_ms (nothing waiting, the queue paused, a cap of the queue's settings "
            "reached, or the service shutting down)"
        ),
    ]
    retry_after_ms: RetryAfterMs = UNSET


# Ack, then lease the next job, in one call: the lease request rides along with the ack.
LeaseNext = Annotated[
    LeaseRequest | None,
    Meta(
        description="after the ack, lease as this lease request would (same fields and limits, "
        "long poll with wait_ms included): the answer adds its jobs. A failed ack leases nothing. "
        "A 429 or 503 can come after the ack took effect: repeating the call is safe (the ack "
        "answers as before), and with request_id the repeat answers the same jobs"
    ),
]


def _require_progress(progress: Raw | UnsetType) -> None:
    if isinstance(progress, Raw):
        if len(progress) > limits.MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is larger than {limits.MAX_PROGRESS_BYTES} bytes")
        require_plain_json("progress", progress)


NextJobs = Annotated[
    list[LeasedJob],
    Meta(description="only with lease_next: what that lease request answered (possibly no jobs)"),
]


class HeartbeatRequest(StrictBody):
    """Renew a lease, and report progress."""

    lease_id: LeaseIdIn
    lease_ms: RenewLeaseMs = None
    progress: Progress = UNSET

    def __post_init__(self) -> None:
        _require_progress(self.progress)


class HeartbeatResponse(Struct):
    """The renewed lease."""

    id: JobId
    lease_id: Annotated[str, Meta(description="the lease renewed: a heartbeat keeps the lease's id")]
    lease_expires_at: Annotated[int, Meta(description="the lease's new end (epoch ms, Redis clock)")]
    cancel_requested: CancelRequested = False


class HeartbeatItem(StrictBody):
    """One lease to renew in a batch heartbeat."""

    id: JobIdIn
    lease_id: LeaseIdIn
    lease_ms: RenewLeaseMs = None
    progress: Progress = UNSET

    def __post_init__(self) -> None:
        require_names(self.id)
        _require_progress(self.progress)


class HeartbeatManyRequest(StrictBody):
    """Leases to renew in one call."""

    leases: Annotated[
        list[HeartbeatItem],
        Meta(
            min_length=1,
            max_length=limits.MAX_BATCH,
            description="1-1000 leases, each renewed or refused on its own",
        ),
    ]


class HeartbeatItemResult(Struct, omit_defaults=True):
    """ok: the lease was renewed (lease_id, lease_expires_at, cancel_requested); else code."""

    id: Annotated[str, Meta(description="the job's id, as sent")]
    ok: Annotated[bool, Meta(description="true: renewed; false: not renewed, see code")]
    lease_id: Annotated[str | None, Meta(description="only when ok: the lease renewed")] = None
    lease_expires_at: Annotated[
        int | None, Meta(description="only when ok: the lease's new end (epoch ms, Redis clock)")
    ] = None
    cancel_requested: Annotated[
        bool | None,
        Meta(
            description="only when ok: the job's cancellation was requested (stop, then fail or release it)"
        ),
    ] = None
    code: HeartbeatItemCode = None


class HeartbeatManyResponse(Struct):
    """What became of each lease."""

    results: Annotated[list[HeartbeatItemResult], Meta(description="one per lease, in the order sent")]


class AckRequest(StrictBody):
    """Finish a job: it becomes completed and leaves the in-flight ledger."""

    lease_id: LeaseIdIn
    result: Result = UNSET
    lease_next: LeaseNext = None

    def __post_init__(self) -> None:
        require_plain_json("result", self.result)


class AckResponse(Struct):
    """The job is completed."""

    id: JobId
    state: Annotated[Literal["completed"], Meta(description="always completed")]
    jobs: NextJobs | UnsetType = UNSET
    retry_after_ms: RetryAfterMs = UNSET


class AckItem(StrictBody):
    """One ack in a batch."""

    id: JobIdIn
    lease_id: LeaseIdIn
    result: Result = UNSET

    def __post_init__(self) -> None:
        require_names(self.id)
        require_plain_json("result", self.result)


class AckManyRequest(StrictBody):
    """Jobs to finish in one call."""

    acks: Annotated[
        list[AckItem],
        Meta(
            min_length=1,
            max_length=limits.MAX_BATCH,
            description="1-1000 acks, each applied or refused on its own, as a single ack would be",
        ),
    ]
    lease_next: LeaseNext = None


class AckItemResult(Struct, omit_defaults=True):
    """One ack's outcome: ok with state completed, or not ok with a code."""

    id: Annotated[str, Meta(description="the job's id, as sent")]
    ok: Annotated[
        bool,
        Meta(description="true: completed now, or already completed by this lease (a repeated ack)"),
    ]
    state: Annotated[Literal["completed"] | None, Meta(description="only when ok: completed")] = None
    code: ItemCode = None


class AckManyResponse(Struct):
    """What became of each ack (and, with lease_next, the jobs leased after them)."""

    results: Annotated[list[AckItemResult], Meta(description="one per ack, in the order sent")]
    jobs: NextJobs | UnsetType = UNSET
    retry_after_ms: RetryAfterMs = UNSET


class FailRequest(StrictBody):
    """Report that an attempt failed."""

    lease_id: LeaseIdIn
    error: Annotated[
        str,
        Meta(
            max_length=limits.MAX_ERROR_BYTES,
            description="what went wrong, at most 8 KiB of UTF-8; kept with the job (see the job view)",
        ),
    ]
    retry: Annotated[
        bool,
        Meta(
            description="false: dead-letter the job now, whatever attempts it has left; true: retry it "
            "while it has"
        ),
    ] = True
    retry_after_ms: Annotated[
        DelayMs | None,
        Meta(
            description="retry after this many milliseconds instead of the job's backoff (0: at once, at the "
            "back of the line), at most 30 days; of no effect when the job is dead-lettered"
        ),
    ] = None

    def __post_init__(self) -> None:
        if len(self.error.encode()) > limits.MAX_ERROR_BYTES:
            raise ValueError(f"error is longer than {limits.MAX_ERROR_BYTES} bytes")


class FailResponse(Struct):
    """Where the failed job went."""

    id: JobId
    state: Annotated[
        Literal["waiting", "delayed", "failed", "cancelled"],
        Meta(
            description="delayed: it waits out its backoff (or retry_after_ms); waiting: it is retried at "
            "once, at the back of the line; failed: dead-lettered (no attempts left, or retry false); "
            "cancelled: its cancellation had been requested, so it is not retried"
        ),
    ]
    attempt: Annotated[int, Meta(description="the number of the attempt that failed")]


class ReleaseRequest(StrictBody):
    """Give a leased job back without failing it."""

    lease_id: LeaseIdIn


class ReleaseResponse(Struct):
    """The job is back in line."""

    id: JobId
    state: Annotated[
        Literal["waiting", "cancelled"],
        Meta(
            description="waiting: first in line within its priority, the attempt not counted; cancelled: its "
            "cancellation had been requested, so it ends instead"
        ),
    ]


class SessionHeartbeatRequest(StrictBody):
    """Start or renew the worker's session."""

    ttl_ms: Annotated[
        int,
        Meta(
            ge=limits.MIN_SESSION_TTL_MS,
            le=limits.MAX_SESSION_TTL_MS,
            description="the session lapses this long from now unless renewed, 1 s to 5 min: then "
            "every job the worker holds in the queue leaves the ledger as if its lease had expired",
        ),
    ] = limits.DEFAULT_SESSION_TTL_MS
    info: Annotated[
        Raw | UnsetType,
        Meta(
            description="what to show about the worker (host, pid, version...): a JSON object of at "
            f"most {limits.MAX_SESSION_INFO_BYTES} bytes, shown by GET .../workers; leave it out to "
            "keep the last one",
            extra_json_schema={"type": "object", "additionalProperties": True},
        ),
    ] = UNSET

    def __post_init__(self) -> None:
        if isinstance(self.info, Raw):
            if len(self.info) > limits.MAX_SESSION_INFO_BYTES:
                raise ValueError(f"info is larger than {limits.MAX_SESSION_INFO_BYTES} bytes")
            if not bytes(self.info).lstrip().startswith(b"{"):
                raise ValueError("info must be a JSON object")
            require_plain_json("info", self.info)


class SessionHeartbeatResponse(Struct):
    """The worker's session."""

    worker: Annotated[str, Meta(description="the worker's name")]
    session_expires_at: Annotated[
        int, Meta(description="when the session lapses unless renewed (epoch ms, Redis clock)")
    ]
    state: SessionStateOut
