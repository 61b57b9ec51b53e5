"""The event feed (GET .../events, Server-Sent Events), through HTTP as a subscriber reads it:
every event type, written with its transition; resume by Last-Event-ID and ?after=; resync;
filters; keep-alive comments; a slow subscriber dropped; nothing secret in an event."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from echomq_http.config import Settings
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.support import assert_problem, enqueue, get_job, job_call, lease_one, metric_value
from tests.support.service import running_service

READ_TIMEOUT_S = 30.0


@dataclass
class Sse:
    """One SSE message as a client sees it (comments kept apart)."""

    id: int | None = None
    event: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


class Feed:
    """An open event stream: read events (and comments) as they come."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.comments: list[str] = []
        self.retry: int | None = None

    async def next(self, timeout_s: float = READ_TIMEOUT_S) -> Sse:
        return await asyncio.wait_for(self._next(), timeout_s)

    async def _next(self) -> Sse:
        message = Sse()
        seen = False
        async for line in self.lines:
            if line == "":
                if seen:
                    return message
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "":
                self.comments.append(value)
            elif name == "retry":
                self.retry = int(value)
            elif name == "id":
                message.id, seen = int(value), True
            elif name == "event":
                message.event, seen = value, True
            elif name == "data":
                message.data, seen = json.loads(value), True
        raise EOFError("the stream ended")

    async def take(self, count: int) -> list[Sse]:
        return [await self.next() for _ in range(count)]

    async def until(self, kind: str, job_id: str | None = None) -> list[Sse]:
        """Events up to and including the first of this type (and job)."""
        seen = []
        while True:
            event = await self.next()
            seen.append(event)
            if event.event == kind and (job_id is None or event.data.get("id") == job_id):
                return seen


