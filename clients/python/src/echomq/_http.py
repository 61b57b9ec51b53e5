"""How the clients speak HTTP: ``Answer`` (what every reader gets), the ``AsyncClient``'s
aiohttp session, and adapters to httpx.

Why aiohttp for ``AsyncClient`` (and so the ``Worker``): client CPU per job measured by
bench/http_clients.py (three runs on a shared 2-core machine; the Worker at c=50 draining 20,000
no-op jobs, and 50 single-job loops acking with ``lease_next``):

    client                          Worker c=50       ack+lease_next, 50 loops
    httpx.AsyncClient               82-91 us/job      ~4,100 us/job
    aiohttp ClientSession           44-49 us/job      ~270 us/job
    asyncio + httptools, own pool   41-50 us/job      ~80 us/job

The Worker batches (about 50 jobs a request), so its CPU is its own work more than HTTP, and
aiohttp stays within 15% of a pool of our own there: a well-kept library beats code to keep up.
Single-job loops pay aiohttp's per-request cost in full, but the service's own CPU per request
is larger still (bench.py's sdk_next: 0.31x BullMQ with the own pool, 0.13-0.36x with aiohttp).

The blocking ``Client`` keeps httpx, and an ``AsyncClient`` given an httpx ``transport`` goes
through httpx too.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, Optional

import aiohttp
import httpx
from msgspec import Struct
from yarl import URL

from echomq.errors import ConnectionFailed

# uvicorn closes a connection idle for 5 s; one idle for longer than this is closed by us first,
# so a request is never written on a connection the service is closing at that instant.
IDLE_CONNECTION_S = 4.0
MAX_CONNECTIONS = 100
_JSON = {"content-type": "application/json"}


class Answer(Struct, frozen=True):
    """A response: status, body and headers (looked up by lower-case name)."""

    status: int
    content: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def reason_of(error: BaseException) -> str:
    """Why a connection failed, in a few words (``connection refused``, ``name or service not
    known``): the strerror of the OS error under it, else the error's own text."""
    seen: Optional[BaseException] = error
    while seen is not None:
        code = getattr(seen, "errno", None)
        if isinstance(seen, OSError) and isinstance(code, int) and code in errno.errorcode:
            return os.strerror(code).lower()
        seen = seen.__cause__ or seen.__context__
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(error)).strip()
    return (text[:1].lower() + text[1:]) if text else type(error).__name__


def json_headers(body: Optional[bytes], headers: Optional[Mapping[str, str]]) -> dict[str, str]:
    """A request's own headers, with the content type of its JSON body."""
    found = dict(headers or {})
    if body is not None:
        found["content-type"] = "application/json"
    return found


class AiohttpPool:
    """Requests to one service over an aiohttp session: keep-alive connections, up to
    ``max_connections`` at once."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str], *, max_connections: int = MAX_CONNECTIONS
    ) -> None:
        self._base = base_url.rstrip("/")
        self._headers = dict(headers)
        self._max = max_connections
        self._session: Optional[aiohttp.ClientSession] = None  # made on first use: it needs a loop
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise ConnectionFailed("the client is closed", sent=False)
        connector = aiohttp.TCPConnector(limit=self._max, keepalive_timeout=IDLE_CONNECTION_S)
        self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: float,
    ) -> Answer:
        session = self._session or self._open()
        deadline = self._timeouts.get(timeout)
        if deadline is None:  # a few distinct values: the client's, plus each long poll's
            deadline = self._timeouts[timeout] = aiohttp.ClientTimeout(total=timeout)
        # The paths come percent-encoded (echomq._ops): yarl need not encode them again.
        url = URL(self._base + path, encoded=True)
        if params:
            url = url.with_query(params)
        try:
            async with session.request(
                method,
                url,
                data=body,
                headers=_JSON if headers is None and body is not None else json_headers(body, headers),
                timeout=deadline,
            ) as response:
                return Answer(response.status, await response.read(), response.headers)
        except asyncio.TimeoutError:
            reason = f"no answer within {timeout:.1f} s"
            raise ConnectionFailed(f"{method} {url}: {reason}", reason=reason) from None
        except aiohttp.ClientConnectorError as error:  # could not connect: nothing was sent
            reason = reason_of(error)
            raise ConnectionFailed(f"cannot connect to {url}: {reason}", sent=False, reason=reason) from error
        except aiohttp.ClientError as error:
            raise ConnectionFailed(f"{method} {url}: {error!r}", reason=reason_of(error)) from error

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Mapping[str, Any],
        headers: Mapping[str, str],
        timeout: float,
        idle_s: float,
    ) -> AsyncIterator[tuple[Answer, AsyncIterator[bytes]]]:
        """A GET whose body is read as it comes: the answer (its content only when it is a
        problem) and its chunks. ``idle_s``: the longest silence between chunks."""
        session = self._session or self._open()
        url = URL(self._base + path, encoded=True).with_query(params or None)
        deadline = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=idle_s)
        try:
            async with session.get(url, headers=headers, timeout=deadline) as response:
                content = await response.read() if response.status >= 400 else b""
                yield Answer(response.status, content, response.headers), response.content.iter_any()
        except asyncio.TimeoutError:
            reason = f"nothing for {idle_s:.0f} s"
            raise ConnectionFailed(f"GET {url}: {reason}", reason=reason) from None
        except aiohttp.ClientConnectorError as error:
            reason = reason_of(error)
            raise ConnectionFailed(f"cannot connect to {url}: {reason}", sent=False, reason=reason) from error
        except aiohttp.ClientError as error:
            raise ConnectionFailed(f"GET {url}: {error!r}", reason=reason_of(error)) from error

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()


def httpx_failure(error: httpx.TransportError, what: str) -> ConnectionFailed:
    """A ConnectionFailed for an httpx transport error; nothing was sent when it could not connect."""
    sent = not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    with contextlib.suppress(RuntimeError):  # an error raised without its request
        what = f"{what} ({error.request.url})"
    reason = reason_of(error)
    failure = ConnectionFailed(f"{what}: {reason}", sent=sent, reason=reason)
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
        body: Optional[bytes] = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
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

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Mapping[str, Any],
        headers: Mapping[str, str],
        timeout: float,
        idle_s: float,
    ) -> AsyncIterator[tuple[Answer, AsyncIterator[bytes]]]:
        try:
            async with self._http.stream(
                "GET", path, params=params, headers=headers, timeout=httpx.Timeout(timeout, read=idle_s)
            ) as response:
                content = await response.aread() if response.status_code >= 400 else b""
                yield Answer(response.status_code, content, response.headers), response.aiter_bytes()
        except httpx.TransportError as error:
            raise httpx_failure(error, f"GET {path}") from error

    async def aclose(self) -> None:
        await self._http.aclose()
