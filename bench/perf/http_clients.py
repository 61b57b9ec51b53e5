"""Client CPU per request of the HTTP clients AsyncClient could use, on the worker's workloads.

    python bench/http_clients.py http://127.0.0.1:8080 [--jobs 20000] [--loop-jobs 5000]

For each client (httpx; aiohttp, AsyncClient's) against a running service: the SDK Worker (c=50,
no-op handler) drains ``--jobs`` pre-filled jobs, then 50 single-job loops over one client ack
each job with ``lease_next`` (bench.py's sdk_next). It prints this process's CPU (user + system)
per request and per job, and jobs/s; the service runs elsewhere, so only the client's CPU counts.

``--own-pool FILE`` adds the pool of the SDK's own that aiohttp replaced (asyncio + httptools):
``git show e166360:clients/python/src/echomq/_http.py > FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from echomq import AsyncClient, LeaseNext, Worker
from echomq._http import AiohttpPool, Answer, HttpxAsyncPool


class Counted:
    """Counts the requests sent through a pool."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.requests = pool, 0

    async def send(self, *args: Any, **kwargs: Any) -> Answer:
        self.requests += 1
        return await self.pool.send(*args, **kwargs)

    async def aclose(self) -> None:
        await self.pool.aclose()


OWN_POOL: Any = None  # the module --own-pool loaded


def make_pool(kind: str, url: str, headers: Mapping[str, str]) -> Any:
    if kind == "own":
        return OWN_POOL.AsyncPool(url, headers)
    if kind == "httpx":
        transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=100))
        return HttpxAsyncPool(url, headers, transport)
    return AiohttpPool(url, headers)


def client_with(kind: str, url: str) -> tuple[AsyncClient, Counted]:
    client = AsyncClient(url)
    counted = Counted(make_pool(kind, url, {}))
    client._http = counted  # type: ignore[assignment]
    return client, counted


async def fill(url: str, queue: str, count: int) -> None:
    async with AsyncClient(url) as client:
        for start in range(0, count, 1000):
            await client.enqueue_many(queue, [{"payload": n} for n in range(start, min(count, start + 1000))])


async def no_op(job: Any) -> None:
    return None


async def worker_run(kind: str, url: str, jobs: int) -> dict[str, float]:
    queue = f"hc-{uuid.uuid4().hex[:8]}"
    await fill(url, queue, jobs)
    client, counted = client_with(kind, url)
    worker = Worker(queue, no_op, client=client, concurrency=50, wait_ms=100)
    cpu, wall = time.process_time(), time.perf_counter()
    running = asyncio.ensure_future(worker.arun())
    while worker.stats.acked < jobs and not running.done():
        await asyncio.sleep(0.005)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    worker.stop()
    await running
    await client.aclose()
    return {"cpu_us_req": cpu / counted.requests * 1e6, "cpu_us_job": cpu / jobs * 1e6, "jobs_s": jobs / wall}


async def loop_run(kind: str, url: str, jobs: int, loops: int = 50) -> dict[str, float]:
    """``loops`` single-job loops over one client (as bench.py's sdk_next): each ack leases the
    next job."""
    queue = f"hc-{uuid.uuid4().hex[:8]}"
    await fill(url, queue, jobs)
    client, counted = client_with(kind, url)

    async def loop(worker: str) -> int:
        following = LeaseNext(worker=worker, lease_ms=30_000, max_jobs=1)
        leased, done = await client.lease(queue, worker), 0
        while leased:
            acked = await client.ack(queue, leased[0].id, leased[0].lease_id, "ok", lease_next=following)
            done += 1
            leased = acked.jobs or []
        return done

    cpu, wall = time.process_time(), time.perf_counter()
    done = sum(await asyncio.gather(*(loop(f"w{n}") for n in range(loops))))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await client.aclose()
    return {"cpu_us_req": cpu / counted.requests * 1e6, "cpu_us_job": cpu / done * 1e6, "jobs_s": done / wall}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--loop-jobs", type=int, default=5_000)
    parser.add_argument("--clients", default="httpx,aiohttp")
    parser.add_argument("--own-pool", type=Path, help="a file with the own pool (see above)")
    args = parser.parse_args()
    if args.own_pool:
        global OWN_POOL
        spec = importlib.util.spec_from_file_location("own_pool", args.own_pool)
        assert spec is not None and spec.loader is not None
        OWN_POOL = sys.modules["own_pool"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(OWN_POOL)
        args.clients += ",own"
    print("| client | workload | client CPU µs/request | µs/job | jobs/s |")
    print("|---|---|---:|---:|---:|")
    for kind in args.clients.split(","):
        for name, run, count in (
            ("worker c=50", worker_run, args.jobs),
            ("ack+lease_next, 50 loops", loop_run, args.loop_jobs),
        ):
            figures = await run(kind, args.url, count)
            print(
                f"| {kind} | {name} | {figures['cpu_us_req']:.0f} | {figures['cpu_us_job']:.0f} "
                f"| {figures['jobs_s']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
