"""A Cluster primary dies under load: its replica is promoted and the service follows the new slot
map by itself. Acknowledged enqueues are counted afterwards; replication is asynchronous, so the
count is reported rather than promised (docs/SCALING.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from service.config import Settings
from service.keys import queue_prefix
from tests.cluster import ValkeyCluster
from tests.server import running_service

QUEUES = 12
JOBS_PER_QUEUE = 30
RECOVERY_DEADLINE_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    started = ValkeyCluster(tmp_path, primaries=3, replicas_per_primary=1).start()
    try:
        yield started
    finally:
        started.stop()


def owner_port(cluster: ValkeyCluster, queue: str) -> int:
    """The primary that holds a queue's slot, as the cluster sees it now."""
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[-1])
    try:
        return client.get_node_from_key(queue_prefix(queue) + "wait").port
    finally:
        client.close()


@pytest.mark.timeout(300)
async def test_the_service_follows_a_cluster_failover(cluster: ValkeyCluster) -> None:
    queues = [f"cf-{i}" for i in range(QUEUES)]
    victim = owner_port(cluster, queues[0])
    acknowledged: set[tuple[str, str]] = set()
    killed_at = recovered_at = 0.0
    settings = Settings(redis_url=cluster.url, sweep_interval_ms=200, redis_timeout_s=2.0)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def produce(queue: str) -> None:
                nonlocal recovered_at
                for i in range(JOBS_PER_QUEUE):
                    while True:  # the same id until acknowledged: enqueue is idempotent by id
                        try:
                            answer = await http.post(
                                f"/v1/queues/{queue}/jobs", json={"id": f"j{i}", "payload": i}
                            )
                        except httpx.TransportError:
                            answer = None
                        if answer is not None and answer.status_code in (200, 201):
                            acknowledged.add((queue, f"j{i}"))
                            if killed_at and queue == queues[0] and not recovered_at:
                                recovered_at = time.monotonic()
                            break
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(0.02)

            producers = [asyncio.create_task(produce(queue)) for queue in queues]
            await asyncio.sleep(0.3)
            killed_at = time.monotonic()
            cluster.processes[victim].kill()
            await asyncio.wait_for(asyncio.gather(*producers), RECOVERY_DEADLINE_S)
            completed: set[tuple[str, str]] = set()
            for queue in queues:
                while True:
                    body = {"worker": "w", "max_jobs": 100}
                    jobs = (await http.post(f"/v1/queues/{queue}/lease", json=body)).json()["jobs"]
                    if not jobs:
                        break
                    acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
                    results = (await http.post(f"/v1/queues/{queue}/ack", json={"acks": acks})).json()[
                        "results"
                    ]
                    completed |= {(queue, result["id"]) for result in results if result["ok"]}
    lost = acknowledged - completed
    print(
        f"\ncluster failover: acknowledged {len(acknowledged)}, lost {len(lost)}, "
        f"first acknowledged enqueue on the failed-over slot {recovered_at - killed_at:.1f} s after the kill"
    )
    assert len(acknowledged) == QUEUES * JOBS_PER_QUEUE  # every producer got through
    assert recovered_at and recovered_at - killed_at < RECOVERY_DEADLINE_S
    assert owner_port(cluster, queues[0]) != victim  # a replica took the slot over


@pytest.mark.timeout(300)
async def test_durable_mode_on_a_cluster_waits_for_the_shards_replica(cluster: ValkeyCluster) -> None:
    settings = Settings(redis_url=cluster.url, wait_replicas=1, wait_timeout_ms=500, redis_timeout_s=2.0)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for queue in ("d-a", "d-b", "d-c", "d-d"):  # queues on several shards
                assert (await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1})).status_code == 201
                job = (await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w"})).json()["jobs"][0]
                ack = await http.post(
                    f"/v1/queues/{queue}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"]}
                )
                assert ack.status_code == 200
            # Without its replica, a shard's writes are refused (they did happen on the primary).
            primary = owner_port(cluster, "d-a")
            replica = next(
                port
                for port in cluster.ports[3:]
                if cluster.client(port).info("replication").get("master_port") == primary
            )
            cluster.processes[replica].kill()
            refused = await http.post("/v1/queues/d-a/jobs", json={"payload": 2})
            assert refused.status_code == 503 and refused.json()["code"] == "backend_unavailable"
            assert (await http.get("/v1/queues/d-a")).status_code == 200  # reads do not wait


@pytest.mark.timeout(120)
async def test_wake_ups_go_by_sharded_pubsub_to_the_queues_shard(cluster: ValkeyCluster) -> None:
    with running_service(Settings(redis_url=cluster.url)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            queue = "sharded-wake"
            waiter = asyncio.create_task(
                http.post(f"/v1/queues/{queue}/lease", json={"worker": "w", "wait_ms": 15_000})
            )
            await asyncio.sleep(0.5)
            channel = queue_prefix(queue) + "wake"
            owner = cluster.client(owner_port(cluster, queue))
            assert owner.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] >= 1
            assert all(
                cluster.client(port).execute_command("PUBSUB", "NUMPAT") == 0 for port in cluster.ports
            )
            started = time.monotonic()
            assert (await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1})).status_code == 201
            assert len((await waiter).json()["jobs"]) == 1
            assert time.monotonic() - started < 0.5  # woken by the message, not the 1 s fallback poll
