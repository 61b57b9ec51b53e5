"""admit_queue.lua (the registry's cap, every reply) and enqueue.lua's "new" argument (a
queue with no keys yet is refused, nothing stored, so that the service admits it first)."""

from __future__ import annotations

import json
import secrets

from echomq_http.core.bindings import NEW_QUEUE_ARG
from echomq_http.core.errors import ScriptCode
from echomq_http.store.keys import QUEUE_REGISTRY


def private_registry() -> str:
    """A registry of the test's own: the shared server's real one is the session service's."""
    return f"{QUEUE_REGISTRY}:lua-tests:{secrets.token_hex(4)}"


async def admit(scripts, registry: str, queue: str, max_queues: int) -> int:
    return await scripts.call("admit-queue", (registry,), (queue, max_queues))


async def test_admit_lists_a_new_queue_then_answers_0_for_a_listed_one(scripts, redis_client):
    registry = private_registry()
    try:
        assert await admit(scripts, registry, "a", 2) == 1
        assert await admit(scripts, registry, "a", 2) == 0
        assert await redis_client.smembers(registry) == {b"a"}
    finally:
        await redis_client.delete(registry)


async def test_admit_refuses_a_new_queue_at_the_cap_and_changes_nothing(scripts, redis_client):
    registry = private_registry()
    try:
        assert await admit(scripts, registry, "a", 2) == 1
        assert await admit(scripts, registry, "b", 2) == 1
        assert await admit(scripts, registry, "c", 2) == ScriptCode.TOO_MANY_QUEUES
        assert await admit(scripts, registry, "a", 2) == 0  # a listed queue is never refused
        assert await redis_client.smembers(registry) == {b"a", b"b"}
    finally:
        await redis_client.delete(registry)


async def test_enqueue_with_new_refuses_a_queue_without_keys_and_stores_nothing(q):
    options = json.dumps([q.spec("a")["options"]])

    assert await q.call("enqueue", options, b"1", NEW_QUEUE_ARG) == [ScriptCode.NEW_QUEUE]
    assert [key async for key in q.redis.scan_iter(match=q.keys.prefix + "*")] == []


async def test_enqueue_with_new_stores_in_a_queue_that_has_keys(q):
    await q.add("a")
    options = json.dumps([q.spec("b")["options"]])

    reply = await q.call("enqueue", options, b"2", NEW_QUEUE_ARG)

    assert reply == [0, b"b", b"waiting", 1]
    assert await q.counts() == [0, 2, 0, 0, 0, 0]
