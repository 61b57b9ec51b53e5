"""The dashboard's pages (GET): the overview, a queue's tabs, the search, a job. Each reads
through JobQueues, as the API's handlers do, and answers HTML (echomq_http.ui.render)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from litestar import Request, get
from litestar.datastructures import State
from litestar.response import Template

from echomq_http.api.auth import Action
from echomq_http.api.http import checked_name, path_queue, query_int, query_name, queues_of, schedules_of
from echomq_http.api.inspection import JOB_STATES
from echomq_http.api.schemas.common import is_name
from echomq_http.api.schemas.jobs import JobView
from echomq_http.core import limits
from echomq_http.core.errors import InvalidRequest, JobNotFound
from echomq_http.core.queue import JobQueues
from echomq_http.core.views import SEARCH_STATES
from echomq_http.ui.access import Viewer, reader_of, viewer_of
from echomq_http.ui.overview import summaries
from echomq_http.ui.render import page
from echomq_http.ui.timeline import job_timeline

UI = "/ui"
QUEUE_PAGE = UI + "/queues/{queue:str}"
LIST_TABS = tuple(state for state in JOB_STATES if state != "active")  # cursor-paged job lists
TABS = (*JOB_STATES, "workers", "schedules", "settings")
LIVE_TABS = frozenset({*JOB_STATES, "workers"})  # the tabs the feed refreshes
DEFAULT_PAGE = 50
# Queues per page of the overview: each costs a few reads (echomq_http.ui.overview), so a page
# answers in a bounded time however many queues there are (live.py follows up to 50 of them).
OVERVIEW_PAGE = 50
MAX_OVERVIEW_PAGE = 200
SEARCH_BUDGET = 1000  # entries one step of the search reads (one script call)
SEARCH_MATCHES = 50  # a step stops early at this many matches
LEASE_SOON_MS = 5000  # a lease this close to its end shows red


def allowed(viewer: Viewer, queue: str) -> dict[str, bool]:
    """What the page offers: only what the viewer's token may do on the queue."""
    return {
        "admin": viewer.may(Action.ADMIN, queue),
        "cancel": viewer.may(Action.CANCEL, queue),
        "enqueue": viewer.may(Action.ENQUEUE, queue),
    }


async def collect(chunks: Any) -> list[JobView]:
    return [job async for jobs in chunks for job in jobs]


@get(UI, include_in_schema=False)
async def overview(request: Request[Any, Any, State]) -> Template:
    viewer = await viewer_of(request)
    queues = queues_of(request)
    limit = query_int(request, "limit", OVERVIEW_PAGE, 1, MAX_OVERVIEW_PAGE)
    cursor, prefix = query_name(request, "cursor"), query_name(request, "prefix")
    names, next_cursor = await queues.queue_page(cursor, limit, prefix or "", viewer.sees)
    rows, now_ms = await asyncio.gather(summaries(queues, names), queues.server_time_ms())
    # The feed follows this page's queues: it takes the same cursor, prefix and limit.
    here = "&".join(
        f"{name}={quote(value)}"
        for name, value in (("limit", str(limit)), ("cursor", cursor), ("prefix", prefix))
        if value is not None
    )
    context = {
        "title": "Queues",
        "viewer": viewer,
        "rows": rows,
        "now_ms": now_ms,
        "feed": f"{UI}/events?{here}",
        "limit": limit,
        "cursor": cursor,
        "prefix": prefix,
        "next_cursor": next_cursor,
    }
    return page(request, "overview.html", context, regions=("queues",))


async def tab_context(
    request: Request[Any, Any, State], queues: JobQueues, queue: str, tab: str
) -> dict[str, Any]:
    """What the tab shows, read through the API's queue operations."""
    if tab in LIST_TABS:
        limit = query_int(request, "limit", DEFAULT_PAGE, 1, limits.MAX_PAGE)
        cursor = request.query_params.get("cursor")
        chunks, next_cursor = await queues.list_jobs(queue, tab, limit, cursor)
        return {"jobs": await collect(chunks), "next_cursor": next_cursor, "limit": limit, "cursor": cursor}
    if tab == "active":
        worker = request.query_params.get("worker") or None
        if worker is not None:
            checked_name(worker, "worker")
        limit = query_int(request, "limit", DEFAULT_PAGE, 1, limits.MAX_PAGE)
        offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
        entries = await queues.ledger(queue, worker, offset, limit + 1)  # one more: is there a next page
        return {
            "entries": entries[:limit],
            "more": len(entries) > limit,
            "offset": offset,
            "limit": limit,
            "worker": worker,
            "soon_ms": LEASE_SOON_MS,
        }
    if tab == "workers":
        return {"workers": await queues.workers(queue)}
    if tab == "schedules":
        return {"schedules": await schedules_of(request).list(queue)}
    return {"settings": await queues.get_settings(queue)}


