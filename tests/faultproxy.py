"""A TCP proxy in front of a Redis server that can lose a reply: the command reaches Redis and
runs, then its reply is dropped and the connection broken, as when a network fails at the worst
moment. The service's multiplexer then re-sends the call (once), which must not act twice.

Threads, not asyncio: the service under test runs in a thread of its own (tests/server.py) and
must reach Redis through the proxy while the test's event loop is blocked starting it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

READ_CHUNK = 65536


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._sockets: list[socket.socket] = []
        self._closed = False
        self.dropped = 0  # replies lost so far
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"redis://{host}:{port}/0"

    def lose_reply_to(self, marker: bytes) -> None:
        """The reply to the next command whose bytes hold marker never reaches the client (nor
        anything else Redis sends on that connection from then on): the connection is closed."""
        with self._lock:
            self._marker = marker

    def close(self) -> None:
        self._closed = True
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
                client.sendall(data)
        self._hang_up(client, server)

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
