"""bench.py's workloads for the in-flight ledger at scale: idle queues.

    .venv/bin/python bench/bench.py --only idle_sweep [--quick]

  idle_sweep  its own Redis and 2 service replicas of 2 processes each (EMQ_WORKERS=2,
              EMQ_SWEEP_INTERVAL_MS=1000): Plan.idle_queues queues, each with one waiting job
              (enqueued over HTTP, so each is registered as the service registers it), left
              alone for Plan.idle_settle_s; then over Plan.idle_window_s, from Redis: script
              calls per second (INFO commandstats, EVALSHA + EVAL) and every command's, Redis's
              CPU (INFO cpu, user + sys), and the service processes' CPU (/proc/<pid>/stat of
              every process below each replica). Works with --service-dir (an older checkout).


Each function takes bench.py's Bench and returns a dict of figures; the ``*_rows`` and
``*_table`` functions turn them into bench.py's table rows and their own tables.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import loadgen

CLK_TCK = os.sysconf("SC_CLK_TCK")

# targets of issue 11
IDLE_SCRIPT_CALLS_TARGET = 100  # script calls per second, in total, with 10,000 idle queues
IDLE_REDIS_CPU_TARGET = 2.0  # % of one core

# ---------------------------------------------------------------------------------------------
# measuring from Redis and /proc


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU of these processes (those that are gone count nothing)."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / CLK_TCK


def command_calls(commandstats: dict[str, Any], answered_only: bool = False) -> dict[str, tuple[int, int]]:
    """INFO commandstats (as redis-py parses it) as {command: (calls, usec)}; answered_only
    leaves out the calls that failed or were rejected (an EVALSHA answered NOSCRIPT counts as a
    call, a failed one)."""
    calls = {}
    for name, stats in commandstats.items():
        count = int(stats["calls"])
        if answered_only:
            count -= int(stats.get("failed_calls", 0)) + int(stats.get("rejected_calls", 0))
        calls[name.removeprefix("cmdstat_")] = (count, int(stats["usec"]))
    return calls


SCRIPT_COMMANDS = ("evalsha", "eval")


def script_calls(calls: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """(calls, usec) of the script commands."""
    return (
        sum(calls.get(name, (0, 0))[0] for name in SCRIPT_COMMANDS),
        sum(calls.get(name, (0, 0))[1] for name in SCRIPT_COMMANDS),
    )


@dataclass
class Snapshot:
    """What the idle measurement compares at both ends of its window."""

    at: float  # monotonic
    calls: dict[str, tuple[int, int]]
    redis_cpu_s: float  # INFO cpu: used_cpu_user + used_cpu_sys
    redis_proc_cpu_s: float  # the same from /proc, as a check
    service_cpu_s: float

    @classmethod
    def take(cls, client: Any, redis_pid: int, service_pids: Sequence[int]) -> Snapshot:
        # One round trip. INFO commandstats counts a command once it has run, so it never counts
        # itself: the calls between two snapshots include the first one's two INFO calls.
        pipe = client.pipeline(transaction=False)
        pipe.info("commandstats")
        pipe.info("cpu")
        stats, cpu = pipe.execute()
        return cls(
            at=time.monotonic(),
            calls=command_calls(stats),
            redis_cpu_s=float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            redis_proc_cpu_s=cpu_seconds([redis_pid]),
            service_cpu_s=cpu_seconds(service_pids),
        )


# ---------------------------------------------------------------------------------------------
# idle_sweep


async def enqueue_one_each(urls: Sequence[str], names: Sequence[str], payload: Any) -> int:
    """One job into each named queue over HTTP (the service registers each queue); the errors."""
    body = loadgen._encode({"payload": payload})
    todo = iter(names)
    errors = 0

    async def connection(url: str) -> None:
        nonlocal errors
        conn = await loadgen.RawConnection.open(url)
        try:
            for name in todo:
                status, answer = await conn.request("POST", f"/v1/queues/{name}/jobs", body)
                if status != 201:
                    errors += 1
                    if errors <= 3:
                        print(f"  enqueue into {name} answered {status}: {answer[:200]!r}", file=sys.stderr)
        finally:
            conn.close()

    await asyncio.gather(*(connection(urls[i % len(urls)]) for i in range(32)))
    return errors


def idle_sweep(bench: Any) -> dict[str, Any]:
    plan = bench.plan
    names = [f"idle-{index:05d}" for index in range(plan.idle_queues)]
    env = {"EMQ_SWEEP_INTERVAL_MS": "1000"}
    with bench.own_stack("idle_sweep", replicas=2, workers=2, env=env) as stack:
        client = stack.redis.client()
        started = time.monotonic()
        errors = asyncio.run(enqueue_one_each(stack.service.urls, names, bench.payload))
        fill_s = time.monotonic() - started
        time.sleep(plan.idle_settle_s)
        service_pids = stack.service.pids()
        redis_pid = stack.redis.process.pid
        before = Snapshot.take(client, redis_pid, service_pids)
        time.sleep(plan.idle_window_s)
        after = Snapshot.take(client, redis_pid, service_pids)
        registered = client.scard("emq:queues")
        due_entries = client.zcard("emq:due") if client.type("emq:due") == b"zset" else None
        waiting = sum(client.llen(f"emq:{{{name}}}:wait") for name in names[:: max(1, len(names) // 100)])
    window_s = after.at - before.at
    deltas = {
        name: (calls - before.calls.get(name, (0, 0))[0], usec - before.calls.get(name, (0, 0))[1])
        for name, (calls, usec) in after.calls.items()
    }
    # The sampling's own calls inside the window: the first snapshot's two INFO calls.
    own = {"info": 2}
    for name, count in own.items():
        calls, usec = deltas.get(name, (0, 0))
        deltas[name] = (max(0, calls - count), usec)
    per_s = {name: calls / window_s for name, (calls, _) in deltas.items() if calls > 0}
    scripts, script_usec = (sum(deltas.get(name, (0, 0))[i] for name in SCRIPT_COMMANDS) for i in (0, 1))
    return {
        "queues": len(names),
        "enqueue_errors": errors,
        "fill_s": round(fill_s, 2),
        "settle_s": plan.idle_settle_s,
        "window_s": round(window_s, 3),
        "registered_queues": registered,
        "due_index_entries": due_entries,
        "waiting_in_sampled_queues": waiting,
        "sampled_queues": len(names[:: max(1, len(names) // 100)]),
        "service_processes": len(service_pids),
        "script_calls_per_s": scripts / window_s,
        "script_usec_per_s": script_usec / window_s,
        "commands_per_s": sum(per_s.values()),
        "commands_per_s_by_name": dict(sorted(per_s.items(), key=lambda item: -item[1])),
        "redis_cpu_pct": 100 * (after.redis_cpu_s - before.redis_cpu_s) / window_s,
        "redis_proc_cpu_pct": 100 * (after.redis_proc_cpu_s - before.redis_proc_cpu_s) / window_s,
        "service_cpu_pct": 100 * (after.service_cpu_s - before.service_cpu_s) / window_s,
        "service_dir": str(stack.service.service_dir),
    }


def idle_sweep_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    n = f"{result['queues'] // 1000}k" if result["queues"] >= 1000 else str(result["queues"])
    scripts = result["script_calls_per_s"]
    redis_cpu = result["redis_cpu_pct"]
    return [
        row(
            "idle_sweep_scripts",
            f"{n} idle queues, 2x2 service processes: script calls",
            "calls/s",
            ours_value=scripts,
            target=f"< {IDLE_SCRIPT_CALLS_TARGET}",
            met=scripts < IDLE_SCRIPT_CALLS_TARGET,
        ),
        row(
            "idle_sweep_redis_cpu",
            "  same, Redis CPU (INFO cpu)",
            "% core",
            ours_value=redis_cpu,
            target=f"< {IDLE_REDIS_CPU_TARGET:g} %",
            met=redis_cpu < IDLE_REDIS_CPU_TARGET,
        ),
        row(
            "idle_sweep_service_cpu",
            f"  same, service CPU ({result['service_processes']} processes below the 2 replicas)",
            "% core",
            ours_value=result["service_cpu_pct"],
        ),
    ]


def idle_sweep_table(result: dict[str, Any]) -> str:
    top = ", ".join(
        f"{name} {rate:,.1f}" for name, rate in itertools.islice(result["commands_per_s_by_name"].items(), 6)
    )
    lines = [
        f"Idle-queue sweep cost ({result['service_dir']}): {result['queues']:,} queues with one waiting "
        f"job each ({result['registered_queues']:,} registered, {result['enqueue_errors']} enqueue errors, "
        f"filled in {result['fill_s']:.1f} s), left alone {result['settle_s']:g} s, then measured over "
        f"{result['window_s']:.1f} s; {result['waiting_in_sampled_queues']} jobs waiting in "
        f"{result['sampled_queues']} of the queues sampled after; due index: "
        + ("absent" if result["due_index_entries"] is None else f"{result['due_index_entries']} entries"),
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| script calls/s (EVALSHA + EVAL) | {result['script_calls_per_s']:,.1f} | "
        f"< {IDLE_SCRIPT_CALLS_TARGET} |",
        f"| Redis time in scripts | {result['script_usec_per_s'] / 1e4:,.2f} % of a core | |",
        f"| all commands/s | {result['commands_per_s']:,.1f} | |",
        f"| Redis CPU, INFO cpu (user + sys) | {result['redis_cpu_pct']:.2f} % of a core | "
        f"< {IDLE_REDIS_CPU_TARGET:g} % |",
        f"| Redis CPU, /proc | {result['redis_proc_cpu_pct']:.2f} % of a core | |",
        f"| service CPU, the {result['service_processes']} processes below the 2 replicas | "
        f"{result['service_cpu_pct']:.2f} % of a core | |",
        "",
        f"commands/s by name: {top or '-'}",
    ]
    return "\n".join(lines)


def idle_sweep_summary(result: dict[str, Any]) -> str:
    return (
        f"{result['script_calls_per_s']:,.1f} script calls/s, {result['commands_per_s']:,.1f} commands/s, "
        f"Redis CPU {result['redis_cpu_pct']:.2f} %, service CPU {result['service_cpu_pct']:.2f} %"
    )
