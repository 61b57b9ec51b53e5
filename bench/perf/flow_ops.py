"""bench.py's workloads for flow control (queue settings): throughput under a rate limit, and
max_in_flight held under load.

    .venv/bin/python bench/bench.py --only rate_limit,max_in_flight [--quick] [--no-bullmq]

  rate_limit     a queue with rate_limit RATE_MAX jobs per RATE_PER_MS ms and far more jobs
                 waiting than the run can lease; WORKERS workers (asyncio tasks, one HTTP client
                 each) lease 100 at a time and ack each batch with ack-many + lease_next for
                 RATE_RUN_S s (half with --quick): the jobs leased per second, achieved against
                 configured, and the most leased in any window of RATE_PER_MS ms (from each job's
                 lease time, lease_expires_at - lease_ms: Redis's clock), which must not pass
                 RATE_MAX.
  max_in_flight  the same workers on a queue with max_in_flight CAP, jobs held HOLD_S each before
                 their ack (a worker that gets none long-polls: an exit from the ledger wakes
                 it), while a sampler reads the ledger's length (LLEN) every millisecond or
                 so: the peak (must not pass CAP) and the throughput (at most CAP / HOLD_S).

Each runs on its own Redis and service (bench.own_stack). Each function takes bench.py's Bench
and returns a dict of figures; the ``*_rows``, ``*_table`` and ``*_summary`` functions turn them
into bench.py's table rows and their own tables.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import redis.asyncio as aioredis

RATE_MAX = 2000
RATE_PER_MS = 1000
RATE_RUN_S = 10.0
WORKERS = 16
LEASE_MS = 60_000
BATCH = 100
CAP = 50
HOLD_S = 0.02
LONG_POLL_MS = 1000
PREFILL_MARGIN = 1.5  # jobs waiting: this many times what the rate lets the run lease


def _run_s(bench: Any, full_s: float) -> float:
    return full_s / 2 if bench.args.quick else full_s


async def _drive(url: str, queue: str, run_s: float, hold_s: float) -> list[int]:
    """WORKERS workers leasing BATCH at a time for run_s: each leased job's lease time (Redis ms)."""
    leased_at: list[int] = []
    deadline = time.monotonic() + run_s

    async def work(worker: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            lease = {"worker": worker, "max_jobs": BATCH, "lease_ms": LEASE_MS}
            long_poll = {**lease, "wait_ms": LONG_POLL_MS}
            answer = (await client.post(f"/v1/queues/{queue}/lease", json=lease)).json()
            while True:
                jobs = answer["jobs"]
                leased_at.extend(job["lease_expires_at"] - LEASE_MS for job in jobs)
                if time.monotonic() >= deadline:
                    acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
                    if acks:
                        await client.post(f"/v1/queues/{queue}/ack", json={"acks": acks})
                    return
                if not jobs and "retry_after_ms" in answer:  # the rate window is full: come back then
                    wait_s = answer["retry_after_ms"] / 1000
                    await asyncio.sleep(min(wait_s, max(deadline - time.monotonic(), 0)))
                    answer = (await client.post(f"/v1/queues/{queue}/lease", json=lease)).json()
                    continue
                if not jobs:  # max_in_flight reached: a long poll, woken when a job leaves the ledger
                    answer = (await client.post(f"/v1/queues/{queue}/lease", json=long_poll)).json()
                    continue
                if hold_s:
                    await asyncio.sleep(hold_s)
                acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
                body = {"acks": acks, "lease_next": lease}
                answer = (await client.post(f"/v1/queues/{queue}/ack", json=body)).json()

    await asyncio.gather(*(work(f"w{i}") for i in range(WORKERS)))
    return leased_at


def _most_in_window(times: list[int], window_ms: int) -> int:
    times = sorted(times)
    most = end = 0
    for start in range(len(times)):
        while end < len(times) and times[end] < times[start] + window_ms:
            end += 1
        most = max(most, end - start)
    return most


async def _settings(url: str, queue: str, **settings: Any) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.put(f"/v1/queues/{queue}/settings", json=settings)
        response.raise_for_status()


# ---------------------------------------------------------------------------------------------
# rate_limit


def rate_limit(bench: Any) -> dict[str, Any]:
    run_s = _run_s(bench, RATE_RUN_S)
    with bench.own_stack("rate_limit", replicas=1, workers=bench.args.workers) as stack:
        url = stack.service.urls[0]
        asyncio.run(_settings(url, "bench", rate_limit={"max": RATE_MAX, "per_ms": RATE_PER_MS}))
        stack.prefill("bench", int(RATE_MAX * (run_s * 1000 / RATE_PER_MS + 1) * PREFILL_MARGIN))
        times = asyncio.run(_drive(url, "bench", run_s, 0.0))
    span_ms = max(times) - min(times) if times else 0
    # Leases over whole windows from the first: the first window's burst included, as a client
    # would see it (the window the run ended in is partial and left out).
    windows = int(span_ms // RATE_PER_MS)
    counted = sum(1 for t in times if t < min(times) + windows * RATE_PER_MS) if windows else 0
    configured = RATE_MAX * 1000 / RATE_PER_MS
    achieved = counted / (windows * RATE_PER_MS / 1000) if windows else None
    return {
        "run_s": run_s,
        "leased": len(times),
        "configured_per_s": configured,
        "achieved_per_s": achieved,
        "ratio": achieved / configured if achieved else None,
        "most_in_window": _most_in_window(times, RATE_PER_MS),
        "rate_max": RATE_MAX,
    }


def rate_limit_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    return [
        row(
            "rate_limit_achieved",
            f"rate limit {RATE_MAX}/{RATE_PER_MS} ms: leased per s",
            "jobs/s",
            ours_value=result["achieved_per_s"],
        ),
        row(
            "rate_limit_window_max",
            f"  most leased in any {RATE_PER_MS} ms (limit {RATE_MAX})",
            "jobs",
            ours_value=result["most_in_window"],
        ),
    ]


def rate_limit_table(result: dict[str, Any]) -> str:
    achieved = result["achieved_per_s"]
    ratio = result["ratio"]
    return (
        "| configured | achieved | achieved/configured | most in one window | leased | run |\n"
        "|---|---|---|---|---|---|\n"
        f"| {result['configured_per_s']:.0f}/s | {achieved or 0:.0f}/s | {ratio or 0:.3f} "
        f"| {result['most_in_window']} (max {result['rate_max']}) | {result['leased']} "
        f"| {result['run_s']:.0f} s |"
    )


def rate_limit_summary(result: dict[str, Any]) -> str:
    return (
        f"rate limit: {result['achieved_per_s'] or 0:.0f} jobs/s achieved of "
        f"{result['configured_per_s']:.0f} configured; most in one window "
        f"{result['most_in_window']} (limit {result['rate_max']})"
    )


# ---------------------------------------------------------------------------------------------
# max_in_flight


async def _capped(url: str, redis_url: str, run_s: float) -> tuple[list[int], list[int]]:
    client = aioredis.Redis.from_url(redis_url)
    ledger = "emq:{bench}:active"  # service/echomq_http/store/keys.py: the queue's in-flight ledger
    samples: list[int] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            samples.append(await client.llen(ledger))
            await asyncio.sleep(0.001)

    sampler = asyncio.create_task(sample())
    try:
        times = await _drive(url, "bench", run_s, HOLD_S)
    finally:
        done.set()
        await sampler
        await client.aclose()
    return times, samples


def max_in_flight(bench: Any) -> dict[str, Any]:
    run_s = _run_s(bench, RATE_RUN_S / 2)
    with bench.own_stack("max_in_flight", replicas=1, workers=bench.args.workers) as stack:
        url = stack.service.urls[0]
        asyncio.run(_settings(url, "bench", max_in_flight=CAP))
        stack.prefill("bench", int(CAP / HOLD_S * run_s * 2))
        times, samples = asyncio.run(_capped(url, stack.redis.url, run_s))
    return {
        "run_s": run_s,
        "cap": CAP,
        "peak": max(samples) if samples else None,
        "samples": len(samples),
        "jobs_per_s": len(times) / run_s,
        "bound_per_s": CAP / HOLD_S,
    }


def max_in_flight_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    return [
        row(
            "max_in_flight_peak",
            f"max_in_flight {CAP}: peak ledger length ({WORKERS} workers)",
            "jobs",
            ours_value=result["peak"],
        ),
    ]


def max_in_flight_table(result: dict[str, Any]) -> str:
    return (
        "| cap | peak in the ledger | samples | jobs/s | bound (cap / hold) |\n|---|---|---|---|---|\n"
        f"| {result['cap']} | {result['peak']} | {result['samples']} | {result['jobs_per_s']:.0f} "
        f"| {result['bound_per_s']:.0f} |"
    )


def max_in_flight_summary(result: dict[str, Any]) -> str:
    return (
        f"max_in_flight {result['cap']}: peak {result['peak']} over {result['samples']} samples, "
        f"{result['jobs_per_s']:.0f} jobs/s (bound {result['bound_per_s']:.0f})"
    )
