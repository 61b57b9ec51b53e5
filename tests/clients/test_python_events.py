"""The SDK's calls of the events work against a real service: cancel, history, outcome waits, and
the event feed, typed, resumed by itself after a lost connection or a stream the service ended."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from echomq import AsyncClient, Client, HistoryMinute, JobNotFound
from echomq._events import SSEParser
from echomq_http.config import Settings
from tests.clients.test_python_sdk import CountingTransport
from tests.faultproxy import FaultProxy
from tests.support.service import running_service


def test_cancel_history_and_wait(sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="waits")
    cancelled = sdk.cancel(queue, "waits", reason="not needed")
    assert (cancelled.id, cancelled.state, cancelled.cancel_requested) == ("waits", "cancelled", True)
    assert sdk.cancel(queue, "waits").state == "cancelled"  # idempotent
    job = sdk.get_job(queue, "waits")
    assert (job.state, job.error, job.finished_at is not None) == ("cancelled", "not needed", True)
    assert sdk.queue(queue).counts.cancelled == 1

    sdk.enqueue(queue, 2, id="runs")
    (held,) = sdk.lease(queue, "w1")
    flagged = sdk.cancel(queue, "runs")
    assert (flagged.state, flagged.cancel_requested) == ("active", True)
    assert sdk.heartbeat(queue, "runs", held.lease_id).cancel_requested is True
    started = time.monotonic()
    assert sdk.wait(queue, "runs", timeout_s=0.3).state == "active"  # timed out: the state then
    assert time.monotonic() - started >= 0.25
    threading.Timer(0.3, lambda: sdk.fail(queue, "runs", held.lease_id, "stopped")).start()
    assert sdk.wait(queue, "runs", timeout_s=10).state == "cancelled"  # answered on the outcome

    sdk.enqueue(queue, 3, id="gone")
    threading.Timer(0.3, lambda: sdk.delete_job(queue, "gone")).start()
    with pytest.raises(JobNotFound):
        sdk.wait(queue, "gone", timeout_s=10)

    minutes = sdk.history(queue, minutes=5)
    assert len(minutes) == 5 and all(isinstance(minute, HistoryMinute) for minute in minutes)
    assert sum(minute.enqueued for minute in minutes) == 3 and minutes[0].at < minutes[-1].at


async def test_async_cancel_history_wait_and_events(asdk: AsyncClient, queue: str) -> None:
    await asdk.enqueue(queue, 1, id="a")
    assert (await asdk.cancel(queue, "a", reason="no")).state == "cancelled"
    assert (await asdk.wait(queue, "a", timeout_s=5)).state == "cancelled"
    assert sum(minute.enqueued for minute in await asdk.history(queue)) == 1
    feed = asdk.events(queue, after=0)
    seen = [await feed.__anext__(), await feed.__anext__()]
    await feed.aclose()
    assert [(event.type, event.id, event.event_id) for event in seen] == [
        ("enqueued", "a", 1),
        ("cancelled", "a", 2),
    ]
    assert seen[0].state == "waiting" and seen[0].queue == queue


def test_events_are_typed_and_filtered(sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="j1")
    (held,) = sdk.lease(queue, "w1")
    sdk.heartbeat_many(queue, [{"id": "j1", "lease_id": held.lease_id, "progress": {"done": 1}}])
    sdk.ack(queue, "j1", held.lease_id)
    sdk.pause(queue)
    feed = sdk.events(queue, after=0)
    events = [next(feed) for _ in range(5)]
    feed.close()
    assert [event.type for event in events] == ["enqueued", "leased", "progress", "completed", "paused"]
    assert [event.event_id for event in events] == [1, 2, 3, 4, 5]
    leased, progress, done, paused = events[1:]
    assert (leased.worker, leased.attempt, leased.fence) == ("w1", 1, held.fence)
    assert (progress.progress, done.worker, paused.id) == ({"done": 1}, "w1", None)

    only = sdk.events(queue, after=0, types=["completed", "paused"], job="j1")
    assert [(event.type, event.event_id) for event in [next(only)]] == [("completed", 4)]
    only.close()


def test_a_resume_from_an_id_no_longer_kept_surfaces_resync(sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="j1")
    sdk.delete_queue(queue)  # numbering starts over: id 5 is not there any more
    sdk.enqueue(queue, 1, id="j2")
    feed = sdk.events(queue, after=5)
    resync, enqueued = next(feed), next(feed)
    feed.close()
    assert (resync.type, resync.event_id, resync.after, resync.oldest) == ("resync", None, 5, 1)
    assert (enqueued.type, enqueued.id, enqueued.event_id) == ("enqueued", "j2", 1)


def test_a_stream_the_service_ends_is_resumed(private_redis_url: str, queue: str) -> None:
    # A subscriber 10 events behind is dropped: one enqueue of 25 jobs does it at once.
    settings = Settings(redis_url=private_redis_url, events_buffer=10)
    with running_service(settings) as url:
        transport = CountingTransport()
        with Client(url, transport=transport) as client:
            client.enqueue(queue, 0, id="first")
            feed = client.events(queue, after=0, types=["enqueued"])
            assert next(feed).id == "first"  # subscribed: what follows is live
            client.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(25)])
            ids = [next(feed).id for _ in range(25)]
            feed.close()
    assert ids == [f"j{n}" for n in range(25)]  # each once, in order, across the reconnection
    assert transport.sent.count(f"GET /v1/queues/{queue}/events") >= 2


async def test_a_lost_connection_is_resumed_from_the_last_id(service_proxy: FaultProxy, queue: str) -> None:
    async with AsyncClient(f"http://{service_proxy.host_port}") as client:
        await client.enqueue(queue, 0, id="j0")
        feed = client.events(queue, after=0)
        assert (await feed.__anext__()).id == "j0"
        service_proxy.cut()
        await client.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(1, 4)])
        later = [await asyncio.wait_for(feed.__anext__(), 10) for _ in range(3)]
        await feed.aclose()
    assert [(event.id, event.event_id) for event in later] == [("j1", 2), ("j2", 3), ("j3", 4)]


def test_sync_events_resume_through_a_cut(service_proxy: FaultProxy, queue: str) -> None:
    with Client(f"http://{service_proxy.host_port}") as client:
        client.enqueue(queue, 0, id="j0")
        feed = client.events(queue, after=0)
        assert next(feed).id == "j0"
        service_proxy.cut()
        client.enqueue(queue, 1, id="j1")
        resumed = next(feed)
        feed.close()
    assert (resumed.id, resumed.event_id) == ("j1", 2)


def test_sse_parser_reads_the_whole_format() -> None:
    parser = SSEParser()
    stream = b'\xef\xbb\xbfretry: 1500\r\n: keep-alive\r\n\r\nid: 7\nevent: x\ndata: {"a":\ndata: 1}\r'
    events = [event for byte in range(len(stream)) for event in parser.feed(stream[byte : byte + 1])]
    assert events == [] and parser.retry_ms == 1500
    assert parser.feed(b"\n\n") == [("7", '{"a":\n1}')]
    assert parser.feed(b"data\n\ndata: no id\n\n") == [(None, ""), (None, "no id")]
    assert parser.feed(b"id: 8\n\n") == []  # no data: no event
