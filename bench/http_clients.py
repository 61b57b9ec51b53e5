"""Client CPU per request of the HTTP clients AsyncClient could use, on the worker's workloads.

    python bench/http_clients.py http://127.0.0.1:8080 [--jobs 20000] [--loop-jobs 3000]

For each client (httpx, and aiohttp: AsyncClient's) against a running service: the SDK Worker
(c=50, no-op handler) drains ``--jobs`` pre-filled jobs, then one single-job loop acks each job
with ``lease_next``. It prints this process's CPU (user + system) per request and per job, and
jobs/s. The service runs elsewhere, so only the client's CPU is counted. (The third row of the
table in echomq/_http.py, a pool of the SDK's own on asyncio + httptools, was measured by this
script at commit e166360, before that pool was replaced by aiohttp.)
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Mapping
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


def make_pool(kind: str, url: str, headers: Mapping[str, str]) -> Any:
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


async def loop_run(kind: str, url: str, jobs: int) -> dict[str, float]:
    queue = f"hc-{uuid.uuid4().hex[:8]}"
    await fill(url, queue, jobs)
    client, counted = client_with(kind, url)
    following = LeaseNext(worker="w", lease_ms=30_000, max_jobs=1)
    cpu, wall = time.process_time(), time.perf_counter()
    leased = await client.lease(queue, "w")
    done = 0
    while leased:
        acked = await client.ack(queue, leased[0].id, leased[0].lease_id, "ok", lease_next=following)
        done += 1
        leased = acked.jobs or []
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await client.aclose()
    return {"cpu_us_req": cpu / counted.requests * 1e6, "cpu_us_job": cpu / done * 1e6, "jobs_s": done / wall}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--loop-jobs", type=int, default=3_000)
    parser.add_argument("--clients", default="httpx,aiohttp")
    args = parser.parse_args()
    print("| client | workload | client CPU µs/request | µs/job | jobs/s |")
    print("|---|---|---:|---:|---:|")
    for kind in args.clients.split(","):
        for name, run, count in (
            ("worker c=50", worker_run, args.jobs),
            ("ack+lease_next loop", loop_run, args.loop_jobs),
        ):
            figures = await run(kind, args.url, count)
            print(
                f"| {kind} | {name} | {figures['cpu_us_req']:.0f} | {figures['cpu_us_job']:.0f} "
                f"| {figures['jobs_s']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
