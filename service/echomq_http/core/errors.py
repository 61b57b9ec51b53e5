"""Domain errors: the script result codes, the exceptions they become, and their HTTP problems.

Scripts answer small negative integers; ``ScriptCode`` is their one definition (the loader hands
each to the Lua as a placeholder: lua/include/base.lua), ``raise_for_code`` turns them into
exceptions in one place, and ``PROBLEMS`` maps every exception to its status and problem code in
one table.
"""

from __future__ import annotations

from enum import IntEnum


class ScriptCode(IntEnum):
    JOB_NOT_FOUND = -1
    LEASE_LOST = -2
    JOB_ACTIVE = -3
    NO_SESSION = -4
    SCHEDULE_NOT_FOUND = -5
    SCHEDULE_MOVED = -6  # put_schedule.lua: the schedule changed since it was read (not an error)
    NOT_DELAYED = -7
    WORKER_OWNED = -8  # the worker name belongs to another token (docs/security.md, "Worker names")
    NEW_QUEUE = -9  # enqueue.lua: the queue has no keys yet, so it is admitted first (not an error)
    TOO_MANY_QUEUES = -10  # admit_queue.lua: the registry holds EMQ_MAX_QUEUES queues already
    JOB_EXISTS = -11  # create_flow.lua: a node's id names a job outside the flow


class QueueError(Exception):
    """Base of the errors a client caused or can act on."""


class InvalidRequest(QueueError):
    pass


class JobNotFound(QueueError):
    pass


class LeaseLost(QueueError):
    pass


class JobActive(QueueError):
    pass


class NoSession(QueueError):
    pass


class ScheduleNotFound(QueueError):
    pass


class NotDelayed(QueueError):
    pass


class WorkerOwned(QueueError):
    pass


class TooManyQueues(QueueError):
    pass


class JobExists(QueueError):
    """A flow node's id names a job that is not that node of this flow."""


class BackendUnavailable(QueueError):
    pass


class BodyTimeout(QueueError):
    pass


class UnsupportedMediaType(QueueError):
    """An API request whose body is not declared JSON (what a cross-site form or fetch can send)."""


class HostNotAllowed(QueueError):
    """A Host header outside the allow-list (a DNS-rebound page names the attacker's host)."""


_EXCEPTION_OF_CODE: dict[ScriptCode, type[QueueError]] = {
    ScriptCode.JOB_NOT_FOUND: JobNotFound,
    ScriptCode.LEASE_LOST: LeaseLost,
    ScriptCode.JOB_ACTIVE: JobActive,
    ScriptCode.NO_SESSION: NoSession,
    ScriptCode.SCHEDULE_NOT_FOUND: ScheduleNotFound,
    ScriptCode.NOT_DELAYED: NotDelayed,
    ScriptCode.WORKER_OWNED: WorkerOwned,
    ScriptCode.TOO_MANY_QUEUES: TooManyQueues,
    ScriptCode.JOB_EXISTS: JobExists,
}

_DETAIL_OF_CODE: dict[ScriptCode, str] = {
    ScriptCode.JOB_NOT_FOUND: "no such job in this queue",
    ScriptCode.LEASE_LOST: "this lease id is not the job's current, unexpired lease",
    ScriptCode.JOB_ACTIVE: "the job is leased; this is not allowed while it is active",
    ScriptCode.NO_SESSION: "the worker has no live session in this queue",
    ScriptCode.SCHEDULE_NOT_FOUND: "no such schedule in this queue",
    ScriptCode.NOT_DELAYED: "the job is not delayed (only a delayed job can be promoted)",
    ScriptCode.WORKER_OWNED: "this worker name belongs to another token while its leases or session last",
    ScriptCode.TOO_MANY_QUEUES: "the service holds EMQ_MAX_QUEUES queues already; delete one to make "
    "room for a new queue",
    ScriptCode.JOB_EXISTS: "a job with this id exists and is not this node of the flow",
}


def raise_for_code(code: int, job_id: str) -> None:  # job_id: the job's, or what the code is about
    """Raise the domain exception of a negative script code; do nothing for success codes."""
    if code < 0:
        script_code = ScriptCode(code)
        raise _EXCEPTION_OF_CODE[script_code](f"{_DETAIL_OF_CODE[script_code]}: {job_id}")


def problem_type(code: str) -> str:
    """The URI that names a problem type in problem details (RFC 9457 "type")."""
    return f"https://echomq.dev/problems/{code}"


def problem_code_of(code: int) -> str:
    """The API's error code for a per-item failure in a batch answer (e.g. ack many)."""
    return PROBLEMS[_EXCEPTION_OF_CODE[ScriptCode(code)]][1]


# exception -> (HTTP status, problem code, title)
PROBLEMS: dict[type[QueueError], tuple[int, str, str]] = {
    InvalidRequest: (400, "invalid_request", "Invalid request"),
    JobNotFound: (404, "job_not_found", "Job not found"),
    LeaseLost: (409, "lease_lost", "Lease lost"),
    JobActive: (409, "job_active", "Job is active"),
    NoSession: (409, "no_session", "No session"),
    ScheduleNotFound: (404, "schedule_not_found", "Schedule not found"),
    NotDelayed: (409, "not_delayed", "Job is not delayed"),
    WorkerOwned: (403, "forbidden", "Forbidden"),
    TooManyQueues: (409, "too_many_queues", "Too many queues"),
    JobExists: (409, "job_exists", "Job exists"),
    BodyTimeout: (408, "request_timeout", "Request body too slow"),
    UnsupportedMediaType: (415, "unsupported_media_type", "Unsupported media type"),
    HostNotAllowed: (421, "misdirected_request", "Host not allowed"),
    BackendUnavailable: (503, "backend_unavailable", "Backend unavailable"),
}
