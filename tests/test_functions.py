"""Scripts run as Redis functions where the server has them (echomq_http.store.luafunctions), with
EVALSHA where it has not: a server that lost its functions gets them back within the call, and
a user who may not call them gets the same scripts by EVALSHA."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from msgspec import UNSET, Raw
from redis.asyncio import Redis

from echomq_http.api.schemas.jobs import EnqueueRequest
from echomq_http.core.bindings import READ_ONLY_OPERATIONS
from echomq_http.core.queue import JobQueues
from echomq_http.store.backends import backend_for
from echomq_http.store.keys import keys_of
from echomq_http.store.luafunctions import library
from echomq_http.store.scripts import Scripts, lua_dir, operation_of, render_parts
from tests.support.queues import job_queues
from tests.support.servers import RedisServer

QUEUE = "fq"
USER, PASSWORD = "no-functions", "pw-no-functions"


CALLS_AT_ONCE = 16


@pytest.fixture
async def server(private_valkey: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(private_valkey.url)
    yield client
    await client.aclose()


async def script_calls(client: Redis) -> dict[str, int]:
    stats = await client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("fcall", "evalsha", "eval")}


async def library_names(client: Redis) -> list[str]:
    libraries = [dict(zip(entry[::2], entry[1::2], strict=True)) for entry in await client.function_list()]
    return [library[b"library_name"].decode() for library in libraries]


async def enqueue_one(queues: JobQueues) -> None:
    await queues.enqueue(QUEUE, [EnqueueRequest(payload=Raw(b'"work"'))])


async def test_every_script_loads_as_a_function_library(server: Redis) -> None:
    for path in sorted(lua_dir().glob("*.lua")):
        operation = operation_of(path)
        rendered = render_parts(path)
        name = f"emq_test_{operation.replace('-', '_')}"
        await server.function_load(
            library(name, rendered.includes, rendered.body, read_only=operation in READ_ONLY_OPERATIONS),
            replace=True,
        )
    assert len(await server.function_list()) == len(list(lua_dir().glob("*.lua")))


async def test_calls_go_by_fcall_and_each_library_is_loaded_once(server: Redis) -> None:
    queues = job_queues(server, CALLS_AT_ONCE)
    try:
        for _ in range(3):
            await enqueue_one(queues)
            [job] = await queues.lease(QUEUE, "w1", 60_000, 1)
            await queues.ack_one(QUEUE, job.id, job.lease_id, UNSET)
        calls = await script_calls(server)
        assert calls["fcall"] >= 9 and calls["evalsha"] == calls["eval"] == 0
        names = await library_names(server)
        assert sorted(name.rsplit("_", 1)[0] for name in names) == [
            "emq_ack",
            "emq_admit_queue",  # the queue's first enqueue admits it to the registry
            "emq_enqueue",
            "emq_lease",
        ]
    finally:
        await queues.aclose()


async def test_a_server_that_lost_its_functions_gets_them_back_and_each_call_acts_once(server: Redis) -> None:
    queues = job_queues(server, CALLS_AT_ONCE)
    try:
        await enqueue_one(queues)
        await enqueue_one(queues)
        await server.function_flush()  # as a restart without persistence would
        [job] = await queues.lease(QUEUE, "w1", 60_000, 1)  # loaded again within the call
        assert await server.llen(queues.keys(QUEUE).active) == 1  # one lease, not two
        await server.function_flush()
        await queues.ack_one(QUEUE, job.id, job.lease_id, UNSET)
        assert await server.llen(queues.keys(QUEUE).active) == 0
        assert await server.zcard(queues.keys(QUEUE).completed) == 1
        assert await server.llen(queues.keys(QUEUE).wait) == 1  # the other job still waits
    finally:
        await queues.aclose()


async def test_a_user_who_may_not_call_functions_runs_the_same_scripts_by_evalsha(
    server: Redis, private_valkey: RedisServer
) -> None:
    await server.acl_setuser(
        USER,
        enabled=True,
        passwords=[f"+{PASSWORD}"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-fcall", "-fcall_ro", "-function"],
    )
    limited = Redis.from_url(private_valkey.url, username=USER, password=PASSWORD)
    queues = job_queues(limited, CALLS_AT_ONCE)
    try:
        await enqueue_one(queues)
        [job] = await queues.lease(QUEUE, "w1", 60_000, 1)
        await queues.ack_one(QUEUE, job.id, job.lease_id, UNSET)
        calls = await script_calls(server)
        assert calls["fcall"] == 0 and calls["evalsha"] >= 3  # every call by EVALSHA, the first refused
        assert await server.zcard(queues.keys(QUEUE).completed) == 1
        assert await server.function_list() == []
    finally:
        await queues.aclose()
        await limited.aclose()


async def test_a_read_only_script_is_a_function_that_writes_nothing() -> None:
    scripts = Scripts(backend_for(Redis()), read_only=READ_ONLY_OPERATIONS)
    for operation in scripts.operations:
        text = scripts._scripts[operation].library
        assert ("flags = {'no-writes'}" in text) == (operation in READ_ONLY_OPERATIONS)


# A test's script: an event in its own queue, then, with the helpers bound again to the queue
# whose prefix ARGV[2] is, one in that queue; answers both queue names and the second's keys.
TWO_QUEUES = """-- @include base
-- @include events
local now = now_ms()
local first = QUEUE
emit('probe', '-', '"n":1')
finish({}, now)
use_keys(queue_keys(ARGV[2]), {ARGV[2]})
emit('probe', '-', '"n":2')
return finish({first, QUEUE, META, DUE, PREFIX}, now)
"""


async def test_a_function_acts_on_a_second_queue_with_the_same_helpers(server: Redis, tmp_path: Path) -> None:
    """What a flow's parent in another queue needs on a single server (docs/FLOWS-DESIGN.md):
    one call, each queue's own events and META, as each queue's own scripts would write them."""
    shutil.copytree(lua_dir() / "include", tmp_path / "include")
    (tmp_path / "two_queues.lua").write_text(TWO_QUEUES)
    scripts = Scripts(backend_for(server), tmp_path)
    try:
        first, second = keys_of("qa"), keys_of("qb")
        await server.hset(second.meta, "event_seq", "41")  # the second queue's own numbering goes on
        reply = await scripts.call("two-queues", first.script_keys, [first.prefix, second.prefix])
        assert [item.decode() for item in reply] == ["qa", "qb", second.meta, second.due, second.prefix]
        assert await server.hget(first.meta, "event_seq") == b"1"
        assert await server.hget(second.meta, "event_seq") == b"42"
        [(first_id, first_entry)] = await server.xrange(first.events)
        [(second_id, second_entry)] = await server.xrange(second.events)
        assert (first_id, first_entry[b"e"]) == (b"0-1", b'probe - "n":1')
        assert (second_id, second_entry[b"e"]) == (b"0-42", b'probe - "n":2')
        calls = await script_calls(server)
        assert calls["evalsha"] == calls["eval"] == 0  # one function call (and its load's retry)
    finally:
        await scripts.aclose()
