"""One Redis connection shared by concurrent calls, their commands pipelined on it.

A call through redis-py's client checks a connection out of the pool, writes one command, waits
for its reply and checks the connection back in: about 40 % of a small request's CPU here
(docs/PERFORMANCE.md). A Multiplexer writes the commands made while the event loop is busy in
one go, on one connection, and one reader hands the replies back in order (the way ioredis
does). Redis runs commands one at a time anyway, so one busy connection loses nothing.

Connections come from the client's pool factory (make_connection), so URL options, TLS, ACL
credentials and Sentinel's primary discovery are redis-py's. A broken connection fails every
call waiting on it with ConnectionError (or TimeoutError) and the next call opens a new one;
like the client's Retry(1), such a call is tried once more before the error reaches the caller.
Not for commands that block or that must be followed by another on the same connection (WAIT).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from collections.abc import Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

RETRY_AFTER_S = 0.01
# Written data the socket has not taken yet above which the writes wait for it to drain (asyncio's
# own high-water mark): below, the transport buffers it and no task waits.
DRAIN_ABOVE_BYTES = 64 * 1024
WATCH_CHECKS_PER_TIMEOUT = 4
_BROKEN = (RedisConnectionError, RedisTimeoutError, OSError)


Arg = bytes | str | int


def _bulk(value: Arg) -> bytes:
    """One argument in RESP (redis-py's packer is written for every case; this one for ours)."""
    if isinstance(value, str):
        value = value.encode()
    elif isinstance(value, int):  # bool included: redis-py refuses those; we never send one
        value = b"%d" % value
    elif not isinstance(value, bytes):
        raise TypeError(f"a Redis command argument must be bytes, str or int, not {type(value).__name__}")
    return b"$%d\r\n%b\r\n" % (len(value), value)


class Packed:
    """The leading arguments of commands sent often (a script's EVALSHA, sha and keys), packed once."""

    __slots__ = ("count", "data")

    def __init__(self, args: Sequence[Arg]) -> None:
        self.count = len(args)
        self.data = b"".join(map(_bulk, args))


class _Link:
    """One connection's life: the replies it owes, in order, and what is still to be written."""

    def __init__(self, connection: AbstractConnection) -> None:
        self.connection = connection
        self.owed: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.unsent: list[bytes] = []
        self.writing = False
        self.broken: BaseException | None = None
        self.something_owed = asyncio.Event()
        self.waiting_since = 0.0  # loop time of the last reply, or of the first call owed since
        self.tasks: set[asyncio.Task[None]] = set()


class Multiplexer:
    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._link: _Link | None = None
        self._closed = False

    async def execute(self, *args: Arg) -> Any:
        """One command's reply; a Redis error reply is raised (ResponseError and subclasses)."""
        return await self.execute_packed(Packed(()), args)

    def submit(self, *args: Arg) -> asyncio.Future[Any]:
        """Send a command with whatever else goes out now, without waiting: await the future
        for its reply later (no second try on a broken connection)."""
        return self._send(b"*%d\r\n%b" % (len(args), b"".join(map(_bulk, args))))

    async def execute_packed(self, head: Packed, args: Sequence[Arg]) -> Any:
        """The command whose first arguments are packed already in head, the rest in args."""
        command = b"*%d\r\n%b%b" % (head.count + len(args), head.data, b"".join(map(_bulk, args)))
        try:
            return await self._send(command)
        except _BROKEN:
            if self._closed:
                raise
            await asyncio.sleep(RETRY_AFTER_S)
            return await self._send(command)

    def _send(self, command: bytes) -> asyncio.Future[Any]:
        if self._closed:
            raise RedisConnectionError("the multiplexer is closed")
        link = self._link if self._link is not None and self._link.broken is None else self._open()
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not link.owed:
            link.waiting_since = reply.get_loop().time()
        link.owed.append(reply)
        link.unsent.append(command)
        link.something_owed.set()
        if not link.writing:
            link.writing = True
            reply.get_loop().call_soon(self._flush, link)
        return reply

    def _open(self) -> _Link:
        link = self._link = _Link(self._pool.make_connection())
        link.writing = True  # until connected: commands wait in unsent
        self._spawn(link, self._connect(link))
        return link

    def _spawn(self, link: _Link, work: Any) -> None:
        task = asyncio.create_task(work)
        link.tasks.add(task)
        task.add_done_callback(link.tasks.discard)

    async def _connect(self, link: _Link) -> None:
        try:
            await link.connection.connect()
        except BaseException as error:
            await self._break(link, error)
            return
        self._spawn(link, self._read(link))
        if link.connection.socket_timeout:
            self._spawn(link, self._watch(link, link.connection.socket_timeout))
        self._flush(link)

    def _flush(self, link: _Link) -> None:
        """Everything queued during this turn of the event loop in one write to the transport,
        without a task (two per write through redis-py's send_packed_command, with its timeout):
        a task waits only when the socket is behind by more than DRAIN_ABOVE_BYTES. A write that
        never completes leaves replies owed, which _watch times out."""
        if link.broken is not None:  # _break failed the calls owed
            link.writing = False
            return
        chunks, link.unsent = link.unsent, []
        writer = link.connection._writer  # redis-py's stream writer of the connected socket
        try:
            if writer is None:
                raise RedisConnectionError("the connection is closed")
            writer.writelines(chunks)
        except Exception as error:
            self._spawn(link, self._break(link, error))
            return
        if writer.transport.get_write_buffer_size() > DRAIN_ABOVE_BYTES:
            self._spawn(link, self._drain(link, writer))
        else:
            link.writing = False

    async def _drain(self, link: _Link, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.drain()
        except BaseException as error:
            await self._break(link, error)
            return
        if link.unsent:
            self._flush(link)
        else:
            link.writing = False

    async def _read(self, link: _Link) -> None:
        """The replies, in the order the commands went out."""
        while link.broken is None:
            if not link.owed:
                link.something_owed.clear()
                await link.something_owed.wait()
                continue
            try:
                # No timeout per reply (one costs more than the rest of the read): _watch
                # times out a connection that owes replies and makes no progress.
                reply: Any = await link.connection.read_response(timeout=math.inf)
            except ResponseError as error:
                reply = error
            except BaseException as error:
                await self._break(link, error)
                return
            link.waiting_since = asyncio.get_running_loop().time()
            waiter = link.owed.popleft()
            if waiter.done():  # its caller went away; the reply is dropped
                continue
            if isinstance(reply, ResponseError):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)

    async def _watch(self, link: _Link, timeout_s: float) -> None:
        """The socket timeout, checked a few times per period: a connection owing replies that
        has not delivered one for longer than timeout_s is given up."""
        loop = asyncio.get_running_loop()
        while link.broken is None:
            await asyncio.sleep(timeout_s / WATCH_CHECKS_PER_TIMEOUT)
            if link.owed and loop.time() - link.waiting_since > timeout_s:
                await self._break(link, RedisTimeoutError(f"no reply from Redis within {timeout_s} s"))

    async def _break(self, link: _Link, error: BaseException) -> None:
        """The connection is unusable: fail every call still owed a reply, close it."""
        if link.broken is not None:
            return
        if isinstance(error, asyncio.CancelledError | GeneratorExit):
            error = RedisConnectionError("connection closed")
        elif isinstance(error, TimeoutError):  # asyncio's, from a connection's handshake
            error = RedisTimeoutError(f"Redis did not answer in time: {error}")
        elif not isinstance(error, RedisConnectionError | RedisTimeoutError):
            error = RedisConnectionError(f"Redis connection failed: {error}")
        link.broken = error
        link.something_owed.set()
        if self._link is link:
            self._link = None
        while link.owed:
            waiter = link.owed.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()
        with contextlib.suppress(Exception):
            await link.connection.disconnect(nowait=True)

    async def aclose(self) -> None:
        self._closed = True
        link, self._link = self._link, None
        if link is None:
            return
        await self._break(link, RedisConnectionError("the multiplexer was closed"))
        await asyncio.gather(*link.tasks, return_exceptions=True)