def tab_of(request: Request[Any, Any, State]) -> str:
    """The tab a path names: /ui/queues/<queue>/<tab>, or the first (waiting) without one."""
    segments = request.url.path.rstrip("/").split("/")
    return segments[4] if len(segments) > len(("", "ui", "queues", "queue")) else TABS[0]


# Each tab its own static path: the actions' paths (.../settings, .../workers/...) would else
# take precedence over a path parameter and answer 405 to a GET.
@get([QUEUE_PAGE, *(f"{QUEUE_PAGE}/{tab}" for tab in TABS)], include_in_schema=False)
async def queue_page(request: Request[Any, Any, State]) -> Template:
    queue = path_queue(request)
    viewer = await reader_of(request, queue)
    tab = tab_of(request)
    queues = queues_of(request)
    view, now_ms, content = await asyncio.gather(
        queues.queue_view(queue), queues.server_time_ms(), tab_context(request, queues, queue, tab)
    )
    context = {
        "title": f"{queue} · {tab}",
        "viewer": viewer,
        "queue": queue,
        "view": view,
        "tab": tab,
        "tabs": TABS,
        "can": allowed(viewer, queue),
        "now_ms": now_ms,
        "feed": f"{UI}/queues/{quote(queue)}/events" if tab in LIVE_TABS else None,
        **content,
    }
    return page(request, "queue.html", context, regions=("summary", "tab"))


async def jobs_by_id(queues: JobQueues, queue: str, ids: list[str]) -> list[JobView]:
    """The jobs still there (one may have been deleted since the scan found it)."""
    found = []
    for job in await asyncio.gather(*(queues.job_details(queue, job_id) for job_id in ids)):
        if job[0] is not None:
            found.append(job[0])
    return found


@get(QUEUE_PAGE + "/search", include_in_schema=False)
async def search(request: Request[Any, Any, State]) -> Template:
    """By id (any state), and by text in payloads and errors: one bounded step of the scan per
    request, "scan more" being the next step."""
    queue = path_queue(request)
    viewer = await reader_of(request, queue)
    text = request.query_params.get("q", "").strip()
    state = request.query_params.get("state", "failed")
    if state not in SEARCH_STATES:
        raise InvalidRequest(f"search in one of {', '.join(SEARCH_STATES)}, not {state!r}")
    if len(text) > limits.MAX_ERROR_BYTES:
        raise InvalidRequest(f"search text of at most {limits.MAX_ERROR_BYTES} characters")
    offset = query_int(request, "offset", 0, 0, limits.MAX_OFFSET)
    queues = queues_of(request)
    by_id: JobView | None = None
    matches: list[JobView] = []
    next_offset = total = 0
    if text:
        if is_name(text):
            by_id = (await queues.job_details(queue, text))[0]
        ids, next_offset, total = await queues.search_jobs(
            queue, state, text, offset, SEARCH_BUDGET, SEARCH_MATCHES
        )
        matches = await jobs_by_id(queues, queue, ids)
    view = await queues.queue_view(queue)
    context = {
        "title": f"{queue} · search",
        "viewer": viewer,
        "queue": queue,
        "view": view,
        "tab": "search",
        "tabs": TABS,
        "can": allowed(viewer, queue),
        "feed": None,
        "text": text,
        "state": state,
        "states": SEARCH_STATES,
        "offset": offset,
        "next_offset": next_offset,
        "total": total,
        "by_id": by_id,
        "matches": matches,
    }
    return page(request, "search.html", context)


@get(QUEUE_PAGE + "/jobs/{id:str}", include_in_schema=False)
async def job_page(request: Request[Any, Any, State]) -> Template:
    queue = path_queue(request)
    viewer = await reader_of(request, queue)
    job_id = checked_name(request.path_params["id"], "job id")
    queues = queues_of(request)
    (job, fence, position), now_ms = await asyncio.gather(
        queues.job_details(queue, job_id), queues.server_time_ms()
    )
    if job is None:
        raise JobNotFound(f"no job {job_id!r} in queue {queue!r} (finished jobs are kept for a time only)")
    timeline = await job_timeline(queues, queue, job_id, job.created_at)
    context = {
        "title": f"job {job_id}",
        "viewer": viewer,
        "queue": queue,
        "job": job,
        "fence": fence,
        "timeline": timeline,
        "can": allowed(viewer, queue),
        "now_ms": now_ms,
        "soon_ms": LEASE_SOON_MS,
        "feed": f"{UI}/queues/{quote(queue)}/events?job={quote(job_id)}&after={position}",
    }
    return page(request, "job.html", context, regions=("job",))


PAGE_HANDLERS = [overview, queue_page, search, job_page]
