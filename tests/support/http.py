"""Client-side helpers over HTTP: the queue calls tests make, problem+json assertions, /metrics reads,
long polls and wake-up subscriptions."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from httpx import AsyncClient
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from echomq_http.core import limits
from echomq_http.store.keys import QueueKeys
from tests.support.waiting import CONDITION_TIMEOUT_S, eventually

WAITERS_METRIC = "emq_long_poll_waiters"


async def enqueue(client: AsyncClient, queue: str, payload: Any = None, **fields: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": payload, **fields})
    assert response.status_code in (200, 201), response.text
    return response.json()


async def lease(client: AsyncClient, queue: str, worker: str = "w1", **fields: Any) -> list[dict[str, Any]]:
    response = await client.post(f"/v1/queues/{queue}/lease", json={"worker": worker, **fields})
    assert response.status_code == 200, response.text
    return response.json()["jobs"]


async def lease_one(client: AsyncClient, queue: str, worker: str = "w1", **fields: Any) -> dict[str, Any]:
    jobs = await lease(client, queue, worker, **fields)
    assert len(jobs) == 1, jobs
    return jobs[0]


async def job_call(client: AsyncClient, queue: str, job_id: str, action: str, **body: Any) -> Any:
    return await client.post(f"/v1/queues/{queue}/jobs/{job_id}/{action}", json=body)


async def get_job(client: AsyncClient, queue: str, job_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue}/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def counts(client: AsyncClient, queue: str) -> dict[str, int]:
    response = await client.get(f"/v1/queues/{queue}")
    assert response.status_code == 200, response.text
    return response.json()["counts"]


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert body["title"] and body["detail"] and body["type"]
    return body


def metric_value(text: str, name: str, **labels: str) -> float:
    """The value of a metric in a /metrics scrape, from the first series with these labels."""
    wanted = {f'{k}="{v}"' for k, v in labels.items()}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and wanted <= set((match[1] or "").split(",")):
            return float(match[2])
    raise AssertionError(f"no {name} {labels} in the scrape")


async def long_polls_waiting(client: AsyncClient) -> int:
    """How many long-poll leases the service holds in its wake hub (its gauge on /metrics)."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return int(metric_value(response.text, WAITERS_METRIC))


async def wait_for_long_polls(
    client: AsyncClient, count: int, timeout_s: float = CONDITION_TIMEOUT_S
) -> None:
    """Until exactly count long polls are registered with the service's wake hub: from then on a
    wake-up message for their queue reaches them (registration comes before their lease try)."""

    async def parked() -> bool:
        return await long_polls_waiting(client) == count

    await eventually(parked, f"{count} long polls to wait in the service", timeout_s)


def long_poll(client: AsyncClient, queue: str, worker: str = "w1") -> asyncio.Task[tuple[list[Any], float]]:
    """A lease waiting as long as the API allows, sent now; the task gives its jobs and how many
    seconds after sending it they came."""

    async def poll() -> tuple[list[Any], float]:
        sent_at = time.monotonic()
        jobs = await lease(client, queue, worker, wait_ms=limits.MAX_WAIT_MS)
        return jobs, time.monotonic() - sent_at

    return asyncio.create_task(poll())


async def woken(poll: asyncio.Task[tuple[list[Any], float]]) -> list[Any]:
    """The jobs of a parked long poll, checked to have come before its wait ran out: its last
    lease try at the end of the wait cannot come sooner, so a wake-up brought them (with
    wake_ups_only, no fallback poll either)."""
    jobs, after_s = await poll
    assert after_s < limits.MAX_WAIT_MS / 1000, f"answered after {after_s:.1f} s: by its wait running out"
    return jobs


async def wake_subscriptions(redis_client: Redis | RedisCluster, queue: str) -> int:
    """Subscriptions that carry this queue's wake-ups to a service: subscribers of its channel
    (sharded on a Cluster), which a service has while a request of it waits on the queue."""
    channel = QueueKeys.for_queue(queue).wake
    if isinstance(redis_client, RedisCluster):
        owner = redis_client.get_node_from_key(channel)  # asked of any other node, it says 0
        reply = await redis_client.execute_command("PUBSUB SHARDNUMSUB", channel, target_nodes=owner)
        return sum(count for _, count in reply)
    return int(dict(await redis_client.pubsub_numsub(channel))[channel.encode()])


async def wait_for_wake_subscription(redis_client: Redis | RedisCluster, queue: str) -> None:
    async def subscribed() -> bool:
        return await wake_subscriptions(redis_client, queue) >= 1

    await eventually(subscribed, f"a wake-up subscription for {queue}")