@contextlib.asynccontextmanager
async def subscribed(
    client: httpx.AsyncClient, queue: str, headers: dict[str, str] | None = None, **params: Any
) -> AsyncIterator[Feed]:
    async with client.stream(
        "GET", f"/v1/queues/{queue}/events", params=params, headers=headers, timeout=READ_TIMEOUT_S
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Feed(response)


def kinds(events: list[Sse]) -> list[str]:
    return [event.event or "" for event in events]


async def test_every_transition_of_a_job_is_an_event_in_order(client: httpx.AsyncClient, queue: str) -> None:
    async with subscribed(client, queue) as feed:
        await enqueue(client, queue, {"secret": "payload"}, id="a", max_attempts=2)
        job = await lease_one(client, queue, "w1")
        beat = await job_call(client, queue, "a", "heartbeat", lease_id=job["lease_id"], progress={"done": 1})
        assert beat.status_code == 200 and beat.json()["cancel_requested"] is False
        failed = await job_call(
            client, queue, "a", "fail", lease_id=job["lease_id"], error="bad", retry_after_ms=0
        )
        assert failed.json()["state"] == "waiting"
        job = await lease_one(client, queue, "w2")
        assert (await job_call(client, queue, "a", "release", lease_id=job["lease_id"])).status_code == 200
        job = await lease_one(client, queue, "w3")
        acked = await job_call(
            client, queue, "a", "ack", lease_id=job["lease_id"], result={"secret": "result"}
        )
        assert acked.status_code == 200
        assert (await client.delete(f"/v1/queues/{queue}/jobs/a")).status_code == 204
        assert (await client.post(f"/v1/queues/{queue}/pause")).status_code == 200
        assert (await client.post(f"/v1/queues/{queue}/resume")).status_code == 200
        events = await feed.until("resumed")
    assert kinds(events) == [
        "enqueued",
        "leased",
        "progress",
        "retrying",
        "leased",
        "released",
        "leased",
        "completed",
        "deleted",
        "paused",
        "resumed",
    ]
    ids = [event.id for event in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(i is not None for i in ids)
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # numbered one by one within the queue
    data = [event.data for event in events]
    for event, message in zip(events, data, strict=True):
        assert message["type"] == event.event and message["queue"] == queue and isinstance(message["at"], int)
    assert data[0]["id"] == "a" and data[0]["state"] == "waiting"
    assert {key: data[1][key] for key in ("worker", "attempt", "fence")} == {
        "worker": "w1",
        "attempt": 1,
        "fence": 1,
    }
    assert data[1]["lease_expires_at"] > data[1]["at"]
    assert data[2]["progress"] == {"done": 1} and data[2]["worker"] == "w1"
    assert data[3] == {**data[3], "attempt": 1, "state": "waiting", "error": "bad"}
    assert data[5]["worker"] == "w2"
    assert data[7] == {**data[7], "worker": "w3", "attempt": 2}
    assert "id" not in data[9] and "id" not in data[10]  # queue events
    text = json.dumps(data)
    assert "secret" not in text and "lease_id" not in text and job["lease_id"] not in text


async def test_a_dead_letter_and_an_expired_lease_are_events(client: httpx.AsyncClient, queue: str) -> None:
    async with subscribed(client, queue, types="failed,reclaimed") as feed:
        await enqueue(client, queue, id="f", max_attempts=1)
        job = await lease_one(client, queue)
        await job_call(client, queue, "f", "fail", lease_id=job["lease_id"], error="no luck")
        await enqueue(client, queue, id="r", max_attempts=2)
        await lease_one(client, queue, "sleepy", lease_ms=1000)
        reclaimed = await feed.until("reclaimed", "r")
        await lease_one(client, queue, "sleepy", lease_ms=1000)
        expired = await feed.until("failed", "r")
    assert [event.data for event in reclaimed] == [
        {
            **reclaimed[0].data,
            "type": "failed",
            "id": "f",
            "attempt": 1,
            "reason": "fail",
            "error": "no luck",
        },
        {**reclaimed[1].data, "type": "reclaimed", "id": "r", "worker": "sleepy", "attempt": 1},
    ]
    assert expired[-1].data["reason"] == "lease_expired" and expired[-1].data["attempt"] == 2
    assert "lease expired" in expired[-1].data["error"]
    assert (await get_job(client, queue, "r"))["stalls"] == 2


async def test_resume_by_last_event_id_or_after_sends_what_followed(
    client: httpx.AsyncClient, queue: str
) -> None:
    async with subscribed(client, queue) as feed:
        for i in range(5):
            await enqueue(client, queue, id=f"j{i}")
        first = await feed.take(5)
    numbers = [event.id for event in first]
    assert numbers is not None
    async with subscribed(client, queue, headers={"Last-Event-ID": str(numbers[1])}) as feed:
        assert [event.data["id"] for event in await feed.take(3)] == ["j2", "j3", "j4"]
        assert feed.retry is not None and feed.retry > 0
    async with subscribed(client, queue, after=numbers[3]) as feed:
        assert [event.data["id"] for event in await feed.take(1)] == ["j4"]
        await enqueue(client, queue, id="j5")  # then the live ones, with nothing repeated
        assert [event.data["id"] for event in await feed.take(1)] == ["j5"]
    async with subscribed(client, queue, after=0) as feed:  # from the oldest kept
        assert [event.data["id"] for event in await feed.take(6)] == [f"j{i}" for i in range(6)]
    # The header wins over ?after= (a browser reconnects with the original URL and the header).
    async with subscribed(client, queue, headers={"Last-Event-ID": str(numbers[3])}, after=0) as feed:
        assert [event.data["id"] for event in await feed.take(2)] == ["j4", "j5"]


async def test_without_a_position_only_new_events_come(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="old")
    async with subscribed(client, queue) as feed:
        await enqueue(client, queue, id="new")
        assert (await feed.next()).data["id"] == "new"


async def test_filters_by_type_and_by_job(client: httpx.AsyncClient, queue: str) -> None:
    for job_id in ("a", "b"):
        await enqueue(client, queue, id=job_id)
    for _ in range(2):
        job = await lease_one(client, queue)
        await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"])
    async with subscribed(client, queue, after=0, types="completed") as feed:
        assert [(e.event, e.data["id"]) for e in await feed.take(2)] == [
            ("completed", "a"),
            ("completed", "b"),
        ]
    async with subscribed(client, queue, after=0, job="b") as feed:
        assert kinds(await feed.take(3)) == ["enqueued", "leased", "completed"]
    async with subscribed(client, queue, after=0, job="b", types="leased,completed") as feed:
        assert kinds(await feed.take(2)) == ["leased", "completed"]


@pytest.mark.parametrize(
    "params, headers",
    [
        ({"types": "completed,bogus"}, None),
        ({"types": ""}, None),
        ({"job": "bad id"}, None),
        ({"after": "-1"}, None),
        ({"after": "x"}, None),
        ({}, {"Last-Event-ID": "abc"}),
    ],
)
async def test_bad_parameters_are_refused(
    client: httpx.AsyncClient, queue: str, params: dict[str, str], headers: dict[str, str] | None
) -> None:
    response = await client.get(f"/v1/queues/{queue}/events", params=params, headers=headers)
    assert_problem(response, 400, "invalid_request")


@pytest.fixture(scope="module")
def short_feed_url(redis_url: str) -> Any:
    """A service that keeps few events, sends keep-alives often and drops slow subscribers soon."""
    settings = Settings(
        redis_url=redis_url,
        sweep_interval_ms=TEST_SWEEP_INTERVAL_MS,
        events_maxlen=20,
        events_keepalive_ms=200,
        events_buffer=50,
    )
    with running_service(settings) as url:
        yield url


async def test_a_resume_from_an_id_no_longer_kept_starts_with_resync(short_feed_url: str, queue: str) -> None:
    async with httpx.AsyncClient(base_url=short_feed_url) as client:
        jobs = [{"id": f"j{i}", "payload": i} for i in range(300)]
        for start in range(0, 300, 10):  # 30 stream entries of 10 events
            response = await client.post(
                f"/v1/queues/{queue}/enqueue", json={"jobs": jobs[start : start + 10]}
            )
            assert response.status_code == 200
        async with subscribed(client, queue, after=1) as feed:
            resync = await feed.next()
            assert resync.event == "resync" and resync.id is None
            assert resync.data["after"] == 1 and resync.data["oldest"] > 2
            first = await feed.next()
            assert first.id == resync.data["oldest"] and first.data["id"] == f"j{first.id - 1}"
            assert 300 - first.id + 1 >= 20  # at least EMQ_EVENTS_MAXLEN kept
        async with subscribed(client, queue, after=0) as feed:  # the oldest kept, no resync
            assert (await feed.next()).event == "enqueued"
        async with subscribed(client, queue, after=10_000) as feed:  # from another life of the queue
            assert (await feed.next()).event == "resync"


async def test_an_idle_stream_gets_keep_alive_comments(short_feed_url: str, queue: str) -> None:
    async with httpx.AsyncClient(base_url=short_feed_url) as client, subscribed(client, queue) as feed:
        with pytest.raises(asyncio.TimeoutError):
            await feed.next(timeout_s=1.0)
        assert feed.comments.count("keep-alive") >= 2


async def test_a_subscriber_that_falls_behind_is_dropped_and_resumes(short_feed_url: str, queue: str) -> None:
    async with (
        httpx.AsyncClient(base_url=short_feed_url) as client,
        client.stream("GET", f"/v1/queues/{queue}/events") as response,
    ):
        assert response.status_code == 200
        feed = Feed(response)
        await enqueue(client, queue, id="first")
        last = (await feed.next()).id or 0
        # Not reading: the socket's buffers fill, then the service's buffer of 50 events.
        big = [{"payload": None} for _ in range(1000)]
        for _ in range(60):
            assert (await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": big})).status_code == 200
        with pytest.raises(EOFError):  # the service ended the stream
            for _ in range(70_000):
                last = (await feed.next()).id or last
    assert 0 < last < 60_001
    async with (
        httpx.AsyncClient(base_url=short_feed_url) as client,
        subscribed(client, queue, headers={"Last-Event-ID": str(last)}) as resumed,
    ):
        first = await resumed.next()
        # Only the last 20 or so events are kept here: the next one, or a resync saying so.
        assert first.id == last + 1 or (first.event == "resync" and first.data["after"] == last)


async def test_many_subscribers_share_one_reader(
    client: httpx.AsyncClient, queue: str, redis_client: Any
) -> None:
    before = await redis_client.info("clients")
    async with contextlib.AsyncExitStack() as stack:
        feeds = [await stack.enter_async_context(subscribed(client, queue)) for _ in range(50)]
        during = await redis_client.info("clients")
        assert metric_value((await client.get("/metrics")).text, "emq_event_subscribers") >= 50
        await enqueue(client, queue, id="x")
        for feed in feeds:
            assert (await feed.next()).data["id"] == "x"
    # One reader (at most one more connection for it), not one per subscriber.
    assert during["connected_clients"] - before["connected_clients"] <= 2


async def test_past_the_cap_a_subscriber_gets_429(redis_url: str, queue: str) -> None:
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS, max_waiters=2)
    with running_service(settings) as url:
        async with (
            httpx.AsyncClient(base_url=url) as client,
            subscribed(client, queue),
            subscribed(client, queue),
        ):
            response = await client.get(f"/v1/queues/{queue}/events")
            assert_problem(response, 429, "too_many_requests")
            assert "retry-after" in response.headers
            waited = await client.get(f"/v1/queues/{queue}/jobs/x", params={"wait_ms": 1000})
            assert_problem(waited, 429, "too_many_requests")
