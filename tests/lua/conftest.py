"""Helpers for the script tests: a LuaQueue wraps Scripts + QueueKeys for one test queue.

Tests call the scripts exactly as echomq_http.core.queue does (keys = QueueKeys.script_keys,
ARGV[1] = the key prefix) but read the raw replies, and inspect the Redis keys a transition leaves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from msgspec import UNSET
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster

from echomq_http.api.schemas.working import LeasedJob
from echomq_http.core import limits
from echomq_http.core.bindings import AckLease, Lease
from echomq_http.core.leasing import CLIENT_REQUEST_TTL_MS, LeaseAsk
from echomq_http.store.backends import backend_for
from echomq_http.store.keys import DUE_INDEX, QueueKeys
from echomq_http.store.scripts import Scripts, retention_placeholders

LEASE_MS = 30_000
REQUEST_TTL_MS = CLIENT_REQUEST_TTL_MS  # the tests' request ids are a client's
LONG_RETENTION_MS = 10**12  # longer than any test: nothing finished is old enough to delete
PAST_MS = 1  # a score far in the past: a deadline that has passed, a delayed job that is due
PUBSUB_TIMEOUT_S = 5.0
EXPIRY_POLL_S = 0.005
WAKE_SENTINEL = "end-of-test-messages"


def decoded(value: Any) -> Any:
    """A reply with every bytes value (nested lists included) decoded to str."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [decoded(item) for item in value]
    return value


_GENERATED = itertools.count(1)


def lease_args(
    worker: str = "w1",
    *,
    lease_ms: int = LEASE_MS,
    max_jobs: int = 1,
    lease_ids: Sequence[str] | None = None,
    request_id: str | None = None,
    owner: str = "",
) -> tuple[object, ...]:
    """The lease script's ARGV after the prefix, as the service makes it (core/bindings.py):
    random lease ids unless given, a request id of the test's unless given."""
    ask = LeaseAsk(worker, lease_ms, max_jobs, request_id or f"r{next(_GENERATED)}", owner=owner)
    return Lease.args(ask, "".join(lease_ids) if lease_ids is not None else None)


def ack_lease_args(
    acks: Sequence[tuple[str, str]],
    worker: str = "w1",
    *,
    lease_ms: int = LEASE_MS,
    request_id: str | None = None,
    owner: str = "",
    only_if_all_taken: bool = True,
) -> tuple[object, ...]:
    """The ack-lease script's ARGV after the prefix, as the service makes it: acks without
    results, then a lease of one job."""
    ask = LeaseAsk(worker, lease_ms, 1, request_id or f"r{next(_GENERATED)}", owner=owner)
    return AckLease.args([(job_id, lease_id, UNSET) for job_id, lease_id in acks], ask, only_if_all_taken)


def spec(
    job_id: str | None = None,
    *,
    name: str = "job",
    priority: int = 0,
    delay_ms: int = 0,
    max_attempts: int = 3,
    backoff_type: str = "exponential",
    backoff_ms: int = 1000,
    payload: bytes = b"{}",
    group: str | None = None,
) -> dict[str, Any]:
    """One job for enqueue: its options object (as enqueue-10.lua reads it) plus its payload."""
    options: dict[str, Any] = {
        "name": name,
        "priority": priority,
        "delay_ms": delay_ms,
        "max_attempts": max_attempts,
        "backoff_type": backoff_type,
        "backoff_ms": backoff_ms,
    }
    if group is not None:
        options["group"] = group
    # The service always sends an id: the client's, or a random one it made (echomq_http.core.queue).
    options["id"] = job_id if job_id is not None else f"gen-{next(_GENERATED)}"
    return {"options": options, "payload": payload}


