"""uvicorn's httptools protocol, writing each response to the socket once rather than twice.

uvicorn writes a response's status line and headers as soon as the application sends
``http.response.start``, and the body at ``http.response.body``: two ``send()`` calls and two TCP
segments for every small answer, and two wake-ups of the client reading it. Here the writes
made in one turn of the event loop are joined and written at the end of that turn, so a small
response (both messages sent one after the other, as every handler here does) costs one of each.
Nothing waits longer than the current turn: a streamed response's chunks go out as they did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class JoinedWrites:
    """A transport whose writes within one turn of the event loop reach the socket as one.

    Everything else is the transport's own; write_eof() and close() first write what is
    pending, as a transport's close() sends what it has buffered."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def writelines(self, chunks: Iterable[bytes]) -> None:
        self.write(b"".join(chunks))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class JoinedWritesProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose responses are written with one send() each (see the module)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = JoinedWrites(transport, self.loop)  # type: ignore[assignment]
