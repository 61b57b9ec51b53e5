"""Floods of event followers and of large progress, against a service of its own: the others'
requests and the stalled sweep go on as before, the number of queues followed is capped,
events stay small, and the process's memory stays under its bound (issue 27)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

import httpx
import pytest

from echomq_http.config import Settings
from echomq_http.core.limits import MAX_EVENT_PROGRESS_BYTES, MAX_PROGRESS_BYTES
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.support import assert_problem, enqueue, get_job, lease, lease_one
from tests.support.launched import LaunchedService, launched
from tests.support.service import running_service

FLOOD_STREAMS = 160
OTHERS_WITHIN_S = 1.0  # what every other request must answer within, during and after a flood
MAX_RSS_BYTES = 300 * 1024 * 1024  # the stated bound of one service process
RECLAIMED_WITHIN_MS = 1100  # a sweep tick (100 ms) and the second, from the lease's end


@pytest.fixture
def service(redis_url: str, tmp_path: Path) -> Iterator[LaunchedService]:
    """A service in a process of its own (its own connection pool, its memory measurable)."""
    with launched(
        tmp_path / "service.log",
        EMQ_REDIS_URL=redis_url,
        EMQ_SWEEP_INTERVAL_MS="100",
        EMQ_EVENTS_BUFFER_BYTES=str(64 * 1024),
    ) as running:
        running.wait_ready()
        yield running


async def timed(call: Awaitable[httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await call
    return response, time.monotonic() - started


async def others_answer_in_time(client: httpx.AsyncClient, queue: str) -> list[float]:
    """An enqueue and a read of the queue, each answered (2xx) within OTHERS_WITHIN_S."""
    created, enqueue_s = await timed(client.post(f"/v1/queues/{queue}/jobs", json={"payload": 1}))
    read, read_s = await timed(client.get(f"/v1/queues/{queue}"))
    assert created.status_code == 201, created.text
    assert read.status_code == 200, read.text
    assert enqueue_s < OTHERS_WITHIN_S and read_s < OTHERS_WITHIN_S, (enqueue_s, read_s)
    return [enqueue_s, read_s]


@contextlib.asynccontextmanager
async def followers(url: str, queues: list[str]) -> AsyncIterator[None]:
    """One event stream open on each queue, all held until the block ends."""
    limits = httpx.Limits(max_connections=len(queues) + 1)
    async with (
        httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client,
        contextlib.AsyncExitStack() as stack,
    ):

        async def follow(queue: str) -> None:
            response = await stack.enter_async_context(client.stream("GET", f"/v1/queues/{queue}/events"))
            assert response.status_code == 200

        await asyncio.gather(*(follow(queue) for queue in queues))
        yield


async def test_a_flood_of_followers_leaves_requests_and_the_sweep_alone(
    service: LaunchedService, queue: str
) -> None:
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as client:
        await enqueue(client, queue, id="held")
        latencies: list[float] = []
        async with followers(service.url, [f"{queue}-flood-{i}" for i in range(FLOOD_STREAMS)]):
            # Leased once the flood is on: its lease runs out, and the sweep acts, during it.
            job = await lease_one(client, queue, lease_ms=1000)

            async def given_back() -> float:
                while (await get_job(client, queue, job["id"]))["state"] != "waiting":
                    await asyncio.sleep(0.05)
                return time.time() * 1000

            watch = asyncio.create_task(given_back())
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                latencies += await others_answer_in_time(client, queue)
                await asyncio.sleep(0.1)
            back_at_ms = await asyncio.wait_for(watch, 10)
            # The sweep (every 100 ms) gave the job back soon after its lease ran out.
            assert back_at_ms - job["lease_expires_at"] < RECLAIMED_WITHIN_MS
        latencies += await others_answer_in_time(client, queue)  # at once after the flood
        assert max(latencies) < OTHERS_WITHIN_S


async def test_past_the_cap_of_queues_followed_a_new_queue_gets_429(redis_url: str, queue: str) -> None:
    settings = Settings(
        redis_url=redis_url,
        sweep_interval_ms=TEST_SWEEP_INTERVAL_MS,
        max_followed_queues=3,
        events_keepalive_ms=100,  # a stream whose client left ends at its next keep-alive
    )
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            async with followers(url, [f"{queue}-{i}" for i in range(3)]):
                refused = await client.get(f"/v1/queues/{queue}-new/events")
                assert_problem(refused, 429, "too_many_requests")
                assert "retry-after" in refused.headers
                waited = await client.get(f"/v1/queues/{queue}-new/jobs/x", params={"wait_ms": 100})
                assert_problem(waited, 429, "too_many_requests")
                # A queue followed already takes more followers.
                async with client.stream("GET", f"/v1/queues/{queue}-0/events") as more:
                    assert more.status_code == 200
            # Once its followers have left, an idle feed makes room for another queue.
            deadline = time.monotonic() + 3.0
            while True:
                async with client.stream("GET", f"/v1/queues/{queue}-new/events") as response:
                    if response.status_code == 200 or time.monotonic() > deadline:
                        break
                await asyncio.sleep(0.1)
            assert response.status_code == 200


async def test_a_large_progress_makes_a_small_event(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, id="big")
    job = await lease_one(client, queue)
    big = {"blob": "x" * (MAX_PROGRESS_BYTES - 100)}
    small = {"done": 3}
    async with client.stream("GET", f"/v1/queues/{queue}/events", params={"types": "progress"}) as stream:
        lines = stream.aiter_lines()
        assert (await anext(lines)).startswith("retry:")
        for progress in (big, small):
            beat = await client.post(
                f"/v1/queues/{queue}/jobs/big/heartbeat",
                json={"lease_id": job["lease_id"], "progress": progress},
            )
            assert beat.status_code == 200, beat.text
            assert (await get_job(client, queue, "big"))["progress"] == progress  # kept whole
        data = []
        async for line in lines:
            if line.startswith("data: "):
                data.append(line.removeprefix("data: "))
                if len(data) == 2:
                    break
    assert len(data[0]) < MAX_EVENT_PROGRESS_BYTES
    truncated, whole = (json.loads(line) for line in data)
    assert truncated["progress_truncated"] is True and "progress" not in truncated
    assert whole["progress"] == small and "progress_truncated" not in whole


def rss_bytes(pid: int) -> int:
    """The resident memory of a process and of its children (the launcher's worker)."""
    total = 0
    pids = [pid]
    while pids:
        current = pids.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                pids += [int(child) for child in children]
    return total


async def open_without_reading(url: str, queue: str) -> socket.socket:
    """An event stream whose client never reads: a small receive buffer, nothing taken from it."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    # Connection: close, so that the end of the stream is the end of the connection (kept alive,
    # it would only close at the keep-alive timeout)
    request = f"GET /v1/queues/{queue}/events HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    sock.sendall(request.encode())
    return sock


def read_to_the_end(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the service ended the stream (EOF) within timeout_s, reading what it sent."""
    sock.settimeout(timeout_s)
    with contextlib.suppress(TimeoutError, OSError):
        while sock.recv(1 << 20):
            pass
        return True
    return False


async def test_subscribers_that_never_read_are_dropped_and_memory_stays_bounded(
    service: LaunchedService, queue: str
) -> None:
    pid = service.process.pid
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as client:
        jobs = [{"id": f"j{i}", "payload": None} for i in range(900)]
        assert (await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).status_code == 200
        held = []
        for _ in range(9):
            held += await lease(client, queue, max_jobs=100, lease_ms=600_000)
        stalled = [await open_without_reading(service.url, queue) for _ in range(4)]
        await asyncio.sleep(0.3)  # subscribed
        baseline = rss_bytes(pid)
        peak = baseline

        async def beat_all(progress: object, count: int) -> None:
            nonlocal peak
            leases = [
                {"id": job["id"], "lease_id": job["lease_id"], "progress": progress} for job in held[:count]
            ]
            response = await client.post(f"/v1/queues/{queue}/heartbeat", json={"leases": leases})
            assert response.status_code == 200, response.text
            peak = max(peak, rss_bytes(pid))

        try:
            big = {"blob": "x" * (MAX_PROGRESS_BYTES - 100)}
            for _ in range(150):  # 15 progresses of 64 KiB per body: about 140 MB written
                await beat_all(big, 15)
            kept = {"blob": "y" * (MAX_EVENT_PROGRESS_BYTES - 100)}
            for _ in range(8):  # 900 progresses of 1 KiB: about 8 MB of events, past every buffer
                await beat_all(kept, 900)
            assert all(read_to_the_end(sock, 5.0) for sock in stalled)  # each was dropped
        finally:
            for sock in stalled:
                sock.close()
        assert peak < MAX_RSS_BYTES, (baseline, peak)
