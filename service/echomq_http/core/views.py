"""A job's hash and a queue's META as the API's views: what Redis keeps, read back."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import Raw

from echomq_http.api.schemas.common import DelayReason
from echomq_http.api.schemas.jobs import ChildCounts, JobRef, JobView
from echomq_http.api.schemas.operations import QueueSettings, RateLimit
from echomq_http.core import limits
from echomq_http.core.bindings import (
    number,
    text,
)
from echomq_http.store.keys import queue_of_prefix

SEARCH_STATES = ("failed", "completed", "cancelled", "delayed")  # lua/search_jobs.lua
# Lua's string.lower folds ASCII letters only: the text is folded the same way here, so that it
# matches what the script compares it with.
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

HISTORY_KINDS = ("enqueued", "completed", "failed", "reclaimed")  # HistoryMinute's order


def delay_reason(attempt: int) -> DelayReason:
    """Why a delayed job is delayed, without a field of its own: only an enqueue's delay_ms delays
    a job that was never leased (attempt 0), and only a failed attempt's backoff one that was (a
    lease counts an attempt; a redrive resets it but makes the job waiting)."""
    return "retry" if attempt > 0 else "delay"


def job_view(queue: str, job_id: str, fields: dict[bytes, bytes]) -> JobView:
    """A job's hash (HGETALL) as the API's job view. The hash leaves out fields that hold
    their default (lua/include/store.lua), so those are filled in here."""
    name = fields.get(b"name") or None
    result = fields.get(b"result")
    progress = fields.get(b"progress")
    active = fields[b"state"] == b"active"
    # The hash keeps run_at after the job left DELAYED (include/waiting.lua delayed_to_waiting).
    delayed = fields[b"state"] == b"delayed"
    attempt = int(fields.get(b"attempt", 0))
    created_at = int(fields[b"created_at"])
    return JobView(
        id=job_id,
        queue=queue,
        name=text(name),
        state=fields[b"state"].decode(),  # type: ignore[arg-type]
        payload=Raw(fields[b"payload"]),
        result=None if result is None else Raw(result),
        error=text(fields.get(b"error")),
        attempt=attempt,
        max_attempts=int(fields.get(b"max_attempts", limits.DEFAULT_MAX_ATTEMPTS)),
        priority=int(fields.get(b"priority", 0)),
        created_at=created_at,
        updated_at=int(fields.get(b"updated_at", created_at)),
        worker=text(fields.get(b"worker")) if active else None,
        lease_expires_at=number(fields.get(b"lease_expires_at")) if active else None,
        progress=None if progress is None else Raw(progress),
        cancel_requested=b"cancel_requested" in fields,
        group=text(fields.get(b"group")),
        stalls=int(fields.get(b"stalls", 0)),
        schedule=text(fields.get(b"schedule")),
        finished_at=number(fields.get(b"finished_at")),
        run_at=number(fields.get(b"run_at")) if delayed else None,
        delay_reason=delay_reason(attempt) if delayed else None,
        parent=parent_of(fields.get(b"parent")),
        children=children_of(fields),
    )


def parent_of(link: bytes | None) -> JobRef | None:
    """A child's link to its parent ("<parent's prefix> <id> <token>": lua/include/children.lua)."""
    if link is None:
        return None
    prefix, job_id, _ = link.decode().split(" ")
    return JobRef(queue=queue_of_prefix(prefix), id=job_id)


def children_of(fields: dict[bytes, bytes]) -> ChildCounts | None:
    if b"kids_token" not in fields:
        return None

    def count(name: bytes) -> int:
        return int(fields.get(name, 0))

    return ChildCounts(
        total=count(b"kids_total"),
        pending=count(b"kids_pending"),
        completed=count(b"kids_completed"),
        failed=count(b"kids_failed"),
        ignored=count(b"kids_ignored"),
    )


# A queue's settings as META fields (lua/settings.lua), in the order they are read.
SETTINGS_FIELDS = (
    "max_in_flight",
    "group_max_in_flight",
    "rate_max",
    "rate_per_ms",
    "max_stalls",
    "events_off",
    "completed_retention_s",
    "failed_retention_s",
)


class ScriptSettings(msgspec.Struct, omit_defaults=True):
    """The settings as settings.lua takes them: the fields not at their default."""

    max_in_flight: int | None = None
    group_max_in_flight: int | None = None
    rate_max: int | None = None
    rate_per_ms: int | None = None
    max_stalls: int | None = None
    events_off: int | None = None
    completed_retention_s: int | None = None
    failed_retention_s: int | None = None


def settings_of(values: Sequence[bytes | None]) -> QueueSettings:
    """A queue's settings from its META fields (SETTINGS_FIELDS' order; absent = default)."""
    found = dict(zip(SETTINGS_FIELDS, (number(value) for value in values), strict=True))
    rate_max, rate_per_ms = found["rate_max"], found["rate_per_ms"]
    rate = None if rate_max is None or rate_per_ms is None else RateLimit(max=rate_max, per_ms=rate_per_ms)
    return QueueSettings(
        max_in_flight=found["max_in_flight"],
        group_max_in_flight=found["group_max_in_flight"],
        rate_limit=rate,
        max_stalls=found["max_stalls"],
        events=found["events_off"] is None,
        completed_retention_s=found["completed_retention_s"],
        failed_retention_s=found["failed_retention_s"],
    )
