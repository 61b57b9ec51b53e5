"""The service under test, served by a real uvicorn on a loopback port in a background thread,
so that tests talk HTTP the way clients do, concurrently."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import threading
import time
from collections.abc import Iterator

import httpx
import uvicorn

from echomq_http.api.http_protocol import http_protocol
from echomq_http.app import create_app
from echomq_http.config import Settings
from echomq_http.observability.telemetry import Telemetry

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 30.0
BACKGROUND_PREFIX = "emq-"  # the service's background tasks: wake hub, sweeper, event readers

_loops: dict[str, asyncio.AbstractEventLoop] = {}  # base URL -> the loop of a running service


def _await_chain(task: asyncio.Task[object]) -> list[str]:
    """Each coroutine the task is suspended in, outermost first, and what the last one awaits."""
    chain: list[str] = []
    awaited: object = task.get_coro()
    while awaited is not None:
        if type(awaited).__name__ == "async_generator_asend":  # `async for`: into its generator
            awaited = next((ref for ref in gc.get_referents(awaited) if inspect.isasyncgen(ref)), awaited)
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if frame is None:
            chain.append(f"awaits {awaited!r:.200}")
            break
        chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return chain


def background_tasks() -> str:
    """Where each running service's background tasks stand: the context of a failed test that
    waited on the sweep, a wake-up or an event feed. Read from another thread: best effort."""
    lines: list[str] = []
    for url, loop in list(_loops.items()):
        tasks: list[asyncio.Task[object]] = []
        for _ in range(3):  # the loop's task set may change while it is read
            with contextlib.suppress(RuntimeError):
                tasks = [
                    task for task in asyncio.all_tasks(loop) if task.get_name().startswith(BACKGROUND_PREFIX)
                ]
                break
        for task in sorted(tasks, key=asyncio.Task.get_name):
            lines.append(f"{url} {task.get_name()} ({'done' if task.done() else 'running'}):")
            lines += ["  " + step for step in _await_chain(task)]
    return "\n".join(lines)


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
    _loops[url] = server.servers[0].get_loop()
    try:
        httpx.get(url + "/healthz").raise_for_status()
        yield url
    finally:
        _loops.pop(url, None)
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
