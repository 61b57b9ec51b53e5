"""The API contract as msgspec Structs: every request and response body (openapi/openapi.json).

Payloads and results stay raw JSON (``msgspec.Raw``) from request to Redis and back: they are
validated as JSON once and never decoded into Python objects or encoded twice.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from echomq_http.api import rawjson
from echomq_http.core import limits, schedule_times

_FULL_NAME = re.compile(limits.NAME_PATTERN.rstrip("$") + r"\Z")

# Every field has a description and every Struct a docstring: they are the OpenAPI document's
# text, and tests/http/test_openapi.py requires them. On an optional field, wrap the whole type
# (``| None`` included), or the description lands in one branch of the union, not on the field.
NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
Name = Annotated[str, Meta(pattern=limits.NAME_PATTERN, description=NAME_RULE)]
Priority = Annotated[int, Meta(ge=0, le=limits.MAX_PRIORITY)]
DelayMs = Annotated[int, Meta(ge=0, le=limits.MAX_DELAY_MS)]
MaxAttempts = Annotated[int, Meta(ge=1, le=limits.MAX_ATTEMPTS)]
LeaseMs = Annotated[int, Meta(ge=limits.MIN_LEASE_MS, le=limits.MAX_LEASE_MS)]
LeaseId = Annotated[str, Meta(min_length=1, max_length=128)]
EpochMs = Annotated[int, Meta(description="epoch milliseconds, Redis server clock")]
JobState = Literal["waiting", "delayed", "active", "completed", "failed", "cancelled"]
DelayReason = Literal["delay", "retry"]

# Fields that several schemas share, described once.
JobId = Annotated[str, Meta(description="the job's id")]
QueueName = Annotated[str, Meta(description="the queue's name")]
JobIdIn = Annotated[Name, Meta(description=f"the job's id ({NAME_RULE})")]
LeaseIdIn = Annotated[
    LeaseId,
    Meta(description="the job's lease, as the lease answer gave it: it must be the current, unexpired one"),
]
LeaseIdOut = Annotated[
    str, Meta(description="the lease's id, for heartbeat, ack, fail and release; every lease has a new one")
]
LeaseExpiresAt = Annotated[
    int, Meta(description="when the lease ends unless renewed (epoch ms, Redis clock)")
]
RenewLeaseMs = Annotated[
    LeaseMs | None,
    Meta(
        description="the lease's new length from now, 1 s to 12 h; default: the lease_ms it was leased with"
    ),
]
Payload = Annotated[
    Raw,
    Meta(
        description="the job's data, any JSON value nested at most 64 levels whose numbers a double can "
        "hold (1e999 is refused); kept and handed to workers exactly as sent"
    ),
]
Result = Annotated[
    Raw | UnsetType,
    Meta(
        description="the job's result, any JSON value nested at most 64 levels whose numbers a double can "
        "hold, kept with the completed job (see the job view) exactly as sent; leave it out for none"
    ),
]
ItemCode = Annotated[
    Literal["lease_lost", "job_not_found"] | None,
    Meta(
        description="only when not ok: lease_lost (not the job's current, unexpired lease: it expired, or "
        "the job was released, reclaimed or finished under another lease) or job_not_found"
    ),
]
HeartbeatItemCode = Annotated[
    Literal["lease_lost", "job_not_found", "forbidden"] | None,
    Meta(
        description="only when not ok: lease_lost (not the job's current, unexpired lease: it expired, or "
        "the job was released, reclaimed or finished under another lease), job_not_found, or forbidden "
        "(the job's worker name belongs to another token: README, Security, Worker names)"
    ),
]
MaxAttemptsOut = Annotated[int, Meta(description="attempts allowed before the job is dead-lettered")]


def _require_plain_json(field: str, value: Raw | UnsetType | None) -> None:
    """Payloads and results are stored and handed out as sent: each must nest at most 64 levels
    and hold only numbers a double can hold."""
    if isinstance(value, Raw):
        problem = rawjson.json_value_problem(bytes(value))
        if problem is not None:
            raise ValueError(f"{field} {problem}")


def is_name(value: str) -> bool:
    """Whole-string match: unlike ``$``, a trailing newline does not pass."""
    return _FULL_NAME.match(value) is not None


def _require_names(*values: str | None) -> None:
    for value in values:
        if value is not None and not is_name(value):
            raise ValueError(f"invalid name {value!r}: letters, digits, '.', '_', '-', at most 128")


class StrictBody(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of request bodies: unknown fields are an error, not silently ignored."""


