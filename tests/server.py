"""The service under test, served by a real uvicorn on a loopback port in a background thread,
so that tests talk HTTP the way clients do, concurrently."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import httpx
import uvicorn

from echomq_http.app import create_app
from echomq_http.config import Settings
from echomq_http.http_protocol import http_protocol
from echomq_http.telemetry import Telemetry

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 30.0


@contextlib.contextmanager
def running_service(settings: Settings, telemetry: Telemetry | None = None) -> Iterator[str]:
    """Start the app with these settings; yields its base URL; stops it (lifespan included)."""
    config = uvicorn.Config(
        create_app(settings, telemetry),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        http=http_protocol(settings),  # type: ignore[arg-type]  # as `emq serve` runs it
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="emq-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    try:
        httpx.get(url + "/healthz").raise_for_status()
        yield url
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
