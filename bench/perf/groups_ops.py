"""bench.py's workload for groups (issue 15): what a lease costs with many groups.

    .venv/bin/python bench/bench.py --only group_lease_cost [--quick] [--no-bullmq]

  group_lease_cost  lease + ack cycles, one job at a time, on a Redis of its own with no service
                    on it, in three queues: no groups at all (the fast path, for reference); one
                    group; GROUPS groups with group_max_in_flight 1, all but UNCAPPED of them at
                    their cap (one job each in flight, one more waiting). Each cycle leases one job
                    and acks it (the ack frees its group, which goes back into the ring). Figures:
                    the Redis time of each lease script call (INFO commandstats, EVALSHA usec,
                    read around each lease), mean and p50, and the cycles per second of the
                    sequential loop. Goal: the lease with 10,000 groups within 1.5x of one group.

Like bench/events_ops.py: the function takes bench.py's Bench and returns a dict of figures;
``group_lease_cost_rows``, ``_table`` and ``_summary`` turn them into rows and a table.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ledger_ops import command_calls, percentile, script_calls

GROUP_LEASE_COST_TARGET = 1.5  # many groups' lease time over one group's, at most
GROUPS = 10_000
UNCAPPED = 200  # groups left with room (and waiting jobs) for the measured cycles
CYCLES = {True: 500, False: 3000}  # --quick, full
WARMUP = 50  # cycles before the measured ones: scripts loaded, caches warm
ENQUEUE_BATCH = 1000
LEASE_BATCH = 100
QUEUES = {"none": "bench-groups-none", "one": "bench-groups-one", "many": "bench-groups-many"}


async def _script_usec(client: Any) -> int:
    return script_calls(command_calls(await client.info("commandstats"), answered_only=True))[1]


async def _enqueue(queues: Any, queue: str, jobs: list[tuple[str, str | None]], payload: Any) -> None:
    from msgspec import Raw

    from echomq_http.api.schemas.jobs import EnqueueRequest

    raw = Raw(json.dumps(payload, separators=(",", ":")).encode())
    for start in range(0, len(jobs), ENQUEUE_BATCH):
        batch = [
            EnqueueRequest(payload=raw, id=job_id, group=group)
            for job_id, group in jobs[start : start + ENQUEUE_BATCH]
        ]
        await queues.enqueue(queue, batch)


async def _setup(queues: Any, side: str, cycles: int, payload: Any) -> None:
    queue = QUEUES[side]
    if side == "none":
        await _enqueue(queues, queue, [(f"j{i}", None) for i in range(cycles + WARMUP + 10)], payload)
    elif side == "one":
        await _enqueue(queues, queue, [(f"j{i}", "g0") for i in range(cycles + WARMUP + 10)], payload)
    else:
        await queues.client.hset(queues.keys(queue).meta, "group_max_in_flight", 1)
        jobs = [(f"g{g}-{n}", f"g{g}") for n in range(2) for g in range(GROUPS)]
        # The groups that keep room (the last to enter the round) get enough jobs for every cycle.
        per_group = -(-(cycles + WARMUP) // UNCAPPED)
        jobs += [
            (f"g{g}-{n}", f"g{g}") for n in range(2, 2 + per_group) for g in range(GROUPS - UNCAPPED, GROUPS)
        ]
        await _enqueue(queues, queue, jobs, payload)
        # One job of all but UNCAPPED groups leased and kept: those groups are at their cap (the
        # round takes the groups in the order they entered it: g0, g1, ...).
        held = 0
        while held < GROUPS - UNCAPPED:
            leased = await queues.lease(
                queue, "holder", 3_600_000, min(LEASE_BATCH, GROUPS - UNCAPPED - held)
            )
            held += len(leased)


async def _cycles(queues: Any, side: str, cycles: int) -> dict[str, Any]:
    from msgspec import UNSET

    queue, client = QUEUES[side], queues.client
    lease_us: list[float] = []
    started = time.perf_counter()
    for _ in range(cycles):
        before = await _script_usec(client)
        (job,) = await queues.lease(queue, "w", 60_000, 1)
        lease_us.append(await _script_usec(client) - before)
        await queues.ack_one(queue, job.id, job.lease_id, UNSET)
    elapsed_s = time.perf_counter() - started
    ring = await client.llen(queues.keys(queue).ring)
    return {
        "cycles": cycles,
        "lease_us_mean": statistics.fmean(lease_us),
        "lease_us_p50": percentile(lease_us, 0.5),
        "cycles_per_s": cycles / elapsed_s,  # includes the INFO calls around each lease
        "ring_length": ring,
    }


async def _measure(stack: Any, cycles: int) -> dict[str, Any]:
    results = {}
    async with stack.job_queues() as queues:
        for side in QUEUES:
            started = time.monotonic()
            await _setup(queues, side, cycles, stack.payload)
            setup_s = time.monotonic() - started
            await _cycles(queues, side, WARMUP)
            results[side] = {**await _cycles(queues, side, cycles), "setup_s": round(setup_s, 1)}
            print(f"  {side}: {json.dumps(results[side])}", file=sys.stderr, flush=True)
    return results


def group_lease_cost(bench: Any) -> dict[str, Any]:
    cycles = CYCLES[bool(getattr(bench.args, "quick", False))]
    with bench.own_stack("group_lease_cost", replicas=0, workers=1) as stack:
        stack.flush()
        sides = asyncio.run(_measure(stack, cycles))
    one, many = sides["one"]["lease_us_mean"], sides["many"]["lease_us_mean"]
    return {"groups": GROUPS, "uncapped": UNCAPPED, "sides": sides, "ratio": many / one if one else None}


def group_lease_cost_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    ratio = result["ratio"]
    sides = result["sides"]
    return [
        row(
            f"group_lease_cost_{side}",
            f"lease of one job, {title}: Redis time (mean)",
            "µs",
            ours_value=round(sides[side]["lease_us_mean"], 1),
        )
        for side, title in (
            ("none", "no groups"),
            ("one", "1 group"),
            ("many", f"{result['groups']:,} groups"),
        )
    ] + [
        row(
            "group_lease_cost_ratio",
            f"lease with {result['groups']:,} groups (most capped) / with 1 group",
            "ratio",
            ours_value=round(ratio, 3) if ratio else None,
            target=f"<= {GROUP_LEASE_COST_TARGET:g}",
            met=ratio is not None and ratio <= GROUP_LEASE_COST_TARGET,
        )
    ]


def group_lease_cost_table(result: dict[str, Any]) -> str:
    lines = [
        f"Lease cost by number of groups: one-job lease + ack cycles, Redis time per lease call "
        f"(INFO commandstats); {result['groups']:,} groups with group_max_in_flight 1, all but "
        f"{result['uncapped']} at their cap.",
        "",
        "| queue | lease µs, mean | lease µs, p50 | cycles/s | ring length after |",
        "|---|---|---|---|---|",
    ]
    for side, title in (("none", "no groups"), ("one", "1 group"), ("many", f"{result['groups']:,} groups")):
        figures = result["sides"][side]
        lines.append(
            f"| {title} | {figures['lease_us_mean']:,.1f} | {figures['lease_us_p50']:,.1f} | "
            f"{figures['cycles_per_s']:,.0f} | {figures['ring_length']} |"
        )
    return "\n".join(lines)


def group_lease_cost_summary(result: dict[str, Any]) -> str:
    sides = result["sides"]
    return (
        f"lease {sides['none']['lease_us_mean']:,.1f} µs without groups, "
        f"{sides['one']['lease_us_mean']:,.1f} with 1 group, "
        f"{sides['many']['lease_us_mean']:,.1f} with {result['groups']:,}: "
        f"{result['ratio']:.2f}x"
    )