class Backoff(StrictBody):
    """How long a job waits before its next attempt after a failed one (fail with retry and no
    retry_after_ms). A job whose lease expired is not delayed: it goes back to waiting at once."""

    type: Annotated[
        Literal["fixed", "exponential"],
        Meta(
            description="fixed: every retry waits delay_ms; exponential: delay_ms * 2^(attempt - 1), "
            "at most 1 h"
        ),
    ]
    delay_ms: Annotated[
        int,
        Meta(
            ge=0, le=limits.MAX_BACKOFF_DELAY_MS, description="the base delay in milliseconds, at most 24 h"
        ),
    ]


class EnqueueRequest(StrictBody):
    """A job to enqueue. Unknown fields are refused (400)."""

    payload: Payload
    id: Annotated[
        Name | None,
        Meta(
            description="your id for the job, which makes enqueue idempotent: while a job with this id is "
            "kept in the queue (in any state, finished ones for their retention time), enqueueing it again "
            "changes nothing and answers that job (created false). Without one the service makes a random "
            f"id of 24 hex characters, and a retried call can enqueue the job twice. {NAME_RULE}"
        ),
    ] = None
    name: Annotated[
        Annotated[str, Meta(min_length=1, max_length=128)] | None,
        Meta(
            description="a label for the job, 1-128 characters, handed to workers and shown in the job view"
        ),
    ] = None
    priority: Annotated[
        Priority,
        Meta(
            description="0-1000: a higher priority is leased before any lower one; within a priority, first "
            "in first out"
        ),
    ] = 0
    delay_ms: Annotated[
        DelayMs,
        Meta(
            description="leasable only after this many milliseconds (state delayed until then), "
            "at most 30 days"
        ),
    ] = 0
    max_attempts: Annotated[
        MaxAttempts,
        Meta(
            description="how many attempts (leases that end in fail or in an expired lease) the job gets "
            "before it is dead-lettered, 1-1000"
        ),
    ] = limits.DEFAULT_MAX_ATTEMPTS
    backoff: Annotated[
        Backoff | None,
        Meta(
            description="the wait before a retry after fail; default exponential from 1000 ms "
            "(1 s, 2 s, 4 s, ...)"
        ),
    ] = None
    group: Annotated[
        Name | None,
        Meta(
            description="the job's group: leases take waiting jobs round-robin across groups (the jobs "
            "without a group are one more group), priority then first in first out within a group, "
            f"and a group's jobs in flight can be capped (group_max_in_flight). {NAME_RULE}"
        ),
    ] = None

    def __post_init__(self) -> None:
        _require_names(self.id, self.group)
        _require_plain_json("payload", self.payload)


class EnqueueResponse(Struct):
    """What enqueue did with one job."""

    id: Annotated[str, Meta(description="the job's id: yours, or the one the service made")]
    queue: QueueName
    state: Annotated[
        JobState,
        Meta(
            description="waiting or delayed for a job stored now; for an id already kept, that job's "
            "current state"
        ),
    ]
    created: Annotated[
        bool,
        Meta(
            description="true: stored now (201 for a single enqueue); false: a job with this id was already "
            "kept and is unchanged (200)"
        ),
    ]


class EnqueueManyRequest(StrictBody):
    """Jobs to enqueue in one call. A body with any invalid job is refused whole (400)."""

    jobs: Annotated[
        list[EnqueueRequest],
        Meta(
            min_length=1,
            max_length=limits.MAX_BATCH,
            description="1-1000 jobs, each enqueued as by the single enqueue (an id repeated in the batch: "
            "the first is stored, the others answer created false)",
        ),
    ]


class EnqueueManyResponse(Struct):
    """What enqueue did with each job."""

    jobs: Annotated[list[EnqueueResponse], Meta(description="one per job, in the order sent")]


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
        _require_names(self.worker, self.request_id)


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


