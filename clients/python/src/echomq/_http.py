"""How the clients speak HTTP: ``Answer`` (what every reader gets), the ``AsyncClient``'s own
keep-alive connection pool on asyncio and httptools, and adapters to httpx.

Why a pool of our own: a worker makes thousands of small requests a second, and the client's
CPU per request decides how many. On that workload httpx.AsyncClient spends about 0.9 ms of CPU
per request and aiohttp about 0.2 ms; asyncio's own transports with httptools' parser (the C
parser uvicorn uses, maintained by the uvloop authors) about 0.1 ms. What is left to this module
is small: one request at a time per connection, a pool of idle connections, deadlines.

The blocking ``Client`` keeps httpx (its cost matters little there), and an ``AsyncClient`` given
an httpx ``transport`` goes through httpx too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httptools
import httpx

from echomq.errors import ConnectionFailed

# uvicorn closes a connection idle for 5 s; one idle for longer than this is not used again, so
# a request is never written on a connection the service is closing at that instant.
IDLE_CONNECTION_S = 4.0
MAX_CONNECTIONS = 100


@dataclass(frozen=True, slots=True)
class Answer:
    """A response: status, body and headers (names in lower case)."""

    status: int
    content: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def target(base_path: str, path: str, params: Mapping[str, Any] | None) -> str:
    query = f"?{urlencode(params)}" if params else ""
    return f"{base_path}{path}{query}"


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Answer] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self.closed = False
        self.idle_since = time.monotonic()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(ConnectionFailed(f"malformed response: {error}"))

    def eof_received(self) -> bool:
        self._fail(ConnectionFailed("the service closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionFailed(f"connection lost: {exc or 'closed'}"))

    # httptools
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = Answer(self._parser.get_status_code(), b"".join(self._body), self._headers)
        self._headers, self._body = {}, []
        if not self._parser.should_keep_alive():
            self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # use
    def send(self, request: bytes) -> asyncio.Future[Answer]:
        assert self._transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: ConnectionFailed) -> None:
        self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


class AsyncPool:
    """Requests to one service over up to ``max_connections`` keep-alive connections."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        max_connections: int = MAX_CONNECTIONS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        self.base_path = parts.path.rstrip("/")
        host = parts.netloc.rsplit("@", 1)[-1]
        self._head = "".join(f"{name}: {value}\r\n" for name, value in {"host": host, **headers}.items())
        self._max = max_connections
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._closed = False

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float,
    ) -> Answer:
        request = self._request(method, target(self.base_path, path, params), body, headers)
        connection = await self._acquire(timeout)
        try:
            async with asyncio.timeout(timeout):
                answer = await connection.send(request)
        except TimeoutError:
            connection.close()
            raise ConnectionFailed(f"no answer within {timeout:.1f} s") from None
        except BaseException:
            connection.close()  # an answer may still come: the connection cannot be reused
            raise
        finally:
            self._give_back(connection)
        return answer

    def _request(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str] | None
    ) -> bytes:
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items()) if headers else ""
        if body is not None:
            extra += "content-type: application/json\r\n"
        head = f"{method} {path} HTTP/1.1\r\n{self._head}{extra}content-length: {len(body or b'')}\r\n\r\n"
        return head.encode("latin-1") + (body or b"")

    async def _acquire(self, timeout: float) -> _Connection:
        while True:
            if self._closed:
                raise ConnectionFailed("the client is closed", sent=False)
            now = time.monotonic()
            while self._idle:
                connection = self._idle.pop()
                if not connection.closed and now - connection.idle_since < IDLE_CONNECTION_S:
                    return connection
                connection.close()
                self._forget()
            if self._open < self._max:
                self._open += 1
                try:
                    return await self._connect(timeout)
                except BaseException:
                    self._open -= 1
                    self._wake_one()
                    raise
            slot = asyncio.get_running_loop().create_future()
            self._waiting.append(slot)
            try:
                async with asyncio.timeout(timeout):
                    await slot
            except TimeoutError:
                raise ConnectionFailed(f"no free connection within {timeout:.1f} s", sent=False) from None
            finally:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(slot)

    async def _connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    _Connection, self._host, self._port, ssl=self._ssl
                )
        except (OSError, TimeoutError) as error:
            raise ConnectionFailed(
                f"cannot connect to {self._host}:{self._port}: {error!r}", sent=False
            ) from error
        return connection

    def _give_back(self, connection: _Connection) -> None:
        if connection.closed or self._closed:
            connection.close()
            self._forget()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
        self._wake_one()

    def _forget(self) -> None:
        self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiting:
            slot = self._waiting.popleft()
            if not slot.done():
                slot.set_result(None)
                return

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
            self._forget()
        while self._waiting:
            slot = self._waiting.popleft()
            if not slot.done():
                slot.set_result(None)


def json_headers(body: bytes | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    """A request's own headers, with the content type of its JSON body."""
    found = dict(headers or {})
    if body is not None:
        found["content-type"] = "application/json"
    return found


def httpx_failure(error: httpx.TransportError, what: str) -> ConnectionFailed:
    """A ConnectionFailed for an httpx transport error; nothing was sent when it could not connect."""
    sent = not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    failure = ConnectionFailed(f"{what}: {error!r}", sent=sent)
    failure.__cause__ = error
    return failure


def httpx_answer(response: httpx.Response) -> Answer:
    return Answer(response.status_code, response.content, response.headers)


class HttpxAsyncPool:
    """The same interface over an ``httpx.AsyncClient`` (an AsyncClient given an httpx transport)."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str], transport: httpx.AsyncBaseTransport
    ) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers=dict(headers), transport=transport)

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float,
    ) -> Answer:
        try:
            response = await self._http.request(
                method,
                path,
                content=body,
                params=params,
                headers=json_headers(body, headers),
                timeout=timeout,
            )
        except httpx.TransportError as error:
            raise httpx_failure(error, f"{method} {path}") from error
        return httpx_answer(response)

    async def aclose(self) -> None:
        await self._http.aclose()
