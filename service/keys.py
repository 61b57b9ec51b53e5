"""Every Redis key and channel name EchoMQ uses: the only module that spells one.

A queue's keys all start with ``emq:{<queue>}:`` so that Redis Cluster puts them in one
slot (the braces are the hash tag). Queue-level keys have one segment after that prefix
(``emq:{q}:wait``); per-job and per-worker keys have two (``emq:{q}:<id>:lock``). Names
never contain ``:``, so no job or worker key can ever equal a queue-level key, and the
distinct suffixes keep job and worker keys apart. Scripts derive per-job keys from the
prefix with the same suffixes (``JOB_SUFFIX``, ``LOCK_SUFFIX``, ``HOLDS_SUFFIX``), which
are handed to them as arguments instead of being spelled again in Lua.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

KEY_ROOT = "emq"
QUEUE_REGISTRY = f"{KEY_ROOT}:queues"  # SET of queue names; global, so never touched by scripts

JOB_SUFFIX = ":job"  # HASH: one job's fields
LOCK_SUFFIX = ":lock"  # STRING "<lease_id>:<worker>" with a PX TTL: the lease
HOLDS_SUFFIX = ":holds"  # SET: ids of the jobs a worker holds


def queue_prefix(queue: str) -> str:
    return f"{KEY_ROOT}:{{{queue}}}:"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue. Built once per queue name and cached by the caller."""

    queue: str
    prefix: str
    meta: str  # HASH: paused flag and the counters for ids and priority order
    wait: str  # LIST: priority-0 waiting jobs; new ones LPUSHed, leased from the right
    prio: str  # ZSET: waiting jobs with priority > 0, lowest score leased first
    delayed: str  # ZSET: id -> due time (ms)
    active: str  # LIST: the in-flight ledger; newest lease on the left, oldest on the right
    deadlines: str  # ZSET: id -> lease expiry (ms); the sweep's index into the ledger
    workers: str  # SET: workers holding at least one job
    completed: str  # ZSET: id -> completion time (ms), for retention
    failed: str  # ZSET: id -> failure time (ms): the dead letters
    wake: str  # pub/sub channel: "<n>" jobs became leasable
    script_keys: tuple[str, ...]  # the KEYS every script takes, in lua/include/common.lua's order

    @classmethod
    def for_queue(cls, queue: str) -> QueueKeys:
        prefix = queue_prefix(queue)
        names = ("meta", "wait", "prio", "delayed", "active", "deadlines", "workers")
        names += ("completed", "failed", "wake")
        named = {name: prefix + name for name in names}
        return cls(queue=queue, prefix=prefix, script_keys=tuple(named.values()), **named)

    def job(self, job_id: str) -> str:
        return self.prefix + job_id + JOB_SUFFIX

    def lock(self, job_id: str) -> str:
        return self.prefix + job_id + LOCK_SUFFIX

    def holds(self, worker: str) -> str:
        return self.prefix + worker + HOLDS_SUFFIX


WAKE_CHANNEL_PATTERN = f"{KEY_ROOT}:{{*}}:wake"


def queue_of_wake_channel(channel: str) -> str:
    """The queue name inside a wake channel name (the text between the braces)."""
    return channel[channel.index("{") + 1 : channel.rindex("}")]


@lru_cache(maxsize=4096)
def keys_of(queue: str) -> QueueKeys:
    """A queue's keys, built once per queue name."""
    return QueueKeys.for_queue(queue)
