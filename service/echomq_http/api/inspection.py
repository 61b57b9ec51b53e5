"""The Inspect operations: queues and their counts, the event feed, history, the
in-flight ledger, workers, failed and listed jobs, settings and groups."""

from __future__ import annotations

import asyncio
from typing import Any, get_args

from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.response import Stream

from echomq_http.api.auth import Action
from echomq_http.api.http import (
    _DIGITS,
    INSPECT,
    JSON,
    Q,
    checked_name,
    events_of,
    grant_of,
    json_response,
    json_with_streamed_list,
    operation_opt,
    path_queue,
    query_int,
    query_name,
    queues_of,
    sse_stream,
)
from echomq_http.api.schemas.common import JobState
from echomq_http.api.schemas.inspection import (
    FailedPage,
    GroupPage,
    HistoryView,
    JobPage,
    LedgerView,
    QueueList,
    QueueView,
    StreamEvent,
    WorkersView,
)
from echomq_http.api.schemas.operations import QueueSettings
from echomq_http.core import limits
from echomq_http.core.errors import InvalidRequest
from echomq_http.runtime.event_feeds import EVENT_TYPES, event_stream

_EVENT_TYPE = "(" + "|".join(sorted(EVENT_TYPES)) + ")"


EVENT_TYPES_PATTERN = f"^{_EVENT_TYPE}(,{_EVENT_TYPE})*$"


EVENTS_QUERY = (
    (
        "after",
        "integer",
        "resume after this event id (0: from the oldest kept event); the Last-Event-ID header, when "
        "sent, takes its place. Without either, only new events are sent",
        2**53,
    ),
    (
        "types",
        {"type": "string", "pattern": EVENT_TYPES_PATTERN},
        "only events of these types, comma-separated (e.g. completed,failed)",
        None,
    ),
    ("job", "string", "only the events of this job", None),
)


def events_query(request: Request[Any, Any, State]) -> tuple[int | None, frozenset[str] | None, str | None]:
    after: int | None = None
    last_event_id = request.headers.get("last-event-id")
    if last_event_id is not None:
        if not _DIGITS.fullmatch(last_event_id.strip()):
            raise InvalidRequest(f"Last-Event-ID must be an event id (a whole number), got {last_event_id!r}")
        after = int(last_event_id)
    elif "after" in request.query_params:
        after = query_int(request, "after", 0, 0, 2**53)
    types: frozenset[str] | None = None
    raw_types = request.query_params.get("types")
    if raw_types is not None:
        types = frozenset(raw_types.split(","))
        unknown = sorted(types - EVENT_TYPES)
        if unknown or not raw_types:
            raise InvalidRequest(f"unknown event types {unknown}: known are {sorted(EVENT_TYPES)}")
    job = request.query_params.get("job")
    if job is not None:
        checked_name(job, "job")
    return after, types, job


@get(
    Q + "/events",
    operation_id="events",
    summary="Follow the queue's events (Server-Sent Events)",
    description="A text/event-stream of what happens to the queue's jobs, in the order it happens: "
    "enqueued, leased, progress, completed, retrying, failed (dead-lettered), released, reclaimed, "
    "cancel_requested, cancelled, promoted, deleted, and the queue's paused and resumed. Each event is "
    "written by the same script call as the change it reports, so none is lost or out of order. "
    "Event ids are whole numbers that grow within the queue: resume after one with the "
    "Last-Event-ID header (browsers' EventSource sends it by itself) or ?after=; ?after=0 starts "
    "from the oldest kept event (the last EMQ_EVENTS_MAXLEN, at least). A resume from an id that "
    "is no longer kept first sends one resync event: read the state again. A comment line comes "
    "at least every 15 s on an idle stream. A subscriber that falls too far behind is "
    "disconnected and resumes by id. No event carries a payload, a result or a lease id. "
    "Subscribers hold no Redis connection each; each counts toward EMQ_MAX_WAITERS (429 past it).",
    opt=operation_opt(
        Action.READ,
        INSPECT,
        None,
        {
            200: {
                "media": "text/event-stream",
                "schema": {
                    "type": "object",
                    "description": "one event of the stream (SSE fields); comment lines are keep-alives",
                    "properties": {
                        "id": {"type": "string", "description": "the event's id, a whole number"},
                        "event": {"type": "string", "description": "the event's type"},
                        "data": {
                            "type": "string",
                            "description": "a StreamEvent as JSON",
                            "contentMediaType": "application/json",
                            "contentSchema": {"$ref": "#/components/schemas/StreamEvent"},
                        },
                        "retry": {
                            "type": "integer",
                            "description": "sent once: reconnect after this many ms",
                        },
                    },
                },
                "description": "The stream: every event's data is a StreamEvent",
                "struct": StreamEvent,
            }
        },
        ("too_many_requests",),
        EVENTS_QUERY,
    ),
)
async def events(request: Request[Any, Any, State]) -> Stream:
    return await sse_response(request, path_queue(request))


