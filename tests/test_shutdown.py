"""Graceful shutdown on SIGTERM, and SIGKILL at any instant leaving nothing half-done."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from echomq_http.core import limits
from echomq_http.store.keys import QueueKeys
from tests.consistency import violations
from tests.support import wait_for_long_polls, wait_until
from tests.support.ports import free_port
from tests.support.servers import RedisServer

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0
WORKERS = 2  # set, not the machine's core count: the tests need a supervisor and its workers
LONG_POLL_MS = limits.MAX_WAIT_MS
PORTS: dict[int, int] = {}  # service pid -> its port


def start_service(redis_url: str, port: int, **settings: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env.update(EMQ_REDIS_URL=redis_url, PORT=str(port), HOST="127.0.0.1", EMQ_SWEEP_INTERVAL_MS="200")
    env.update(settings)
    process = subprocess.Popen(
        [sys.executable, "-m", "echomq_http"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: "kill the service" kills every process of it
    )
    PORTS[process.pid] = port
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.05)


def kill_service(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the service (its supervisor and uvicorn workers) and wait."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # the workers are gone once nobody answers on the port any more
        try:
            httpx.get(f"http://127.0.0.1:{PORTS[process.pid]}/healthz", timeout=0.2)
        except httpx.TransportError:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the service's processes outlived SIGKILL")
        time.sleep(0.05)


@pytest.mark.timeout(120)
async def test_sigterm_answers_long_polls_and_keeps_leases(private_valkey: RedisServer, queue: str) -> None:
    port = free_port()
    process = start_service(private_valkey.url, port, EMQ_WORKERS=str(WORKERS))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            await http.post(f"/v1/queues/{queue}/jobs", json={"payload": "held"})
            held = (await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w"})).json()["jobs"][0]
            sent_at = time.monotonic()
            waiters = [
                asyncio.create_task(
                    http.post(f"/v1/queues/{queue}/lease", json={"worker": f"p{i}", "wait_ms": LONG_POLL_MS})
                )
                for i in range(5)
            ]
            await wait_for_long_polls(http, 5)  # all five are parked, in one process or the other
            process.send_signal(signal.SIGTERM)
            answers = await asyncio.wait_for(asyncio.gather(*waiters), 2 * LONG_POLL_MS / 1000)
            answered_after_s = time.monotonic() - sent_at
            assert [a.status_code for a in answers] == [200] * 5
            assert all(a.json() == {"jobs": []} for a in answers)
            # Answered by the shutdown, not by their wait running out (which cannot come sooner).
            assert answered_after_s < LONG_POLL_MS / 1000, answered_after_s
            assert await asyncio.to_thread(process.wait, STOP_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
    # The leased job is still in the ledger, attributed, recoverable.
    client = redis.Redis.from_url(private_valkey.url)
    assert violations(client, queue) == []
    assert client.lrange(QueueKeys.for_queue(queue).active, 0, -1) == [held["id"].encode()]


async def _load(base_url: str, queue: str, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=5) as http:
        rng = random.Random()
        while not stop.is_set():
            try:
                jobs = [
                    {"payload": i, "priority": rng.choice([0, 0, 5]), "delay_ms": rng.choice([0, 0, 50])}
                    for i in range(rng.randint(1, 20))
                ]
                await http.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
                leased = (
                    await http.post(
                        f"/v1/queues/{queue}/lease",
                        json={"worker": f"w{rng.randint(1, 3)}", "max_jobs": 10, "lease_ms": 1000},
                    )
                ).json()["jobs"]
                for job in leased:
                    action = rng.choice(["ack", "ack", "fail", "release", None])
                    if action is not None:
                        body = (
                            {"lease_id": job["lease_id"], "error": "e", "retry_after_ms": 0}
                            if action == "fail"
                            else {"lease_id": job["lease_id"]}
                        )
                        await http.post(f"/v1/queues/{queue}/jobs/{job['id']}/{action}", json=body)
            except (httpx.TransportError, ValueError, KeyError):
                await asyncio.sleep(0.02)  # the service is being killed and restarted


@pytest.mark.timeout(180)
async def test_sigkill_at_any_instant_leaves_nothing_half_done(
    private_valkey: RedisServer, queue: str
) -> None:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    process = start_service(private_valkey.url, port)
    stop = asyncio.Event()
    loads = [asyncio.create_task(_load(base_url, queue, stop)) for _ in range(4)]
    try:
        for _ in range(6):
            await asyncio.sleep(random.uniform(0.3, 1.0))
            await asyncio.to_thread(kill_service, process)
            process = await asyncio.to_thread(start_service, private_valkey.url, port)
    finally:
        stop.set()
        await asyncio.gather(*loads)
        kill_service(process)
    client = redis.Redis.from_url(private_valkey.url)
    assert violations(client, queue) == []
    keys = QueueKeys.for_queue(queue)
    # Not vacuous: the load really moved jobs through every state while being killed.
    assert client.zcard(keys.completed) > 20


@pytest.mark.timeout(120)
def test_workers_do_not_outlive_a_sigkilled_supervisor(private_valkey: RedisServer) -> None:
    port = free_port()
    process = start_service(private_valkey.url, port, EMQ_WORKERS=str(WORKERS))
    try:
        # Not vacuous: the supervisor really has its worker processes (and whatever else it runs).
        wait_until(
            lambda: len(_workers(_children(process.pid))) == WORKERS,
            f"{WORKERS} uvicorn workers under the supervisor",
            START_TIMEOUT_S,
        )
        children = _children(process.pid)
        process.kill()  # the supervisor only
        process.wait()
        deadline = time.monotonic() + 2 * START_TIMEOUT_S  # a worker may still be starting up
        while alive := [pid for pid in children if _state(pid) != "Z"]:
            states = {pid: (_state(pid), _command(pid)) for pid in alive}
            assert time.monotonic() < deadline, f"uvicorn workers outlived their supervisor: {states}"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _workers(pids: list[int]) -> list[int]:
    """uvicorn's worker processes among these: multiprocessing children it spawned."""
    return [pid for pid in pids if "spawn_main" in _command(pid)]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120]
    except OSError:
        return "?"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"
