"""What each API call sends and how its answer is read, shared by Client and AsyncClient.

Every public method of both clients builds an ``Op`` here and hands it to its transport, so the
two clients cannot drift apart. ``Op.idempotent`` says whether repeating the call after an
ambiguous failure (a 503, a dropped connection) is safe.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar, Union
from urllib.parse import quote

import msgspec

from echomq import models as m
from echomq._http import Answer
from echomq.errors import APIError, BackendUnavailable, ConnectionFailed, TooManyRequests, error_for

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT_S = 30.0
USER_AGENT = "echomq-client/0.1.0"

_encoder = msgspec.json.Encoder()


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def default_url(url: Optional[str]) -> str:
    """The base URL: ``url``, else $EMQ_URL, else the default; without a scheme (``host:port``,
    ``localhost:8080``) it is plain http, as curl reads it."""
    found = (url or os.environ.get("EMQ_URL") or DEFAULT_URL).strip().rstrip("/")
    return found if _SCHEME.match(found) else "http://" + found


def default_token(token: Optional[str]) -> Optional[str]:
    return token if token is not None else (os.environ.get("EMQ_TOKEN") or None)


def headers(token: Optional[str]) -> dict[str, str]:
    found = {"user-agent": USER_AGENT, "accept": "application/json"}
    if token:
        found["authorization"] = f"Bearer {token}"
    return found


@dataclass(frozen=True)
class Op(Generic[T]):
    method: str
    path: str
    read: Callable[[Answer], T]
    idempotent: bool
    body: Optional[bytes] = None
    params: Optional[dict[str, Any]] = None
    headers: Optional[dict[str, str]] = None
    long_poll_s: float = 0.0  # added to the read timeout: the service may hold the answer this long


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of calls that are safe to repeat: GETs, enqueue with a client-chosen id,
    heartbeat, ack with the same lease, pause/resume... on 503, 429 and lost connections.
    Any call is retried when the connection could not even be opened (nothing was sent) or
    on 429 (the service did nothing). Delays grow exponentially with full jitter; a
    ``Retry-After`` from the service is honoured (up to ``max_delay_s``)."""

    retries: int = 4
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0

    def delay(self, attempt: int, error: Exception) -> float:
        backoff = random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))
        hinted = getattr(error, "retry_after_s", None)
        if hinted:
            return min(self.max_delay_s, max(backoff, hinted))
        return backoff

    def should_retry(self, op: Op[Any], attempt: int, error: Exception) -> bool:
        if attempt >= self.retries:
            return False
        if isinstance(error, TooManyRequests) or (isinstance(error, ConnectionFailed) and not error.sent):
            return True  # the request was not processed
        if isinstance(error, (ConnectionFailed, BackendUnavailable)):
            return op.idempotent
        return False


NO_RETRIES = RetryPolicy(retries=0)


# --- reading answers ---------------------------------------------------------------------------


def raise_for_problem(response: Answer) -> None:
    if response.status < 400:
        return
    problem: Optional[dict[str, Any]] = None
    try:
        decoded = msgspec.json.decode(response.content)
        if isinstance(decoded, dict):
            problem = decoded
    except msgspec.DecodeError:
        problem = {"detail": response.text[:500]}
    retry_after: Optional[float] = None
    raw = response.headers.get("retry-after")
    if raw:
        try:
            retry_after = float(raw)
        except ValueError:
            retry_after = None
    raise error_for(response.status, problem, retry_after)


def reader(kind: type[T]) -> Callable[[Answer], T]:
    decoder = msgspec.json.Decoder(kind)

    def read(response: Answer) -> T:
        raise_for_problem(response)
        try:
            return decoder.decode(response.content)
        except msgspec.DecodeError as error:
            raise APIError(
                response.status, "unexpected_response", "Unexpected response", str(error)
            ) from error

    return read


def _read_nothing(response: Answer) -> None:
    raise_for_problem(response)


def _read_text(response: Answer) -> str:
    raise_for_problem(response)
    return response.text


def _read_json(response: Answer) -> Any:
    raise_for_problem(response)
    return msgspec.json.decode(response.content)


def _read_ok(response: Answer) -> bool:
    return response.status == 200


def _field(kind: type[Any], name: str) -> Callable[[Answer], Any]:
    read = reader(kind)
    return lambda response: getattr(read(response), name)


