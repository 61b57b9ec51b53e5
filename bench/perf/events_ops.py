"""bench.py's workloads for following jobs: what events cost, SSE fan-out, outcome waits.

    .venv/bin/python bench/bench.py --only events_cost,sse_fanout,outcome_wait [--quick] [--no-bullmq]

  events_cost   the batched workload (lease 100 + 1 ack-many, --batch-workers loops) on a
                service with events on (the default, EMQ_EVENTS_MAXLEN=10000) and one with them
                off (EMQ_EVENTS_MAXLEN=0), each on its own Redis and service, alternating for
                Plan.events_rounds rounds: the median throughput of each and their ratio (goal:
                events on keeps at least 85 %).
  sse_fanout    Plan.sse_subscribers subscribers of one queue's event feed (raw keep-alive
                sockets, spread over the service's processes by the kernel), then
                Plan.sse_events enqueues, one job each, 50 ms apart (20,000 deliveries/s):
                the Redis connections the subscribers added (INFO clients: one reader per
                queue per process, not one per subscriber), and delivery latency from each
                event's time (its `at`, Redis's clock, ms) to its arrival at each subscriber
                (p50, p99 over all deliveries).
  outcome_wait  Plan.wait_rounds times: a job is enqueued and leased, a GET .../jobs/{id}
                ?wait_ms=20000 starts, then the job is acked: the latency from the job's
                finished_at (Redis's clock) to the wait's answer (p50, p99).

Each function takes bench.py's Bench and returns a dict of figures; the ``*_rows``, ``*_table``
and ``*_summary`` functions turn them into bench.py's table rows and their own tables.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from ledger_ops import percentile

EVENTS_COST_TARGET = 0.85  # events on keeps at least this share of the batched throughput
OUTCOME_WAIT_MS = 20_000
SSE_CONNECT_CONCURRENCY = 100
SSE_EVENT_INTERVAL_S = 0.05  # 20 events/s: 20,000 deliveries/s to 1,000 subscribers


# ---------------------------------------------------------------------------------------------
# events_cost


def events_cost(bench: Any) -> dict[str, Any]:
    plan, args = bench.plan, bench.args
    rounds: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(plan.events_rounds):
        for side, env in (("on", {}), ("off", {"EMQ_EVENTS_MAXLEN": "0"})):
            with bench.own_stack(f"events-{side}", replicas=1, workers=args.workers, env=env) as stack:
                stack.prefill("bench", plan.prefill_batch)
                outcome = stack.loadgen("batch_cycle", args.batch_workers, batch=100)
            rounds[side].append(outcome.jobs_per_s or 0.0)
    on, off = statistics.median(rounds["on"]), statistics.median(rounds["off"])
    return {"rounds": rounds, "on": on, "off": off, "ratio": on / off if off else None}


def events_cost_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    ratio = result["ratio"]
    return [
        row(
            "events_cost",
            "lease 100 + 1 ack-many, events on / events off (median)",
            "ratio",
            ours_value=round(ratio, 3) if ratio else None,
            target=f">= {EVENTS_COST_TARGET:g}",
            met=ratio is not None and ratio >= EVENTS_COST_TARGET,
        )
    ]


def events_cost_table(result: dict[str, Any]) -> str:
    lines = [
        "| events | jobs/s, median | each round |",
        "|---|---|---|",
    ]
    for side in ("on", "off"):
        each = " / ".join(f"{value:,.0f}" for value in result["rounds"][side])
        lines.append(f"| {side} | {result[side]:,.0f} | {each} |")
    return "\n".join(lines)


def events_cost_summary(result: dict[str, Any]) -> str:
    return f"events on {result['on']:,.0f} jobs/s, off {result['off']:,.0f}: {result['ratio']:.2f}x"


# ---------------------------------------------------------------------------------------------
# sse_fanout


class Subscriber:
    """One raw SSE connection: the arrival time (ms, this machine's clock, which is Redis's here)
    of every event and the `at` it carries."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.latencies_ms: list[float] = []
        self.events = 0
        self.task: asyncio.Task[None] | None = None

    async def open(self, url: str, queue: str) -> None:
        parts = urlsplit(url)
        self.reader, self.writer = await asyncio.open_connection(parts.hostname, parts.port)
        self.writer.write(
            f"GET /v1/queues/{queue}/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        await self.writer.drain()
        while (await self.reader.readline()) not in (b"\r\n", b""):
            pass  # the response head
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.reader is not None
        while True:
            line = await self.reader.readline()
            if not line:
                return
            if b'"at":' in line:
                arrived = time.time() * 1000
                at = json.loads(line[line.index(b"data: ") + 6 :])["at"]
                self.latencies_ms.append(arrived - at)
                self.events += 1

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()


async def _fan_out(bench: Any, stack: Any) -> dict[str, Any]:
    plan = bench.plan
    url = stack.service.urls[0]
    client = stack.redis.client()
    queue = "fanout"
    before = client.info("clients")["connected_clients"]
    subscribers = [Subscriber() for _ in range(plan.sse_subscribers)]
    gate = asyncio.Semaphore(SSE_CONNECT_CONCURRENCY)

    async def open_one(subscriber: Subscriber) -> None:
        async with gate:
            await subscriber.open(url, queue)

    started = time.monotonic()
    await asyncio.gather(*(open_one(subscriber) for subscriber in subscribers))
    connect_s = time.monotonic() - started
    await asyncio.sleep(1.0)
    during = client.info("clients")["connected_clients"]
    async with httpx.AsyncClient(base_url=url) as http:
        for index in range(plan.sse_events):
            await http.post(f"/v1/queues/{queue}/jobs", json={"payload": index})
            await asyncio.sleep(SSE_EVENT_INTERVAL_S)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(s.events < plan.sse_events for s in subscribers):
        await asyncio.sleep(0.1)
    latencies = [value for subscriber in subscribers for value in subscriber.latencies_ms]
    delivered = sum(subscriber.events for subscriber in subscribers)
    for subscriber in subscribers:
        await subscriber.close()
    return {
        "subscribers": len(subscribers),
        "events": plan.sse_events,
        "delivered": delivered,
        "expected": plan.sse_events * len(subscribers),
        "connect_s": round(connect_s, 2),
        "redis_connections_added": during - before,
        "service_processes": len(stack.service.pids()),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
    }


def sse_fanout(bench: Any) -> dict[str, Any]:
    with bench.own_stack("sse_fanout", replicas=1, workers=bench.args.workers) as stack:
        return asyncio.run(_fan_out(bench, stack))


def sse_fanout_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    n = result["subscribers"]
    return [
        row(
            "sse_fanout_connections",
            f"{n:,} SSE subscribers: Redis connections they add",
            "connections",
            ours_value=result["redis_connections_added"],
            target=f"<= {result['service_processes']} (one reader per process)",
            met=result["redis_connections_added"] <= result["service_processes"],
        ),
        row(
            "sse_fanout_p50",
            "  same, delivery from transition to subscriber, p50",
            "ms",
            ours_value=result["p50_ms"],
        ),
        row(
            "sse_fanout_p99",
            "  same, p99",
            "ms",
            ours_value=result["p99_ms"],
            target="all delivered",
            met=result["delivered"] == result["expected"],
        ),
    ]


def sse_fanout_table(result: dict[str, Any]) -> str:
    return (
        "| subscribers | events | delivered | Redis connections added | connect | p50 | p99 |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {result['subscribers']:,} | {result['events']} "
        f"| {result['delivered']:,} of {result['expected']:,} "
        f"| {result['redis_connections_added']} ({result['service_processes']} service processes) "
        f"| {result['connect_s']} s | {_ms(result['p50_ms'])} | {_ms(result['p99_ms'])} |"
    )


def sse_fanout_summary(result: dict[str, Any]) -> str:
    return (
        f"{result['subscribers']} subscribers, {result['redis_connections_added']} Redis connections added, "
        f"delivered {result['delivered']}/{result['expected']}, p50 {_ms(result['p50_ms'])}, "
        f"p99 {_ms(result['p99_ms'])}"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


# ---------------------------------------------------------------------------------------------
# outcome_wait


async def _waits(bench: Any, url: str) -> list[float]:
    queue = "waits"
    latencies = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for index in range(bench.plan.wait_rounds):
            job_id = f"w{index}"
            await http.post(f"/v1/queues/{queue}/jobs", json={"payload": index, "id": job_id})
            leased = (await http.post(f"/v1/queues/{queue}/lease", json={"worker": "b"})).json()["jobs"][0]
            waiting = asyncio.create_task(
                http.get(f"/v1/queues/{queue}/jobs/{job_id}", params={"wait_ms": OUTCOME_WAIT_MS})
            )
            await asyncio.sleep(0.02)
            await http.post(f"/v1/queues/{queue}/jobs/{job_id}/ack", json={"lease_id": leased["lease_id"]})
            answer = await waiting
            arrived = time.time() * 1000
            latencies.append(arrived - answer.json()["finished_at"])
    return latencies


def outcome_wait(bench: Any) -> dict[str, Any]:
    with bench.own_stack("outcome_wait", replicas=1, workers=bench.args.workers) as stack:
        latencies = asyncio.run(_waits(bench, stack.service.urls[0]))
    return {
        "rounds": len(latencies),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies) if latencies else None,
    }


def outcome_wait_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    return [
        row(
            "outcome_wait_p50",
            "wait for the outcome: completion to answer, p50",
            "ms",
            ours_value=result["p50_ms"],
        ),
        row("outcome_wait_p99", "  same, p99", "ms", ours_value=result["p99_ms"]),
    ]


def outcome_wait_table(result: dict[str, Any]) -> str:
    return (
        "| waits | p50 | p99 | max |\n|---|---|---|---|\n"
        f"| {result['rounds']} | {_ms(result['p50_ms'])} | {_ms(result['p99_ms'])} "
        f"| {_ms(result['max_ms'])} |"
    )


def outcome_wait_summary(result: dict[str, Any]) -> str:
    return f"{result['rounds']} waits: p50 {_ms(result['p50_ms'])}, p99 {_ms(result['p99_ms'])}"
