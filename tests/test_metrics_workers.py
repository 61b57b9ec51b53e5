"""/metrics of a replica with several uvicorn worker processes (`python -m echomq_http` with
EMQ_WORKERS=2): whichever process answers a scrape, it reports the replica's totals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from echomq_http.__main__ import METRICS_DIR_PREFIX
from echomq_http.observability.replica_totals import SNAPSHOT_SUFFIX
from tests.support.ports import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
CONNECTIONS = 10  # each its own TCP connection, so the kernel hands them to both processes
ENQUEUES_PER_CONNECTION = 20
ENQUEUES = CONNECTIONS * ENQUEUES_PER_CONNECTION
SCRAPES = 20
# The other processes' share of a scrape is their last snapshot, written about once a second.
CATCH_UP_TIMEOUT_S = 10.0
ENQUEUE_ROUTE = "/v1/queues/{queue}/jobs"


@contextlib.contextmanager
def service_processes(redis_url: str, workers: int, tmp: Path) -> Iterator[str]:
    """`python -m echomq_http` with this many worker processes and its temporary files in ``tmp``;
    yields its URL; SIGTERM at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env.update(EMQ_REDIS_URL=redis_url, EMQ_WORKERS=str(workers), PORT=str(port), HOST="127.0.0.1")
    env.update(TMPDIR=str(tmp))
    process = subprocess.Popen(
        [sys.executable, "-m", "echomq_http"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so a failed test can kill every process
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the service did not become ready")
            time.sleep(0.05)
        yield url
        process.send_signal(signal.SIGTERM)
        assert process.wait(STOP_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def samples(text: str, name: str, **labels: str) -> list[float]:
    """Every value of a metric whose labels include these."""
    wanted = {f'{key}="{value}"' for key, value in labels.items()}
    found = []
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and wanted <= set((match[1] or "").split(",")):
            found.append(float(match[2]))
    return found


def scrape(url: str) -> str:
    """One scrape on a connection of its own (it may land on either process)."""
    response = httpx.get(url + "/metrics", timeout=10, headers={"connection": "close"})
    assert response.status_code == 200, response.text
    return response.text


def replica_totals(text: str, queue: str) -> tuple[list[float], float]:
    """The queue's enqueue counter, and how many enqueue requests the request histogram counted."""
    enqueue_requests = samples(
        text, "emq_http_request_duration_seconds_count", route=ENQUEUE_ROUTE, method="POST"
    )
    return samples(text, "emq_jobs_enqueued_total", queue=queue), sum(enqueue_requests)


@pytest.mark.timeout(90)
async def test_every_scrape_reads_the_replica_s_totals(redis_url: str, queue: str, tmp_path: Path) -> None:
    with service_processes(redis_url, workers=2, tmp=tmp_path) as url:

        async def enqueue(http: httpx.AsyncClient, connection: int, n: int) -> None:
            body = {"payload": n, "id": f"c{connection}-{n}"}
            created = await http.post(f"/v1/queues/{queue}/jobs", json=body)
            assert created.status_code == 201, created.text

        async def enqueue_the_rest(http: httpx.AsyncClient, connection: int) -> None:
            for n in range(1, ENQUEUES_PER_CONNECTION):
                await enqueue(http, connection, n)

        async with contextlib.AsyncExitStack() as clients:
            # Connections opened one at a time: a burst of them would all be accepted by
            # whichever process wakes first; one by one, each goes to either.
            connections = []
            for connection in range(CONNECTIONS):
                http = await clients.enter_async_context(httpx.AsyncClient(base_url=url, timeout=30))
                await enqueue(http, connection, 0)
                connections.append(http)
            await asyncio.gather(*(enqueue_the_rest(http, c) for c, http in enumerate(connections)))

        everything = ([ENQUEUES], ENQUEUES)
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while replica_totals(await asyncio.to_thread(scrape, url), queue) != everything:
            assert time.monotonic() < deadline, "no scrape ever read every process's enqueues"
            await asyncio.sleep(0.1)

        request_counts = []
        for _ in range(SCRAPES):
            text = await asyncio.to_thread(scrape, url)
            assert replica_totals(text, queue) == everything
            request_counts.append(sum(samples(text, "emq_http_request_duration_seconds_count")))
        assert request_counts == sorted(request_counts), request_counts  # never goes down

        # The run's private directory, where each process keeps its snapshot.
        (shared,) = tmp_path.glob(METRICS_DIR_PREFIX + "*")
        assert shared.stat().st_mode & 0o777 == 0o700
        assert len(list(shared.glob("*" + SNAPSHOT_SUFFIX))) == 2
    assert not list(tmp_path.glob(METRICS_DIR_PREFIX + "*"))  # removed when the service stops
