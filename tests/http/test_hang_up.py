"""A long poll whose client hangs up after jobs were leased for it: the service gives the jobs
straight back, unspent (core/leasing.py: the hang-up branch).

The hang-up must land while the lease call is in flight. The fault proxy between the service
and Redis holds the lease's reply back until the client has hung up and the service has closed
its side of the connection (uvicorn does that after telling the request it is gone), so the
order of events is fixed, not a race."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx
import pytest
from redis.asyncio import Redis

from echomq_http.config import Settings
from echomq_http.store.keys import QueueKeys
from tests.faultproxy import FaultProxy, fault_proxy
from tests.support import counts, get_job, lease
from tests.support.servers import RedisServer
from tests.support.service import running_service

DEADLINE_S = 30.0
POLL_S = 0.05
WAIT_MS = 20_000
HELD_LEASE_MS = 600_000  # longer than the test: nothing but the service gives the jobs back
MARK = "leased-for-a-client-that-hung-up"  # in the held lease's reply, and in no other
WORKER = "gone"


@pytest.fixture
def proxy(private_valkey: RedisServer) -> Iterator[FaultProxy]:
    with fault_proxy(private_valkey.port) as proxy:
        yield proxy


@pytest.fixture
async def service(proxy: FaultProxy) -> AsyncIterator[str]:
    with running_service(Settings(redis_url=proxy.url, sweep_interval_ms=100)) as url:
        yield url


@pytest.fixture
async def http(service: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=service, timeout=DEADLINE_S) as client:
        yield client


@pytest.fixture
async def backend(private_valkey: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(private_valkey.url)
    yield client
    await client.aclose()


def send_long_poll(service: str, queue: str, **fields: str) -> socket.socket:
    """A lease request with wait_ms, sent on a raw socket so that the test decides when it hangs up."""
    host, port = service.removeprefix("http://").split(":")
    body = json.dumps(
        {"worker": WORKER, "wait_ms": WAIT_MS, "lease_ms": HELD_LEASE_MS, "max_jobs": 5, **fields}
    )
    head = (
        f"POST /v1/queues/{queue}/lease HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    sock.sendall(head.encode() + body.encode())
    return sock


async def poll_until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(POLL_S)


async def hang_up_while_two_jobs_are_leased(
    http: httpx.AsyncClient, service: str, proxy: FaultProxy, queue: str, **fields: str
) -> list[str]:
    """A long poll leases two jobs and its client hangs up before the answer: their ids, once
    the service has given them back."""

    async def one_waiter() -> bool:
        return "\nemq_long_poll_waiters 1\n" in (await http.get("/metrics")).text

    async def both_waiting() -> bool:
        return (await counts(http, queue))["waiting"] == 2

    proxy.hold_reply_holding(MARK.encode())
    sock = send_long_poll(service, queue, **fields)
    try:
        await poll_until(one_waiter, "the long poll to wait")
        jobs = [{"payload": {"mark": MARK, "n": n}} for n in range(2)]
        enqueued = (await http.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).json()["jobs"]
        ids = [job["id"] for job in enqueued]
        # The wake-up's lease took both jobs for the poll; Redis's reply waits in the proxy.
        assert await asyncio.to_thread(proxy.holding.wait, DEADLINE_S)
        sock.shutdown(socket.SHUT_WR)
        # The service closes its side only after telling the request its client is gone.
        assert sock.recv(1) == b"", "the client was answered although the lease's reply was held"
    finally:
        sock.close()
    proxy.let_replies_through()
    await poll_until(both_waiting, "the jobs to be given back")
    return ids


async def test_jobs_leased_for_a_client_that_hung_up_are_given_straight_back(
    http: httpx.AsyncClient, service: str, proxy: FaultProxy, backend: Redis, queue: str
) -> None:
    ids = await hang_up_while_two_jobs_are_leased(http, service, proxy, queue)
    assert await counts(http, queue) == {
        "waiting": 2,
        "delayed": 0,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting_children": 0,
    }
    assert (await http.get(f"/v1/queues/{queue}/active")).json() == {"jobs": []}
    assert (await http.get(f"/v1/queues/{queue}/workers")).json() == {"workers": []}
    for job_id in ids:
        view = await get_job(http, queue, job_id)
        assert (view["state"], view["worker"], view["lease_expires_at"]) == ("waiting", None, None)
    keys = QueueKeys.for_queue(queue)
    assert await backend.exists(keys.active, keys.deadlines, keys.held(WORKER)) == 0
    assert await backend.exists(*(keys.lock(job_id) for job_id in ids)) == 0
    assert not await backend.sismember(keys.workers, WORKER)

    again = await lease(http, queue, "next", max_jobs=5)
    assert [job["id"] for job in again] == ids  # first in line, in the order they were leased
    assert [job["attempt"] for job in again] == [1, 1]  # the hung-up lease spent no attempt
    assert [job["fence"] for job in again] == [3, 4]  # it did lease them: fences 1 and 2 were its


async def test_the_retry_of_a_hung_up_request_leases_what_was_given_back(
    http: httpx.AsyncClient, service: str, proxy: FaultProxy, backend: Redis, queue: str
) -> None:
    """The give-back forgets the request: its retry (same request_id) is its first delivery,
    instead of an answer of jobs no longer held (and, with wait_ms, a wait for nothing)."""
    ids = await hang_up_while_two_jobs_are_leased(http, service, proxy, queue, request_id="poll-1")
    assert not await backend.exists(QueueKeys.for_queue(queue).request(WORKER, "poll-1"))

    started = time.monotonic()
    again = await lease(http, queue, WORKER, max_jobs=5, wait_ms=WAIT_MS, request_id="poll-1")
    assert [job["id"] for job in again] == ids
    assert time.monotonic() - started < WAIT_MS / 2000  # answered, not waited out
    assert [job["attempt"] for job in again] == [1, 1]