RetryAfterMs = Annotated[
    int | UnsetType,
    Meta(
        description="only when the queue's rate_limit held this lease back (fewer jobs, or none, "
        "than asked for while jobs wait): how many milliseconds until the rate window has room "
        "again. A cap of max_in_flight gives no time (a long poll is woken when a job leaves the "
        "ledger)"
    ),
]


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
Progress = Annotated[
    Raw | UnsetType,
    Meta(
        description='how far the job has got, any JSON value of at most 64 KiB (e.g. {"done": 40, '
        '"of": 100}): stored on the job (job view progress) and sent as a progress event; leave it out '
        "to keep the last one"
    ),
]
CancelRequested = Annotated[
    bool,
    Meta(
        description="the job's cancellation was requested (POST .../cancel): stop working on it and fail or "
        "release it (it then ends cancelled, not retried); an ack still completes it"
    ),
]


def _require_progress(progress: Raw | UnsetType) -> None:
    if isinstance(progress, Raw):
        if len(progress) > limits.MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is larger than {limits.MAX_PROGRESS_BYTES} bytes")
        _require_plain_json("progress", progress)


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
        _require_names(self.id)
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
        _require_plain_json("result", self.result)


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
        _require_names(self.id)
        _require_plain_json("result", self.result)


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


class JobView(Struct):
    """A job as kept, in any state."""

    id: JobId
    queue: QueueName
    name: Annotated[str | None, Meta(description="the name given at enqueue, or null")]
    state: Annotated[
        JobState,
        Meta(
            description="waiting: leasable; delayed: leasable later (delay_ms, or a retry's backoff); "
            "active: leased; completed: acked; failed: dead-lettered; cancelled: cancelled (never leased "
            "again)"
        ),
    ]
    payload: Annotated[Raw, Meta(description="the payload, exactly as enqueued")]
    result: Annotated[
        Raw | None,
        Meta(description="the ack's result, exactly as sent; null until acked, or when the ack sent none"),
    ]
    error: Annotated[
        str | None,
        Meta(
            description="the latest failed attempt's error (fail's text, or 'lease expired: ...' when the "
            "sweep reclaimed the job); null when there is none, and after a redrive"
        ),
    ]
    attempt: Annotated[
        int,
        Meta(
            description="attempts so far: 0 before the first lease, one more with each lease after a failed "
            "attempt or an expired lease (a released job's next lease does not count); a redrive resets it"
        ),
    ]
    max_attempts: MaxAttemptsOut
    priority: Annotated[int, Meta(description="the priority given at enqueue, 0-1000")]
    created_at: Annotated[int, Meta(description="when the job was enqueued (epoch ms, Redis clock)")]
    updated_at: Annotated[
        int, Meta(description="when the job last changed: state, lease or heartbeat (epoch ms, Redis clock)")
    ]
    worker: Annotated[str | None, Meta(description="only while active: the worker holding the lease")]
    lease_expires_at: Annotated[
        int | None,
        Meta(description="only while active: when the lease ends unless renewed (epoch ms, Redis clock)"),
    ]
    progress: Annotated[
        Raw | None, Meta(description="the last progress a heartbeat reported (compact JSON), or null")
    ] = None
    cancel_requested: Annotated[
        bool, Meta(description="its cancellation was requested (a cancelled job's always was)")
    ] = False
    group: Annotated[str | None, Meta(description="the group it was enqueued with, or null")] = None
    stalls: Annotated[
        int, Meta(description="how many times its lease expired (or its worker's session lapsed) so far")
    ] = 0
    schedule: Annotated[
        str | None, Meta(description="the schedule that made it (a run or a trigger), or null")
    ] = None
    finished_at: Annotated[
        int | None,
        Meta(
            description="when it completed, was dead-lettered or cancelled (epoch ms, Redis clock); else null"
        ),
    ] = None
    run_at: Annotated[
        int | None,
        Meta(
            description="only while delayed: when it becomes waiting (epoch ms, Redis clock), unless "
            "promoted sooner; else null"
        ),
    ] = None
    delay_reason: Annotated[
        DelayReason | None,
        Meta(
            description="only while delayed: why; delay: the enqueue's delay_ms, retry: a failed attempt's "
            "backoff (or its retry_after_ms); else null"
        ),
    ] = None


class PromoteResponse(Struct):
    """The job is waiting now."""

    id: JobId
    state: Annotated[
        Literal["waiting"],
        Meta(description="waiting: at the back of its priority's line (its group's, for a grouped job)"),
    ]