class WakeListener:
    """Subscribed to a queue's wake channel; messages() returns what was published so far."""

    def __init__(self, client: Redis, channel: str) -> None:
        self._client = client
        self._channel = channel
        # On a Cluster the scripts SPUBLISH: listen on the shard that owns the channel.
        self._sharded = isinstance(client, RedisCluster)
        if self._sharded:
            node = client.get_node_from_key(channel)
            self._node_client: Redis | None = Redis(host=node.host, port=node.port)
            self._pubsub: PubSub = self._node_client.pubsub()
        else:
            self._node_client = None
            self._pubsub = client.pubsub()

    async def __aenter__(self) -> WakeListener:
        if self._sharded:
            await self._pubsub.execute_command("SSUBSCRIBE", self._channel)
        else:
            await self._pubsub.subscribe(self._channel)
        confirmation = await self._pubsub.get_message(timeout=PUBSUB_TIMEOUT_S)
        assert confirmation is not None and confirmation["type"] in ("subscribe", "ssubscribe")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._pubsub.aclose()
        if self._node_client is not None:
            await self._node_client.aclose()

    async def messages(self) -> list[str]:
        """Everything published since the last call. A sentinel published after the scripts ran
        arrives after their messages, so no message can be missed and no sleep is needed."""
        if self._sharded:
            await self._client.execute_command("SPUBLISH", self._channel, WAKE_SENTINEL)
        else:
            await self._client.publish(self._channel, WAKE_SENTINEL)
        received = []
        while True:
            message = await self._pubsub.get_message(timeout=PUBSUB_TIMEOUT_S)
            assert message is not None, "the sentinel never arrived"
            if message["type"] not in ("message", "smessage"):
                continue
            data = message["data"].decode()
            if data == WAKE_SENTINEL:
                return received
            received.append(data)


def private_due_index(keys: QueueKeys) -> QueueKeys:
    """The queue's keys with a due index of the tests' own: the session's service sweeps the
    queues of the real due index, and would reclaim an expired lease before a test's own sweep
    call could (in the same cluster slot, as the real one is)."""
    due = keys.due.replace(DUE_INDEX, DUE_INDEX + ":lua-tests", 1)
    script_keys = tuple(due if key == keys.due else key for key in keys.script_keys)
    return dataclasses.replace(keys, due=due, script_keys=script_keys)


