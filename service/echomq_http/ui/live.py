"""Live updates: the queues' event feeds (echomq_http.runtime.event_feeds) as the dashboard's pages follow
them. A queue page and a job page take the queue's own stream (the API's, signed in by cookie:
EventSource sends no Authorization header), resuming by event id; the overview takes one stream
that says which queues changed, bursts merged, rather than one connection per queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request, get
from litestar.datastructures import State
from litestar.response import Stream

from echomq_http.api.http import events_of, path_queue, query_int, query_name, queues_of, sse_stream
from echomq_http.api.inspection import sse_response
from echomq_http.runtime.event_feeds import KEEPALIVE_FRAME, SSE_RETRY_MS, EventHub, Subscriber
from echomq_http.ui.access import reader_of, viewer_of
from echomq_http.ui.pages import MAX_OVERVIEW_PAGE, OVERVIEW_PAGE, QUEUE_PAGE, UI

MAX_OVERVIEW_QUEUES = 50  # the overview follows at most this many queues of its page live
MERGE_S = 0.5  # changes within this long make one notice: a busy queue costs the page little
STREAM_S = 60.0  # the overview stream ends after this long: the page reconnects and sees new queues


@get(QUEUE_PAGE + "/events", include_in_schema=False)
async def queue_events(request: Request[Any, Any, State]) -> Stream:
    queue = path_queue(request)
    await reader_of(request, queue)
    return await sse_response(request, queue)


def _pending(subscriber: Subscriber) -> bool:
    return bool(subscriber.buffer) or subscriber.dropped or subscriber.resync is not None


async def changed_queues(hub: EventHub, names: list[str], keepalive_s: float) -> AsyncIterator[bytes]:
    """ "changed" events naming the queues whose feeds had events, at most one per MERGE_S."""
    async with contextlib.AsyncExitStack() as stack:
        subscribers = [(await stack.enter_async_context(hub.subscribe(name)))[1] for name in names]
        yield b"retry: %d\n\n" % SSE_RETRY_MS
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STREAM_S
        while loop.time() < deadline:
            for subscriber in subscribers:
                if not _pending(subscriber):
                    subscriber.ready.clear()
            waits = [asyncio.ensure_future(subscriber.ready.wait()) for subscriber in subscribers]
            if waits:
                try:
                    await asyncio.wait(waits, timeout=keepalive_s, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    # Also when the page leaves mid-wait: asyncio.wait leaves its tasks running.
                    for wait in waits:
                        wait.cancel()
            else:
                await asyncio.sleep(keepalive_s)
            if hub.stopping.is_set() or any(subscriber.dropped for subscriber in subscribers):
                return  # shutting down, or too far behind: the page reconnects and reads again
            changed = [
                name for name, subscriber in zip(names, subscribers, strict=True) if _pending(subscriber)
            ]
            for subscriber in subscribers:
                subscriber.clear()
                subscriber.resync = None
            if not changed:
                yield KEEPALIVE_FRAME
                continue
            yield b"event: changed\ndata: " + msgspec.json.encode(changed) + b"\n\n"
            await asyncio.sleep(MERGE_S)


@get(UI + "/events", include_in_schema=False)
async def overview_events(request: Request[Any, Any, State]) -> Stream:
    viewer = await viewer_of(request)
    limit = query_int(request, "limit", OVERVIEW_PAGE, 1, MAX_OVERVIEW_PAGE)
    cursor, prefix = query_name(request, "cursor"), query_name(request, "prefix")
    names, _ = await queues_of(request).queue_page(cursor, limit, prefix or "", viewer.sees)
    hub = events_of(request)
    return await sse_stream(changed_queues(hub, names[:MAX_OVERVIEW_QUEUES], hub.keepalive_s))


LIVE_HANDLERS = [queue_events, overview_events]
