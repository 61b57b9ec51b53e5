"""The bodies of the Jobs operations (api/jobs.py): enqueue, the job view, cancel, promote."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Raw, Struct

from echomq_http.api.schemas.common import (
    NAME_RULE,
    DelayMs,
    DelayReason,
    JobId,
    JobState,
    MaxAttempts,
    MaxAttemptsOut,
    Name,
    Payload,
    Priority,
    QueueName,
    StrictBody,
    require_names,
    require_plain_json,
)
from echomq_http.core import limits


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
        require_names(self.id, self.group)
        require_plain_json("payload", self.payload)


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


class JobRef(Struct):
    """A job of another queue, or of the same one."""

    queue: QueueName
    id: JobId


class ChildCounts(Struct):
    """A parent's children by how they stand (a child's latest outcome replaces an earlier one)."""

    total: Annotated[int, Meta(description="children declared or added")]
    pending: Annotated[int, Meta(description="not finished yet")]
    completed: Annotated[int, Meta(description="completed: their results are kept with the parent")]
    failed: Annotated[
        int, Meta(description="dead-lettered, cancelled or deleted before finishing, under on_failure fail")
    ]
    ignored: Annotated[int, Meta(description="the same under on_failure ignore: counted as finished")]


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
            "again); waiting_children: waits for its children (a flow's parent)"
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
    parent: Annotated[
        JobRef | None, Meta(description="the job that waits for this one (a flow's parent), or null")
    ] = None
    children: Annotated[
        ChildCounts | None, Meta(description="the job's children by how they stand, or null when it has none")
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
