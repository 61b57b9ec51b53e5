"""bench.py's workloads for the in-flight ledger at scale: idle queues, long operations, acks.

    .venv/bin/python bench/bench.py --only idle_sweep,long_ops,ack_cost [--quick] [--no-bullmq]

  idle_sweep  its own Redis and 2 service replicas of 2 processes each (EMQ_WORKERS=2,
              EMQ_SWEEP_INTERVAL_MS=1000): Plan.idle_queues queues, each with one waiting job
              (enqueued over HTTP, so each is registered as the service registers it), left
              alone for Plan.idle_settle_s; then over Plan.idle_window_s, from Redis: script
              calls per second (INFO commandstats, EVALSHA + EVAL) and every command's, Redis's
              CPU (INFO cpu, user + sys), and the service processes' CPU (/proc/<pid>/stat of
              every process below each replica). Works with --service-dir (an older checkout).
  long_ops    its own Redis and one service replica (default processes). Plan.long_dead dead
              letters and Plan.long_in_flight jobs in flight, leased 100 at a time by 5 workers
              w0..w4 in turn (so each holds a fifth, spread through the ledger); while a
              background loadgen process sends small requests at a fixed rate on another queue
              (enqueue 1, lease 1, ack 1, ...), in turn: (a) operator release of w0, (b) the
              service's own sweep of w1's leases, all renewed to end at the same instant,
              (c) redrive of all dead letters, (d) forced deletion of the queue with the rest.
              For each: its duration, and the small requests' latency during it vs at rest.
  ack_cost    with each of Plan.ack_sizes jobs in flight: the Redis time of one ack when acking
              the oldest leases first (lease order) and in a random order, for EchoMQ (the ack
              script, one job per call) and BullMQ (Job.moveToCompleted, fetchNext false) on the
              same Redis, both from INFO commandstats (EVALSHA + EVAL usec / calls) over acks
              made one at a time on an otherwise quiet Redis.

Each function takes bench.py's Bench and returns a dict of figures; the ``*_rows`` and
``*_table`` functions turn them into bench.py's table rows and their own tables.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loadgen
from proc_cpu import process_cpu_s

BENCH_DIR = Path(__file__).resolve().parent
LONG_LEASE_MS = 12 * 3600 * 1000  # the API's maximum: nothing expires unless the bench says so
SETUP_CONCURRENCY = 64  # script calls in flight at once during set-up

# targets of issue 11
IDLE_SCRIPT_CALLS_TARGET = 100  # script calls per second, in total, with 10,000 idle queues
IDLE_REDIS_CPU_TARGET = 2.0  # % of one core
LONG_OPS_P99_TARGET_MS = 50.0

# ---------------------------------------------------------------------------------------------
# measuring from Redis and /proc


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU of these processes, all threads (those that are gone count nothing)."""
    return sum(process_cpu_s(pid) for pid in pids)


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


SCRIPT_COMMANDS = ("fcall", "evalsha", "eval")  # FCALL where the server has functions


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