class CancelRequest(StrictBody):
    """Cancel a job."""

    reason: Annotated[
        Annotated[str, Meta(max_length=limits.MAX_CANCEL_REASON_BYTES)] | None,
        Meta(description="why, at most 1 KiB; kept as the cancelled job's error"),
    ] = None

    def __post_init__(self) -> None:
        if self.reason is not None and len(self.reason.encode()) > limits.MAX_CANCEL_REASON_BYTES:
            raise ValueError(f"reason is longer than {limits.MAX_CANCEL_REASON_BYTES} bytes")


class CancelResponse(Struct):
    """The job's state after the cancel."""

    id: JobId
    state: Annotated[
        JobState,
        Meta(
            description="cancelled: it was waiting or delayed, and is cancelled now; active: it stays active "
            "with cancel_requested until its worker acks (completed) or fails, releases or loses it "
            "(cancelled); completed, failed, cancelled: it had already finished, and nothing changed"
        ),
    ]
    cancel_requested: Annotated[bool, Meta(description="its cancellation was requested (now or before)")]


class HistoryMinute(Struct):
    """What happened in one minute."""

    at: Annotated[int, Meta(description="the minute's start (epoch ms, Redis clock)")]
    enqueued: Annotated[int, Meta(description="jobs enqueued (new ids only)")]
    completed: Annotated[int, Meta(description="jobs acked")]
    failed: Annotated[int, Meta(description="jobs dead-lettered")]
    reclaimed: Annotated[int, Meta(description="jobs whose lease expired, returned to waiting")]


class HistoryView(Struct):
    """Per-minute counts, counted in Redis (the same on every replica), kept 24 hours."""

    minutes: Annotated[
        list[HistoryMinute],
        Meta(
            description="one entry per minute, oldest first, zeros included; the last is the current minute"
        ),
    ]


# Every type of event the feed sends (service/echomq_http/runtime/event_feeds.py filters by all but resync).
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
    "paused",
    "resumed",
    "resync",
]


class StreamEvent(Struct, omit_defaults=True):
    """One event of GET .../events (its SSE data line): what happened to a job or the queue. No
    event carries a payload, a result or a lease id, and each is small: a progress event carries
    the progress only up to 1 KiB of JSON (else progress_truncated), a retrying or failed one
    the error text (at most 8 KiB), the rest a few fields. So a queue's stream of
    EMQ_EVENTS_MAXLEN events is bounded in bytes by that count times about 9 KiB."""

    type: Annotated[
        EventType,
        Meta(
            description="enqueued {state} (redriven: true for a redrive); leased {worker, attempt, fence, "
            "lease_expires_at}; progress {worker, progress or progress_truncated}; completed "
            "{worker, attempt}; retrying {attempt, state, error}; failed "
            "{attempt, reason: fail|lease_expired|stalled, error} "
            "(dead-lettered); released {worker}; reclaimed {worker, attempt}; cancel_requested; "
            "cancelled; promoted (a delayed job made waiting now); deleted; paused and resumed (no id); "
            "resync {after, oldest}: events after `after` are no longer kept"
        ),
    ]
    queue: QueueName
    id: Annotated[str | UnsetType, Meta(description="the job's id (not on queue events)")] = UNSET
    at: Annotated[int | UnsetType, Meta(description="when it happened (epoch ms, Redis clock)")] = UNSET
    state: Annotated[str | UnsetType, Meta(description="enqueued, retrying: the job's state")] = UNSET
    worker: Annotated[str | UnsetType, Meta(description="the worker concerned")] = UNSET
    attempt: Annotated[int | UnsetType, Meta(description="the attempt concerned")] = UNSET
    fence: Annotated[int | UnsetType, Meta(description="leased: the lease's fence")] = UNSET
    lease_expires_at: Annotated[int | UnsetType, Meta(description="leased: the lease's end")] = UNSET
    progress: Annotated[
        Raw | UnsetType,
        Meta(
            description="progress: what the heartbeat reported, when its JSON text is at most "
            f"{limits.MAX_EVENT_PROGRESS_BYTES} bytes (else progress_truncated; the job view has it)"
        ),
    ] = UNSET
    progress_truncated: Annotated[
        bool | UnsetType,
        Meta(description="progress: true when the progress was too large to send (read the job)"),
    ] = UNSET
    error: Annotated[str | UnsetType | None, Meta(description="retrying, failed: the error text")] = UNSET
    reason: Annotated[
        Literal["fail", "lease_expired", "stalled"] | UnsetType, Meta(description="failed: why")
    ] = UNSET
    redriven: Annotated[bool | UnsetType, Meta(description="enqueued by a redrive")] = UNSET
    after: Annotated[int | UnsetType, Meta(description="resync: the id asked to resume after")] = UNSET
    oldest: Annotated[int | UnsetType, Meta(description="resync: the oldest event id kept")] = UNSET


