"""The bodies of the Operate operations (api/operations.py): quiet, pause, redrive,
worker release, group limits, and a queue's settings."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from echomq_http.api.schemas.common import Name, QueueName, StrictBody, require_names
from echomq_http.core import limits


class QuietResponse(Struct):
    """The worker's session, quieted."""

    worker: Annotated[str, Meta(description="the worker's name")]
    state: Annotated[Literal["quiet"], Meta(description="quiet: the worker's lease requests lease nothing")]


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
        require_names(*(self.ids or ()))


class RedriveResponse(Struct):
    """The jobs sent back."""

    retried: Annotated[
        list[str],
        Meta(
            description="the ids sent back to waiting (at the back of the line, attempts reset to 0, error "
            "cleared)"
        ),
    ]


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
