"""bench.py's workload for schedules (issue 16): what 10,000 schedules cost, and how late runs are.

    .venv/bin/python bench/bench.py --only schedule_cost [--quick] --no-bullmq

  schedule_cost  10,000 every_ms schedules (every 100 s, their first runs 10 ms apart, so that
                 100 fall due each second) on a Redis of its own and a service with its default
                 processes (1 replica, EMQ_WORKERS at its default, sweep every 1 s), put through
                 the service's own code (not measured). Nothing consumes the jobs the runs make:
                 the figures are the schedules' own cost. Three windows: the service alone,
                 before any schedule is put (its own idle cost, for reference); idle, with the
                 10,000 schedules put and none due yet (their first runs still ahead); and due,
                 100 runs a second. Figures: CPU of
                 the service processes (/proc) and of Redis (INFO cpu) in % of one core, script
                 calls/s and Redis time in scripts; then, from every run due in the due window,
                 its lateness (the job's created_at, Redis clock, less the run time in its id)
                 p50/p99/max, and the runs missing. Goal: service + Redis < 5 % of one core.

BullMQ's job schedulers make the next job only when the previous one is taken, which this
workload (no worker) would stall; it has no counterpart here.

Like bench/groups_ops.py: the function takes bench.py's Bench and returns a dict of figures;
``schedule_cost_rows``, ``_table`` and ``_summary`` turn them into rows and a table.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from ledger_ops import SCRIPT_COMMANDS, Snapshot, gather_limited, percentile

SCHEDULE_COST_TARGET_PCT = 5.0  # service + Redis, % of one core, with 100 runs due a second
SCHEDULES = 10_000
EVERY_MS = 100_000  # SCHEDULES / EVERY_MS * 1000 = 100 runs a second
STAGGER_MS = EVERY_MS // SCHEDULES  # first runs this far apart
QUEUE = "bench-schedules"
PUT_CONCURRENCY = 16
SETUP_BUDGET_S = 40.0  # the first runs come this long after the set-up starts
IDLE_WINDOW_S = {True: 5.0, False: 10.0}  # --quick, full
DUE_WINDOW_S = {True: 10.0, False: 30.0}
WARMUP_S = 3.0  # after the first runs fall due, before the due window
SETTLE_S = 1.0  # after the set-up, before the idle window
LATE_READ_S = 3.0  # after the due window: its last runs are made (at most a sweep + 1 s late)
READ_BATCH = 1000


async def _put_all(stack: Any, first_run_ms: int) -> float:
    """The schedules, put with the service's own code; the set-up's seconds."""
    import msgspec

    from echomq_http.api.schemas.schedules import ScheduleRequest
    from echomq_http.core.schedules import Schedules

    payload = stack.payload
    started = time.monotonic()
    async with stack.job_queues() as queues:
        schedules = Schedules(queues)

        def request(index: int) -> Any:
            body = {
                "every_ms": EVERY_MS,
                "start_at": first_run_ms + index * STAGGER_MS,
                "job": {"payload": payload},
            }
            return msgspec.json.decode(json.dumps(body), type=ScheduleRequest)

        await gather_limited(
            (lambda i=i: schedules.put(QUEUE, f"s{i:05d}", request(i)) for i in range(SCHEDULES)),
            PUT_CONCURRENCY,
        )
    return time.monotonic() - started


def _window(stack: Any, seconds: float) -> dict[str, Any]:
    client = stack.redis.client()
    service_pids = stack.service.pids()
    before = Snapshot.take(client, stack.redis.process.pid, service_pids)
    time.sleep(seconds)
    after = Snapshot.take(client, stack.redis.process.pid, service_pids)
    window_s = after.at - before.at
    scripts = usec = 0
    for name in SCRIPT_COMMANDS:
        calls_after, usec_after = after.calls.get(name, (0, 0))
        calls_before, usec_before = before.calls.get(name, (0, 0))
        scripts += calls_after - calls_before
        usec += usec_after - usec_before
    commands = sum(calls for calls, _ in after.calls.values()) - sum(
        calls for calls, _ in before.calls.values()
    )
    redis_pct = 100 * (after.redis_cpu_s - before.redis_cpu_s) / window_s
    service_pct = 100 * (after.service_cpu_s - before.service_cpu_s) / window_s
    return {
        "window_s": round(window_s, 2),
        "start": time.time() - window_s,
        "service_processes": len(service_pids),
        "service_cpu_pct": service_pct,
        "redis_cpu_pct": redis_pct,
        "total_cpu_pct": service_pct + redis_pct,
        "script_calls_per_s": scripts / window_s,
        "script_usec_per_s": usec / window_s,
        "commands_per_s": (commands - 2) / window_s,  # less the first snapshot's two INFO calls
    }


def _lateness(stack: Any, first_run_ms: int, from_ms: float, to_ms: float) -> dict[str, Any]:
    """Every run due from from_ms to to_ms (Redis clock ~ ours: one machine): its job's lateness."""
    from echomq_http.core.schedules import run_job_id
    from echomq_http.store.keys import QueueKeys

    keys = QueueKeys.for_queue(QUEUE)
    runs = []
    for index in range(SCHEDULES):
        anchor = first_run_ms + index * STAGGER_MS
        k = max(0, -(-(int(from_ms) - anchor) // EVERY_MS))
        at = anchor + k * EVERY_MS
        while at <= to_ms:
            runs.append((f"s{index:05d}", at))
            at += EVERY_MS
    client = stack.redis.client()
    late_ms: list[float] = []
    missing = 0
    for start in range(0, len(runs), READ_BATCH):
        batch = runs[start : start + READ_BATCH]
        pipe = client.pipeline(transaction=False)
        for name, at in batch:
            pipe.hget(keys.job(run_job_id(name, at)), "created_at")
        for (_, at), created in zip(batch, pipe.execute(), strict=True):
            if created is None:
                missing += 1
            else:
                late_ms.append(int(created) - at)
    return {
        "runs": len(runs),
        "missing": missing,
        "late_p50_ms": percentile(late_ms, 0.5),
        "late_p99_ms": percentile(late_ms, 0.99),
        "late_max_ms": max(late_ms, default=None),
        "late_min_ms": min(late_ms, default=None),
    }


def schedule_cost(bench: Any) -> dict[str, Any]:
    quick = bool(getattr(bench.args, "quick", False))
    with bench.own_stack("schedule_cost", replicas=1, workers=bench.args.workers) as stack:
        stack.flush()
        time.sleep(SETTLE_S)
        alone = _window(stack, IDLE_WINDOW_S[quick])
        print(f"  alone: {json.dumps(alone)}", file=sys.stderr, flush=True)
        first_run_ms = int((time.time() + SETUP_BUDGET_S) * 1000)
        setup_s = asyncio.run(_put_all(stack, first_run_ms))
        if time.time() + SETTLE_S + IDLE_WINDOW_S[quick] > first_run_ms / 1000 - 1:
            raise RuntimeError(f"schedule_cost: the set-up took {setup_s:.0f} s, past its budget")
        print(f"  {SCHEDULES:,} schedules put in {setup_s:.1f} s", file=sys.stderr, flush=True)
        time.sleep(SETTLE_S)
        idle = _window(stack, IDLE_WINDOW_S[quick])
        print(f"  idle: {json.dumps(idle)}", file=sys.stderr, flush=True)
        time.sleep(max(0.0, first_run_ms / 1000 + WARMUP_S - time.time()))
        due = _window(stack, DUE_WINDOW_S[quick])
        print(f"  due: {json.dumps(due)}", file=sys.stderr, flush=True)
        due_end_ms = (due["start"] + due["window_s"]) * 1000
        time.sleep(LATE_READ_S)
        late = _lateness(stack, first_run_ms, due["start"] * 1000, due_end_ms)
        waiting = stack.redis.client().llen(f"emq:{{{QUEUE}}}:wait")
    return {
        "schedules": SCHEDULES,
        "every_ms": EVERY_MS,
        "due_per_s": SCHEDULES * 1000 / EVERY_MS,
        "setup_s": round(setup_s, 1),
        "alone": alone,
        "idle": idle,
        "due": due,
        "lateness": late,
        "jobs_waiting_after": waiting,
        "service_workers": bench.args.workers,
    }


def schedule_cost_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    due, idle, late = result["due"], result["idle"], result["lateness"]
    title = f"{result['schedules']:,} schedules, {result['due_per_s']:g} runs due/s"
    return [
        row(
            "schedule_cost_cpu",
            f"{title}: service + Redis CPU",
            "% core",
            ours_value=round(due["total_cpu_pct"], 2),
            target=f"< {SCHEDULE_COST_TARGET_PCT:g} %",
            met=due["total_cpu_pct"] < SCHEDULE_COST_TARGET_PCT,
        ),
        row(
            "schedule_cost_service_cpu",
            "  same, service CPU",
            "% core",
            ours_value=round(due["service_cpu_pct"], 2),
        ),
        row(
            "schedule_cost_redis_cpu",
            "  same, Redis CPU (INFO cpu)",
            "% core",
            ours_value=round(due["redis_cpu_pct"], 2),
        ),
        row(
            "schedule_cost_calls",
            "  same, script calls",
            "calls/s",
            ours_value=round(due["script_calls_per_s"], 1),
        ),
        row(
            "schedule_cost_late_p50",
            "  run lateness p50 (job created_at - run time)",
            "ms",
            ours_value=late["late_p50_ms"],
        ),
        row("schedule_cost_late_p99", "  run lateness p99", "ms", ours_value=late["late_p99_ms"]),
        row(
            "schedule_cost_idle_cpu",
            f"{result['schedules']:,} schedules, none due: service + Redis CPU",
            "% core",
            ours_value=round(idle["total_cpu_pct"], 2),
        ),
    ]


def schedule_cost_table(result: dict[str, Any]) -> str:
    due, idle, late = result["due"], result["idle"], result["lateness"]
    lines = [
        f"Schedules' cost: {result['schedules']:,} schedules every {result['every_ms'] / 1000:g} s, "
        f"first runs {STAGGER_MS} ms apart ({result['due_per_s']:g} runs due a second), 1 replica with "
        f"{due['service_processes']} service processes (EMQ_WORKERS {result['service_workers']}), sweep "
        f"every 1 s; put in {result['setup_s']:.1f} s; nothing consumes the jobs "
        f"({result['jobs_waiting_after']:,} waiting at the end).",
        "",
        "| window | s | service CPU | Redis CPU | total | target | script calls/s | Redis time in scripts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, window, target in (
        ("no schedules (the service alone)", result["alone"], ""),
        ("none due", idle, ""),
        (f"{result['due_per_s']:g} due/s", due, f"< {SCHEDULE_COST_TARGET_PCT:g} %"),
    ):
        lines.append(
            f"| {name} | {window['window_s']:.0f} | {window['service_cpu_pct']:.2f} % | "
            f"{window['redis_cpu_pct']:.2f} % | {window['total_cpu_pct']:.2f} % | {target} | "
            f"{window['script_calls_per_s']:,.1f} | {window['script_usec_per_s'] / 1e4:.2f} % |"
        )
    lines += [
        "",
        f"Lateness of the {late['runs']:,} runs due in the due window (job created_at - run time): "
        f"p50 {late['late_p50_ms']} ms, p99 {late['late_p99_ms']} ms, max {late['late_max_ms']} ms "
        f"(min {late['late_min_ms']} ms); missing {late['missing']}.",
    ]
    return "\n".join(lines)


def schedule_cost_summary(result: dict[str, Any]) -> str:
    due, idle, late = result["due"], result["idle"], result["lateness"]
    return (
        f"{result['due_per_s']:g} due/s: service {due['service_cpu_pct']:.2f} % + Redis "
        f"{due['redis_cpu_pct']:.2f} % of a core, {due['script_calls_per_s']:.1f} script calls/s; idle "
        f"{idle['total_cpu_pct']:.2f} %; lateness p50 {late['late_p50_ms']} ms, "
        f"p99 {late['late_p99_ms']} ms, max {late['late_max_ms']} ms, "
        f"missing {late['missing']} of {late['runs']:,}"
    )
