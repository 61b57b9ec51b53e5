"""Rows of the table, pairs of measurements, and the measurements the harness makes itself
(sweep and ack cost, memory per job)."""

from __future__ import annotations

import hashlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench_harness import Bench, Outcome, percentile
from bench_plan import BENCH_CLIENT_NAME, LONG_LEASE_MS, PAYLOAD_BYTES, SLOWLOG_LEN

# ---------------------------------------------------------------------------------------------
# the measurements


@dataclass
class Row:
    key: str
    title: str
    unit: str
    ours: Outcome | None
    bull: Outcome | None
    bull_title: str = ""
    metric: str = "rate"  # which figure of the outcomes the row shows: rate, p50, p99, value
    target: str = ""
    met: bool | None = None
    ours_value: float | None = None
    bull_value: float | None = None

    def values(self) -> tuple[float | None, float | None]:
        def pick(outcome: Outcome | None) -> float | None:
            if outcome is None:
                return None
            return {"rate": outcome.jobs_per_s, "p50": outcome.p50_ms, "p99": outcome.p99_ms}.get(
                self.metric, outcome.extra.get("value")
            )

        ours = self.ours_value if self.ours_value is not None else pick(self.ours)
        bull = self.bull_value if self.bull_value is not None else pick(self.bull)
        return ours, bull


def ratio(ours: float | None, bull: float | None) -> float | None:
    if ours is None or bull is None or bull == 0:
        return None
    return ours / bull


def measure_pair(
    bench: Bench,
    key: str,
    ours: Callable[[], Outcome],
    bull: Callable[[], Outcome | None],
    enabled: Callable[[str], bool],
) -> tuple[Outcome | None, Outcome | None]:
    if not enabled(key):
        return None, None
    print(f"- {key}: EchoMQ ...", file=sys.stderr, flush=True)
    bench.flush()
    mine = ours()
    print(f"  {describe(mine)}", file=sys.stderr, flush=True)
    theirs = None
    if bench.node is not None:
        print(f"- {key}: BullMQ ...", file=sys.stderr, flush=True)
        bench.flush()
        theirs = bull()
        print(f"  {describe(theirs)}", file=sys.stderr, flush=True)
    return mine, theirs


def describe(outcome: Outcome | None) -> str:
    if outcome is None:
        return "-"
    parts = []
    if outcome.jobs_per_s is not None:
        parts.append(f"{outcome.jobs_per_s:,.0f} jobs/s")
    if outcome.p50_ms is not None:
        parts.append(f"p50 {outcome.p50_ms:.2f} ms p99 {outcome.p99_ms:.2f} ms")
    if outcome.cpu_pct:
        parts.append("cpu " + " ".join(f"{k} {v:.0f}%" for k, v in outcome.cpu_pct.items()))
    if "enqueue_answer_p50_ms" in outcome.extra:
        parts.append(f"(the enqueue itself answered in p50 {outcome.extra['enqueue_answer_p50_ms']:.2f} ms)")
    if outcome.errors:
        parts.append(f"{outcome.errors} errors")
    if outcome.note:
        parts.append(outcome.note)
    return ", ".join(parts)


def library_name(operation: str, sha: str) -> str:
    from echomq_http.store.luafunctions import library_name

    return library_name(operation, sha)


def script_sha(operation: str) -> str:
    from echomq_http.store.scripts import render, script_path

    return hashlib.sha1(render(script_path(operation)).encode()).hexdigest()


class ServerTimes:
    """Execution times (µs, server side) of our own calls of one script, from the slow log.

    Inside, Redis logs every command (slowlog-log-slower-than 0), the commands a script runs
    included, so drain() must be called every few dozen calls before the log wraps around."""

    DRAIN_EVERY = 50

    def __init__(self, client: Any, operation: str) -> None:
        self.client = client
        self.sha = script_sha(operation)
        # The call as the slow log shows it: "FCALL <function> ..." where the server has
        # functions (echomq_http.store.scripts), else "EVALSHA <sha> ...".
        self.calls = (f"FCALL {library_name(operation, self.sha)} ", f"EVALSHA {self.sha} ")
        self.durations_us: list[int] = []
        self._old: dict[str, Any] = {}

    async def __aenter__(self) -> ServerTimes:
        self._old = await self.client.config_get("slowlog-*")
        await self.client.config_set("slowlog-max-len", SLOWLOG_LEN)
        await self.client.config_set("slowlog-log-slower-than", 0)
        await self.client.slowlog_reset()
        return self

    async def drain(self) -> None:
        for entry in await self.client.slowlog_get(SLOWLOG_LEN):
            command = entry["command"]
            command = command.decode(errors="replace") if isinstance(command, bytes) else command
            name = entry.get("client_name")
            name = name.decode() if isinstance(name, bytes) else name
            if name == BENCH_CLIENT_NAME and command.startswith(self.calls):
                self.durations_us.append(int(entry["duration"]))
        await self.client.slowlog_reset()

    async def __aexit__(self, *_: Any) -> None:
        await self.drain()
        for name, value in self._old.items():
            await self.client.config_set(name, value)


def summary(values_ms: Sequence[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values_ms, 0.5),
        "p99": percentile(values_ms, 0.99),
        "mean": statistics.fmean(values_ms) if values_ms else None,
        "n": len(values_ms),
    }