async def sse_response(request: Request[Any, Any, State], queue: str) -> Stream:
    """The queue's event stream as the request asks for it (from an id, some types, one job):
    the API's feed, and the dashboard's (which signs in by cookie)."""
    after, types, job = events_query(request)
    return await sse_stream(event_stream(events_of(request), queue, after, types, job))


HISTORY_QUERY = (
    (
        "minutes",
        "integer",
        f"this many minutes back, the current one included (default {limits.DEFAULT_HISTORY_MINUTES})",
        limits.MAX_HISTORY_MINUTES,
    ),
)


@get(
    Q + "/history",
    operation_id="history",
    summary="Per-minute counts of the last hours",
    description="For each of the last `minutes` minutes, oldest first and the current (partial) "
    "one last: how many jobs were enqueued, completed, dead-lettered and reclaimed (lease "
    "expired). Counted in Redis by the scripts themselves, so every replica answers the same; "
    "kept 24 hours.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: HistoryView}, (), HISTORY_QUERY),
)
async def history(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    minutes = query_int(request, "minutes", limits.DEFAULT_HISTORY_MINUTES, 1, limits.MAX_HISTORY_MINUTES)
    return json_response(HistoryView(minutes=await queues_of(request).history(queue, minutes)))


QUEUES_QUERY = (
    ("limit", "integer", f"at most this many queues (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "string", "the next_cursor of the previous page; none for the first page", None),
    ("prefix", "string", "only the queues whose name starts with this", None),
)


@get(
    "/v1/queues",
    operation_id="listQueues",
    summary="List queues with their counts, page by page",
    description="Lists the known queues (from a queue's first enqueue, pause, resume, settings or "
    "schedule until it is deleted) by name, each with its pause state and counts, a page at a "
    f"time: limit of them (default {limits.DEFAULT_PAGE}, at most {limits.MAX_PAGE}); pass the "
    "answer's next_cursor as cursor for the next page, until it is null. Following the cursors "
    "lists every queue that stays known once. A token limited to queue patterns sees only the "
    "queues it covers. The service holds at most EMQ_MAX_QUEUES queues.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: QueueList}, (), QUEUES_QUERY),
)
async def list_queues(request: Request[Any, Any, State]) -> Response[bytes]:
    queues, grant = queues_of(request), grant_of(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    cursor, prefix = query_name(request, "cursor"), query_name(request, "prefix")
    names, next_cursor = await queues.queue_page(
        cursor, limit, prefix or "", None if grant is None else grant.covers
    )
    views = await asyncio.gather(*(queues.queue_view(name) for name in names))
    return json_response(QueueList(queues=list(views), next_cursor=next_cursor))


@get(
    Q,
    operation_id="getQueue",
    summary="A queue's counts and pause state",
    description="A queue's pause state and its jobs in each state, read as one consistent "
    "snapshot. Any valid name answers: a queue never used reads as empty and not paused.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: QueueView}),
)
async def get_queue(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(await queues_of(request).queue_view(queue))


LEDGER_QUERY = (
    ("worker", "string", "only the jobs this worker holds", None),
    (
        "limit",
        "integer",
        f"at most this many jobs (default {limits.DEFAULT_LEDGER_PAGE})",
        limits.MAX_LEDGER_PAGE,
    ),
    ("offset", "integer", "skip this many of the oldest leases", limits.MAX_OFFSET),
)


@get(
    Q + "/active",
    operation_id="getLedger",
    summary="The in-flight ledger, oldest lease first",
    description="Every leased job of the queue with its worker, attempt and lease times, oldest "
    "lease first; a lease that ends in the past has expired and the sweep is about to reclaim "
    "its job. Filter by worker; page with limit and offset.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: LedgerView}, (), LEDGER_QUERY),
)
async def get_ledger(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    worker = request.query_params.get("worker")
    if worker is not None:
        checked_name(worker, "worker")
    limit = query_int(request, "limit", limits.DEFAULT_LEDGER_PAGE, 1, limits.MAX_LEDGER_PAGE)
    offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
    return json_response(LedgerView(jobs=await queues_of(request).ledger(queue, worker, offset, limit)))


@get(
    Q + "/workers",
    operation_id="listWorkers",
    summary="Who holds what",
    description="Every worker holding jobs of the queue or with a live session, by name, with the "
    "ids it holds and its session (state, times and info), or null.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: WorkersView}),
)
async def list_workers(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(WorkersView(workers=await queues_of(request).workers(queue)))


FAILED_QUERY = (
    ("limit", "integer", f"at most this many jobs (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("offset", "integer", "skip this many of the most recently failed", limits.MAX_OFFSET),
)


@get(
    Q + "/failed",
    operation_id="listFailed",
    summary="Dead-lettered jobs, most recent first",
    description="A page of the queue's dead letters (jobs whose attempts ran out, or that failed "
    "with retry false), most recently failed first, with their total. The page is streamed; a job "
    "redriven or deleted while it is read is left out.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: FailedPage}, (), FAILED_QUERY),
)
async def list_failed(request: Request[Any, Any, State]) -> Stream:
    queue = path_queue(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
    jobs, total = await queues_of(request).failed_page(queue, offset, limit)
    # Streamed: a page of large jobs is hundreds of MB, encoded here one chunk at a time.
    return Stream(json_with_streamed_list(FailedPage(jobs=[], total=total), jobs), media_type=JSON)


JOB_STATES: tuple[str, ...] = get_args(JobState)


LIST_QUERY = (
    ("state", JOB_STATES, "list the jobs in this state (required)", None),
    ("limit", "integer", f"at most this many jobs (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "cursor", "the next_cursor of the previous page (same state); none for the first page", None),
)


@get(
    Q + "/jobs",
    operation_id="listJobs",
    summary="List the jobs in one state, page by page",
    description="A page of the queue's jobs in one state, in that state's order: waiting in the order "
    "leases take them (highest priority first, then first in line), delayed by due time, active "
    "oldest lease first, completed, failed and cancelled most recently finished first. Pass the "
    "answer's next_cursor as cursor for the next page, until it is null. Following the cursors "
    "lists every job that stays in the state meanwhile exactly once, whatever else happens to the "
    "queue (one that enters or leaves the state may or may not be listed); a page may hold fewer "
    "jobs than limit and still have a next one. A cursor is opaque, and valid only for its state. "
    "The page is streamed; a queue never used lists nothing.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: JobPage}, (), LIST_QUERY),
)
async def list_jobs(request: Request[Any, Any, State]) -> Stream:
    queue = path_queue(request)
    state = request.query_params.get("state")
    if state not in JOB_STATES:
        raise InvalidRequest(f"query parameter state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    cursor = request.query_params.get("cursor")
    jobs, next_cursor = await queues_of(request).list_jobs(queue, state, limit, cursor)
    return Stream(json_with_streamed_list(JobPage(jobs=[], next_cursor=next_cursor), jobs), media_type=JSON)


@get(
    Q + "/settings",
    operation_id="getSettings",
    summary="A queue's settings (flow control, retention, events)",
    description="The queue's settings as they apply now on every replica: max_in_flight, "
    "group_max_in_flight, rate_limit, max_stalls, events, and its own retention times. A queue "
    "never configured (or never used) answers the defaults: no limits, events on, the service's "
    "retention.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: QueueSettings}),
)
async def get_settings(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    return json_response(await queues_of(request).get_settings(queue))


GROUPS_QUERY = (
    ("limit", "integer", f"at most this many groups (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "string", "the next_cursor of the previous page; none for the first page", None),
)


@get(
    Q + "/groups",
    operation_id="listGroups",
    summary="A queue's groups, page by page",
    description="The queue's groups by name, each with its waiting jobs, its jobs in flight and its "
    "cap: every group with waiting jobs, jobs in flight or a cap of its own. Pass the answer's "
    "next_cursor as cursor for the next page, until it is null.",
    opt=operation_opt(Action.READ, INSPECT, None, {200: GroupPage}, (), GROUPS_QUERY),
)
async def list_groups(request: Request[Any, Any, State]) -> Response[bytes]:
    queue = path_queue(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    cursor = request.query_params.get("cursor")
    if cursor is not None:
        checked_name(cursor, "cursor")
    groups, next_cursor = await queues_of(request).groups(queue, cursor, limit)
    return json_response(GroupPage(groups=groups, next_cursor=next_cursor))
