"""A queue's event feed (``GET .../events``, Server-Sent Events), shared by Client and AsyncClient.

``SSEParser`` reads the text/event-stream format (any line ending, comments, multi-line data,
``retry``). ``EventFeed`` is one ``events()`` iteration: what each connection asks for (the last
event id received, as Last-Event-ID), the events read from its chunks, and how long to wait before
the next connection. The clients only move bytes: the feed decides, so both resume alike.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from typing import Any, Optional

import msgspec

from echomq import _ops
from echomq import models as m
from echomq.errors import BackendUnavailable, ConnectionFailed, EchoMQError, TooManyRequests

# The service sends a keep-alive comment every 15 s at most: a stream silent for this long is
# taken for dead and resumed.
IDLE_S = 45.0
FIRST_PAUSE_S = 0.1
DEFAULT_RETRY_S = 2.0  # until the service's `retry:` says otherwise
_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_decode = msgspec.json.Decoder(m.Event).decode


class SSEParser:
    """Text/event-stream as the HTML standard reads it: ``feed`` bytes as they come, get the
    complete events as (id or None, data)."""

    def __init__(self) -> None:
        self._rest = b""
        self._started = False
        self._data: list[str] = []
        self._id: Optional[str] = None
        self.retry_ms: Optional[int] = None

    def feed(self, chunk: bytes) -> list[tuple[Optional[str], str]]:
        text = self._rest + chunk
        if not self._started:  # a byte order mark may open the stream, in pieces too
            if _BOM.startswith(text):
                self._rest = text
                return []
            self._started = True
            text = text[3:] if text.startswith(_BOM) else text
        # A chunk ending in \r may be half of a \r\n: keep it for the next chunk.
        held = text.endswith(b"\r")
        lines = _LINE_END.split(text[:-1] if held else text)
        self._rest = lines.pop() + (b"\r" if held else b"")
        found = []
        for line in lines:
            event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                found.append(event)
        return found

    def _line(self, line: str) -> Optional[tuple[Optional[str], str]]:
        if not line:  # a blank line ends the event
            event = (self._id, "\n".join(self._data)) if self._data else None
            self._data, self._id = [], None
            return event
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None  # "event" is in the data too (its type); unknown fields are ignored


class EventFeed:
    """One ``events()`` iteration across its connections."""

    def __init__(
        self, queue: str, after: Optional[int], types: Optional[Iterable[str]], job: Optional[str]
    ) -> None:
        self.path = f"{_ops._q(queue)}/events"
        self._filters = {"types": ",".join(types) if types is not None else None, "job": job}
        self.last_id = after  # None: only events from the first connection on
        self._resumed = False
        self._parser = SSEParser()
        self._delivered = False
        self._failures = 0
        self._retry_s = DEFAULT_RETRY_S

    def connect(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The next connection's query and headers: after the last event received."""
        self._parser = SSEParser()
        self._delivered = False
        params = {k: v for k, v in self._filters.items() if v is not None}
        headers = {"accept": "text/event-stream"}
        if self.last_id is not None and self._resumed:
            headers["last-event-id"] = str(self.last_id)
        elif self.last_id is not None:
            params["after"] = self.last_id
        self._resumed = True
        return params, headers

    def read(self, chunk: bytes) -> list[m.Event]:
        events = []
        for event_id, data in self._parser.feed(chunk):
            if not data:
                continue  # not one of the service's: each event has its JSON
            event = _decode(data)
            if event_id is not None and event_id.isdigit():
                self.last_id = int(event_id)
                event = msgspec.structs.replace(event, event_id=self.last_id)
            elif event.type == "resync" and event.oldest is not None:
                self.last_id = event.oldest - 1  # where the service goes on from
            events.append(event)
        if self._parser.retry_ms is not None:
            self._retry_s = self._parser.retry_ms / 1000
        self._delivered = self._delivered or bool(events)
        return events

    def pause_s(self, error: Optional[EchoMQError]) -> float:
        """How long to wait before connecting again after the stream ended (with ``error``, or
        cleanly): none after a connection that delivered events (say one the service dropped
        for falling behind), else growing up to the service's ``retry``. Other errors than
        lost connections, 503 and 429 are raised: connecting again cannot help."""
        if error is not None and not isinstance(
            error, (ConnectionFailed, BackendUnavailable, TooManyRequests)
        ):
            raise error
        if self._delivered:
            self._failures = 0
            return 0.0
        self._failures += 1
        pause = min(self._retry_s, FIRST_PAUSE_S * 2 ** (self._failures - 1)) * random.uniform(0.5, 1.0)
        return max(pause, getattr(error, "retry_after_s", None) or 0.0)
