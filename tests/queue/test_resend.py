"""A call re-sent after its reply was lost acts once: the service's multiplexer sends a script
call again when the connection breaks, which cannot tell whether the first one ran. Here it
always ran: the fault proxy drops the reply of the marked call and breaks the connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from echomq_http.config import Settings
from tests.faultproxy import FaultProxy, fault_proxy
from tests.support import counts, get_job, job_call, lease, lease_one
from tests.support.servers import RedisServer
from tests.support.service import running_service


@pytest.fixture
def proxy(private_valkey: RedisServer) -> Iterator[FaultProxy]:
    with fault_proxy(private_valkey.port) as proxy:
        yield proxy


@pytest.fixture
async def http(proxy: FaultProxy) -> AsyncIterator[httpx.AsyncClient]:
    """A service whose every Redis call goes through the proxy, its scripts loaded: a first call
    answered "no such script" runs nothing, and a lost answer to that would prove nothing."""
    with running_service(Settings(redis_url=proxy.url, sweep_interval_ms=100)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await warm_up(client, "warm-up")
            yield client


async def warm_up(http: httpx.AsyncClient, queue: str) -> None:
    """Every script the tests below re-send, called once."""
    for _ in range(3):
        await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 0})
    job = await lease_one(http, queue, lease_ms=60_000)
    assert (await job_call(http, queue, job["id"], "release", lease_id=job["lease_id"])).status_code == 200
    job = await lease_one(http, queue, lease_ms=60_000)
    assert (
        await job_call(http, queue, job["id"], "fail", lease_id=job["lease_id"], error="e")
    ).status_code == 200
    job = await lease_one(http, queue, lease_ms=60_000)
    assert (await job_call(http, queue, job["id"], "ack", lease_id=job["lease_id"])).status_code == 200
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 0})
    job = await lease_one(http, queue, lease_ms=60_000)
    next_lease = {"worker": "warm-up", "max_jobs": 1}
    done = await job_call(http, queue, job["id"], "ack", lease_id=job["lease_id"], lease_next=next_lease)
    assert done.status_code == 200


async def test_a_re_sent_lease_answers_the_jobs_the_first_run_leased(http, proxy, queue) -> None:
    ids = [(await http.post(f"/v1/queues/{queue}/jobs", json={"payload": n})).json()["id"] for n in range(3)]
    proxy.lose_reply_to(b"resend-worker")
    jobs = await lease(http, queue, "resend-worker", max_jobs=2)
    assert proxy.dropped == 1  # the first run's answer was lost: this is the re-sent call's
    assert [job["id"] for job in jobs] == ids[:2]
    assert [job["attempt"] for job in jobs] == [1, 1]
    # Nothing else was leased: no orphaned batch waiting for its leases to expire.
    ledger = (await http.get(f"/v1/queues/{queue}/active")).json()["jobs"]
    assert [entry["id"] for entry in ledger] == ids[:2]
    assert (await counts(http, queue))["waiting"] == 1
    for job in jobs:
        assert (await job_call(http, queue, job["id"], "ack", lease_id=job["lease_id"])).status_code == 200


async def test_a_re_sent_fail_answers_as_the_first_did(http, proxy, queue) -> None:
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1})
    job = await lease_one(http, queue)
    proxy.lose_reply_to(b"resent-failure-text")
    response = await job_call(
        http, queue, job["id"], "fail", lease_id=job["lease_id"], error="resent-failure-text"
    )
    assert proxy.dropped == 1
    assert response.status_code == 200, response.text
    assert response.json() == {"id": job["id"], "state": "delayed", "attempt": 1}
    view = await get_job(http, queue, job["id"])
    assert view["state"] == "delayed" and view["attempt"] == 1


async def test_a_re_sent_release_answers_as_the_first_did(http, proxy, queue) -> None:
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1})
    job = await lease_one(http, queue)
    proxy.lose_reply_to(job["lease_id"].encode())
    response = await job_call(http, queue, job["id"], "release", lease_id=job["lease_id"])
    assert proxy.dropped == 1
    assert response.status_code == 200, response.text
    assert response.json() == {"id": job["id"], "state": "waiting"}
    again = await lease_one(http, queue)
    assert again["id"] == job["id"] and again["attempt"] == 1  # the release spent no attempt


async def test_a_re_sent_ack_answers_as_the_first_did(http, proxy, queue) -> None:
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1})
    job = await lease_one(http, queue)
    proxy.lose_reply_to(b"resent-result")
    response = await job_call(http, queue, job["id"], "ack", lease_id=job["lease_id"], result="resent-result")
    assert proxy.dropped == 1
    assert response.status_code == 200 and response.json()["state"] == "completed"


async def test_a_re_sent_ack_with_lease_next_acks_once_and_leases_once(http, proxy, queue) -> None:
    """The acks and the next lease go in one script call: re-sent, the ack answers as before and
    the lease answers the jobs the first run leased (its request id), leasing nothing more."""
    ids = [(await http.post(f"/v1/queues/{queue}/jobs", json={"payload": n})).json()["id"] for n in range(4)]
    job = await lease_one(http, queue, lease_ms=60_000)
    proxy.lose_reply_to(b"resent-ack-result")
    response = await job_call(
        http,
        queue,
        job["id"],
        "ack",
        lease_id=job["lease_id"],
        result="resent-ack-result",
        lease_next={"worker": "resend-next", "max_jobs": 2, "lease_ms": 60_000},
    )
    assert proxy.dropped == 1
    assert response.status_code == 200, response.text
    leased = response.json()["jobs"]
    assert [next_job["id"] for next_job in leased] == ids[1:3]
    assert [next_job["attempt"] for next_job in leased] == [1, 1]
    ledger = (await http.get(f"/v1/queues/{queue}/active")).json()["jobs"]
    assert sorted(entry["id"] for entry in ledger) == sorted(ids[1:3])
    assert (await counts(http, queue))["waiting"] == 1
    assert (await get_job(http, queue, job["id"]))["result"] == "resent-ack-result"


async def test_a_re_sent_enqueue_of_a_new_job_answers_created(http, proxy, queue) -> None:
    proxy.lose_reply_to(b"resent-payload")
    response = await http.post(f"/v1/queues/{queue}/jobs", json={"payload": "resent-payload"})
    assert proxy.dropped == 1
    assert response.status_code == 201, response.text
    assert response.json()["created"] is True and response.json()["state"] == "waiting"
    assert (await counts(http, queue))["waiting"] == 1