class LuaQueue:
    """One queue's scripts, called directly, and readers for the state they leave."""

    spec = staticmethod(spec)  # tests build enqueue batches with q.spec(...)

    def __init__(self, client: Redis, scripts: Scripts, name: str) -> None:
        self.redis = client
        self.scripts = scripts
        self.name = name
        self.keys = private_due_index(QueueKeys.for_queue(name, cluster=isinstance(client, RedisCluster)))
        self._variants: dict[tuple[tuple[str, str], ...], Scripts] = {}
        self.retry_after_ms = 0  # the last lease's

    async def call(self, operation: str, *args: Any) -> Any:
        return await self.scripts.call(operation, self.keys.script_keys, (self.keys.prefix, *args))

    # --- the scripts -----------------------------------------------------------------------

    async def enqueue(self, *jobs: dict[str, Any]) -> list[tuple[str, str, int]]:
        """[(id, state, created)] per job, from the flat reply (after its first-of-queue flag)."""
        options = json.dumps([job["options"] for job in jobs])
        first, *reply = decoded(await self.call("enqueue", options, *[job["payload"] for job in jobs]))
        assert first in (0, 1)
        assert len(reply) == 3 * len(jobs)
        return [(reply[i], reply[i + 1], reply[i + 2]) for i in range(0, len(reply), 3)]

    async def add(self, job_id: str | None = None, **options: Any) -> str:
        """Enqueue one new job and return its id."""
        [(stored_id, _, created)] = await self.enqueue(spec(job_id, **options))
        assert created == 1
        return stored_id

    async def lease(
        self,
        worker: str = "w1",
        *,
        lease_ms: int = LEASE_MS,
        max_jobs: int = 1,
        lease_ids: Sequence[str] | None = None,
        request_id: str | None = None,
        expect_stale: int = 0,
    ) -> list[LeasedJob]:
        reply = await self.call(
            "lease",
            *lease_args(
                worker, lease_ms=lease_ms, max_jobs=max_jobs, lease_ids=lease_ids, request_id=request_id
            ),
        )
        leased = Lease.reply(self.name, reply)
        assert leased.stale == expect_stale
        self.retry_after_ms = leased.retry_after_ms  # the lease reply's hint (0: none)
        return leased.jobs

    async def lease_one(self, worker: str = "w1", *, lease_ms: int = LEASE_MS) -> LeasedJob:
        [job] = await self.lease(worker, lease_ms=lease_ms)
        return job

    async def heartbeat(self, job_id: str, lease_id: str, lease_ms: int = 0) -> list[int]:
        """[code, new lease_expires_at (0 when not renewed)] of one lease renewed alone."""
        return await self.heartbeat_many((job_id, lease_id, lease_ms))

    async def heartbeat_many(self, *leases: tuple[str, str, int]) -> list[int]:
        """Code and new expiry per (id, lease id, lease_ms; 0 = its own length), flat."""
        reply = await self.heartbeat_reply(*leases)
        return [value for i, value in enumerate(reply) if i % 3 != 2]

    async def heartbeat_reply(self, *leases: tuple[str, str, int] | tuple[str, str, int, str]) -> list[int]:
        """The flat reply: code, new expiry and cancel requested (0|1) per (id, lease id,
        lease_ms, progress JSON text or "")."""
        return await self.call("heartbeat", json.dumps([list(lease) for lease in leases]))

    async def ack(self, *acks: tuple[str, str] | tuple[str, str, bytes]) -> list[int]:
        """The codes of an ack call (its held-time entries are checked by ack_held)."""
        return (await self.ack_reply(*acks))[::2]

    async def ack_reply(self, *acks: tuple[str, str] | tuple[str, str, bytes]) -> list[int]:
        pairs = json.dumps([[ack[0], ack[1]] for ack in acks])
        results = [ack[2] if len(ack) == 3 else b"" for ack in acks]
        return await self.call("ack", pairs, *results)

    async def fail(
        self,
        job_id: str,
        lease_id: str,
        *,
        error: str = "boom",
        retry: bool = True,
        retry_after_ms: int | None = None,
    ) -> list[Any]:
        options: dict[str, Any] = {"retry": retry}
        if retry_after_ms is not None:
            options["retry_after_ms"] = retry_after_ms
        return decoded(await self.call("fail", job_id, lease_id, json.dumps(options), error))

    async def release(self, job_id: str, lease_id: str) -> int:
        [code] = await self.release_many((job_id, lease_id))
        return code

    async def release_many(self, *leases: tuple[str, str]) -> list[int]:
        return await self.call("release", json.dumps([list(pair) for pair in leases]))

    async def release_worker_step(
        self, worker: str, bound: str = "", step: int = 1000, offset: int = 0
    ) -> list[Any]:
        """[bound, more, stale, offset, released ids (oldest lease first)]."""
        return decoded(await self.call("release-worker", worker, bound, step, offset))

    async def release_worker(self, worker: str) -> list[str]:
        """All steps, as service/echomq_http/core/queue.py runs them: the released ids, oldest lease first."""
        steps, bound, offset = [], "", 0
        while True:
            bound, more, _, offset, *released = await self.release_worker_step(worker, bound, offset=offset)
            steps.append(released)
            if not more:
                return [job_id for step in reversed(steps) for job_id in step]

    async def sweep(
        self,
        batch: int = 100,
        completed_retention_ms: int | None = None,
        failed_retention_ms: int | None = None,
        expect_stale: int = 0,
    ) -> list[int]:
        """[reclaimed, dead_lettered, promoted, deleted, more]; retention as a service with these
        settings has it (its own rendering of the scripts), else the defaults."""
        scripts = self.scripts
        if completed_retention_ms is not None or failed_retention_ms is not None:
            scripts = await self.scripts_with(
                COMPLETED_RETENTION_MS=completed_retention_ms
                if completed_retention_ms is not None
                else LONG_RETENTION_MS,
                FAILED_RETENTION_MS=failed_retention_ms
                if failed_retention_ms is not None
                else LONG_RETENTION_MS,
            )
        # After more: stale, offset, schedules_due, outbox, flows_due.
        *reply, stale, _, _, _, _ = await scripts.call(
            "sweep", self.keys.script_keys, (self.keys.prefix, batch, 0)
        )
        assert stale == expect_stale
        return reply

    async def scripts_with(self, **settings: int) -> Scripts:
        """The scripts as a service with other settings renders them (retention, caps)."""
        placeholders = {**retention_placeholders(), **{name: str(value) for name, value in settings.items()}}
        key = tuple(sorted(placeholders.items()))
        if key not in self._variants:
            self._variants[key] = Scripts(backend_for(self.redis), placeholders=placeholders)
        return self._variants[key]

    async def aclose(self) -> None:
        for scripts in self._variants.values():
            await scripts.aclose()

    async def delete(self, job_id: str) -> int:
        return await self.call("delete", job_id)

    async def set_group(self, group: str, max_in_flight: int | None) -> int:
        return await self.call("set-group", group, "" if max_in_flight is None else max_in_flight)

    async def groups(self, after: str = "", limit: int = 100) -> list[Any]:
        """[queue cap ("" none), more, then (name, waiting, active, own max) per group]."""
        cap, more, *flat = decoded(await self.call("groups", after, limit))
        return [cap, more, [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]]

    async def set_paused(self, paused: bool) -> int:
        return await self.call("set-paused", "1" if paused else "0")

    async def redrive(
        self, ids: Sequence[str] = (), limit: int = limits.MAX_BATCH, bound: str = ""
    ) -> list[str]:
        _, _, _, *redriven = decoded(await self.call("redrive", json.dumps(list(ids)), limit, bound, 0))
        return redriven

    async def counts(self) -> list[int]:
        """[paused, waiting, delayed, active, completed, failed] (cancelled: all_counts)."""
        return (await self.all_counts())[:6]

    async def all_counts(self) -> list[int]:
        """[paused, waiting, delayed, active, completed, failed, cancelled]."""
        return await self.call("counts")

    async def ledger(self, offset: int = 0, limit: int = 100, worker: str = "") -> list[list[str]]:
        """[[id, worker, attempt, leased_at, lease_expires_at]] from the flat reply."""
        reply = decoded(await self.call("ledger", offset, limit, worker))
        assert len(reply) % 5 == 0
        return [reply[i : i + 5] for i in range(0, len(reply), 5)]

    async def workers(self) -> list[list[Any]]:
        return decoded(await self.call("workers"))

    async def failed_page(self, offset: int = 0, limit: int = 100) -> tuple[int, list[tuple[str, int]]]:
        """(total, [(id, payload bytes)]) from the flat reply."""
        total, *listing = decoded(await self.call("failed-page", offset, limit))
        return total, list(zip(listing[::2], listing[1::2], strict=True))

    # --- the state they leave --------------------------------------------------------------

    async def job(self, job_id: str) -> dict[str, str]:
        """The job's hash, decoded ({} when it does not exist)."""
        return decoded_dict(await self.redis.hgetall(self.keys.job(job_id)))

    async def field(self, job_id: str, name: str) -> bytes | None:
        return await self.redis.hget(self.keys.job(job_id), name)

    async def wait_list(self) -> list[str]:
        """The priority-0 wait LIST's jobs, left to right (leased from the right); the tombstones
        of deleted or cancelled jobs (":<id>") left out (wait_entries has them)."""
        return [entry for entry in await self.wait_entries() if not entry.startswith(":")]

    async def wait_entries(self) -> list[str]:
        """The priority-0 wait LIST as stored, tombstones included."""
        return decoded(await self.redis.lrange(self.keys.wait, 0, -1))

    async def prio(self) -> list[str]:
        """The priority ZSET, lowest score (leased first) first."""
        return decoded(await self.redis.zrange(self.keys.prio, 0, -1))

    async def line(self) -> list[str]:
        """Every waiting job in the order leases would take them."""
        return await self.prio() + list(reversed(await self.wait_list()))

    async def active(self) -> list[str]:
        """The ledger LIST as stored: newest lease on the left."""
        return decoded(await self.redis.lrange(self.keys.active, 0, -1))

    async def zset(self, key: str) -> dict[str, int]:
        """A ZSET as {member: score}."""
        scored = await self.redis.zrange(key, 0, -1, withscores=True)
        return {member.decode(): int(score) for member, score in scored}

    async def members(self, key: str) -> set[str]:
        """A SET's members, or a ZSET's (a worker's held jobs)."""
        if await self.redis.type(key) == b"zset":
            return {member.decode() for member in await self.redis.zrange(key, 0, -1)}
        return {member.decode() for member in await self.redis.smembers(key)}

    async def lock(self, job_id: str) -> str | None:
        value = await self.redis.get(self.keys.lock(job_id))
        return None if value is None else value.decode()

    async def lock_pttl(self, job_id: str) -> int:
        return await self.redis.pttl(self.keys.lock(job_id))

    async def meta(self) -> dict[str, str]:
        return decoded_dict(await self.redis.hgetall(self.keys.meta))

    async def now_ms(self) -> int:
        seconds, microseconds = await self.redis.time()
        return seconds * 1000 + microseconds // 1000

    async def next_ms(self) -> None:
        """Wait (busily, about a millisecond) until the Redis clock moves to a new millisecond,
        so that the next transition gets a later timestamp than the previous one."""
        start = await self.now_ms()
        while await self.now_ms() == start:
            pass

    # --- time passing ------------------------------------------------------------------------

    async def wait_for_expiry(self, job: LeasedJob) -> None:
        """Let a (tiny) lease really expire on the Redis clock: its lock is gone and its
        lease_expires_at has passed."""
        while await self.lock(job.id) is not None or await self.now_ms() <= job.lease_expires_at:
            await asyncio.sleep(EXPIRY_POLL_S)

    async def expire_lock(self, job_id: str) -> None:
        """The lease's lock expired; the sweep has not run yet (the deadline index still has it)."""
        await self.redis.delete(self.keys.lock(job_id))

    async def expire_lease(self, job_id: str, deadline_ms: int = PAST_MS) -> None:
        """The lock expired and the deadline index says so: the sweep will find the job."""
        await self.expire_lock(job_id)
        await self.redis.zadd(self.keys.deadlines, {job_id: deadline_ms})

    async def make_due(self, job_id: str, due_ms: int = PAST_MS) -> None:
        """As if the job's due time had come: its score, and META's delayed_due (include/base.lua)."""
        await self.redis.zadd(self.keys.delayed, {job_id: due_ms})
        await self.redis.hset(self.keys.meta, "delayed_due", due_ms)

    def wake(self) -> WakeListener:
        return WakeListener(self.redis, self.keys.wake)


def decoded_dict(fields: dict[bytes, bytes]) -> dict[str, str]:
    return {key.decode(): value.decode() for key, value in fields.items()}


@pytest.fixture
async def scripts(redis_client: Redis) -> AsyncIterator[Scripts]:
    scripts = Scripts(backend_for(redis_client))
    yield scripts
    await scripts.aclose()


@pytest.fixture
async def q(redis_client: Redis, scripts: Scripts, queue: str) -> AsyncIterator[LuaQueue]:
    lua_queue = LuaQueue(redis_client, scripts, queue)
    yield lua_queue
    await lua_queue.aclose()