class Counts(Struct):
    """A queue's jobs in each state, read as one consistent snapshot."""

    waiting: Annotated[int, Meta(description="leasable now")]
    delayed: Annotated[int, Meta(description="leasable later (delay_ms, or a retry's backoff)")]
    active: Annotated[
        int,
        Meta(
            description="leased: in the in-flight ledger, expired leases included until the sweep "
            "reclaims them"
        ),
    ]
    completed: Annotated[
        int, Meta(description="acked and still kept (EMQ_COMPLETED_RETENTION_S, EMQ_COMPLETED_MAX)")
    ]
    failed: Annotated[
        int, Meta(description="dead-lettered and still kept (EMQ_FAILED_RETENTION_S, EMQ_FAILED_MAX)")
    ]
    cancelled: Annotated[
        int,
        Meta(
            description="cancelled and still kept (as dead letters are: EMQ_FAILED_RETENTION_S, "
            "EMQ_FAILED_MAX)"
        ),
    ]


class QueueView(Struct):
    """A queue's pause state and counts. Any valid name reads as a queue: one never used is empty
    and not paused."""

    name: QueueName
    paused: Annotated[
        bool,
        Meta(description="true: leases answer no jobs (long polls keep waiting) until the queue is resumed"),
    ]
    counts: Annotated[Counts, Meta(description="the jobs in each state")]


class QueueList(Struct):
    """A page of the queues the token may see, by name."""

    queues: Annotated[
        list[QueueView],
        Meta(
            description="the page's queues, by name: known ones (from a queue's first enqueue, pause, "
            "resume, settings or schedule until it is deleted) that the token covers"
        ),
    ]
    next_cursor: Annotated[
        str | None, Meta(description="pass it as cursor for the next page; null on the last page")
    ] = None


class LedgerEntry(Struct):
    """One job in flight."""

    id: JobId
    worker: Annotated[str, Meta(description="the worker holding the lease")]
    attempt: Annotated[int, Meta(description="the attempt's number")]
    leased_at: Annotated[int, Meta(description="when the lease began (epoch ms, Redis clock)")]
    lease_expires_at: Annotated[
        int,
        Meta(
            description="when the lease ends unless renewed (epoch ms, Redis clock); in the past: expired, "
            "and the sweep is about to reclaim the job"
        ),
    ]


class LedgerView(Struct):
    """A page of the in-flight ledger."""

    jobs: Annotated[list[LedgerEntry], Meta(description="leased jobs, oldest lease first")]


SessionState = Literal["running", "quiet"]
SessionStateOut = Annotated[
    SessionState,
    Meta(
        description="running; or quiet (an operator quieted the worker: its lease requests lease "
        "nothing until the session ends, so finish the jobs held and stop)"
    ),
]


class WorkerSession(Struct):
    """A worker's live session."""

    state: SessionStateOut
    started_at: Annotated[int, Meta(description="when the session started (epoch ms, Redis clock)")]
    last_seen_at: Annotated[int, Meta(description="the session's last heartbeat (epoch ms, Redis clock)")]
    expires_at: Annotated[
        int, Meta(description="when the session lapses unless renewed (epoch ms, Redis clock)")
    ]
    info: Annotated[
        Raw | None, Meta(description="the JSON object the worker's last heartbeat with info sent, or null")
    ] = None


class WorkerHoldings(Struct):
    """A worker, the jobs it holds and its session."""

    worker: Annotated[str, Meta(description="the worker's name")]
    jobs: Annotated[list[str], Meta(description="the ids of the jobs it holds, sorted")]
    session: Annotated[
        WorkerSession | None, Meta(description="the worker's live session, or null when it has none")
    ] = None


