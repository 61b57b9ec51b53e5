"""Big reads against the hot path: small requests' latency while pages of large dead letters
are read from the same service process (issue 11).

    .venv/bin/python bench/big_read.py [--jobs 1000] [--min-kb 200] [--max-kb 400] [--seconds 15]
    .venv/bin/python bench/big_read.py --service-dir /tmp/emq-main   # another checkout ("before")

Starts a valkey-server (persistence off, noeviction) and ONE service process (``python -m
service``, EMQ_WORKERS=1) on free loopback ports. Fills queue ``big`` with --jobs dead-lettered
jobs whose payloads are --min-kb..--max-kb (enqueue with max_attempts 1, lease, fail, over
HTTP). Then a loop of small requests on queue ``hot`` (enqueue one job, lease it, ack it, one
request at a time on one keep-alive connection) runs twice for --seconds: alone, and while
--readers threads GET /v1/queues/big/failed?limit=<jobs> back to back (each page read to the
end and thrown away). Prints the small requests' p50/p99/max for both phases, the pages' times,
the service's peak memory and the longest Redis command (slow log) of the second phase. Every
process it starts is stopped on exit; a hard deadline (--deadline-s) ends the run with exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import redis

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH_DIR))

from bench_harness import percentile  # noqa: E402 - bench/perf is on the path now
from bench_stack import adopt, stop_children, watchdog  # noqa: E402
from loadgen import RawConnection  # noqa: E402

from echomq_http.store.server_process import ServerDidNotStart  # noqa: E402
from tests.support.launched import service_process, service_server  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.servers import RedisServer  # noqa: E402

BIG_QUEUE = "big"
HOT_QUEUE = "hot"
SMALL_PAYLOAD = {"n": 123456}
LEASE_MS = 60_000
FILL_CONCURRENCY = 4
FILL_LEASE_BATCH = 4  # jobs per lease while filling: each lease answer carries their payloads
START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 300.0
WARMUP_S = 2.0
RECV_BYTES = 1 << 20
SLOW_MS = 100.0  # a small request slower than this counts as stuck
TAIL_BYTES = 64
SLOWLOG_FROM_US = 1000  # Redis's slow log keeps the commands that ran longer than 1 ms
SLOWLOG_LEN = 1000

_encode = msgspec.json.encode
_decode = msgspec.json.decode


# --- processes ----------------------------------------------------------------------------


def start_service(service_dir: Path, redis_url: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith(("EMQ_", "OTEL_"))}
    env |= {
        "EMQ_REDIS_URL": redis_url,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "EMQ_WORKERS": "1",
    }
    run, env = service_process(service_dir, env)
    url = f"http://127.0.0.1:{port}"
    log.write_bytes(b"")
    server = service_server([sys.executable, *run], url, env=env, log=log, cwd=service_dir)
    adopt(server.spawn())
    try:
        server.wait_ready()
    except ServerDidNotStart as error:
        raise RuntimeError(f"{error}; see {log}") from None
    assert server.process is not None
    return server.process, url


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- filling the big queue ----------------------------------------------------------------


def big_payload(index: int, size: int) -> dict[str, str]:
    """A JSON object of about size bytes (distinct per job; its content does not matter)."""
    unit = f"{index:06d}" + string.ascii_letters
    return {"blob": (unit * (size // len(unit) + 1))[: size - 12]}


async def fill(url: str, jobs: int, min_kb: int, max_kb: int) -> int:
    """jobs dead letters in BIG_QUEUE; answers their payloads' total size in bytes."""
    sizes = [(min_kb + (max_kb - min_kb) * i // max(1, jobs - 1)) * 1024 for i in range(jobs)]
    queue_path = f"/v1/queues/{BIG_QUEUE}"
    async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
        next_index = 0

        async def filler() -> None:
            nonlocal next_index
            while next_index < jobs:
                batch = range(next_index, min(jobs, next_index + FILL_LEASE_BATCH))
                next_index = batch.stop
                for index in batch:
                    job = {"id": f"big-{index:05d}", "payload": big_payload(index, sizes[index])}
                    answer = await client.post(f"{queue_path}/jobs", json=job | {"max_attempts": 1})
                    answer.raise_for_status()
                lease = {"worker": "filler", "lease_ms": LEASE_MS, "max_jobs": len(batch)}
                leased = (await client.post(f"{queue_path}/lease", json=lease)).json()["jobs"]
                for job in leased:
                    failure = {"lease_id": job["lease_id"], "error": "bench", "retry": False}
                    answer = await client.post(f"{queue_path}/jobs/{job['id']}/fail", json=failure)
                    answer.raise_for_status()

        await asyncio.gather(*(filler() for _ in range(FILL_CONCURRENCY)))
        counts = (await client.get(queue_path)).json()["counts"]
    if counts["failed"] != jobs:
        raise RuntimeError(f"filled {counts['failed']} dead letters, wanted {jobs}")
    return sum(sizes)


# --- the big reader -----------------------------------------------------------------------


@dataclass
class PageTimes:
    first_byte_s: list[float] = field(default_factory=list)
    whole_s: list[float] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def read_pages(url: str, limit: int, expected_total: int, stop: threading.Event, into: PageTimes) -> None:
    """GET the failed page again and again until stop is set; each answer read to the end on a
    fresh connection (Connection: close) and dropped. A blocking socket: recv releases the GIL."""
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"GET /v1/queues/{BIG_QUEUE}/failed?limit={limit} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nConnection: close\r\n\r\n"
    ).encode()
    buffer = bytearray(RECV_BYTES)
    while not stop.is_set():
        with socket.create_connection((host, int(port))) as sock:
            started = time.perf_counter()
            sock.sendall(request)
            size, first_at, head, tail = 0, None, b"", b""
            while count := sock.recv_into(buffer):
                if first_at is None:
                    first_at = time.perf_counter()
                    head = bytes(buffer[:TAIL_BYTES])
                size += count
                tail = (tail + bytes(buffer[max(0, count - TAIL_BYTES) : count]))[-TAIL_BYTES:]
            done_at = time.perf_counter()
        if not head.startswith(b"HTTP/1.1 200") or b'"total":%d}' % expected_total not in tail:
            into.errors.append(f"{head[:40]!r} ... {tail!r}")
            continue
        into.first_byte_s.append((first_at or done_at) - started)
        into.whole_s.append(done_at - started)
        into.bytes.append(size)


# --- the small requests -------------------------------------------------------------------


async def small_requests(url: str, seconds: float) -> list[float]:
    """Enqueue one small job, lease it, ack it: each request's latency in ms, for seconds."""
    connection = await RawConnection.open(url)
    queue_path = f"/v1/queues/{HOT_QUEUE}"
    enqueue_body = _encode({"payload": SMALL_PAYLOAD})
    lease_body = _encode({"worker": "hot", "lease_ms": LEASE_MS, "max_jobs": 1})
    latencies: list[float] = []

    async def timed(path: str, body: bytes) -> bytes:
        started = time.perf_counter()
        status, answer = await connection.request("POST", path, body)
        latencies.append((time.perf_counter() - started) * 1000)
        if not 200 <= status < 300:
            raise RuntimeError(f"{path} answered {status}: {answer[:200]!r}")
        return answer

    try:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            await timed(f"{queue_path}/jobs", enqueue_body)
            (job,) = _decode(await timed(f"{queue_path}/lease", lease_body))["jobs"]
            await timed(f"{queue_path}/jobs/{job['id']}/ack", _encode({"lease_id": job["lease_id"]}))
    finally:
        connection.close()
    return latencies


def summary(latencies_ms: Sequence[float], seconds: float) -> dict[str, float]:
    return {
        "requests": len(latencies_ms),
        "per_s": len(latencies_ms) / seconds,
        "p50_ms": percentile(latencies_ms, 0.50),
        "p99_ms": percentile(latencies_ms, 0.99),
        "max_ms": max(latencies_ms),
        "over_100_ms": sum(ms > SLOW_MS for ms in latencies_ms),
    }


def longest_redis_command(redis_url: str) -> str:
    """The slowest command in the slow log: its time and name (EVALSHA for a script)."""
    entries = redis.Redis.from_url(redis_url).slowlog_get(SLOWLOG_LEN)
    if not entries:
        return f"none over {SLOWLOG_FROM_US / 1000:.0f} ms"
    slowest = max(entries, key=lambda entry: entry["duration"])
    return f"{slowest['duration'] / 1000:.1f} ms ({slowest['command'].split()[0].decode()})"


async def measure(args: argparse.Namespace, url: str, redis_url: str) -> dict[str, Any]:
    await small_requests(url, WARMUP_S)
    quiet = summary(await small_requests(url, args.seconds), args.seconds)
    print(f"  alone:           {describe(quiet)}", file=sys.stderr, flush=True)
    server = redis.Redis.from_url(redis_url)
    server.config_set("slowlog-log-slower-than", SLOWLOG_FROM_US)
    server.config_set("slowlog-max-len", SLOWLOG_LEN)
    server.slowlog_reset()
    stop, pages = threading.Event(), PageTimes()
    readers = [
        threading.Thread(target=read_pages, args=(url, args.jobs, args.jobs, stop, pages), daemon=True)
        for _ in range(args.readers)
    ]
    for reader in readers:
        reader.start()
    try:
        loaded = summary(await small_requests(url, args.seconds), args.seconds)
    finally:
        stop.set()
    await asyncio.get_running_loop().run_in_executor(None, lambda: [r.join(HTTP_TIMEOUT_S) for r in readers])
    print(f"  with big reads:  {describe(loaded)}", file=sys.stderr, flush=True)
    longest = longest_redis_command(redis_url)
    if pages.errors:
        raise RuntimeError(f"{len(pages.errors)} pages were not whole: {pages.errors[:3]}")
    if not pages.whole_s:
        raise RuntimeError("no page was read to the end during the loaded phase")
    return {
        "alone": quiet,
        "with_big_reads": loaded,
        "pages": {
            "count": len(pages.whole_s),
            "mb_per_page": sum(pages.bytes) / len(pages.bytes) / 1e6,
            "first_byte_s_median": percentile(pages.first_byte_s, 0.5),
            "whole_s_median": percentile(pages.whole_s, 0.5),
            "whole_s_max": max(pages.whole_s),
        },
        "longest_redis_command": longest,
    }


def describe(figures: dict[str, float]) -> str:
    return (
        f"{figures['requests']} requests ({figures['per_s']:.0f}/s), p50 {figures['p50_ms']:.2f} ms, "
        f"p99 {figures['p99_ms']:.2f} ms, max {figures['max_ms']:.1f} ms, "
        f"{figures['over_100_ms']} over {SLOW_MS:.0f} ms"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1000, help="dead letters in the page (<= 1000)")
    parser.add_argument("--min-kb", type=int, default=200, help="the smallest payload, KiB")
    parser.add_argument("--max-kb", type=int, default=400, help="the largest payload, KiB")
    parser.add_argument("--seconds", type=float, default=15.0, help="each phase's length")
    parser.add_argument("--readers", type=int, default=1, help="threads reading pages back to back")
    parser.add_argument("--service-dir", type=Path, default=REPO, help="the checkout to serve")
    parser.add_argument("--deadline-s", type=float, default=900.0, help="hard deadline of the run")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    return parser.parse_args(argv)


def service_version(service_dir: Path) -> str:
    described = subprocess.run(
        ["git", "-C", str(service_dir), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return described.stdout.strip() or f"{service_dir} (not a git checkout)"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not 1 <= args.jobs <= 1000:
        raise SystemExit("--jobs must be in 1..1000 (the largest page)")
    watchdog(args.deadline_s, "big_read")
    atexit.register(stop_children)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: sys.exit(130))
    workdir = Path(tempfile.mkdtemp(prefix="emq-big-read-"))
    load_at_start = os.getloadavg()[0]
    server = RedisServer(workdir / "valkey").start()
    assert server.process is not None
    adopt(server.process)  # stopped with the rest, by the watchdog too
    finished = False
    try:
        service, url = start_service(args.service_dir.resolve(), server.url, workdir / "service.log")
        started = time.monotonic()
        payload_bytes = asyncio.run(fill(url, args.jobs, args.min_kb, args.max_kb))
        print(
            f"filled {args.jobs} dead letters, {payload_bytes / 1e6:.0f} MB of payloads, in "
            f"{time.monotonic() - started:.0f} s; service {service_version(args.service_dir)}",
            file=sys.stderr,
            flush=True,
        )
        figures = asyncio.run(measure(args, url, server.url))
        figures["service_peak_rss_mb"] = peak_rss_mb(service.pid)
        figures["payload_mb_per_page"] = payload_bytes / 1e6
        finished = True
    finally:
        stop_children()
        if finished:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"big_read: the service's log is {workdir / 'service.log'}", file=sys.stderr)
    pages = figures["pages"]
    print(f"load average {load_at_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(
        f"pages: {pages['count']} of {pages['mb_per_page']:.0f} MB, first byte after "
        f"{pages['first_byte_s_median']:.2f} s, whole page {pages['whole_s_median']:.2f} s (median), "
        f"{pages['whole_s_max']:.2f} s (max); service peak RSS {figures['service_peak_rss_mb']:.0f} MB; "
        f"longest Redis command {figures['longest_redis_command']}"
    )
    print("| small requests | p50 ms | p99 ms | max ms | over 100 ms | requests/s |")
    print("|---|---|---|---|---|---|")
    for name, key in (("alone", "alone"), ("with big reads", "with_big_reads")):
        row = figures[key]
        print(
            f"| {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['max_ms']:.1f} | "
            f"{row['over_100_ms']} | {row['per_s']:.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
