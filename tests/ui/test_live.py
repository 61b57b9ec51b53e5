"""The overview's live stream (echomq_http.ui.live) against a real server: a page that leaves
while the stream waits for its queues leaves nothing running behind it."""

from __future__ import annotations

import asyncio
import secrets

from echomq_http.config import Settings
from echomq_http.runtime.event_feeds import EventHub
from echomq_http.store.backends import backend_for
from echomq_http.store.connect import connect
from echomq_http.ui.live import changed_queues

KEEPALIVE_S = 30.0  # longer than the test: the stream is inside its wait when the page leaves


def readiness_waits(hub: EventHub) -> list[asyncio.Task[object]]:
    """The running tasks that wait on one of the hub's subscribers becoming ready."""
    readiness = {id(subscriber.ready) for feed in hub._feeds.values() for subscriber in feed.subscribers}
    waits = []
    for task in asyncio.all_tasks():
        frame = getattr(task.get_coro(), "cr_frame", None)
        if not task.done() and frame is not None and id(frame.f_locals.get("self")) in readiness:
            waits.append(task)
    return waits


async def test_a_page_that_leaves_mid_wait_leaves_no_wait_behind(redis_url: str) -> None:
    client = await connect(Settings(redis_url=redis_url))
    hub = EventHub(
        backend_for(client),
        max_subscribers=10,
        buffer_events=100,
        buffer_bytes=64 * 1024,
        keepalive_s=KEEPALIVE_S,
        max_queues=10,
        readers=1,
    )
    names = [f"t-{secrets.token_hex(6)}" for _ in range(3)]
    try:
        stream = changed_queues(hub, names, KEEPALIVE_S)
        assert (await anext(stream)).startswith(b"retry:")
        reading = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)
        waits = readiness_waits(hub)
        assert len(waits) == len(names)  # the stream waits on each followed queue
        reading.cancel()  # the page hangs up: the server cancels the stream's read
        await asyncio.gather(reading, return_exceptions=True)
        await stream.aclose()
        await asyncio.sleep(0)
        assert [wait for wait in waits if not wait.done()] == []
        assert hub.subscribed == 0
    finally:
        await hub.stop()
        await client.aclose()