class WorkersView(Struct):
    """Who holds what, and which workers have a session."""

    workers: Annotated[
        list[WorkerHoldings],
        Meta(description="every worker with a job in the ledger or a live session, sorted by name"),
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
            _require_plain_json("info", self.info)


class SessionHeartbeatResponse(Struct):
    """The worker's session."""

    worker: Annotated[str, Meta(description="the worker's name")]
    session_expires_at: Annotated[
        int, Meta(description="when the session lapses unless renewed (epoch ms, Redis clock)")
    ]
    state: SessionStateOut


class QuietResponse(Struct):
    """The worker's session, quieted."""

    worker: Annotated[str, Meta(description="the worker's name")]
    state: Annotated[Literal["quiet"], Meta(description="quiet: the worker's lease requests lease nothing")]


class FailedPage(Struct):
    """A page of dead-lettered jobs."""

    jobs: Annotated[
        list[JobView],
        Meta(
            description="most recently failed first; a job redriven or deleted while the page is read is "
            "left out"
        ),
    ]
    total: Annotated[int, Meta(description="dead-lettered jobs in the queue, on all pages")]


class JobPage(Struct):
    """A page of the jobs in one state, and where the next page starts."""

    jobs: Annotated[
        list[JobView],
        Meta(
            description="in the state's order: waiting as leases take them, delayed by due time, active "
            "oldest lease first, completed, failed and cancelled most recently finished first; a job "
            "that leaves the state while the page is read is left out, so a page can hold fewer jobs "
            "than the limit and still have a next one"
        ),
    ]
    next_cursor: Annotated[
        str | None,
        Meta(
            description="opaque: pass it as cursor (with the same state) for the next page; null on the "
            "last page"
        ),
    ]


GroupMax = Annotated[int, Meta(ge=1, le=limits.MAX_GROUP_MAX_IN_FLIGHT)]


class GroupLimitRequest(StrictBody):
    """A group's own cap on its jobs in flight."""

    max_in_flight: Annotated[
        GroupMax | None,
        Meta(
            description="at least 1: at most this many of the group's jobs in the ledger at once; null: "
            "back to the queue's group_max_in_flight"
        ),
    ]


class GroupLimitResponse(Struct):
    """The group's own cap, as set."""

    group: Annotated[str, Meta(description="the group's name")]
    max_in_flight: Annotated[
        int | None, Meta(description="its own cap; null: the queue's group_max_in_flight applies")
    ]


class GroupView(Struct):
    """One group of a queue: its jobs waiting and in flight, and its cap."""

    group: Annotated[str, Meta(description="the group's name")]
    waiting: Annotated[int, Meta(description="its waiting jobs")]
    active: Annotated[
        int, Meta(description="its jobs in the ledger (leased, not yet acked, failed or released)")
    ]
    max_in_flight: Annotated[
        int | None, Meta(description="its own cap, set with PUT .../groups/{group}; null for none")
    ]
    effective_max_in_flight: Annotated[
        int | None,
        Meta(description="the cap that applies: its own, else the queue's group_max_in_flight; null: no cap"),
    ]


class GroupPage(Struct):
    """A page of a queue's groups, by name."""

    groups: Annotated[
        list[GroupView],
        Meta(
            description="by name: every group with waiting jobs, jobs in flight or a cap of its own "
            "(the jobs without a group are not listed)"
        ),
    ]
    next_cursor: Annotated[
        str | None, Meta(description="pass it as cursor for the next page; null on the last page")
    ]


class ScheduleJob(StrictBody):
    """The job each run of a schedule enqueues: an enqueue request without id and delay_ms (a
    run's job id is made from the schedule's name and the run's time)."""

    payload: Payload
    name: Annotated[
        Annotated[str, Meta(min_length=1, max_length=128)] | None,
        Meta(description="a label for the jobs, 1-128 characters"),
    ] = None
    priority: Annotated[Priority, Meta(description="0-1000, as on enqueue")] = 0
    max_attempts: Annotated[MaxAttempts, Meta(description="1-1000, as on enqueue")] = (
        limits.DEFAULT_MAX_ATTEMPTS
    )
    backoff: Annotated[
        Backoff | None, Meta(description="the wait before a retry after fail, as on enqueue")
    ] = None
    group: Annotated[Name | None, Meta(description=f"the jobs' group, as on enqueue. {NAME_RULE}")] = None

    def __post_init__(self) -> None:
        _require_names(self.group)
        _require_plain_json("payload", self.payload)


EpochMs = Annotated[int, Meta(ge=0, le=limits.MAX_EPOCH_MS)]


class ScheduleRequest(StrictBody):
    """A schedule: exactly one of cron and every_ms, and the job each run makes. Unknown fields
    are refused (400)."""

    job: Annotated[ScheduleJob, Meta(description="the job each run enqueues")]
    cron: Annotated[
        Annotated[str, Meta(min_length=1, max_length=limits.MAX_CRON_CHARS)] | None,
        Meta(
            description="5 fields (minute hour day-of-month month day-of-week; names such as JAN and MON, "
            "ranges, steps, lists, L) or a macro: @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly; read in timezone. On a spring-forward day a time in the gap runs at the "
            "first minute after it, once; on a fall-back day a daily time that occurs twice runs once"
        ),
    ] = None
    every_ms: Annotated[
        Annotated[int, Meta(ge=limits.MIN_EVERY_MS, le=limits.MAX_EVERY_MS)] | None,
        Meta(
            description="run every this many ms (at least 1000) on a fixed grid without drift: first at "
            "start_at if given, else one interval after the schedule was created"
        ),
    ] = None
    timezone: Annotated[
        Annotated[str, Meta(min_length=1, max_length=limits.MAX_TIMEZONE_CHARS)],
        Meta(
            description="the IANA timezone cron times are read in, e.g. Europe/Berlin (a name of the IANA "
            "database; not localtime, Factory, right/... or posix/...)"
        ),
    ] = "UTC"
    start_at: Annotated[
        EpochMs | None, Meta(description="no run before this time (epoch ms); for every_ms, the first run")
    ] = None
    end_at: Annotated[
        EpochMs | None,
        Meta(description="no run after this time (epoch ms): then the schedule stays, with next_run_at null"),
    ] = None
    limit: Annotated[
        Annotated[int, Meta(ge=1, le=limits.MAX_SCHEDULE_LIMIT)] | None,
        Meta(description="at most this many runs (triggers do not count): then next_run_at is null"),
    ] = None
    overlap: Annotated[
        Literal["allow", "skip"],
        Meta(
            description="skip: a run is skipped (counted in skipped) while the schedule's previous job is "
            "still waiting, delayed or active; allow: every run makes a job"
        ),
    ] = "allow"
    paused: Annotated[bool, Meta(description="a paused schedule makes no runs (next_run_at null)")] = False

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_ms is None):
            raise ValueError("give exactly one of cron and every_ms")
        if self.cron is not None:
            schedule_times.cron_expression(self.cron)
        schedule_times.timezone(self.timezone)
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise ValueError("end_at is before start_at: the schedule could never run")


