"""echomq_http.store.multiplex against a real server: replies reach their own callers, in any mix of
concurrency, error replies, cancelled callers and broken connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from echomq_http.store.multiplex import Multiplexer
from tests.support.servers import RedisServer


@pytest.fixture
async def plain(private_valkey: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(private_valkey.url, socket_timeout=5)
    yield client
    await client.aclose()


@pytest.fixture
async def mux(plain: Redis) -> AsyncIterator[Multiplexer]:
    multiplexer = Multiplexer(plain.connection_pool)
    yield multiplexer
    await multiplexer.aclose()


async def test_concurrent_calls_each_get_their_own_reply(mux: Multiplexer) -> None:
    replies = await asyncio.gather(*(mux.execute("ECHO", f"call-{i}") for i in range(500)))
    assert replies == [f"call-{i}".encode() for i in range(500)]


async def test_they_share_one_connection(mux: Multiplexer, plain: Redis) -> None:
    await mux.execute("CLIENT", "SETNAME", "emq-mux")
    await asyncio.gather(*(mux.execute("INCR", "counter") for _ in range(200)))
    names = [client["name"] for client in await plain.client_list()]
    assert names.count("emq-mux") == 1
    assert await plain.get("counter") == b"200"


async def test_an_error_reply_fails_only_its_own_call(mux: Multiplexer, plain: Redis) -> None:
    await plain.set("text", "x")
    calls = [mux.execute("ECHO", "before"), mux.execute("HGET", "text", "f"), mux.execute("ECHO", "after")]
    before, wrong, after = await asyncio.gather(*calls, return_exceptions=True)
    assert (before, after) == (b"before", b"after")
    assert isinstance(wrong, ResponseError) and "WRONGTYPE" in str(wrong)


async def test_a_cancelled_caller_does_not_shift_the_replies(mux: Multiplexer) -> None:
    slow = asyncio.create_task(mux.execute("BLPOP", "nothing", "0.2"))
    await asyncio.sleep(0.05)
    slow.cancel()
    assert await mux.execute("ECHO", "next") == b"next"
    assert await asyncio.gather(*(mux.execute("ECHO", str(i)) for i in range(50))) == [
        str(i).encode() for i in range(50)
    ]


async def test_a_killed_connection_is_replaced_and_the_call_tried_again(
    mux: Multiplexer, plain: Redis
) -> None:
    await mux.execute("CLIENT", "SETNAME", "emq-mux")
    await plain.execute_command("CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal")
    assert await mux.execute("ECHO", "again") == b"again"
    assert await asyncio.gather(*(mux.execute("ECHO", str(i)) for i in range(20))) == [
        str(i).encode() for i in range(20)
    ]


async def test_calls_owed_a_reply_when_the_server_dies_fail_with_connection_error(
    private_valkey: RedisServer, mux: Multiplexer
) -> None:
    assert await mux.execute("PING") == b"PONG"
    stuck = asyncio.gather(*(mux.execute("BLPOP", "nothing", "1") for _ in range(3)), return_exceptions=True)
    await asyncio.sleep(0.2)
    private_valkey.kill()
    outcomes = await asyncio.wait_for(stuck, timeout=20)
    assert all(isinstance(outcome, RedisConnectionError) for outcome in outcomes), outcomes
    with pytest.raises(RedisConnectionError):
        await mux.execute("PING")


async def test_close_fails_what_is_still_owed(mux: Multiplexer) -> None:
    pending = asyncio.gather(mux.execute("BLPOP", "nothing", "0.5"), return_exceptions=True)
    await asyncio.sleep(0.05)
    await mux.aclose()
    (outcome,) = await pending
    assert isinstance(outcome, RedisConnectionError)


async def test_a_server_that_stops_answering_times_the_calls_out(private_valkey: RedisServer) -> None:
    client = Redis.from_url(private_valkey.url, socket_timeout=0.5)
    mux = Multiplexer(client.connection_pool)
    try:
        assert await mux.execute("PING") == b"PONG"
        await client.execute_command("CLIENT", "PAUSE", "2500", "ALL")  # this client's too
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await mux.execute("PING")
        assert time.monotonic() - started < 2.5  # two tries, each given up after 0.5-0.625 s
        await asyncio.sleep(3 - (time.monotonic() - started))  # the pause is over
        assert await mux.execute("ECHO", "back") == b"back"
    finally:
        await mux.aclose()
        await client.aclose()


async def test_arguments_are_bytes_str_or_int(mux: Multiplexer) -> None:
    assert await mux.execute("ECHO", b"\x00\xff") == b"\x00\xff"
    assert await mux.execute("ECHO", "é") == "é".encode()
    assert await mux.execute("ECHO", -12) == b"-12"
    with pytest.raises(TypeError, match="float"):
        await mux.execute("ECHO", 1.5)  # type: ignore[arg-type]
