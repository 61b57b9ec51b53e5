"""What a producer saw across a failover, and what asynchronous replication allows it to lose.

The promoted replica holds a prefix of the old primary's writes: a failover without WAIT may
lose the newest writes acknowledged before the primary died, never one the replica already had,
and never one acknowledged afterwards (the new primary wrote it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import redis

from echomq_http.store.keys import QueueKeys


@dataclass
class ProducerLog:
    """One producer's enqueues, in the order they were acknowledged (one request at a time)."""

    acknowledged: list[str] = field(default_factory=list)
    acked_at_kill: int | None = None  # how many when the primary was killed
    on_replica_at_kill: set[str] = field(default_factory=set)  # already replicated by then
    refused_after_kill: bool = False
    recovered_at: float | None = None  # time.monotonic() of the first acknowledgement after a refusal

    def acked(self, job_id: str) -> None:
        self.acknowledged.append(job_id)
        if self.refused_after_kill and self.recovered_at is None:
            self.recovered_at = time.monotonic()

    def refused(self) -> None:
        self.refused_after_kill = self.refused_after_kill or self.acked_at_kill is not None

    def killed(self, on_replica: set[str]) -> None:
        self.acked_at_kill = len(self.acknowledged)
        self.on_replica_at_kill = on_replica

    @property
    def may_be_lost(self) -> list[str]:
        """Acknowledged before the kill, and the one request that may have been in flight then
        (written by the old primary, its answer read after the kill)."""
        assert self.acked_at_kill is not None, "the primary was never killed"
        return self.acknowledged[: self.acked_at_kill + 1]

    def lost(self, completed: set[str]) -> list[str]:
        return [job for job in self.acknowledged if job not in completed]


def held_by(node: redis.Redis, queue: str, ids: list[str], cluster: bool = False) -> set[str]:
    """Which of these jobs a server (a replica, say) holds now."""
    keys = QueueKeys.for_queue(queue)
    with node.pipeline(transaction=False) as pipe:  # one connection: READONLY holds for the rest
        if cluster:
            pipe.execute_command("READONLY")  # a cluster replica answers reads of its slots
        for job in ids:
            pipe.exists(keys.job(job))
        found = pipe.execute()[1:] if cluster else pipe.execute()
    return {job for job, present in zip(ids, found, strict=True) if present}


def assert_lost_only_unreplicated_writes(log: ProducerLog, completed: set[str]) -> None:
    lost = log.lost(completed)
    newest = log.may_be_lost[len(log.may_be_lost) - len(lost) :]
    assert lost == newest, f"lost {lost}: not the newest acknowledged when the primary was killed"
    assert not set(lost) & log.on_replica_at_kill, f"lost {lost}: the replica held some when promoted"
