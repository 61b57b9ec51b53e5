"""Which queues the sweeper must visit now: a read of the due index the scripts keep.

Every transition that gives a queue work for a later sweep (a lease that will expire, a delayed
job, a finished job whose retention will end) brings the queue's entry in the index forward, in
the same script; the sweep sets it exactly afterwards. So a sweeper reads only the entries that
are due, and a quiet queue costs nothing however many there are.

On a single server (or Sentinel) the index is one key. On a Cluster each queue's entry lives in
a key of the queue's own slot (echomq_http.store.keys.due_index_key), so the reader asks each known slot's
key, one pipeline per node. It learns the slots from the queue registry (re-read when its size
changes, and every REGISTRY_REFRESH_S) and from the queues this process has called.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import PipelineCommand, RedisCluster

from echomq_http.store.keys import DUE_INDEX, QUEUE_REGISTRY, due_index_key

REGISTRY_REFRESH_S = 30.0


def _ms(reply: Any) -> int:
    seconds, microseconds = reply
    return int(seconds) * 1000 + int(microseconds) // 1000


def _due_names(entries: Iterable[tuple[bytes, float]], now_ms: int) -> list[str]:
    return [name.decode() for name, score in entries if score <= now_ms]


def _pairs(reply: list[Any]) -> list[tuple[bytes, float]]:
    """ZRANGE ... WITHSCORES as (member, score) pairs, whether the client paired them or not."""
    if reply and isinstance(reply[0], list | tuple):
        return [(member, float(score)) for member, score in reply]
    return [(reply[i], float(reply[i + 1])) for i in range(0, len(reply), 2)]


class DueIndex:
    """A single server's index: one key."""

    def __init__(self, client: Redis) -> None:
        self._client = client

    def note(self, due_key: str) -> None:
        """The index key of a queue this process has called: a Cluster's index reads it from now on."""

    async def due(self, limit: int) -> list[str]:
        """Up to `limit` queues whose next sweep is due now (Redis clock), earliest first."""
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.zrange(DUE_INDEX, 0, limit - 1, withscores=True)
            now, entries = await pipe.execute()
        return _due_names(entries, _ms(now))


class SlotDueIndex(DueIndex):
    """A Cluster's index: a key per slot that holds a queue, each read on its node."""

    def __init__(self, client: RedisCluster, sharing: DueIndex | None = None) -> None:
        self._cluster_client = client
        # The index keys of the known queues' slots, shared with `sharing`: the sweep (on its own
        # connections) must see at once the queues the request path has called, not only after
        # the registry is read again.
        self._slot_keys: set[str] = sharing._slot_keys if isinstance(sharing, SlotDueIndex) else set()
        self._registry_size = -1
        self._registry_read_at = 0.0

    def note(self, due_key: str) -> None:
        self._slot_keys.add(due_key)

    async def due(self, limit: int) -> list[str]:
        client = self._cluster_client
        await self._learn_slots(client)
        by_node: dict[str, tuple[Any, list[str]]] = {}
        for key in self._slot_keys:
            node = client.get_node_from_key(key)
            by_node.setdefault(node.name, (node, []))[1].append(key)
        due: list[tuple[float, str]] = []
        for node, keys in by_node.values():
            commands = [PipelineCommand(0, "TIME")]
            commands += [
                PipelineCommand(i + 1, "ZRANGE", key, 0, limit - 1, "WITHSCORES")
                for i, key in enumerate(keys)
            ]
            await node.execute_pipeline(commands)
            now_ms = _ms(commands[0].result)
            for command in commands[1:]:
                if isinstance(command.result, Exception):
                    raise command.result
                due += [(score, name.decode()) for name, score in _pairs(command.result) if score <= now_ms]
        return [name for _, name in sorted(due)[:limit]]

    async def _learn_slots(self, client: RedisCluster) -> None:
        size = await client.scard(QUEUE_REGISTRY)
        stale = time.monotonic() - self._registry_read_at > REGISTRY_REFRESH_S
        if size == self._registry_size and not stale:
            return
        names = await client.smembers(QUEUE_REGISTRY)
        self._slot_keys |= {due_index_key(name.decode(), True) for name in names}
        self._registry_size = size
        self._registry_read_at = time.monotonic()
