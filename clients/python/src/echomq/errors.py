"""Exceptions: one class per problem ``code`` of the API, all under ``EchoMQError``.

``APIError`` carries the problem details the service sent (status, code, title, detail).
``ConnectionFailed`` means the service could not be reached or did not answer; its message
names the URL, its ``reason`` says why (``connection refused``).
``JobError`` is for handlers: raise it to fail a job with a retry hint.
"""

from __future__ import annotations

from typing import Any, Optional


class EchoMQError(Exception):
    """Base of every error this package raises."""


class ConnectionFailed(EchoMQError):
    """The request did not get an answer (connection refused, reset, timed out). ``sent`` is
    False when it cannot have reached the service (the connection was never opened), so that
    trying it again is safe whatever the call."""

    def __init__(self, message: str, *, sent: bool = True, reason: Optional[str] = None) -> None:
        super().__init__(message)
        self.sent = sent
        self.reason = reason or message  # the cause alone, e.g. "connection refused"


class APIError(EchoMQError):
    """The service answered with an RFC 9457 problem."""

    status: int
    code: str
    title: str
    detail: str
    retry_after_s: Optional[float]

    def __init__(
        self,
        status: int,
        code: str,
        title: str = "",
        detail: str = "",
        *,
        retry_after_s: Optional[float] = None,
        problem: Optional[dict[str, Any]] = None,
    ) -> None:
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.problem = problem or {}
        super().__init__(f"{status} {code}: {detail or title}")


class InvalidRequest(APIError):
    """400 invalid_request: malformed or out-of-range input; nothing was changed."""


class Unauthorized(APIError):
    """401 unauthorized: auth is on and the token is missing or unknown."""


class Forbidden(APIError):
    """403 forbidden: the token lacks the role or the queue, or the worker name belongs to
    another token while its leases or session last."""


class NotFound(APIError):
    """404 not_found: no such path (wrong base URL?)."""


class JobNotFound(APIError):
    """404 job_not_found: no such job in that queue."""


class ScheduleNotFound(APIError):
    """404 schedule_not_found: no such schedule in that queue."""


class LeaseLost(APIError):
    """409 lease_lost: the lease id is not the job's current, unexpired lease. Whatever the
    worker did with the job must not be reported as done: another worker may hold it now."""


class JobActive(APIError):
    """409 job_active: not allowed while the job is leased."""


class NoSession(APIError):
    """409 no_session: the worker has no live session in the queue."""


class NotDelayed(APIError):
    """409 not_delayed: only a delayed job can be promoted; this one is in another state."""


class JobExists(APIError):
    """409 job_exists: a flow node's id names a job that is not that node of this flow (another
    job, or a flow with another tree under this root id); nothing was made."""


class TooManyQueues(APIError):
    """409 too_many_queues: the queue is new and the service holds its most queues already
    (EMQ_MAX_QUEUES); nothing was stored."""


class RequestTimeout(APIError):
    """408 request_timeout: the request body did not arrive in time."""


class PayloadTooLarge(APIError):
    """413 payload_too_large: the body is over the service's limit."""


class TooManyRequests(APIError):
    """429 too_many_requests: too many long polls wait on that replica; see retry_after_s."""


class BackendUnavailable(APIError):
    """503 backend_unavailable: the service cannot reach Redis (or is at its connection
    limit); see retry_after_s."""


ERRORS_BY_CODE: dict[str, type[APIError]] = {
    "invalid_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "job_not_found": JobNotFound,
    "schedule_not_found": ScheduleNotFound,
    "lease_lost": LeaseLost,
    "job_active": JobActive,
    "no_session": NoSession,
    "not_delayed": NotDelayed,
    "job_exists": JobExists,
    "too_many_queues": TooManyQueues,
    "request_timeout": RequestTimeout,
    "payload_too_large": PayloadTooLarge,
    "too_many_requests": TooManyRequests,
    "backend_unavailable": BackendUnavailable,
}

# When a body has no code (a proxy's page, uvicorn's own 503), the status decides.
_ERRORS_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    413: PayloadTooLarge,
    429: TooManyRequests,
    503: BackendUnavailable,
}


def error_for(
    status: int, problem: Optional[dict[str, Any]], retry_after_s: Optional[float] = None
) -> APIError:
    """The exception for an error answer, chosen by the problem's ``code`` (else the status)."""
    problem = problem or {}
    code = str(problem.get("code") or "")
    cls = ERRORS_BY_CODE.get(code) or _ERRORS_BY_STATUS.get(status, APIError)
    return cls(
        status,
        code or f"http_{status}",
        str(problem.get("title") or ""),
        str(problem.get("detail") or ""),
        retry_after_s=retry_after_s,
        problem=problem,
    )


class JobError(Exception):
    """Raise from a handler to fail the job with a hint: ``retry=False`` sends it straight to
    the dead letter; ``retry_after_ms`` sets the delay before the next attempt.

    The job's error is the message alone (``JobError("no recipient")`` reads ``no recipient``):
    the handler chose to fail, so its words say why. ``plain=False`` records the type and the
    traceback as well, as for any other exception (``ValueError: bad value`` and its traceback).
    Any exception works as a failure; the worker reads the same attributes
    (``retry``, ``retry_after_ms``, ``plain``) from any exception that has them.
    """

    def __init__(
        self, message: str, *, retry: bool = True, retry_after_ms: Optional[int] = None, plain: bool = True
    ) -> None:
        super().__init__(message)
        self.retry = retry
        self.retry_after_ms = retry_after_ms
        self.plain = plain  # the job's error is the message alone, without type and traceback
