"""What the request and response bodies of every tag share: the named field types (names,
ids, times, payloads), the strict base of request bodies, and the problem and health bodies."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from msgspec import Meta, Raw, Struct, UnsetType

from echomq_http.api import rawjson
from echomq_http.core import limits

FULL_NAME = re.compile(limits.NAME_PATTERN.rstrip("$") + r"\Z")


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


JobState = Literal["waiting", "delayed", "active", "completed", "failed", "cancelled", "waiting_children"]


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


def require_plain_json(field: str, value: Raw | UnsetType | None) -> None:
    """Payloads and results are stored and handed out as sent: each must nest at most 64 levels
    and hold only numbers a double can hold."""
    if isinstance(value, Raw):
        problem = rawjson.json_value_problem(bytes(value))
        if problem is not None:
            raise ValueError(f"{field} {problem}")


def is_name(value: str) -> bool:
    """Whole-string match: unlike ``$``, a trailing newline does not pass."""
    return FULL_NAME.match(value) is not None


def require_names(*values: str | None) -> None:
    for value in values:
        if value is not None and not is_name(value):
            raise ValueError(f"invalid name {value!r}: letters, digits, '.', '_', '-', at most 128")


class StrictBody(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of request bodies: unknown fields are an error, not silently ignored."""


RetryAfterMs = Annotated[
    int | UnsetType,
    Meta(
        description="only when the queue's rate_limit held this lease back (fewer jobs, or none, "
        "than asked for while jobs wait): how many milliseconds until the rate window has room "
        "again. A cap of max_in_flight gives no time (a long poll is woken when a job leaves the "
        "ledger)"
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


SessionState = Literal["running", "quiet"]


SessionStateOut = Annotated[
    SessionState,
    Meta(
        description="running; or quiet (an operator quieted the worker: its lease requests lease "
        "nothing until the session ends, so finish the jobs held and stop)"
    ),
]


EpochMs = Annotated[int, Meta(ge=0, le=limits.MAX_EPOCH_MS)]


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
