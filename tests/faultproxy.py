"""A TCP proxy in front of a Redis server that can lose a reply: the command reaches Redis and
runs, then its reply is dropped and the connection broken, as when a network fails at the worst
moment. The service's multiplexer then re-sends the call (once), which must not act twice. (The
SDK's tests put it in front of the HTTP service the same way: a request's answer lost.)

It can also hold a reply back until the test lets it through (something else happens while a
call is in flight), and make a real server answer INFO as an older Redis would.

Threads, not asyncio: the service under test runs in a thread of its own (tests/support/service.py) and
must reach Redis through the proxy while the test's event loop is blocked starting it."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator

READ_CHUNK = 65536
INFO_VERSION = b"redis_version:"
_VALKEY_ONLY_LINE = re.compile(rb"^(server_name|valkey_[a-z_]+):.*\r\n", re.MULTILINE)


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._sockets: list[socket.socket] = []
        self._closed = False
        self.dropped = 0  # replies lost so far
        self._hold_marker: bytes | None = None
        self.holding = threading.Event()  # set once a reply is held back
        self._let_through = threading.Event()
        self._posed_version: bytes | None = None
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://{self.host_port}/0"

    @property
    def host_port(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def lose_reply_to(self, marker: bytes) -> None:
        """The reply to the next command whose bytes hold marker never reaches the client (nor
        anything else Redis sends on that connection from then on): the connection is closed."""
        with self._lock:
            self._marker = marker

    def hold_reply_holding(self, marker: bytes) -> None:
        """The next reply whose bytes hold marker, and whatever Redis sends after it on that
        connection, waits in the proxy (``holding`` is set) until let_replies_through(); from
        then on nothing is held."""
        with self._lock:
            self._hold_marker = marker

    def let_replies_through(self) -> None:
        self._let_through.set()

    def pose_as_redis(self, version: str) -> None:
        """INFO answers as a Redis of this version would: redis_version says it, and the lines
        only Valkey writes (valkey_version, server_name) are left out."""
        self._posed_version = version.encode()

    def cut(self) -> None:
        """Hang up every connection open now (as a network failure would); new ones still pass."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._closed = True
        self._let_through.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            doomed = threading.Event()  # set once this connection carried the marked command
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._requests, args=(client, server, doomed), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, doomed), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(READ_CHUNK):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        doomed.set()
                server.sendall(data)
        self._hang_up(client, server)

    def _replies(self, server: socket.socket, client: socket.socket, doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(READ_CHUNK):
                if doomed.is_set():
                    with self._lock:
                        self.dropped += 1
                    break
                version = self._posed_version
                if version is not None and INFO_VERSION in data:
                    data = self._posing(data, server, version)
                self._hold_if_marked(data)
                client.sendall(data)
        self._hang_up(client, server)

    def _hold_if_marked(self, data: bytes) -> None:
        with self._lock:
            marked = self._hold_marker is not None and self._hold_marker in data
            if marked:
                self._hold_marker = None
        if marked:
            self.holding.set()
            self._let_through.wait()

    @staticmethod
    def _posing(data: bytes, server: socket.socket, version: bytes) -> bytes:
        """data with the INFO reply in it rewritten: a bulk string "$<length>\\r\\n# Server..." (RESP2)
        or a verbatim one "=<length>\\r\\ntxt:# Server..." (RESP3)."""
        version_at = data.index(INFO_VERSION)
        start = max(data.rfind(b"$", 0, version_at), data.rfind(b"=", 0, version_at))
        body_start = data.index(b"\r\n", start) + 2
        body_end = body_start + int(data[start + 1 : body_start - 2])
        while len(data) < body_end:  # the rest of the reply, when it came in pieces
            more = server.recv(READ_CHUNK)
            if not more:
                raise OSError("the server closed the connection in the middle of a reply")
            data += more
        body = _VALKEY_ONLY_LINE.sub(b"", data[body_start:body_end])
        body = re.sub(rb"redis_version:[^\r]*", INFO_VERSION + version, body)
        kind = data[start : start + 1]
        return data[:start] + kind + b"%d\r\n" % len(body) + body + data[body_end:]

    @staticmethod
    def _hang_up(*sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


@contextlib.contextmanager
def fault_proxy(redis_port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy("127.0.0.1", redis_port)
    try:
        yield proxy
    finally:
        proxy.close()