class ScheduleView(ScheduleRequest, kw_only=True):
    """A schedule: the fields it was put with, and where its runs stand."""

    schedule: Annotated[str, Meta(description="its name")]
    queue: Annotated[str, Meta(description="the queue its jobs go to")]
    next_run_at: Annotated[
        int | None,
        Meta(description="when it runs next (epoch ms, Redis clock); null while paused or once ended"),
    ]
    last_run_at: Annotated[
        int | None, Meta(description="the time of its last run that made a job (epoch ms), or null")
    ]
    last_job_id: Annotated[
        str | None, Meta(description="the id of the last job it made (a run's or a trigger's), or null")
    ]
    runs: Annotated[int, Meta(description="runs that made a job (triggers and skipped runs not counted)")]
    skipped: Annotated[int, Meta(description='runs skipped by overlap "skip"')] = 0
    created_at: Annotated[int, Meta(description="when it was first put (epoch ms)")]
    updated_at: Annotated[int, Meta(description="when it was last put (epoch ms)")]


class ScheduleList(Struct):
    """A queue's schedules."""

    schedules: Annotated[list[ScheduleView], Meta(description="every schedule of the queue, by name")]


class WorkerReleaseResponse(Struct):
    """The jobs taken from the worker."""

    released: Annotated[
        list[str],
        Meta(
            description="the ids given back to the front of waiting, oldest lease first (which is also "
            "their order in line)"
        ),
    ]


class PauseResponse(Struct):
    """The queue's pause state."""

    name: QueueName
    paused: Annotated[bool, Meta(description="the queue's pause state now")]