def percentile(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


async def gather_limited(calls: Iterable[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    """Run the calls with at most `limit` in flight; their results in the calls' order."""
    pending = list(calls)
    results: list[Any] = [None] * len(pending)
    position = iter(range(len(pending)))

    async def worker() -> None:
        for index in position:
            results[index] = await pending[index]()

    await asyncio.gather(*(worker() for _ in range(limit)))
    return results


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


# ---------------------------------------------------------------------------------------------
# long_ops

LONG_QUEUE = "long"
SMALL_QUEUE = "small"
LONG_WORKERS = tuple(f"w{index}" for index in range(5))
RELEASED_WORKER, EXPIRING_WORKER = "w0", "w1"
PHASE_GAP_S = 1.0  # quiet time between two operations
SLOWLOG_THRESHOLD_US = 1000  # Redis commands slower than this are logged during the operations
OPERATION_TIMEOUT_S = 300.0


@dataclass
class Phase:
    name: str
    start: float  # wall clock
    end: float
    duration_s: float  # the operation's own duration (its definition is in `what`)
    what: str
    extra: dict[str, Any] = field(default_factory=dict)


async def _fill(queues: Any, queue: str, count: int, payload: Any, max_attempts: int | None) -> None:
    from msgspec import Raw

    from echomq_http.api.schemas.jobs import EnqueueRequest

    body = Raw(json.dumps(payload, separators=(",", ":")).encode())
    options = {} if max_attempts is None else {"max_attempts": max_attempts}
    batch = [EnqueueRequest(payload=body, **options) for _ in range(1000)]
    sizes = [min(1000, count - start) for start in range(0, count, 1000)]
    await gather_limited((lambda size=size: queues.enqueue(queue, batch[:size]) for size in sizes), 4)


async def _lease_all(queues: Any, queue: str, workers: Sequence[str], count: int) -> dict[str, list[Any]]:
    """Lease `count` jobs, 100 per call, the workers taking turns: {worker: its jobs, oldest first}."""
    held: dict[str, list[Any]] = {worker: [] for worker in workers}
    total = 0
    for worker in itertools.cycle(workers):
        if total >= count:
            break
        jobs = await queues.lease(queue, worker, LONG_LEASE_MS, min(100, count - total))
        if not jobs:
            raise RuntimeError(f"long_ops: {queue} ran dry after {total} of {count} leases")
        held[worker] += jobs
        total += len(jobs)
    return held


async def long_ops_setup(stack: Any, dead: int, in_flight: int) -> dict[str, list[Any]]:
    """Dead letters first (leased, then failed without retry), then the jobs in flight."""
    async with stack.job_queues() as queues:
        await _fill(queues, LONG_QUEUE, dead, stack.payload, max_attempts=1)
        doomed = (await _lease_all(queues, LONG_QUEUE, ["doomed"], dead))["doomed"]
        answers = await gather_limited(
            (
                lambda job=job: queues.fail(
                    LONG_QUEUE, job.id, job.lease_id, "bench: dead letter", False, None
                )
                for job in doomed
            ),
            SETUP_CONCURRENCY,
        )
        if any(answer.state != "failed" for answer in answers):
            raise RuntimeError("long_ops: a failed job was not dead-lettered")
        await _fill(queues, LONG_QUEUE, in_flight, stack.payload, max_attempts=None)
        return await _lease_all(queues, LONG_QUEUE, LONG_WORKERS, in_flight)


async def renew_to_end_at(stack: Any, jobs: Sequence[Any], end_ms: float) -> list[int]:
    """Heartbeat every job so that its lease ends at end_ms (Redis clock ~ ours: same machine),
    or 1 s from its heartbeat if that is later; the new expiries."""

    async def renew(queues: Any, job: Any) -> int:
        lease_ms = max(1000, int(end_ms - time.time() * 1000))
        answer = await queues.heartbeat(LONG_QUEUE, job.id, job.lease_id, lease_ms)
        return int(answer.lease_expires_at)

    async with stack.job_queues() as queues:
        return await gather_limited((lambda job=job: renew(queues, job) for job in jobs), SETUP_CONCURRENCY)


def script_names() -> dict[str, str]:
    """{sha: operation} of this checkout's scripts, as the service renders them with its default
    settings (long_ops runs this checkout's service)."""
    import hashlib

    from echomq_http.store.luafunctions import library_name
    from echomq_http.store.scripts import lua_dir, operation_of, render

    names = {}
    for path in lua_dir().glob("*.lua"):
        sha, operation = hashlib.sha1(render(path).encode()).hexdigest(), operation_of(path)
        names[sha] = names[library_name(operation, sha)] = operation  # EVALSHA's and FCALL's
    return names


def _command_name(command: Any, scripts: dict[str, str]) -> str:
    text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    words = text.split()
    if len(words) > 1 and words[0].upper() in ("EVALSHA", "FCALL"):
        return f"{scripts.get(words[1], words[1][:10])} script"
    return words[0] if words else "?"


def _slow_commands(client: Any, scripts: dict[str, str] | None = None) -> dict[str, Any]:
    """What the slow log holds (commands slower than SLOWLOG_THRESHOLD_US), then cleared: the
    script calls (count, Redis time, the slowest), and by command. The log also holds commands
    run inside a script (LREM, ZREM ...), whose time is part of their script's: by_command only."""
    entries = client.slowlog_get(10_000)
    client.slowlog_reset()
    calls = []
    by_command: dict[str, dict[str, float]] = {}
    for entry in entries:
        name = _command_name(entry["command"], scripts or {})
        ms = int(entry["duration"]) / 1000
        if name.endswith(" script"):
            calls.append((ms, name))
        figures = by_command.setdefault(name, {"count": 0, "total_ms": 0.0, "max_ms": 0.0})
        figures["count"] += 1
        figures["total_ms"] = round(figures["total_ms"] + ms, 3)
        figures["max_ms"] = max(figures["max_ms"], ms)
    slowest = max(calls, default=None)
    return {
        "count": len(calls),
        "max_ms": None if slowest is None else slowest[0],
        "total_ms": round(sum(ms for ms, _ in calls), 3),
        "slowest": None if slowest is None else slowest[1],
        "by_command": by_command,
    }


def start_background(stack: Any, rate: float, loops: int, max_s: float) -> tuple[Any, float]:
    spec = {
        "workload": "paced",
        "client": "raw",
        "queue": SMALL_QUEUE,
        "payload": stack.payload,
        "lease_ms": 60_000,
        "urls": stack.service.urls,
        "concurrency": loops,
        "rate": rate,
        "tag": "small",
        "watch": {},
    }
    process = stack.spawn(
        [sys.executable, str(BENCH_DIR / "loadgen.py"), json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError(f"the background loadgen did not start: {line!r}")
    start = time.time() + 0.2
    process.stdin.write(f"go {start} {start + max_s}\n")
    process.stdin.flush()
    return process, start


def stop_background(stack: Any, process: Any) -> dict[str, Any]:
    try:
        out, _ = process.communicate("stop\n", timeout=60)
    finally:
        stack.forget(process)
    if process.returncode != 0:
        raise RuntimeError(f"the background loadgen failed, exit {process.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def long_ops(bench: Any) -> dict[str, Any]:
    import httpx

    plan = bench.plan
    per_worker = plan.long_in_flight // len(LONG_WORKERS)
    in_flight = per_worker * len(LONG_WORKERS)
    with bench.own_stack("long_ops", replicas=1, workers=bench.args.workers) as stack:
        client = stack.redis.client()
        scripts = script_names()
        wait_key = f"emq:{{{LONG_QUEUE}}}:wait"
        started = time.monotonic()
        held = asyncio.run(long_ops_setup(stack, plan.long_dead, in_flight))
        setup_s = time.monotonic() - started
        print(
            f"  set up {plan.long_dead:,} dead letters and {in_flight:,} in flight in {setup_s:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        client.config_set("slowlog-log-slower-than", SLOWLOG_THRESHOLD_US)
        client.config_set("slowlog-max-len", 10_000)
        max_s = 2 * plan.long_rest_s + 8 * PHASE_GAP_S + 4 * OPERATION_TIMEOUT_S
        background, start = start_background(stack, plan.long_rate, plan.long_loops, max_s)
        phases: list[Phase] = []
        url = stack.service.urls[0]
        try:
            with httpx.Client(base_url=url, timeout=OPERATION_TIMEOUT_S) as http:
                time.sleep(max(0.0, start - time.time()) + plan.long_rest_s)
                phases.append(Phase("at rest (before)", start, time.time(), plan.long_rest_s, "-"))
                _slow_commands(client)

                def operation(name: str, what: str, call: Callable[[], httpx.Response]) -> httpx.Response:
                    time.sleep(PHASE_GAP_S)
                    _slow_commands(client)
                    begun = time.time()
                    response = call()
                    ended = time.time()
                    response.raise_for_status()
                    slow = _slow_commands(client, scripts)
                    phases.append(Phase(name, begun, ended, ended - begun, what, {"slow": slow}))
                    print(f"  {name}: {ended - begun:.2f} s", file=sys.stderr, flush=True)
                    return response

                answer = operation(
                    f"(a) operator release of {RELEASED_WORKER} ({per_worker:,} jobs)",
                    "the HTTP call",
                    lambda: http.post(f"/v1/queues/{LONG_QUEUE}/workers/{RELEASED_WORKER}/release"),
                )
                phases[-1].extra["released"] = len(answer.json()["released"])

                # (b) the service's own sweep: every lease of w1 renewed so that all end together
                time.sleep(PHASE_GAP_S)
                jobs = held[EXPIRING_WORKER]
                before = client.llen(wait_key)
                end_ms = time.time() * 1000 + max(3000.0, 1000 + 0.3 * len(jobs))
                expiries = asyncio.run(renew_to_end_at(stack, jobs, end_ms))
                first, last = min(expiries) / 1000, max(expiries) / 1000
                time.sleep(max(0.0, first - time.time()))
                _slow_commands(client)
                deadline = time.time() + OPERATION_TIMEOUT_S
                back = 0
                while time.time() < deadline:
                    back = client.llen(wait_key) - before
                    if back >= len(jobs):
                        break
                    time.sleep(0.01)
                done = time.time()
                phases.append(
                    Phase(
                        f"(b) sweep of {len(jobs):,} expired leases ({EXPIRING_WORKER})",
                        first,
                        done,
                        done - last,
                        "last lease's end -> all back in waiting",
                        {
                            "slow": _slow_commands(client, scripts),
                            "back_in_waiting": back,
                            "expiry_spread_s": last - first,
                            "from_first_expiry_s": done - first,
                        },
                    )
                )
                print(f"  {phases[-1].name}: {done - last:.2f} s", file=sys.stderr, flush=True)

                answer = operation(
                    f"(c) redrive of {plan.long_dead:,} dead letters",
                    "the HTTP call",
                    lambda: http.post(f"/v1/queues/{LONG_QUEUE}/failed/retry"),
                )
                phases[-1].extra["retried"] = len(answer.json()["retried"])
                left = sum(
                    client.execute_command(command, f"emq:{{{LONG_QUEUE}}}:{key}")
                    for command, key in (("LLEN", "wait"), ("LLEN", "active"), ("ZCARD", "failed"))
                )
                operation(
                    f"(d) forced deletion of the queue ({left:,} jobs)",
                    "the HTTP call",
                    lambda: http.delete(f"/v1/queues/{LONG_QUEUE}", params={"force": "true"}),
                )
                time.sleep(PHASE_GAP_S)
                rest_from = time.time()
                time.sleep(plan.long_rest_s)
                phases.append(Phase("at rest (after)", rest_from, time.time(), plan.long_rest_s, "-"))
                remaining = client.exists(wait_key, f"emq:{{{LONG_QUEUE}}}:active")
        finally:
            samples = stop_background(stack, background)
    requests = samples["requests"]
    result = {
        "in_flight": in_flight,
        "per_worker": per_worker,
        "dead": plan.long_dead,
        "setup_s": round(setup_s, 1),
        "rate": plan.long_rate,
        "loops": plan.long_loops,
        "background_requests": len(requests),
        "background_errors": samples["errors"],
        "queue_keys_left_after_delete": remaining,
        "phases": [],
    }
    for phase in phases:
        # A request belongs to the phase it was due in (sent late or not).
        inside = [entry for entry in requests if phase.start <= entry[1] < phase.end]
        latency = [entry[3] for entry in inside]
        from_due = [(entry[2] - entry[1]) * 1000 + entry[3] for entry in inside]
        result["phases"].append(
            {
                "name": phase.name,
                "duration_s": phase.duration_s,
                "what": phase.what,
                "window_s": phase.end - phase.start,
                "requests": len(inside),
                "failed": sum(1 for entry in inside if not entry[4]),
                "p50_ms": percentile(latency, 0.5),
                "p99_ms": percentile(latency, 0.99),
                "max_ms": max(latency, default=None),
                "from_due_p99_ms": percentile(from_due, 0.99),
                "from_due_max_ms": max(from_due, default=None),
            }
            | phase.extra
        )
    return result


def long_ops_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    rows = []
    for index, phase in enumerate(result["phases"]):
        if phase["name"].startswith("at rest"):
            continue
        p99 = phase["p99_ms"]
        rows.append(
            row(
                f"long_ops_{index}",
                f"p99 of small requests during {phase['name'][4:]}",
                "ms",
                ours_value=p99,
                target=f"< {LONG_OPS_P99_TARGET_MS:g} ms",
                met=None if p99 is None else p99 < LONG_OPS_P99_TARGET_MS,
            )
        )
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def long_ops_table(result: dict[str, Any]) -> str:
    lines = [
        f"Small requests during long operations: {result['in_flight']:,} in flight ({result['per_worker']:,} "
        f"per worker, 5 workers leasing 100 at a time in turn) and {result['dead']:,} dead letters "
        f"(set up in {result['setup_s']} s); background: enqueue 1 / lease 1 / ack 1 on another queue, "
        f"{result['rate']:g} requests/s over {result['loops']} keep-alive connections "
        f"({result['background_requests']:,} requests, {result['background_errors']} errors). "
        "Latency: sent -> answered; 'from due': answered - when the request was due (a stalled "
        "connection's next requests go out late).",
        "",
        "| phase | duration s | requests | p50 ms | p99 ms | max ms | from due: p99 / max ms | "
        "script calls > 1 ms: count, Redis time, slowest | target p99 < 50 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in result["phases"]:
        slow = phase.get("slow")
        slow_text = "-"
        if slow is not None:
            slow_text = f"{slow['count']}, {slow['total_ms']:.0f} ms, {_ms(slow['max_ms'])} ms"
            if slow["slowest"]:
                slow_text += f" ({slow['slowest']})"
        resting = phase["name"].startswith("at rest")
        met = (
            ""
            if resting or phase["p99_ms"] is None
            else ("met" if phase["p99_ms"] < LONG_OPS_P99_TARGET_MS else "NOT met")
        )
        duration = "-" if resting else f"{phase['duration_s']:.2f}"
        lines.append(
            f"| {phase['name']} | {duration} | {phase['requests']} | {_ms(phase['p50_ms'])} | "
            f"{_ms(phase['p99_ms'])} | {_ms(phase['max_ms'])} | {_ms(phase['from_due_p99_ms'])} / "
            f"{_ms(phase['from_due_max_ms'])} | {slow_text} | {met} |"
        )
    notes = []
    for phase in result["phases"]:
        if "from_first_expiry_s" in phase:
            notes.append(
                "(b): duration from the last lease's end; from the first's "
                f"{phase['from_first_expiry_s']:.2f} s "
                f"(the renewals spread the ends over {phase['expiry_spread_s']:.2f} s); "
                f"{phase['back_in_waiting']:,} back in waiting; the sweeper runs every 1 s"
            )
        if "released" in phase:
            notes.append(f"(a) released {phase['released']:,} jobs")
        if "retried" in phase:
            notes.append(f"(c) redrove {phase['retried']:,} jobs")
    notes.append(f"queue keys left after (d): {result['queue_keys_left_after_delete']}")
    return "\n".join([*lines, "", *notes])


def long_ops_summary(result: dict[str, Any]) -> str:
    return "; ".join(
        f"{phase['name'] if phase['name'].startswith('at') else phase['name'][:3]} "
        f"p99 {_ms(phase['p99_ms'])} ms"
        for phase in result["phases"]
    )


# ---------------------------------------------------------------------------------------------
# ack_cost

ACK_QUEUE = "ackcost"


def ack_positions(size: int, samples: int, seed: int) -> list[int]:
    """The random order: positions (in lease order) among the jobs left after the lease-order
    acks, the same for both sides."""
    return random.Random(seed).sample(range(size - samples), samples)


async def _script_stats(client: Any) -> tuple[int, int]:
    return script_calls(command_calls(await client.info("commandstats"), answered_only=True))


async def echomq_ack_cost(bench: Any, size: int, samples: int, positions: Sequence[int]) -> dict[str, Any]:
    from msgspec import UNSET

    from echomq_http.api.schemas.working import AckItem

    async with bench.job_queues() as queues:
        client = queues.client
        started = time.monotonic()
        await _fill(queues, ACK_QUEUE, size, bench.payload, max_attempts=None)
        order = (await _lease_all(queues, ACK_QUEUE, ["holder"], size))["holder"]
        setup_s = time.monotonic() - started
        ledger_key = f"emq:{{{ACK_QUEUE}}}:active"
        # The ack script loaded before measuring, by an ack of a job that does not exist (no effect).
        await queues.ack(ACK_QUEUE, [AckItem(id="no-such-job", lease_id="0" * 32)])

        async def timed(jobs: Sequence[Any]) -> dict[str, Any]:
            in_flight = await client.llen(ledger_key)
            calls_before, usec_before = await _script_stats(client)
            client_ms = []
            for job in jobs:
                begun = time.perf_counter()
                await queues.ack_one(ACK_QUEUE, job.id, job.lease_id, UNSET)
                client_ms.append((time.perf_counter() - begun) * 1000)
            calls_after, usec_after = await _script_stats(client)
            calls = calls_after - calls_before
            return {
                "acks": len(jobs),
                "in_flight_before": in_flight,
                "script_calls": calls,
                "redis_us_per_call": (usec_after - usec_before) / calls if calls else None,
                "client_ms_p50": percentile(client_ms, 0.5),
                "client_ms_mean": sum(client_ms) / len(client_ms) if client_ms else None,
            }

        lease_order = await timed(order[:samples])
        rest = order[samples:]
        random_order = await timed([rest[index] for index in positions])
    return {"in_flight": size, "setup_s": round(setup_s, 1), "lease": lease_order, "random": random_order}


def ack_cost(bench: Any) -> dict[str, Any]:
    plan = bench.plan
    results = []
    # A Redis of its own with no service on it: nothing but the acks calls a script meanwhile.
    with bench.own_stack("ack_cost", replicas=0, workers=1) as stack:
        for size in plan.ack_sizes:
            samples = min(plan.ack_cost_samples, size // 10)
            positions = ack_positions(size, samples, seed=size)
            stack.flush()
            ours = asyncio.run(echomq_ack_cost(stack, size, samples, positions))
            print(f"  EchoMQ, {size:,} in flight: {json.dumps(ours)}", file=sys.stderr, flush=True)
            theirs = None
            if stack.node is not None:
                stack.flush()
                outcome = stack.bullmq(
                    "ack_cost", queue=ACK_QUEUE, in_flight=size, samples=samples, positions=positions
                )
                theirs = outcome.extra if outcome is not None and outcome.extra else None
                print(f"  BullMQ, {size:,} in flight: {json.dumps(theirs)}", file=sys.stderr, flush=True)
            results.append({"in_flight": size, "samples": samples, "echomq": ours, "bullmq": theirs})
    return {"sizes": results}


def _us(side: dict[str, Any] | None, order: str) -> float | None:
    if not side or order not in side:
        return None
    return side[order].get("redis_us_per_call")


def ack_cost_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    rows = []
    for entry in result["sizes"]:
        n = entry["in_flight"]
        label = f"{n // 1000}k" if n >= 1000 else str(n)
        for order, title in (("lease", "oldest first"), ("random", "random order")):
            rows.append(
                row(
                    f"ack_cost_{label}_{order}",
                    f"ack, {label} in flight, {title}: Redis time",
                    "µs",
                    ours_value=_us(entry["echomq"], order),
                    bull_value=_us(entry["bullmq"], order),
                    bull_title="moveToCompleted (fetchNext false), same order",
                )
            )
    return rows


def ack_cost_table(result: dict[str, Any]) -> str:
    lines = [
        "Ack cost by ledger size and order: Redis time per ack (INFO commandstats, EVALSHA + EVAL "
        "usec / calls, over acks made one at a time on a quiet Redis); lease order = the oldest "
        "lease first; random = the same random positions (seeded) on both sides, among the jobs "
        "left after the lease-order acks. In brackets: the caller's time per call, µs, p50.",
        "",
        "| in flight | order | acks | EchoMQ µs/ack | BullMQ µs/ack | ratio | EchoMQ calls | BullMQ calls |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(side: dict[str, Any] | None, order: str) -> tuple[str, str]:
        if not side or order not in side:
            return "-", "-"
        figures = side[order]
        us, client_ms = figures.get("redis_us_per_call"), figures.get("client_ms_p50")
        text = "-" if us is None else f"{us:,.1f}"
        if client_ms is not None:
            text += f" ({client_ms * 1000:,.0f})"
        return text, str(figures.get("script_calls"))

    for entry in result["sizes"]:
        for order in ("lease", "random"):
            ours, ours_calls = cell(entry["echomq"], order)
            theirs, theirs_calls = cell(entry["bullmq"], order)
            a, b = _us(entry["echomq"], order), _us(entry["bullmq"], order)
            ratio = "-" if a is None or not b else f"{a / b:.2f}x"
            lines.append(
                f"| {entry['in_flight']:,} | {order} | {entry['samples']} | {ours} | {theirs} | {ratio} | "
                f"{ours_calls} | {theirs_calls} |"
            )
    return "\n".join(lines)


def ack_cost_summary(result: dict[str, Any]) -> str:
    return "; ".join(
        f"{entry['in_flight']:,} {order}: EchoMQ {_us(entry['echomq'], order) or 0:,.1f} µs, "
        f"BullMQ {_us(entry['bullmq'], order) or 0:,.1f} µs"
        for entry in result["sizes"]
        for order in ("lease", "random")
    )
