"""The API contract as msgspec Structs: every request and response body (openapi/openapi.json).

Payloads and results stay raw JSON (``msgspec.Raw``) from request to Redis and back: they are
validated as JSON once and never decoded into Python objects or encoded twice.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from service import limits

_FULL_NAME = re.compile(limits.NAME_PATTERN.rstrip("$") + r"\Z")

Name = Annotated[str, Meta(pattern=limits.NAME_PATTERN, description="letters, digits, . _ -")]
Priority = Annotated[int, Meta(ge=0, le=limits.MAX_PRIORITY)]
DelayMs = Annotated[int, Meta(ge=0, le=limits.MAX_DELAY_MS)]
MaxAttempts = Annotated[int, Meta(ge=1, le=limits.MAX_ATTEMPTS)]
LeaseMs = Annotated[int, Meta(ge=limits.MIN_LEASE_MS, le=limits.MAX_LEASE_MS)]
LeaseId = Annotated[str, Meta(min_length=1, max_length=128)]
EpochMs = Annotated[int, Meta(description="epoch milliseconds, Redis server clock")]
JobState = Literal["waiting", "delayed", "active", "completed", "failed"]


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth_exceeds(raw: Raw | bytes, max_depth: int = limits.MAX_JSON_DEPTH) -> bool:
    """Whether JSON text (already known to be valid) nests deeper than max_depth."""
    text = bytes(raw)
    if text.count(b"[") + text.count(b"{") <= max_depth:
        return False  # too few brackets to nest that deep: the common case costs two scans
    depth = 0
    for byte in _JSON_STRING.sub(b"", text):  # brackets inside strings do not nest
        depth += _BRACKETS.get(byte, 0)
        if depth > max_depth:
            return True
    return False


def _require_shallow(*values: Raw | UnsetType | None) -> None:
    for value in values:
        if isinstance(value, Raw) and json_depth_exceeds(value):
            raise ValueError(f"JSON nested deeper than {limits.MAX_JSON_DEPTH} levels")


def is_name(value: str) -> bool:
    """Whole-string match: unlike ``$``, a trailing newline does not pass."""
    return _FULL_NAME.match(value) is not None


def _require_names(*values: str | None) -> None:
    for value in values:
        if value is not None and not is_name(value):
            raise ValueError(f"invalid name {value!r}: letters, digits, '.', '_', '-', at most 128")


class Request(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of request bodies: unknown fields are an error, not silently ignored."""


class Backoff(Request):
    type: Literal["fixed", "exponential"]
    delay_ms: Annotated[int, Meta(ge=0, le=limits.MAX_BACKOFF_DELAY_MS)]


class EnqueueRequest(Request):
    payload: Raw
    id: Name | None = None
    name: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    priority: Priority = 0
    delay_ms: DelayMs = 0
    max_attempts: MaxAttempts = limits.DEFAULT_MAX_ATTEMPTS
    backoff: Backoff | None = None

    def __post_init__(self) -> None:
        _require_names(self.id)
        _require_shallow(self.payload)


class EnqueueResponse(Struct):
    id: str
    queue: str
    state: JobState
    created: bool


class EnqueueManyRequest(Request):
    jobs: Annotated[list[EnqueueRequest], Meta(min_length=1, max_length=limits.MAX_BATCH)]


class EnqueueManyResponse(Struct):
    jobs: list[EnqueueResponse]


class LeaseRequest(Request):
    worker: Name
    lease_ms: LeaseMs = limits.DEFAULT_LEASE_MS
    max_jobs: Annotated[int, Meta(ge=1, le=limits.MAX_JOBS_PER_LEASE)] = 1
    wait_ms: Annotated[int, Meta(ge=0, le=limits.MAX_WAIT_MS)] = 0
    request_id: (
        Annotated[
            Name,
            Meta(
                description="makes the lease idempotent: the same worker and request_id within 5 "
                "minutes leases nothing new and answers the jobs the first request leased that it "
                "still holds (same lease ids and fences)"
            ),
        ]
        | None
    ) = None

    def __post_init__(self) -> None:
        _require_names(self.worker, self.request_id)


class LeasedJob(Struct):
    id: str
    queue: str
    name: str | None
    payload: Raw
    attempt: int
    max_attempts: int
    lease_id: str
    lease_expires_at: EpochMs
    fence: int
    enqueued_at: EpochMs
    traceparent: str | None = None  # the producer's W3C trace context, to continue its trace


class LeaseResponse(Struct):
    jobs: list[LeasedJob]


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
NextJobs = Annotated[
    list[LeasedJob],
    Meta(description="only with lease_next: what that lease request answered (possibly no jobs)"),
]