class RedriveRequest(StrictBody):
    """Which dead-lettered jobs to send back. No body, {} or ids null: all of them."""

    ids: Annotated[
        Annotated[list[Name], Meta(max_length=limits.MAX_BATCH)] | None,
        Meta(
            description="up to 1000 ids; ids that are not dead-lettered in this queue are skipped, and an "
            "empty list redrives nothing"
        ),
    ] = None

    def __post_init__(self) -> None:
        _require_names(*(self.ids or ()))


class RedriveResponse(Struct):
    """The jobs sent back."""

    retried: Annotated[
        list[str],
        Meta(
            description="the ids sent back to waiting (at the back of the line, attempts reset to 0, error "
            "cleared)"
        ),
    ]


class Problem(Struct):
    """An error, as RFC 9457 problem details with a machine-readable code."""

    type: Annotated[
        str, Meta(description="a URI naming the problem type: https://echomq.dev/problems/<code>")
    ]
    title: Annotated[str, Meta(description="a short summary of the problem type")]
    status: Annotated[int, Meta(description="the HTTP status code")]
    detail: Annotated[
        str, Meta(description="what went wrong with this request, for people (do not parse it)")
    ]
    code: Annotated[
        str,
        Meta(
            description="what went wrong, for programs: invalid_request, unauthorized, forbidden, not_found, "
            "job_not_found, method_not_allowed, request_timeout, lease_lost, job_active, too_many_queues, "
            "payload_too_large, unsupported_media_type, misdirected_request, too_many_requests, "
            "headers_too_large, internal_error, backend_unavailable"
        ),
    ]


class Health(Struct):
    """Liveness or readiness."""

    status: Annotated[str, Meta(description="ok (/healthz) or ready (/readyz)")]


# --- queue settings (flow control) ----------------------------------------------------------------

InFlightCap = Annotated[int, Meta(ge=1, le=limits.MAX_IN_FLIGHT_CAP)]
RetentionS = Annotated[int, Meta(ge=0, le=limits.MAX_RETENTION_S)]


class RateLimit(StrictBody):
    """At most max leased jobs in any window of per_ms milliseconds, for the whole queue."""

    max: Annotated[
        int,
        Meta(
            ge=1,
            le=limits.MAX_RATE_JOBS,
            description="jobs leased per window, at least 1; a burst of up to max at once is allowed",
        ),
    ]
    per_ms: Annotated[
        int,
        Meta(
            ge=limits.MIN_RATE_PER_MS,
            le=limits.MAX_RATE_PER_MS,
            description="the window's length in milliseconds, 1 s to 24 h: no interval this long ever "
            "leases more than max jobs",
        ),
    ]


class QueueSettings(StrictBody):
    """A queue's settings, as a whole: a PUT replaces them all (a field left out takes its
    default). Every replica follows a change at once."""

    max_in_flight: Annotated[
        InFlightCap | None,
        Meta(
            description="at most this many of the queue's jobs in the in-flight ledger at once, over all "
            "workers; null (default): no limit"
        ),
    ] = None
    group_max_in_flight: Annotated[
        InFlightCap | None,
        Meta(description="at most this many jobs of each group in flight at once; null (default): no limit"),
    ] = None
    rate_limit: Annotated[
        RateLimit | None,
        Meta(description="at most max leased jobs per per_ms window; null (default): no limit"),
    ] = None
    max_stalls: Annotated[
        Annotated[int, Meta(ge=0, le=limits.MAX_STALLS)] | None,
        Meta(
            description="a job whose lease expires more than this many times is dead-lettered (reason "
            "stalled), even with attempts left; null (default): no limit"
        ),
    ] = None
    events: Annotated[
        bool,
        Meta(
            description="false: the queue's transitions write no events (its event subscribers see "
            "nothing new; its history still counts); default true"
        ),
    ] = True
    completed_retention_s: Annotated[
        RetentionS | None,
        Meta(
            description="how long the queue's completed jobs are kept, in seconds; null (default): the "
            "service's EMQ_COMPLETED_RETENTION_S"
        ),
    ] = None
    failed_retention_s: Annotated[
        RetentionS | None,
        Meta(
            description="how long the queue's dead-lettered and cancelled jobs are kept, in seconds; null "
            "(default): the service's EMQ_FAILED_RETENTION_S"
        ),
    ] = None