_read_enqueued = reader(m.Enqueued)
_read_many = _field(m._EnqueueMany, "jobs")
_read_leased = _field(m._Leased, "jobs")
_read_lease_answer = reader(m.LeaseAnswer)
_read_settings = reader(m.QueueSettings)
_read_heartbeat = reader(m.Heartbeat)
_read_heartbeat_many = _field(m._HeartbeatMany, "results")
_read_acked = reader(m.Acked)
_read_ack_many = _field(m._AckMany, "results")
_read_acked_many = reader(m.AckedMany)
_read_failed = reader(m.Failed)
_read_released = reader(m.Released)
_read_job = reader(m.Job)
_read_queue_page = reader(m.QueuePage)
_read_queue = reader(m.QueueInfo)
_read_ledger = _field(m._Ledger, "jobs")
_read_workers = _field(m._Workers, "workers")
_read_failed_page = reader(m.FailedPage)
_read_job_page = reader(m.JobPage)
_read_redriven = _field(m._Redriven, "retried")
_read_worker_released = _field(m._WorkerReleased, "released")
_read_session = reader(m.Session)
_read_quieted = reader(m.Quieted)
_read_paused = reader(m.Paused)
_read_group_limit = reader(m.GroupLimit)
_read_group_page = reader(m.GroupPage)
_read_cancelled = reader(m.Cancelled)
_read_promoted = reader(m.Promoted)
_read_flow = _field(m._Flow, "jobs")
_read_children = reader(m.ChildPage)
_read_history = _field(m._History, "minutes")
_read_schedule = reader(m.Schedule)
_read_schedules = _field(m._Schedules, "schedules")


# --- building requests ---------------------------------------------------------------------------


def _seg(value: str) -> str:
    return quote(value, safe="")


def _q(queue: str) -> str:
    return f"/v1/queues/{_seg(queue)}"


def _job(queue: str, job_id: str) -> str:
    return f"{_q(queue)}/jobs/{_seg(job_id)}"


