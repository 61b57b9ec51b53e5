"""Sentinel failover under load: the service follows the new primary by itself. With
EMQ_WAIT_REPLICAS=1 no acknowledged enqueue is lost; without it replication is asynchronous, so a
failover may lose only the newest writes the replica had not received yet. Prints the figures for
docs/SCALING.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from service.config import Settings
from service.keys import QueueKeys
from tests.sentinel import SentinelSet
from tests.server import running_service
from tests.support import eventually

JOBS = 400
ACKED_BEFORE_THE_KILL = 50  # the producer is well under way when the primary dies
RECOVERY_DEADLINE_S = 60.0


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path).start()
    try:
        yield servers
    finally:
        servers.stop()


@dataclass
class Run:
    """What the producer saw, in order: ids acknowledged, and how many before the outage."""

    acknowledged: list[str] = field(default_factory=list)
    acked_before_outage: int | None = None  # set at the first refused enqueue after the kill
    on_replica_at_kill: set[str] = field(default_factory=set)  # already replicated when killed
    completed: set[str] = field(default_factory=set)
    killed_at: float = 0.0
    recovered_at: float | None = None

    @property
    def before_outage(self) -> list[str]:
        return self.acknowledged[: self.acked_before_outage]

    @property
    def lost(self) -> list[str]:
        return [job for job in self.acknowledged if job not in self.completed]


def replicated(servers: SentinelSet, queue: str, ids: list[str]) -> set[str]:
    """Which of these jobs the replica holds now."""
    keys = QueueKeys.for_queue(queue)
    replica = redis.Redis(port=servers.replica_port)
    try:
        pipe = replica.pipeline(transaction=False)
        for job in ids:
            pipe.exists(keys.job(job))
        return {job for job, present in zip(ids, pipe.execute(), strict=True) if present}
    finally:
        replica.close()


async def produce(http: httpx.AsyncClient, queue: str, run: Run) -> None:
    for i in range(JOBS):
        while True:  # retry the same id until acknowledged: enqueue is idempotent by id
            try:
                answer = await http.post(f"/v1/queues/{queue}/jobs", json={"id": f"j{i}", "payload": i})
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code in (200, 201):
                run.acknowledged.append(f"j{i}")
                if run.acked_before_outage is not None and run.recovered_at is None:
                    run.recovered_at = time.monotonic()
                break
            if run.killed_at and run.acked_before_outage is None:
                run.acked_before_outage = len(run.acknowledged)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.005)


async def drain(http: httpx.AsyncClient, queue: str, run: Run) -> None:
    """Every acknowledged job that is still there is leased and acked."""
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
    while time.monotonic() < deadline:
        answer = await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w", "max_jobs": 100})
        jobs = answer.json().get("jobs", []) if answer.status_code == 200 else []
        if not jobs and answer.status_code == 200:
            return
        for job in jobs:
            acked = await http.post(
                f"/v1/queues/{queue}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"]}
            )
            if acked.status_code == 200:
                run.completed.add(job["id"])


async def run_failover(servers: SentinelSet, wait_replicas: int) -> Run:
    settings = Settings(
        redis_url=servers.url,
        sweep_interval_ms=200,
        wait_replicas=wait_replicas,
        wait_timeout_ms=1000,
        redis_timeout_s=2.0,
    )
    run = Run()
    queue = f"failover-{wait_replicas}"
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            producer = asyncio.create_task(produce(http, queue, run))

            async def under_way() -> bool:
                return len(run.acknowledged) >= ACKED_BEFORE_THE_KILL

            await eventually(under_way, f"{ACKED_BEFORE_THE_KILL} acknowledged enqueues")
            old_primary = servers.primary()
            # Whatever the replica holds now, it holds when promoted: none of it may be lost.
            run.on_replica_at_kill = replicated(servers, queue, list(run.acknowledged))
            run.killed_at = time.monotonic()
            servers.kill(old_primary)

            async def failed_over() -> bool:
                return await asyncio.to_thread(servers.primary) != old_primary

            await eventually(failed_over, "Sentinel to promote the replica", RECOVERY_DEADLINE_S)
            # The old primary comes back and Sentinel turns it into a replica of the new one.
            await asyncio.to_thread(servers.start_server, old_primary)
            await asyncio.wait_for(producer, RECOVERY_DEADLINE_S)
            await drain(http, queue, run)
    return run


@pytest.mark.timeout(240)
@pytest.mark.parametrize("wait_replicas", [0, 1])
async def test_failover_under_load(sentinel_set: SentinelSet, wait_replicas: int) -> None:
    old_primary = sentinel_set.primary()
    run = await run_failover(sentinel_set, wait_replicas)
    recovery_s = (run.recovered_at or time.monotonic()) - run.killed_at
    print(
        f"\nfailover EMQ_WAIT_REPLICAS={wait_replicas}: acknowledged {len(run.acknowledged)}, "
        f"lost {len(run.lost)}, from the kill to the next acknowledged enqueue {recovery_s:.1f} s"
    )
    assert sentinel_set.primary() != old_primary
    assert len(run.acknowledged) == JOBS  # the producer got through: the service recovered by itself
    if wait_replicas:
        assert run.lost == []  # durable mode: nothing acknowledged is lost to a failover
    else:
        # Asynchronous replication: the promoted replica holds a prefix of what the old primary
        # acknowledged. Only the newest of those can be lost, nothing it already had, and nothing
        # acknowledged after the failover.
        tail = run.before_outage[len(run.before_outage) - len(run.lost) :]
        assert run.lost == tail, f"lost {run.lost}, not the newest acknowledged before the outage"
        assert not set(run.lost) & run.on_replica_at_kill, "lost jobs the replica already held"
    assert run.acked_before_outage is not None and run.recovered_at is not None  # there was an outage
    assert recovery_s < RECOVERY_DEADLINE_S
