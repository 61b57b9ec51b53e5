"""The attacker of the abuse harness (bench/abuse.py): one flood, in a process of its own.

    .venv/bin/python bench/abuse_floods.py FLOOD '<json spec>'

It prints ``engaged <epoch s>`` once its load is in place (the harness then hits a worker), and
at the end one JSON object: what the service answered (status counts and the like) and
``ended``, the instant its last connection was closed. Every flood is bounded in count and in
time (spec["duration_s"]: connections are held that long, then closed) and talks to loopback only.
Nothing here judges: tests/support/abuse_check.py does.

Floods (spec keys besides url, tokens, duration_s):
  sse         count event streams GET /v1/queues/sms-flood-<i>/events (the worker token), read
              and thrown away
  silent      count TCP connections that send nothing
  slowloris   count connections whose headers never end: one more header line a second
  headers     count connections sending a request with mb MB of headers each
  progress    batches batch heartbeats, each renewing `jobs` leases with a 64 KiB progress,
              while `subscribers` event streams of that queue are never read
  web         count requests of each kind: a cross-site form's enqueue (text/plain), its pause
              (text/plain), and a request naming a rebound Host
  queues      count queues made by one enqueue each (the producer token), then GET /ui,
              /metrics and /v1/queues together, rounds times
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import resource
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

CONNECT_TIMEOUT_S = 5.0
HEAD_TIMEOUT_S = 5.0  # an answer's status line, once the request is sent
OPEN_AT_ONCE = 100  # connections opened concurrently
PROGRESS_BYTES = 64 * 1024 - 64  # a progress just under the service's 64 KiB cap, as JSON
PAD_LINE_BYTES = 8 * 1024  # one header line of a large-header request
CREATE_AT_ONCE = 16
REBOUND_HOST = "rebind.attacker.example"


def engaged() -> None:
    print(f"engaged {time.time():.6f}", flush=True)


def bearer(token: str) -> str:
    return f"Authorization: Bearer {token}\r\n"


class Target:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.netloc = parts.netloc

    async def connect(self, rcvbuf: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # a small window: a subscriber that never reads blocks the sender early
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().sock_connect(sock, (self.host, self.port)), CONNECT_TIMEOUT_S
            )
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock, limit=1 << 20)

    def head(self, method: str, path: str, extra: str = "") -> bytes:
        return f"{method} {path} HTTP/1.1\r\nHost: {self.netloc}\r\n{extra}\r\n".encode()


async def status_of(reader: asyncio.StreamReader) -> int:
    """The status of the answer (0: the connection ended or nothing came in time)."""
    try:
        line = await asyncio.wait_for(reader.readline(), HEAD_TIMEOUT_S)
    except (TimeoutError, OSError, ValueError):
        return 0
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0


async def bounded(coros: list[Any], at_once: int = OPEN_AT_ONCE) -> list[Any]:
    gate = asyncio.Semaphore(at_once)

    async def one(coro: Any) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)


def close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        with contextlib.suppress(Exception):
            writer.transport.abort()


async def hold_until(deadline: float, readers: list[asyncio.StreamReader], discard: bool) -> int:
    """Hold the connections until the deadline (reading and discarding what comes when discard);
    the number the service closed meanwhile."""

    async def watch(reader: asyncio.StreamReader) -> bool:
        while True:
            left = deadline - time.time()
            if left <= 0:
                return False
            try:
                chunk = await asyncio.wait_for(reader.read(65536), left) if discard else None
            except TimeoutError:
                return False
            except OSError:
                return True
            if discard and not chunk:
                return True
            if not discard:  # read nothing: only learn whether it was closed
                await asyncio.sleep(min(left, 0.5))
                if reader.at_eof():
                    return True

    return sum(await asyncio.gather(*(watch(r) for r in readers)))


# -- the floods -------------------------------------------------------------------------------


async def flood_sse(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    token = spec["tokens"]["worker_sms"]
    writers: list[asyncio.StreamWriter] = []

    async def subscribe(i: int) -> tuple[int, asyncio.StreamReader | None]:
        reader, writer = await target.connect()
        writers.append(writer)
        writer.write(
            target.head(
                "GET", f"/v1/queues/sms-flood-{i}/events", bearer(token) + "Accept: text/event-stream\r\n"
            )
        )
        return await status_of(reader), reader

    results = await bounded([subscribe(i) for i in range(spec["count"])])
    engaged()
    statuses = collections.Counter(r[0] if isinstance(r, tuple) else "connect-failed" for r in results)
    readers = [r[1] for r in results if isinstance(r, tuple) and r[0] == 200 and r[1] is not None]
    closed = await hold_until(deadline, readers, discard=True)
    close_all(writers)
    return {"statuses": dict(statuses), "streams_open": len(readers), "closed_by_service": closed}


async def flood_silent(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    writers: list[asyncio.StreamWriter] = []

    async def connect() -> asyncio.StreamReader:
        reader, writer = await target.connect()
        writers.append(writer)
        return reader

    results = await bounded([connect() for _ in range(spec["count"])])
    engaged()
    readers = [r for r in results if isinstance(r, asyncio.StreamReader)]
    closed = await hold_until(deadline, readers, discard=True)
    close_all(writers)
    return {
        "opened": len(readers),
        "connect_failed": len(results) - len(readers),
        "closed_by_service": closed,
    }


async def flood_slowloris(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    writers: list[asyncio.StreamWriter] = []
    answers: collections.Counter[str] = collections.Counter()

    async def drip() -> None:
        reader, writer = await target.connect()
        writers.append(writer)
        writer.write(f"GET /v1/queues/slow HTTP/1.1\r\nHost: {target.netloc}\r\n".encode())
        n = 0
        while time.time() < deadline:
            if reader.at_eof():
                answers["closed_by_service"] += 1
                return
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(reader.readline(), 1.0)
                if line:
                    answers[line.split()[1].decode() if len(line.split()) > 1 else "?"] += 1
                    return
                answers["closed_by_service"] += 1
                return
            try:
                writer.write(f"X-Drip-{n}: {n}\r\n".encode())
                await writer.drain()
            except OSError:
                answers["closed_by_service"] += 1
                return
            n += 1
        answers["held_to_the_end"] += 1

    async def started() -> None:
        await asyncio.sleep(1.0)
        engaged()

    results = await asyncio.gather(bounded([drip() for _ in range(spec["count"])], spec["count"]), started())
    failed = sum(1 for r in results[0] if isinstance(r, BaseException))
    close_all(writers)
    return {"answers": dict(answers), "connect_failed": failed}


async def flood_headers(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    size = int(spec["mb"] * 1024 * 1024)
    line = b"X-Pad-%d: " + b"a" * PAD_LINE_BYTES + b"\r\n"
    writers: list[asyncio.StreamWriter] = []

    async def send_one() -> dict[str, Any]:
        reader, writer = await target.connect()
        writers.append(writer)
        writer.write(f"GET /v1/queues/big-headers HTTP/1.1\r\nHost: {target.netloc}\r\n".encode())
        sent, n = 0, 0
        try:
            while sent < size and time.time() < deadline:
                chunk = line % n
                writer.write(chunk)
                sent += len(chunk)
                n += 1
                if n % 64 == 0:
                    await writer.drain()
            writer.write(b"\r\n")
            await writer.drain()
        except OSError:
            pass  # the service closed it: refused before the end
        return {"sent": sent, "status": await status_of(reader)}

    engaged()
    results = await asyncio.gather(*(send_one() for _ in range(spec["count"])), return_exceptions=True)
    while time.time() < deadline:  # the connections stay until the flood's end, as the others do
        await asyncio.sleep(0.1)
    close_all(writers)
    done = [r for r in results if isinstance(r, dict)]
    return {
        "statuses": dict(collections.Counter(r["status"] for r in done)),
        "mb_sent_each": [round(r["sent"] / 2**20, 1) for r in done],
        "failed": len(results) - len(done),
    }


async def flood_progress(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    tokens, queue = spec["tokens"], "sms-progress"
    producer = {"authorization": f"Bearer {tokens['producer']}"}
    worker = {"authorization": f"Bearer {tokens['worker_sms']}"}
    async with httpx.AsyncClient(base_url=target.url, timeout=30.0) as http:
        enqueued = await http.post(
            f"/v1/queues/{queue}/enqueue",
            json={"jobs": [{"payload": {"n": i}} for i in range(spec["jobs"])]},
            headers=producer,
        )
        leased = await http.post(
            f"/v1/queues/{queue}/lease",
            json={"worker": "flood-progress", "lease_ms": 120_000, "max_jobs": spec["jobs"]},
            headers=worker,
        )
        jobs = leased.json().get("jobs", []) if leased.status_code == 200 else []
        writers: list[asyncio.StreamWriter] = []
        subscribed = []
        for _ in range(spec["subscribers"]):
            _reader, writer = await target.connect(rcvbuf=4096)
            writers.append(writer)
            writer.write(target.head("GET", f"/v1/queues/{queue}/events", bearer(tokens["worker_sms"])))
            subscribed.append(writer)  # never read: its events pile up in the service
        engaged()
        blob = "p" * (PROGRESS_BYTES - 16)
        statuses: collections.Counter[int] = collections.Counter()
        sent_mb = 0.0
        body = {
            "leases": [{"id": j["id"], "lease_id": j["lease_id"], "progress": {"blob": blob}} for j in jobs]
        }
        for _ in range(spec["batches"] if jobs else 0):
            if time.time() >= deadline:
                break
            try:
                answer = await http.post(f"/v1/queues/{queue}/heartbeat", json=body, headers=worker)
                statuses[answer.status_code] += 1
            except httpx.HTTPError:
                statuses[0] += 1
            sent_mb += len(blob) * len(jobs) / 2**20
        while time.time() < deadline:
            await asyncio.sleep(0.1)
        close_all(writers)
    return {
        "setup": [enqueued.status_code, leased.status_code, len(jobs)],
        "statuses": dict(statuses),
        "progress_mb_sent": round(sent_mb, 1),
        "subscribers": len(subscribed),
    }


async def flood_web(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    tokens = spec["tokens"]
    kinds = {
        # a cross-site form can send text/plain; a token or not, the body is JSON in disguise
        "form-enqueue": (
            "POST",
            "/v1/queues/sms-web/jobs",
            {"content-type": "text/plain", "authorization": f"Bearer {tokens['producer']}"},
        ),
        "form-pause": (
            "POST",
            "/v1/queues/sms-web/pause",
            {"content-type": "text/plain", "authorization": f"Bearer {tokens['admin']}"},
        ),
        # a page on a name rebound to 127.0.0.1: its requests carry that name as Host
        "rebound-host": (
            "GET",
            "/v1/queues/sms-web",
            {"host": REBOUND_HOST, "authorization": f"Bearer {tokens['producer']}"},
        ),
    }
    statuses: dict[str, collections.Counter[int]] = {kind: collections.Counter() for kind in kinds}
    engaged()
    async with httpx.AsyncClient(base_url=target.url, timeout=10.0) as http:
        for i in range(spec["count"]):
            for kind, (method, path, headers) in kinds.items():
                if time.time() >= deadline:
                    break
                try:
                    answer = await http.request(
                        method, path, content=b'{"payload": {"n": %d}}' % i, headers=headers
                    )
                    statuses[kind][answer.status_code] += 1
                except httpx.HTTPError:
                    statuses[kind][0] += 1
    while time.time() < deadline:
        await asyncio.sleep(0.1)
    return {"statuses": {kind: dict(counter) for kind, counter in statuses.items()}}


async def flood_queues(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + spec["duration_s"]
    tokens = spec["tokens"]
    producer = {"authorization": f"Bearer {tokens['producer']}"}
    admin = {"authorization": f"Bearer {tokens['admin']}"}
    created: collections.Counter[int] = collections.Counter()
    limits = httpx.Limits(max_connections=CREATE_AT_ONCE)
    async with httpx.AsyncClient(base_url=target.url, timeout=30.0, limits=limits) as http:

        async def create(i: int) -> None:
            if time.time() >= deadline:
                return
            try:
                answer = await http.post(
                    f"/v1/queues/flood-q-{i:05d}/jobs", json={"payload": {}}, headers=producer
                )
                created[answer.status_code] += 1
            except httpx.HTTPError:
                created[0] += 1

        await bounded([create(i) for i in range(spec["count"])], CREATE_AT_ONCE)
        engaged()
        pages: dict[str, list[tuple[int, float, int]]] = {"/ui": [], "/metrics": [], "/v1/queues": []}
        signed_in = await sign_in(http, target, tokens["admin"])

        async def fetch(path: str) -> None:
            started = time.perf_counter()
            try:
                answer = await http.get(path, headers=None if path == "/ui" else admin)
                pages[path].append(
                    (answer.status_code, round(time.perf_counter() - started, 3), len(answer.content))
                )
            except httpx.HTTPError:
                pages[path].append((0, round(time.perf_counter() - started, 3), 0))

        for round_number in range(spec["rounds"]):
            # The first round always runs: creating the queues may have used the whole flood.
            if round_number and time.time() >= deadline:
                break
            await asyncio.gather(*(fetch(path) for path in pages))
    return {"created": dict(created), "signed_in": signed_in, "pages": pages}


async def sign_in(http: httpx.AsyncClient, target: Target, token: str) -> int:
    """The dashboard's sign-in form, as a browser fills it: its cookies stay in the client."""
    try:
        await http.get("/ui/sign-in")
        form = {"token": token, "csrf_token": http.cookies.get("emq_csrf", "")}
        answer = await http.post("/ui/sign-in", data=form, headers={"origin": target.url})
        return answer.status_code
    except httpx.HTTPError:
        return 0


FLOODS = {
    "sse": flood_sse,
    "silent": flood_silent,
    "slowloris": flood_slowloris,
    "headers": flood_headers,
    "progress": flood_progress,
    "web": flood_web,
    "queues": flood_queues,
}


def main() -> int:
    name, spec = sys.argv[1], json.loads(sys.argv[2])
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # thousands of sockets
    result = asyncio.run(FLOODS[name](Target(spec["url"]), spec))
    print(json.dumps(result | {"ended": time.time()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
