"""bench.py's workload for worker sessions: how soon a killed worker's jobs come back.

    .venv/bin/python bench/bench.py --only session_recovery [--quick] [--no-bullmq]

  session_recovery  a worker (a process of its own) leases SESSION_JOBS jobs with 60 s leases
                    and is killed (SIGKILL) while it holds them: the time from the kill until
                    another worker has leased all of them again (it long-polls for them), with a
                    session (ttl 5 s, renewed every second until the kill: the contract's bound
                    is ttl + the sweep interval + 1 s) and without one (the leases must run out:
                    60 s + the sweep interval). Quick: one round each; full: ROUNDS_FULL each,
                    the median reported.

Each function takes bench.py's Bench and returns a dict of figures; the ``*_rows``,
``*_table`` and ``*_summary`` functions turn them into bench.py's table rows and their own table.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

SESSION_TTL_MS = 5000
LEASE_MS = 60_000
SESSION_JOBS = 20
SWEEP_INTERVAL_MS = 1000  # the service's default
ROUNDS_FULL = 3
LEASED_TIMEOUT_S = 30.0
RECOVERY_TIMEOUT_S = 120.0
QUEUE = "sessions-bench"

# The doomed worker: opens a session (or not), leases the jobs, says so, then only renews its
# session every second (never its leases) until it is killed.
DOOMED = """
import sys, time, httpx
url, queue, worker, jobs, lease_ms, ttl_ms = sys.argv[1:7]
with httpx.Client(base_url=url, timeout=30) as http:
    session = ttl_ms != "0"
    def beat():
        beating = http.post(f"/v1/queues/{queue}/workers/{worker}/heartbeat", json={"ttl_ms": int(ttl_ms)})
        beating.raise_for_status()
    if session:
        beat()
    asked = {"worker": worker, "max_jobs": int(jobs), "lease_ms": int(lease_ms)}
    leased = http.post(f"/v1/queues/{queue}/lease", json=asked).json()["jobs"]
    print(len(leased), flush=True)
    while True:
        time.sleep(1.0)
        if session:
            beat()
"""


def _round(url: str, with_session: bool, number: int) -> float:
    """Seconds from the doomed worker's SIGKILL until all its jobs were leased again."""
    queue = f"{QUEUE}-{'on' if with_session else 'off'}-{number}"
    with httpx.Client(base_url=url, timeout=60) as http:
        jobs = [{"payload": i} for i in range(SESSION_JOBS)]
        http.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs}).raise_for_status()
        ttl = str(SESSION_TTL_MS if with_session else 0)
        doomed = subprocess.Popen(
            [sys.executable, "-c", DOOMED, url, queue, "doomed", str(SESSION_JOBS), str(LEASE_MS), ttl],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert doomed.stdout is not None
            line = doomed.stdout.readline()
            if line.strip() != str(SESSION_JOBS):
                raise RuntimeError(f"the doomed worker leased {line.strip() or 'nothing'}")
            time.sleep(1.5)  # a session heartbeat or so after the lease: the kill lands mid-session
            os.kill(doomed.pid, signal.SIGKILL)
            killed_at = time.monotonic()
        finally:
            doomed.kill()
            doomed.wait()
        taken = 0
        while taken < SESSION_JOBS:
            if time.monotonic() - killed_at > RECOVERY_TIMEOUT_S:
                raise RuntimeError(f"only {taken} of {SESSION_JOBS} jobs came back")
            answer = http.post(
                f"/v1/queues/{queue}/lease",
                json={"worker": "rescuer", "max_jobs": SESSION_JOBS - taken, "wait_ms": 20_000},
            )
            answer.raise_for_status()
            taken += len(answer.json()["jobs"])
        return time.monotonic() - killed_at


def session_recovery(bench: Any) -> dict[str, Any]:
    rounds = 1 if bench.args.quick else ROUNDS_FULL
    seconds: dict[str, list[float]] = {"session": [], "lease": []}
    with bench.own_stack("session-recovery", replicas=1, workers=1) as stack:
        url = stack.service.urls[0]
        for number in range(rounds):
            seconds["session"].append(_round(url, True, number))
            seconds["lease"].append(_round(url, False, number))
    return {
        "rounds": seconds,
        "session_s": statistics.median(seconds["session"]),
        "lease_s": statistics.median(seconds["lease"]),
        "session_bound_s": (SESSION_TTL_MS + SWEEP_INTERVAL_MS + 1000) / 1000,
    }


def session_recovery_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    return [
        row(
            "session_recovery",
            f"SIGKILLed worker's {SESSION_JOBS} jobs leasable again, session ttl 5 s (median)",
            "s",
            ours_value=round(result["session_s"], 2),
            target=f"<= {result['session_bound_s']:g}",
            met=result["session_s"] <= result["session_bound_s"],
        ),
        row(
            "session_recovery",
            f"SIGKILLed worker's {SESSION_JOBS} jobs leasable again, no session, lease 60 s (median)",
            "s",
            ours_value=round(result["lease_s"], 2),
        ),
    ]


def session_recovery_table(result: dict[str, Any]) -> str:
    lines = ["| worker | jobs back after (median) | each round |", "|---|---|---|"]
    for side, title in (("session", "session, ttl 5 s"), ("lease", "no session, lease 60 s")):
        each = " / ".join(f"{value:.2f} s" for value in result["rounds"][side])
        lines.append(f"| {title} | {result[f'{side}_s']:.2f} s | {each} |")
    return "\n".join(lines)


def session_recovery_summary(result: dict[str, Any]) -> str:
    return (
        f"jobs back {result['session_s']:.2f} s after the kill with a session (bound "
        f"{result['session_bound_s']:g} s), {result['lease_s']:.2f} s without"
    )
