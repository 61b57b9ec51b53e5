"""The bodies of the Inspect operations (api/inspection.py): queues, counts, events,
history, the ledger, workers, job pages, groups."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from echomq_http.api.schemas.common import JobId, QueueName, SessionStateOut
from echomq_http.api.schemas.jobs import JobView
from echomq_http.core import limits


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
    "children_completed",
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
            "{attempt, reason: fail|lease_expired|stalled|child_failed, error} "
            "(dead-lettered); released {worker}; reclaimed {worker, attempt}; cancel_requested; "
            "cancelled; promoted (a delayed job made waiting now); deleted; children_completed (a flow's "
            "parent made waiting: its children finished); paused and resumed (no id); "
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
        Literal["fail", "lease_expired", "stalled", "child_failed"] | UnsetType,
        Meta(description="failed: why"),
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
    waiting_children: Annotated[
        int, Meta(description="waiting for their children to finish (a flow's parents)")
    ] = 0


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
