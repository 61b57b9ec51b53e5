"""Scaling benchmark: the same batched workload on 1 vs 3 Redis primaries (a Valkey Cluster) and
on 1 vs 2 service replicas, many queues. Prints jobs/s for each; loopback only, bounded in time.

    .venv/bin/python bench/scaling.py [--seconds 10] [--queues 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import ValkeyCluster  # noqa: E402
from tests.support.launched import service_server  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.servers import RedisServer  # noqa: E402

LEASE_BATCH = 50
PREFILL_PER_QUEUE = 2000
CONCURRENCY = 32


def start_replica(redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env.update(EMQ_REDIS_URL=redis_url, PORT=str(port), EMQ_WORKERS="1", EMQ_SWEEP_INTERVAL_MS="1000")
    url = f"http://127.0.0.1:{port}"
    server = service_server([sys.executable, "-m", "echomq_http"], url, env=env, cwd=ROOT, new_session=True)
    server.start()
    assert server.process is not None
    return server.process, url


async def run_load(urls: list[str], queues: list[str], seconds: float) -> float:
    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    clients = [httpx.AsyncClient(base_url=url, timeout=30, limits=limits) for url in urls]
    for index, queue in enumerate(queues):
        client = clients[index % len(clients)]
        for _ in range(PREFILL_PER_QUEUE // 1000):
            jobs = [{"payload": {"n": i}} for i in range(1000)]
            (await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})).raise_for_status()
    done = 0
    stop_at = time.monotonic() + seconds

    async def worker(number: int) -> None:
        nonlocal done
        client = clients[number % len(clients)]
        queue = queues[number % len(queues)]
        while time.monotonic() < stop_at:
            leased = (
                await client.post(
                    f"/v1/queues/{queue}/lease", json={"worker": f"w{number}", "max_jobs": LEASE_BATCH}
                )
            ).json()["jobs"]
            if not leased:
                jobs = [{"payload": {"n": i}} for i in range(500)]
                await client.post(f"/v1/queues/{queue}/enqueue", json={"jobs": jobs})
                continue
            acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in leased]
            await client.post(f"/v1/queues/{queue}/ack", json={"acks": acks})
            done += len(leased)

    started = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
    elapsed = time.monotonic() - started
    for client in clients:
        await client.aclose()
    return done / elapsed


def measure(redis_url: str, replicas: int, queues: list[str], seconds: float) -> float:
    started = [start_replica(redis_url) for _ in range(replicas)]
    try:
        return asyncio.run(run_load([url for _, url in started], queues, seconds))
    finally:
        for process, _ in started:
            os.killpg(process.pid, 9)
            process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--queues", type=int, default=16)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; load generator, service and Redis share them")
    print(f"workload: {args.queues} queues, {CONCURRENCY} concurrent workers, lease {LEASE_BATCH} + ack-many")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        single = RedisServer(Path(scratch) / "single").start()
        cluster = ValkeyCluster(Path(scratch) / "cluster", primaries=3, replicas_per_primary=0).start()
        try:
            for label, url in (("1 primary", single.url), ("3 primaries (cluster)", cluster.url)):
                for replicas in (1, 2):
                    queues = [f"scale-{label[0]}-{replicas}-{i}" for i in range(args.queues)]
                    rate = measure(url, replicas, queues, args.seconds)
                    rows.append((label, replicas, rate))
                    print(f"{label:24} {replicas} replica(s): {rate:9.0f} jobs/s", flush=True)
        finally:
            single.kill()
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