def _body_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that were given (None and UNSET mean: let the service decide)."""
    return {k: v for k, v in fields.items() if v is not None and v is not msgspec.UNSET}


def _body(fields: Mapping[str, Any]) -> bytes:
    return _encoder.encode(_body_fields(fields))


def _trace(traceparent: Optional[str]) -> Optional[dict[str, str]]:
    return {"traceparent": traceparent} if traceparent else None


def _new_job(job: Union[m.NewJob, Mapping[str, Any]]) -> m.NewJob:
    if isinstance(job, m.NewJob):
        return job
    return msgspec.convert(dict(job), m.NewJob)


def _flow_node(node: Union[m.FlowNode, Mapping[str, Any]]) -> m.FlowNode:
    if isinstance(node, m.FlowNode):
        return node
    return msgspec.convert(dict(node), m.FlowNode)


def _every_id_given(node: m.FlowNode) -> bool:
    return node.id is not None and all(_every_id_given(child) for child in node.children or [])


def create_flow(job: Union[m.FlowNode, Mapping[str, Any]]) -> Op[list[m.FlowJob]]:
    root = _flow_node(job)
    # Repeated only when every node has its id: then the service answers a repeat as the first.
    return Op(
        "POST", "/v1/flows", _read_flow, idempotent=_every_id_given(root), body=_encoder.encode({"job": root})
    )


def _ack_item(item: Union[m.AckItem, Mapping[str, Any]]) -> m.AckItem:
    if isinstance(item, m.AckItem):
        return item
    return msgspec.convert(dict(item), m.AckItem)


def _heartbeat_item(item: Union[m.HeartbeatItem, Mapping[str, Any]]) -> m.HeartbeatItem:
    if isinstance(item, m.HeartbeatItem):
        return item
    return msgspec.convert(dict(item), m.HeartbeatItem)


def _lease_next(lease_next: Optional[Union[m.LeaseNext, Mapping[str, Any]]]) -> Optional[m.LeaseNext]:
    if lease_next is None or isinstance(lease_next, m.LeaseNext):
        return lease_next
    return msgspec.convert(dict(lease_next), m.LeaseNext)


def _with_lease_next(fields: dict[str, Any], lease_next: Optional[m.LeaseNext]) -> tuple[bytes, bool, float]:
    """An ack's body with its lease_next; whether the call is safe to repeat (the ack is; the
    lease only with a request_id, as a lease call); how long the service may hold the answer."""
    if lease_next is None:
        return _encoder.encode(fields), True, 0.0
    body = _encoder.encode({**fields, "lease_next": lease_next})
    return body, lease_next.request_id is not None, (lease_next.wait_ms or 0) / 1000


def enqueue(
    queue: str,
    payload: Any,
    *,
    id: Optional[str],
    name: Optional[str],
    priority: Optional[int],
    delay_ms: Optional[int],
    max_attempts: Optional[int],
    backoff: Optional[m.Backoff],
    traceparent: Optional[str],
    group: Optional[str] = None,
) -> Op[m.Enqueued]:
    job = m.NewJob(
        payload=payload,
        id=id,
        name=name,
        priority=priority,
        delay_ms=delay_ms,
        max_attempts=max_attempts,
        backoff=backoff,
        group=group,
    )
    return Op(
        "POST",
        f"{_q(queue)}/jobs",
        _read_enqueued,
        idempotent=id is not None,
        body=_encoder.encode(job),
        headers=_trace(traceparent),
    )


def enqueue_many(
    queue: str, jobs: Iterable[Union[m.NewJob, Mapping[str, Any]]], traceparent: Optional[str]
) -> Op[list[m.Enqueued]]:
    items = [_new_job(job) for job in jobs]
    return Op(
        "POST",
        f"{_q(queue)}/enqueue",
        _read_many,
        idempotent=all(item.id is not None for item in items),
        body=_encoder.encode({"jobs": items}),
        headers=_trace(traceparent),
    )


def lease(
    queue: str,
    worker: str,
    *,
    lease_ms: Optional[int],
    max_jobs: Optional[int],
    wait_ms: Optional[int],
    request_id: Optional[str] = None,
) -> Op[list[m.LeasedJob]]:
    # Idempotent only with a request_id: a lease repeated without one, after its first answer
    # was lost, would leave those jobs held by nobody until their lease expires; with one, the
    # repeat answers the jobs the first leased.
    fields = {"worker": worker, "lease_ms": lease_ms, "max_jobs": max_jobs, "wait_ms": wait_ms}
    return Op(
        "POST",
        f"{_q(queue)}/lease",
        _read_leased,
        idempotent=request_id is not None,
        body=_body({**fields, "request_id": request_id}),
        long_poll_s=(wait_ms or 0) / 1000,
    )


def lease_answer(
    queue: str,
    worker: str,
    *,
    lease_ms: Optional[int],
    max_jobs: Optional[int],
    wait_ms: Optional[int],
    request_id: Optional[str] = None,
) -> Op[m.LeaseAnswer]:
    """lease, answered whole: the jobs and the rate limit's retry_after_ms (the Worker's)."""
    op = lease(queue, worker, lease_ms=lease_ms, max_jobs=max_jobs, wait_ms=wait_ms, request_id=request_id)
    return Op(op.method, op.path, _read_lease_answer, op.idempotent, op.body, long_poll_s=op.long_poll_s)


def heartbeat(
    queue: str, job_id: str, lease_id: str, lease_ms: Optional[int], progress: Any = msgspec.UNSET
) -> Op[m.Heartbeat]:
    fields = _body_fields({"lease_id": lease_id, "lease_ms": lease_ms})
    if progress is not msgspec.UNSET:  # null is a progress too: only UNSET leaves it out
        fields["progress"] = progress
    return Op(
        "POST",
        f"{_job(queue, job_id)}/heartbeat",
        _read_heartbeat,
        idempotent=True,
        body=_encoder.encode(fields),
    )


def heartbeat_many(
    queue: str, leases: Iterable[Union[m.HeartbeatItem, Mapping[str, Any]]]
) -> Op[list[m.HeartbeatOutcome]]:
    return Op(
        "POST",
        f"{_q(queue)}/heartbeat",
        _read_heartbeat_many,
        idempotent=True,
        body=_encoder.encode({"leases": [_heartbeat_item(item) for item in leases]}),
    )


def ack(
    queue: str,
    job_id: str,
    lease_id: str,
    result: Any,
    lease_next: Optional[Union[m.LeaseNext, Mapping[str, Any]]],
) -> Op[m.Acked]:
    # The same ack (same lease) repeated after it succeeded answers 200 again.
    fields = {"lease_id": lease_id} if result is msgspec.UNSET else {"lease_id": lease_id, "result": result}
    body, idempotent, long_poll_s = _with_lease_next(fields, _lease_next(lease_next))
    return Op(
        "POST",
        f"{_job(queue, job_id)}/ack",
        _read_acked,
        idempotent=idempotent,
        body=body,
        long_poll_s=long_poll_s,
    )


def ack_many(queue: str, acks: Iterable[Union[m.AckItem, Mapping[str, Any]]]) -> Op[list[m.AckOutcome]]:
    return Op(
        "POST",
        f"{_q(queue)}/ack",
        _read_ack_many,
        idempotent=True,
        body=_encoder.encode({"acks": [_ack_item(item) for item in acks]}),
    )


def ack_many_and_lease(
    queue: str,
    acks: Iterable[Union[m.AckItem, Mapping[str, Any]]],
    lease_next: Union[m.LeaseNext, Mapping[str, Any]],
) -> Op[m.AckedMany]:
    fields = {"acks": [_ack_item(item) for item in acks]}
    body, idempotent, long_poll_s = _with_lease_next(fields, _lease_next(lease_next))
    return Op(
        "POST",
        f"{_q(queue)}/ack",
        _read_acked_many,
        idempotent=idempotent,
        body=body,
        long_poll_s=long_poll_s,
    )


def fail(
    queue: str,
    job_id: str,
    lease_id: str,
    error: str,
    *,
    retry: Optional[bool],
    retry_after_ms: Optional[int],
) -> Op[m.Failed]:
    # Not repeated on an ambiguous failure: once it succeeded, the same call answers lease_lost.
    return Op(
        "POST",
        f"{_job(queue, job_id)}/fail",
        _read_failed,
        idempotent=False,
        body=_body({"lease_id": lease_id, "error": error, "retry": retry, "retry_after_ms": retry_after_ms}),
    )


def release(queue: str, job_id: str, lease_id: str) -> Op[m.Released]:
    return Op(
        "POST",
        f"{_job(queue, job_id)}/release",
        _read_released,
        idempotent=False,
        body=_body({"lease_id": lease_id}),
    )


def get_job(queue: str, job_id: str, wait_ms: Optional[int] = None) -> Op[m.Job]:
    if not wait_ms:
        return Op("GET", _job(queue, job_id), _read_job, idempotent=True)
    return Op(
        "GET",
        _job(queue, job_id),
        _read_job,
        idempotent=True,
        params={"wait_ms": wait_ms},
        long_poll_s=wait_ms / 1000,
    )


OUTCOMES = frozenset({"completed", "failed", "cancelled"})  # the states a wait ends on
MAX_WAIT_MS = 60_000  # the service's limit per call: longer waits take several


def wait_step_ms(deadline: float, now: float) -> int:
    """The wait_ms of the next outcome-wait call toward ``deadline`` (monotonic seconds)."""
    return max(0, min(MAX_WAIT_MS, math.ceil((deadline - now) * 1000)))


def cancel(queue: str, job_id: str, reason: Optional[str]) -> Op[m.Cancelled]:
    # Cancelling again changes nothing and answers the state: safe to repeat.
    return Op(
        "POST",
        f"{_job(queue, job_id)}/cancel",
        _read_cancelled,
        idempotent=True,
        body=_body({"reason": reason}),
    )


def promote(queue: str, job_id: str) -> Op[m.Promoted]:
    # Not repeated: a second promote of a job promoted by the first answers not_delayed.
    return Op("POST", f"{_job(queue, job_id)}/promote", _read_promoted, idempotent=False)


def history(queue: str, minutes: Optional[int]) -> Op[list[m.HistoryMinute]]:
    params = None if minutes is None else {"minutes": minutes}
    return Op("GET", f"{_q(queue)}/history", _read_history, idempotent=True, params=params)


def delete_job(queue: str, job_id: str) -> Op[None]:
    # Repeated after it succeeded it would answer job_not_found: not retried.
    return Op("DELETE", _job(queue, job_id), _read_nothing, idempotent=False)


def delete_queue(queue: str, force: bool) -> Op[None]:
    # Deleting a queue that is gone already answers 204 too: safe to repeat.
    params = {"force": "true"} if force else None
    return Op("DELETE", _q(queue), _read_nothing, idempotent=True, params=params)


def list_queues(*, limit: Optional[int], cursor: Optional[str], prefix: Optional[str]) -> Op[m.QueuePage]:
    params = {k: v for k, v in {"limit": limit, "cursor": cursor, "prefix": prefix}.items() if v is not None}
    return Op("GET", "/v1/queues", _read_queue_page, idempotent=True, params=params or None)


def get_queue(queue: str) -> Op[m.QueueInfo]:
    return Op("GET", _q(queue), _read_queue, idempotent=True)


def ledger(
    queue: str, *, worker: Optional[str], limit: Optional[int], offset: Optional[int]
) -> Op[list[m.LedgerEntry]]:
    params = {k: v for k, v in {"worker": worker, "limit": limit, "offset": offset}.items() if v is not None}
    return Op("GET", f"{_q(queue)}/active", _read_ledger, idempotent=True, params=params or None)


def workers(queue: str) -> Op[list[m.WorkerHoldings]]:
    return Op("GET", f"{_q(queue)}/workers", _read_workers, idempotent=True)


def failed(queue: str, *, limit: Optional[int], offset: Optional[int]) -> Op[m.FailedPage]:
    params = {k: v for k, v in {"limit": limit, "offset": offset}.items() if v is not None}
    return Op("GET", f"{_q(queue)}/failed", _read_failed_page, idempotent=True, params=params or None)


def list_jobs(queue: str, state: str, *, limit: Optional[int], cursor: Optional[str]) -> Op[m.JobPage]:
    params = {k: v for k, v in {"state": state, "limit": limit, "cursor": cursor}.items() if v is not None}
    return Op("GET", f"{_q(queue)}/jobs", _read_job_page, idempotent=True, params=params)


def children(queue: str, job_id: str, *, limit: Optional[int], cursor: Optional[str]) -> Op[m.ChildPage]:
    params = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
    return Op("GET", f"{_job(queue, job_id)}/children", _read_children, idempotent=True, params=params)


def retry_failed(queue: str, ids: Optional[Iterable[str]]) -> Op[list[str]]:
    listed = None if ids is None else list(ids)
    return Op(
        "POST",
        f"{_q(queue)}/failed/retry",
        _read_redriven,
        # Listed ids: a repeat retries nothing new. "All": a repeat could redrive jobs that
        # failed in between, which the caller did not ask for.
        idempotent=listed is not None,
        body=_body({"ids": listed}),
    )


def release_worker(queue: str, worker: str) -> Op[list[str]]:
    return Op("POST", f"{_q(queue)}/workers/{_seg(worker)}/release", _read_worker_released, idempotent=False)


def _worker(queue: str, worker: str) -> str:
    return f"{_q(queue)}/workers/{_seg(worker)}"


def session_heartbeat(
    queue: str, worker: str, ttl_ms: Optional[int], info: Optional[Mapping[str, Any]]
) -> Op[m.Session]:
    # Renewing a session again is harmless: safe to repeat.
    return Op(
        "POST",
        f"{_worker(queue, worker)}/heartbeat",
        _read_session,
        idempotent=True,
        body=_body({"ttl_ms": ttl_ms, "info": None if info is None else dict(info)}),
    )


def quiet(queue: str, worker: str) -> Op[m.Quieted]:
    return Op("POST", f"{_worker(queue, worker)}/quiet", _read_quieted, idempotent=True)


def end_session(queue: str, worker: str) -> Op[list[str]]:
    # A repeat gives back nothing more (the first call's answer would be lost): not retried.
    return Op("DELETE", _worker(queue, worker), _read_worker_released, idempotent=False)


def set_paused(queue: str, paused: bool) -> Op[m.Paused]:
    action = "pause" if paused else "resume"
    return Op("POST", f"{_q(queue)}/{action}", _read_paused, idempotent=True)


def get_settings(queue: str) -> Op[m.QueueSettings]:
    return Op("GET", f"{_q(queue)}/settings", _read_settings, idempotent=True)


RateLimitIn = Union[m.RateLimit, Mapping[str, int], tuple[int, int], None]


def put_settings(
    queue: str,
    *,
    max_in_flight: Optional[int],
    group_max_in_flight: Optional[int],
    rate_limit: RateLimitIn,
    max_stalls: Optional[int],
    events: bool,
    completed_retention_s: Optional[int],
    failed_retention_s: Optional[int],
) -> Op[m.QueueSettings]:
    # The whole object: a field sent as null takes its default. Repeating it changes nothing.
    if isinstance(rate_limit, tuple):
        rate_limit = m.RateLimit(max=rate_limit[0], per_ms=rate_limit[1])
    elif rate_limit is not None and not isinstance(rate_limit, m.RateLimit):
        rate_limit = msgspec.convert(dict(rate_limit), m.RateLimit)
    settings = m.QueueSettings(
        max_in_flight=max_in_flight,
        group_max_in_flight=group_max_in_flight,
        rate_limit=rate_limit,
        max_stalls=max_stalls,
        events=events,
        completed_retention_s=completed_retention_s,
        failed_retention_s=failed_retention_s,
    )
    body = _encoder.encode(settings)
    return Op("PUT", f"{_q(queue)}/settings", _read_settings, idempotent=True, body=body)


def set_group_limit(queue: str, group: str, max_in_flight: Optional[int]) -> Op[m.GroupLimit]:
    # Setting the same cap again changes nothing: safe to repeat.
    return Op(
        "PUT",
        f"{_q(queue)}/groups/{_seg(group)}",
        _read_group_limit,
        idempotent=True,
        body=_encoder.encode({"max_in_flight": max_in_flight}),
    )


def list_groups(queue: str, *, limit: Optional[int], cursor: Optional[str]) -> Op[m.GroupPage]:
    params = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
    return Op("GET", f"{_q(queue)}/groups", _read_group_page, idempotent=True, params=params or None)


def _schedule(queue: str, schedule: str) -> str:
    return f"{_q(queue)}/schedules/{_seg(schedule)}"


def _schedule_job(job: Union[m.ScheduleJob, Mapping[str, Any]]) -> m.ScheduleJob:
    if isinstance(job, m.ScheduleJob):
        return job
    return msgspec.convert(dict(job), m.ScheduleJob)


def put_schedule(
    queue: str,
    schedule: str,
    job: Union[m.ScheduleJob, Mapping[str, Any]],
    *,
    cron: Optional[str],
    every_ms: Optional[int],
    timezone: Optional[str],
    start_at: Optional[int],
    end_at: Optional[int],
    limit: Optional[int],
    overlap: Optional[m.Overlap],
    paused: Optional[bool],
) -> Op[m.Schedule]:
    # The whole schedule: a field left out takes its default. Repeating the same PUT keeps the
    # next run and the counts (the service compares the timing), so it is safe to retry.
    fields = {
        "job": _schedule_job(job),
        "cron": cron,
        "every_ms": every_ms,
        "timezone": timezone,
        "start_at": start_at,
        "end_at": end_at,
        "limit": limit,
        "overlap": overlap,
        "paused": paused,
    }
    return Op("PUT", _schedule(queue, schedule), _read_schedule, idempotent=True, body=_body(fields))


def get_schedule(queue: str, schedule: str) -> Op[m.Schedule]:
    return Op("GET", _schedule(queue, schedule), _read_schedule, idempotent=True)


def list_schedules(queue: str) -> Op[list[m.Schedule]]:
    return Op("GET", f"{_q(queue)}/schedules", _read_schedules, idempotent=True)


def delete_schedule(queue: str, schedule: str) -> Op[None]:
    # Repeated after it succeeded it would answer schedule_not_found: not retried.
    return Op("DELETE", _schedule(queue, schedule), _read_nothing, idempotent=False)


def trigger_schedule(queue: str, schedule: str) -> Op[m.Enqueued]:
    # Each call makes one more job: not retried.
    return Op("POST", f"{_schedule(queue, schedule)}/trigger", _read_enqueued, idempotent=False)


def healthz() -> Op[bool]:
    return Op("GET", "/healthz", _read_ok, idempotent=True)


def readyz() -> Op[bool]:
    return Op("GET", "/readyz", _read_ok, idempotent=True)


def metrics() -> Op[str]:
    return Op("GET", "/metrics", _read_text, idempotent=True)


def openapi() -> Op[Any]:
    return Op("GET", "/openapi.json", _read_json, idempotent=True)