class HeartbeatRequest(Request):
    lease_id: LeaseId
    lease_ms: LeaseMs | None = None


class HeartbeatResponse(Struct):
    id: str
    lease_id: str
    lease_expires_at: EpochMs


class HeartbeatItem(Request):
    id: Name
    lease_id: LeaseId
    lease_ms: (
        Annotated[LeaseMs, Meta(description="the lease's new length from now; default: its own length")]
        | None
    ) = None

    def __post_init__(self) -> None:
        _require_names(self.id)


class HeartbeatManyRequest(Request):
    leases: Annotated[list[HeartbeatItem], Meta(min_length=1, max_length=limits.MAX_BATCH)]


class HeartbeatResult(Struct, omit_defaults=True):
    """ok: the lease was renewed (lease_id, lease_expires_at, cancel_requested); else code."""

    id: str
    ok: bool
    lease_id: str | None = None
    lease_expires_at: EpochMs | None = None
    cancel_requested: (
        Annotated[bool, Meta(description="the job is asked to stop; always false in this version")] | None
    ) = None
    code: Literal["lease_lost", "job_not_found"] | None = None


class HeartbeatManyResponse(Struct):
    results: Annotated[list[HeartbeatResult], Meta(description="one per lease, in the order sent")]


class AckRequest(Request):
    lease_id: LeaseId
    result: Raw | UnsetType = UNSET
    lease_next: LeaseNext = None

    def __post_init__(self) -> None:
        _require_shallow(self.result)


class AckResponse(Struct):
    id: str
    state: Literal["completed"]
    jobs: NextJobs | UnsetType = UNSET


class AckItem(Request):
    id: Name
    lease_id: LeaseId
    result: Raw | UnsetType = UNSET

    def __post_init__(self) -> None:
        _require_names(self.id)
        _require_shallow(self.result)


class AckManyRequest(Request):
    acks: Annotated[list[AckItem], Meta(min_length=1, max_length=limits.MAX_BATCH)]
    lease_next: LeaseNext = None


class AckResult(Struct, omit_defaults=True):
    id: str
    ok: bool
    state: Literal["completed"] | None = None
    code: Literal["lease_lost", "job_not_found"] | None = None


class AckManyResponse(Struct):
    results: list[AckResult]
    jobs: NextJobs | UnsetType = UNSET


class FailRequest(Request):
    lease_id: LeaseId
    error: Annotated[str, Meta(max_length=limits.MAX_ERROR_BYTES)]
    retry: bool = True
    retry_after_ms: DelayMs | None = None

    def __post_init__(self) -> None:
        if len(self.error.encode()) > limits.MAX_ERROR_BYTES:
            raise ValueError(f"error is longer than {limits.MAX_ERROR_BYTES} bytes")


class FailResponse(Struct):
    id: str
    state: Literal["waiting", "delayed", "failed"]
    attempt: int


class ReleaseRequest(Request):
    lease_id: LeaseId


class ReleaseResponse(Struct):
    id: str
    state: Literal["waiting"]


class JobView(Struct):
    id: str
    queue: str
    name: str | None
    state: JobState
    payload: Raw
    result: Raw | None
    error: str | None
    attempt: int
    max_attempts: int
    priority: int
    created_at: EpochMs
    updated_at: EpochMs
    worker: str | None
    lease_expires_at: EpochMs | None


class Counts(Struct):
    waiting: int
    delayed: int
    active: int
    completed: int
    failed: int


class QueueView(Struct):
    name: str
    paused: bool
    counts: Counts


class QueueList(Struct):
    queues: list[QueueView]


class LedgerEntry(Struct):
    id: str
    worker: str
    attempt: int
    leased_at: EpochMs
    lease_expires_at: EpochMs


class LedgerView(Struct):
    jobs: list[LedgerEntry]


class WorkerHoldings(Struct):
    worker: str
    jobs: list[str]


class WorkersView(Struct):
    workers: list[WorkerHoldings]


class FailedPage(Struct):
    jobs: list[JobView]
    total: int


class WorkerReleaseResponse(Struct):
    released: list[str]


class PauseResponse(Struct):
    name: str
    paused: bool


class RedriveRequest(Request):
    ids: Annotated[list[Name], Meta(max_length=limits.MAX_BATCH)] | None = None

    def __post_init__(self) -> None:
        _require_names(*(self.ids or ()))


class RedriveResponse(Struct):
    retried: list[str]


class Problem(Struct):
    """RFC 9457 problem details, with our machine-readable ``code``."""

    type: str
    title: str
    status: int
    detail: str
    code: str


class Health(Struct):
    status: str
