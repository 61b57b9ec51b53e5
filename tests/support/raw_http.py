"""A client's raw HTTP/1.1 connection to the service, for tests that need the bytes on the wire:
what arrives in which segment, pipelined requests, connections held idle or half-sent."""

from __future__ import annotations

import dataclasses
import select
import socket
import time

import pytest

HEALTH_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[bytes, bytes]  # names in lower case
    body: bytes


def post_request(path: str, body: bytes, *extra_headers: bytes) -> bytes:
    """A JSON POST's bytes: its head, then its body."""
    head = [b"POST %s HTTP/1.1" % path.encode(), b"Host: 127.0.0.1", b"Content-Type: application/json"]
    head += [b"Content-Length: %d" % len(body), *extra_headers]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class RawConnection:
    """One connection to the service at url, read through a buffer: answers to pipelined
    requests may come in one segment."""

    def __init__(self, url: str, timeout_s: float = 10) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.socket = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.reader = self.socket.makefile("rb")

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.reader.close()
        self.socket.close()

    def send(self, data: bytes) -> None:
        self.socket.sendall(data)

    def ask(self, request: bytes = HEALTH_REQUEST) -> Answer:
        self.send(request)
        return self.answer()

    def answer(self) -> Answer:
        """One whole answer (with a Content-Length)."""
        status_line = self.reader.readline()
        assert status_line, "the service closed the connection without answering"
        headers = {}
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            headers[name.lower()] = value.strip()
        body = self.reader.read(int(headers[b"content-length"]))
        return Answer(int(status_line.split()[1]), headers, body)

    def answer_waiting(self) -> bool:
        return bool(select.select([self.socket], [], [], 0)[0])

    def is_closed(self) -> bool:
        """The service closed the connection (an end of stream, or a reset) and sent nothing more."""
        try:
            return self.reader.read(1) == b""
        except ConnectionResetError:
            return True

    def closed_after_s(self, within_s: float) -> float:
        """Seconds until the service closes the connection; fails if it is still open within_s."""
        started = time.monotonic()
        self.socket.settimeout(within_s)
        try:
            assert self.reader.read(1) == b"", "the service answered instead of closing"
        except TimeoutError:
            pytest.fail(f"the connection was still open after {within_s} s")
        except ConnectionResetError:
            pass
        return time.monotonic() - started