async def ledger_costs(bench: Bench, in_flight: int, queue: str) -> dict[str, Any]:
    """With in_flight jobs leased (long leases, none expired): the cost of a sweep run, of an
    ack of the oldest lease (each followed by a lease of one more job, so the ledger keeps its
    size), and, for reference, of an ack of the newest lease."""
    plan = bench.plan
    samples = plan.ack_samples
    newest_samples = min(100, samples)  # one lease call (the API takes at most 100 jobs per lease)
    async with bench.job_queues() as queues:
        client = queues.client
        await bench.fill(queues, queue, in_flight + samples + newest_samples + 10)
        order: list[tuple[str, str]] = []  # (id, lease_id), oldest lease first
        while len(order) < in_flight:
            jobs = await queues.lease(queue, "holder", LONG_LEASE_MS, min(100, in_flight - len(order)))
            order += [(job.id, job.lease_id) for job in jobs]
        result: dict[str, Any] = {"in_flight": in_flight}

        # sweep: nothing has expired, so a run only looks and leaves
        sweep_ms = []
        async with ServerTimes(client, "sweep") as sweep_us:
            for run in range(plan.sweep_runs):
                started = time.perf_counter()
                report = await queues.sweep_queue(queue, max_steps=1)
                sweep_ms.append((time.perf_counter() - started) * 1000)
                assert report.reclaimed == 0 and report.dead_lettered == 0, report
                if run % ServerTimes.DRAIN_EVERY == 0:
                    await sweep_us.drain()
        result["sweep_ms"] = summary(sweep_ms)
        result["sweep_server_us"] = summary(sweep_us.durations_us)

        # acks, oldest lease first (workers mostly finish in the order they took jobs), each
        # followed by a lease of one more job so that the ledger keeps its size
        ack_ms = []
        async with ServerTimes(client, "ack") as ack_us:
            for index in range(samples):
                job_id, lease_id = order[index]
                started = time.perf_counter()
                await queues.ack_one(queue, job_id, lease_id, _unset())
                ack_ms.append((time.perf_counter() - started) * 1000)
                more = await queues.lease(queue, "holder", LONG_LEASE_MS, 1)
                order += [(job.id, job.lease_id) for job in more]
                if index % ServerTimes.DRAIN_EVERY == 0:
                    await ack_us.drain()
        result["ack_oldest_ms"] = summary(ack_ms)
        result["ack_oldest_server_us"] = summary(ack_us.durations_us)

        # for reference: acks of the newest lease, whose id sits at the far end of the scan
        leased = await queues.lease(queue, "holder", LONG_LEASE_MS, newest_samples)
        newest_ms = []
        async with ServerTimes(client, "ack") as newest_us:
            for index, job in enumerate(reversed(leased)):
                started = time.perf_counter()
                await queues.ack_one(queue, job.id, job.lease_id, _unset())
                newest_ms.append((time.perf_counter() - started) * 1000)
                if index % ServerTimes.DRAIN_EVERY == 0:
                    await newest_us.drain()
        result["ack_newest_ms"] = summary(newest_ms)
        result["ack_newest_server_us"] = summary(newest_us.durations_us)
        result["ping_ms"] = summary(await _ping_ms(client, 200))
    return result


def _unset() -> Any:
    from msgspec import UNSET

    return UNSET


async def _ping_ms(client: Any, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await client.ping()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def memory_per_job(bench: Bench, count: int) -> dict[str, Any]:
    async with bench.job_queues() as queues:
        client = queues.client
        before = (await client.info("memory"))["used_memory"]
        await bench.fill(queues, "memory", count)
        queued = (await client.info("memory"))["used_memory"]
        anatomy = await job_anatomy(client, "memory")
        leased = 0
        while leased < count:
            leased += len(await queues.lease("memory", "holder", LONG_LEASE_MS, min(100, count - leased)))
        in_flight = (await client.info("memory"))["used_memory"]
    per_job = (queued - before) / count
    return {
        "jobs": count,
        "payload_bytes": PAYLOAD_BYTES,
        "used_memory_before": before,
        "used_memory_queued": queued,
        "used_memory_in_flight": in_flight,
        "bytes_per_queued_job": per_job,
        "overhead_per_queued_job": per_job - PAYLOAD_BYTES,
        "bytes_per_in_flight_job": (in_flight - before) / count,
        "one_queued_job": anatomy,
    }


async def job_anatomy(client: Any, queue: str) -> dict[str, Any]:
    """What one waiting job is made of: its hash's fields and MEMORY USAGE (for whoever trims it)."""
    from echomq_http.store.keys import QueueKeys

    keys = QueueKeys.for_queue(queue)
    job_id = (await client.lindex(keys.wait, 0)).decode()
    fields = await client.hgetall(keys.job(job_id))
    return {
        "hash_key": keys.job(job_id),
        "hash_memory_usage": await client.memory_usage(keys.job(job_id), samples=0),
        "hash_encoding": (await client.object("encoding", keys.job(job_id))).decode(),
        "fields": {name.decode(): value.decode(errors="replace") for name, value in fields.items()},
        "wait_list_memory_usage_per_job": await client.memory_usage(keys.wait, samples=0)
        / await client.llen(keys.wait),
    }
