"""A Cluster primary dies under load: its replica is promoted and the service follows the new slot
map by itself. Acknowledged enqueues are counted afterwards: replication is asynchronous, so the
failed-over shard may lose the newest writes its replica had not received, and no other
(docs/SCALING.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from echomq_http.config import Settings
from echomq_http.store.keys import queue_prefix
from tests.replication import ProducerLog, assert_lost_only_unreplicated_writes, held_by
from tests.support import enqueue, eventually, long_poll, wait_for_long_polls, woken
from tests.support.cluster import ValkeyCluster
from tests.support.service import running_service

QUEUES = 12
JOBS_PER_QUEUE = 30
ACKED_BEFORE_THE_KILL = 3  # per queue: every producer is under way when the primary dies
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


def replica_of(cluster: ValkeyCluster, primary: int) -> int:
    return next(
        port
        for port in cluster.ports[cluster.primaries :]
        if cluster.client(port).info("replication").get("master_port") == primary
    )


async def produce(http: httpx.AsyncClient, queue: str, log: ProducerLog) -> None:
    for i in range(JOBS_PER_QUEUE):
        while True:  # the same id until acknowledged: enqueue is idempotent by id
            try:
                answer = await http.post(f"/v1/queues/{queue}/jobs", json={"id": f"j{i}", "payload": i})
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code in (200, 201):
                log.acked(f"j{i}")
                break
            log.refused()
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.02)


async def drain(http: httpx.AsyncClient, queue: str) -> set[str]:
    """The ids of every job still there, each leased and acked (the shard may still be failing
    over: a refused call is tried again)."""
    completed: set[str] = set()
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
    while time.monotonic() < deadline:
        leased = await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w", "max_jobs": 100})
        if leased.status_code != 200:
            await asyncio.sleep(0.1)
            continue
        jobs = leased.json()["jobs"]
        if not jobs:
            return completed
        acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
        acked = await http.post(f"/v1/queues/{queue}/ack", json={"acks": acks})
        if acked.status_code == 200:
            completed |= {result["id"] for result in acked.json()["results"] if result["ok"]}
    raise AssertionError(f"{queue} could not be drained in {RECOVERY_DEADLINE_S} s")


@pytest.mark.timeout(300)
async def test_the_service_follows_a_cluster_failover(cluster: ValkeyCluster) -> None:
    queues = [f"cf-{i}" for i in range(QUEUES)]
    victim = owner_port(cluster, queues[0])
    on_victim = [queue for queue in queues if owner_port(cluster, queue) == victim]
    victims_replica = cluster.client(replica_of(cluster, victim))
    logs = {queue: ProducerLog() for queue in queues}
    settings = Settings(redis_url=cluster.url, sweep_interval_ms=200, redis_timeout_s=2.0)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            producers = [asyncio.create_task(produce(http, queue, logs[queue])) for queue in queues]

            async def under_way() -> bool:
                return all(len(log.acknowledged) >= ACKED_BEFORE_THE_KILL for log in logs.values())

            await eventually(under_way, f"{ACKED_BEFORE_THE_KILL} acknowledged enqueues on every queue")
            # Whatever the replica holds now, it holds when promoted: none of it may be lost.
            for queue, log in logs.items():
                held: set[str] = set()
                if queue in on_victim:
                    held = held_by(victims_replica, queue, list(log.acknowledged), cluster=True)
                log.killed(on_replica=held)
            killed_at = time.monotonic()
            cluster.processes[victim].kill()
            await asyncio.wait_for(asyncio.gather(*producers), RECOVERY_DEADLINE_S)
            completed = {queue: await drain(http, queue) for queue in queues}
    lost = {queue: log.lost(completed[queue]) for queue, log in logs.items()}
    recovered_at = logs[queues[0]].recovered_at
    print(
        f"\ncluster failover: acknowledged {sum(len(log.acknowledged) for log in logs.values())}, "
        f"lost {sum(map(len, lost.values()))}, first acknowledged enqueue on the failed-over slot "
        f"{(recovered_at or time.monotonic()) - killed_at:.1f} s after the kill"
    )
    assert all(len(log.acknowledged) == JOBS_PER_QUEUE for log in logs.values())  # all got through
    assert owner_port(cluster, queues[0]) != victim  # a replica took the slot over
    # Shards that kept their primary lose nothing; the failed-over one at most what its replica
    # had not received when the primary died (replication is asynchronous without WAIT).
    assert {queue: jobs for queue, jobs in lost.items() if queue not in on_victim and jobs} == {}
    for queue in on_victim:
        assert_lost_only_unreplicated_writes(logs[queue], completed[queue])
    # The failed-over slot really was unavailable for a while, then served again.
    assert logs[queues[0]].refused_after_kill and recovered_at is not None
    assert recovered_at - killed_at < RECOVERY_DEADLINE_S


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
            cluster.processes[replica_of(cluster, primary)].kill()
            refused = await http.post("/v1/queues/d-a/jobs", json={"payload": 2})
            assert refused.status_code == 503 and refused.json()["code"] == "backend_unavailable"
            assert (await http.get("/v1/queues/d-a")).status_code == 200  # reads do not wait


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("wake_ups_only")
async def test_wake_ups_go_by_sharded_pubsub_to_the_queues_shard(cluster: ValkeyCluster) -> None:
    queue = "sharded-wake"
    channel = queue_prefix(queue) + "wake"
    owner = cluster.client(owner_port(cluster, queue))
    with running_service(Settings(redis_url=cluster.url)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            first = long_poll(http, queue, "w1")

            async def subscribed() -> bool:
                return owner.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] >= 1

            await eventually(subscribed, "the service's SSUBSCRIBE on the queue's shard")
            assert all(
                cluster.client(port).execute_command("PUBSUB", "NUMPAT") == 0 for port in cluster.ports
            )
            await wait_for_long_polls(http, 1)
            created = await enqueue(http, queue, 1)
            assert [job["id"] for job in await woken(first)] == [created["id"]]
            # The subscription is settled now, so nothing but the message can wake this one: it
            # tried to lease once registered, found nothing, and the fallback poll is off.
            second = long_poll(http, queue, "w2")
            await wait_for_long_polls(http, 1)
            created = await enqueue(http, queue, 2)
            assert [job["id"] for job in await woken(second)] == [created["id"]]
