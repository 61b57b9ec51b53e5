"""HTTP load generator for bench/bench.py: one process, one event loop (uvloop), many loops.

    .venv/bin/python bench/loadgen.py '<json spec>'

bench.py starts one or more of these. Each connects, prints ``ready`` on stdout, waits for a
line ``go <measure_from> <measure_until>`` (wall-clock seconds) on stdin, runs its workload
until ``measure_until`` (everything before ``measure_from`` is warm-up and not counted), then
prints one JSON object with what it measured and exits.

Two clients do the same requests:
  raw    asyncio + httptools (the C parser uvicorn uses): one keep-alive connection per loop, a
         pre-built request head; costs a few tens of microseconds of CPU per request
  httpx  httpx.AsyncClient with a connection pool of ``concurrency`` connections
bench.py uses ``raw`` by default: on a 2-core machine the load generator shares the CPU with
the service and Redis, and httpx's own per-request cost is of the same order as the service's
(bench.py --client-compare measures both).

Workloads (spec["workload"]):
  enqueue        POST /jobs, one job per request
  enqueue_batch  POST /enqueue with spec["batch"] jobs per request
  cycle          POST /lease max_jobs=1, then POST /jobs/{id}/ack: one job per lease, acked alone
  batch_cycle    POST /lease max_jobs=spec["batch"], then one POST /ack for the whole batch
  wakeup         one long-poll lease (wait_ms) waiting, then an enqueue on a second connection:
                 the time from sending the enqueue to receiving the lease response, spec["samples"] times
  sdk_worker     the Python SDK's Worker (spec["concurrency"] slots, a no-op async handler) drains
                 spec["total"] pre-filled jobs; the window ends once the last is acked
  next_cycle     spec["concurrency"] single-job worker loops: each ack leases the next job
                 (lease_next, max_jobs 1), one request per job
  sdk_next       spec["concurrency"] loops over one SDK AsyncClient: each ack leases the next job
                 (lease_next, max_jobs 1), one request per job
  paced          small requests at a fixed rate (spec["rate"] requests/s over all connections):
                 each connection in turn enqueues 1 job, leases 1, acks it; every request is
                 recorded with when it was due, sent and answered. Runs from measure_from until
                 measure_until, or until a line ``stop`` (or the end of stdin) arrives.
  probe          what another client sees while something else loads the service (bench/abuse.py):
                 GET /v1/queues/{queue} and an enqueue in turn at spec["rate"] requests/s, each on
                 a new connection (a new client must get in too), with spec["headers"] (a token),
                 each given up after spec["timeout_s"]; recorded as [op, due, sent, latency_ms,
                 status] (status 0: no answer). Ends as paced does.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httptools
import msgspec
from proc_cpu import ProcWatch

_encode = msgspec.json.encode
_decode = msgspec.json.decode
EMPTY_BACKOFF_S = 0.005  # a worker that found the queue empty waits this long before leasing again
CONNECT_TIMEOUT_S = 10.0
ACKED_POLL_S = 0.005  # how often sdk_worker looks whether the last job is acked
OWN_CLIENTS = {"wakeup", "sdk_worker", "sdk_next"}  # workloads that open their connections themselves


class RawConnection(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection; one request at a time (like a worker's own socket)."""

    def __init__(self, host: str, headers: dict[str, str] | None = None) -> None:
        more = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        self._head_host = f"Host: {host}\r\nContent-Type: application/json\r\n{more}".encode()
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._body: list[bytes] = []
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.completed_at = 0.0  # perf_counter() when the last response was complete

    @classmethod
    async def open(cls, url: str, headers: dict[str, str] | None = None) -> RawConnection:
        parts = urlsplit(url)
        loop = asyncio.get_running_loop()
        connection = cls(parts.netloc, headers)
        await asyncio.wait_for(
            loop.create_connection(lambda: connection, parts.hostname, parts.port), CONNECT_TIMEOUT_S
        )
        return connection

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.completed_at = time.perf_counter()
        body, self._body = b"".join(self._body), []
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result((self._parser.get_status_code(), body))

    def send(self, method: str, path: str, body: bytes) -> asyncio.Future[tuple[int, bytes]]:
        """Write the request now; the future resolves to (status, body)."""
        assert self._transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        head = f"{method} {path} HTTP/1.1\r\nContent-Length: {len(body)}\r\n".encode()
        self._transport.write(head + self._head_host + b"\r\n" + body)
        return self._waiter

    async def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        return await self.send(method, path, body)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class HttpxConnection:
    """The same interface over a shared httpx.AsyncClient (its pool holds the connections)."""

    def __init__(self, client: Any, url: str) -> None:
        self._client = client
        self._url = url

    async def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        response = await self._client.request(
            method, self._url + path, content=body, headers={"content-type": "application/json"}
        )
        return response.status_code, response.content

    def close(self) -> None:
        pass


class Window:
    """The measurement window: work before ``start`` is warm-up, after ``end`` is not done."""

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end
        self.jobs = 0
        self.requests = 0
        self.errors = 0
        self.empty = 0
        self.first_empty_at: float | None = None  # wall clock: the queue ran dry
        self.latencies_s: list[float] = []
        self.enqueue_latencies_s: list[float] = []  # wake-up samples: the enqueue's own answer

    def inside(self, now: float) -> bool:
        return self.start <= now < self.end

    def note(self, jobs: int, requests: int, latency_s: float) -> None:
        # Once the queue ran dry the rate is over: the window ends at the first empty lease.
        if self.first_empty_at is None and self.inside(time.time()):
            self.jobs += jobs
            self.requests += requests
            self.latencies_s.append(latency_s)

    def note_empty(self) -> None:
        now = time.time()
        if self.inside(now):
            self.empty += 1
            if self.first_empty_at is None:
                self.first_empty_at = now


def _check(status: int, body: bytes, window: Window, what: str) -> bool:
    if 200 <= status < 300:
        return True
    window.errors += 1
    if window.errors <= 3:
        print(f"loadgen: {what} answered {status}: {body[:200]!r}", file=sys.stderr)
    return False


async def enqueue_loop(conn: Any, spec: dict[str, Any], window: Window) -> None:
    path = f"/v1/queues/{spec['queue']}/jobs"
    body = _encode({"payload": spec["payload"]})
    while time.time() < window.end:
        started = time.perf_counter()
        status, answer = await conn.request("POST", path, body)
        if _check(status, answer, window, "enqueue"):
            window.note(1, 1, time.perf_counter() - started)


async def enqueue_batch_loop(conn: Any, spec: dict[str, Any], window: Window) -> None:
    path = f"/v1/queues/{spec['queue']}/enqueue"
    batch = spec["batch"]
    body = _encode({"jobs": [{"payload": spec["payload"]}] * batch})
    while time.time() < window.end:
        started = time.perf_counter()
        status, answer = await conn.request("POST", path, body)
        if _check(status, answer, window, "enqueue many"):
            window.note(batch, 1, time.perf_counter() - started)


async def cycle_loop(conn: Any, spec: dict[str, Any], window: Window, worker: str) -> None:
    """Lease one job, ack it alone: two requests per job."""
    queue = spec["queue"]
    lease_path = f"/v1/queues/{queue}/lease"
    lease_body = _encode({"worker": worker, "lease_ms": spec["lease_ms"], "max_jobs": 1})
    while time.time() < window.end:
        started = time.perf_counter()
        status, answer = await conn.request("POST", lease_path, lease_body)
        if not _check(status, answer, window, "lease"):
            continue
        jobs = _decode(answer)["jobs"]
        if not jobs:
            window.note_empty()
            await asyncio.sleep(EMPTY_BACKOFF_S)
            continue
        job = jobs[0]
        ack_body = _encode({"lease_id": job["lease_id"]})
        status, answer = await conn.request("POST", f"/v1/queues/{queue}/jobs/{job['id']}/ack", ack_body)
        if _check(status, answer, window, "ack"):
            window.note(1, 2, time.perf_counter() - started)


async def next_cycle_loop(conn: Any, spec: dict[str, Any], window: Window, worker: str) -> None:
    """A single-job worker loop: each ack leases the next job (lease_next, max_jobs 1), one
    request per job."""
    queue = spec["queue"]
    lease_path = f"/v1/queues/{queue}/lease"
    lease_body = _encode({"worker": worker, "lease_ms": spec["lease_ms"], "max_jobs": 1})
    following = {"worker": worker, "lease_ms": spec["lease_ms"], "max_jobs": 1}
    jobs: list[Any] = []
    while time.time() < window.end:
        if not jobs:
            status, answer = await conn.request("POST", lease_path, lease_body)
            if not _check(status, answer, window, "lease"):
                continue
            jobs = _decode(answer)["jobs"]
            if not jobs:
                window.note_empty()
                await asyncio.sleep(EMPTY_BACKOFF_S)
            continue
        started = time.perf_counter()
        job = jobs[0]
        ack_body = _encode({"lease_id": job["lease_id"], "lease_next": following})
        status, answer = await conn.request("POST", f"/v1/queues/{queue}/jobs/{job['id']}/ack", ack_body)
        jobs = []
        if _check(status, answer, window, "ack"):
            window.note(1, 1, time.perf_counter() - started)
            jobs = _decode(answer).get("jobs") or []


def _sdk() -> Any:
    """The Python SDK of this checkout, whichever the environment may have installed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import echomq

    return echomq


async def sdk_worker_drain(spec: dict[str, Any], window: Window) -> None:
    """The SDK's Worker drains spec["total"] jobs; the window ends when the last one is acked."""
    echomq = _sdk()
    worker = echomq.Worker(
        spec["queue"],
        _no_op,
        url=spec["urls"][0],
        concurrency=spec["concurrency"],
        lease_ms=spec["lease_ms"],
        wait_ms=100,  # once drained it stops after the long poll in flight: soon
    )
    running = asyncio.ensure_future(worker.arun())
    while worker.stats.acked < spec["total"] and not running.done():
        await asyncio.sleep(ACKED_POLL_S)
    window.first_empty_at = time.time()
    window.jobs = worker.stats.acked
    worker.stop()
    await running
    window.errors += len(worker.stats.errors)


async def _no_op(job: Any) -> None:
    return None


async def sdk_next_loops(spec: dict[str, Any], window: Window, tag: str) -> None:
    echomq = _sdk()
    async with echomq.AsyncClient(spec["urls"][0]) as client:
        loops = [
            sdk_next_loop(echomq, client, spec, window, f"{tag}-{i}") for i in range(spec["concurrency"])
        ]
        await asyncio.gather(*loops)


async def sdk_next_loop(echomq: Any, client: Any, spec: dict[str, Any], window: Window, worker: str) -> None:
    """Each ack leases the next job (lease_next, max_jobs 1): one request per job."""
    queue, lease_ms = spec["queue"], spec["lease_ms"]
    next_lease = echomq.LeaseNext(worker=worker, lease_ms=lease_ms, max_jobs=1)
    jobs = await client.lease(queue, worker, lease_ms=lease_ms)
    while time.time() < window.end:
        if not jobs:
            window.note_empty()
            await asyncio.sleep(EMPTY_BACKOFF_S)
            jobs = await client.lease(queue, worker, lease_ms=lease_ms)
            continue
        started = time.perf_counter()
        acked = await client.ack(queue, jobs[0].id, jobs[0].lease_id, "ok", lease_next=next_lease)
        window.note(1, 1, time.perf_counter() - started)
        jobs = acked.jobs or []


async def batch_cycle_loop(conn: Any, spec: dict[str, Any], window: Window, worker: str) -> None:
    """Lease up to spec["batch"] jobs, ack them all in one ack-many: two requests per batch."""
    queue = spec["queue"]
    lease_path = f"/v1/queues/{queue}/lease"
    ack_path = f"/v1/queues/{queue}/ack"
    lease_body = _encode({"worker": worker, "lease_ms": spec["lease_ms"], "max_jobs": spec["batch"]})
    while time.time() < window.end:
        started = time.perf_counter()
        status, answer = await conn.request("POST", lease_path, lease_body)
        if not _check(status, answer, window, "lease"):
            continue
        jobs = _decode(answer)["jobs"]
        if not jobs:
            window.note_empty()
            await asyncio.sleep(EMPTY_BACKOFF_S)
            continue
        acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
        status, answer = await conn.request("POST", ack_path, _encode({"acks": acks}))
        if _check(status, answer, window, "ack many"):
            window.note(len(jobs), 2, time.perf_counter() - started)


async def wakeup_samples(spec: dict[str, Any], window: Window) -> None:
    """Low load, one sample at a time: a long poll waits, then a producer enqueues one job."""
    url, queue = spec["urls"][0], spec["queue"]
    waiter, producer = await RawConnection.open(url), await RawConnection.open(url)
    lease_path = f"/v1/queues/{queue}/lease"
    lease_body = _encode({"worker": "waiter", "lease_ms": spec["lease_ms"], "wait_ms": spec["wait_ms"]})
    enqueue_body = _encode({"payload": spec["payload"]})
    settle_s = spec["settle_ms"] / 1000
    try:
        for _ in range(spec["samples"]):
            if time.time() >= window.end:
                break
            waiting = waiter.send("POST", lease_path, lease_body)
            # Let the long poll's first (empty) lease attempt finish and the request register
            # as a waiter: only then is this the wake-up path.
            await asyncio.sleep(settle_s)
            if waiting.done():
                window.errors += 1  # it answered before any job existed: not a wake-up
                continue
            sent_at = time.perf_counter()
            enqueued = producer.send("POST", f"/v1/queues/{queue}/jobs", enqueue_body)
            status, answer = await waiting
            woke_at = waiter.completed_at
            await enqueued
            enqueue_answered_at = producer.completed_at
            jobs = _decode(answer)["jobs"] if status == 200 else []
            if not jobs:
                window.errors += 1
                continue
            window.jobs += 1
            window.requests += 1
            window.latencies_s.append(woke_at - sent_at)
            window.enqueue_latencies_s.append(enqueue_answered_at - sent_at)
            job = jobs[0]
            ack_body = _encode({"lease_id": job["lease_id"]})
            await producer.request("POST", f"/v1/queues/{queue}/jobs/{job['id']}/ack", ack_body)
    finally:
        waiter.close()
        producer.close()


PACED_OPS = ("enqueue", "lease", "ack")


async def paced_loop(
    conn: Any, spec: dict[str, Any], window: Window, worker: str, offset_s: float, log: list[Any]
) -> None:
    """Enqueue 1, lease 1, ack it, ... one request every concurrency/rate seconds, on a fixed
    schedule: a request that is late (the one before took longer than the interval) goes out at
    once, so a stall shows both in its own latency and in how late the next ones were sent.
    log gets [op, due, sent, latency_ms, ok] per request (due and sent: wall clock)."""
    queue = spec["queue"]
    interval_s = spec["concurrency"] / spec["rate"]
    enqueue_path = f"/v1/queues/{queue}/jobs"
    enqueue_body = _encode({"payload": spec["payload"]})
    lease_path = f"/v1/queues/{queue}/lease"
    lease_body = _encode({"worker": worker, "lease_ms": spec["lease_ms"], "max_jobs": 1})
    due = window.start + offset_s
    step = 0
    job: dict[str, Any] | None = None
    while True:
        now = time.time()
        if now < due:
            await asyncio.sleep(due - now)
        if time.time() >= window.end:
            return
        op = step % len(PACED_OPS)
        if op == 2 and job is None:  # nothing was leased: no ack this round
            step += 1
            continue
        if op == 0:
            method_path_body = ("POST", enqueue_path, enqueue_body)
        elif op == 1:
            method_path_body = ("POST", lease_path, lease_body)
        else:
            assert job is not None
            ack_path = f"/v1/queues/{queue}/jobs/{job['id']}/ack"
            method_path_body = ("POST", ack_path, _encode({"lease_id": job["lease_id"]}))
        sent = time.time()
        started = time.perf_counter()
        status, answer = await conn.request(*method_path_body)
        latency_ms = (time.perf_counter() - started) * 1000
        ok = _check(status, answer, window, PACED_OPS[op])
        if op == 1:
            jobs = _decode(answer)["jobs"] if ok else []
            job = jobs[0] if jobs else None
        elif op == 2:
            job = None
        log.append([op, round(due, 6), round(sent, 6), round(latency_ms, 4), ok])
        step += 1
        due += interval_s


PROBE_OPS = ("get", "enqueue")


async def probe_loop(spec: dict[str, Any], window: Window, log: list[Any]) -> None:
    """One small request every 1/rate s on a fixed schedule, each on its own connection and
    not waiting for the one before: a stalled service shows as latencies, not as fewer probes."""
    url, queue = spec["urls"][0], spec["queue"]
    interval_s = 1 / spec["rate"]
    requests = [
        ("GET", f"/v1/queues/{queue}", b""),
        ("POST", f"/v1/queues/{queue}/jobs", _encode({"payload": spec["payload"]})),
    ]
    pending: set[asyncio.Task[None]] = set()
    due = window.start
    step = 0
    while True:
        now = time.time()
        if now < due:
            await asyncio.sleep(due - now)
        if time.time() >= window.end:
            break
        task = asyncio.ensure_future(probe_once(url, spec, requests, step % len(requests), due, log))
        pending.add(task)
        task.add_done_callback(pending.discard)
        step += 1
        due += interval_s
    if pending:
        await asyncio.wait(pending)


async def probe_once(
    url: str,
    spec: dict[str, Any],
    requests: list[tuple[str, str, bytes]],
    op: int,
    due: float,
    log: list[Any],
) -> None:
    sent = time.time()
    started = time.perf_counter()
    status = 0
    conn: RawConnection | None = None
    try:
        async with asyncio.timeout(spec["timeout_s"]):
            conn = await RawConnection.open(url, spec.get("headers"))
            status, _ = await conn.request(*requests[op])
    except (TimeoutError, OSError, httptools.HttpParserError):
        status = 0  # no answer: refused, cut or timed out
    finally:
        if conn is not None:
            conn.close()
    log.append([op, round(due, 6), round(sent, 6), round((time.perf_counter() - started) * 1000, 3), status])


async def _stop_on_line(window: Window) -> None:
    """paced: a line "stop" on stdin (or its end) ends the run now."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "stop":
            window.end = min(window.end, time.time())
            return


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    urls: list[str] = spec["urls"]
    concurrency: int = spec["concurrency"]
    workload: str = spec["workload"]
    httpx_client = None
    conns: list[Any] = []
    if workload not in OWN_CLIENTS and workload != "probe":
        if spec["client"] == "httpx":
            import httpx

            limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
            httpx_client = httpx.AsyncClient(limits=limits, timeout=60.0)
            conns = [HttpxConnection(httpx_client, urls[i % len(urls)]) for i in range(concurrency)]
        else:
            conns = [await RawConnection.open(urls[i % len(urls)]) for i in range(concurrency)]
    watch = ProcWatch({name: list(pids) for name, pids in spec.get("watch", {}).items()})

    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    _, measure_from, measure_until = line.split()
    window = Window(float(measure_from), float(measure_until))

    async def at(moment: float) -> tuple[float, dict[str, float]]:
        await asyncio.sleep(max(0.0, moment - time.time()))
        return time.process_time(), watch.sample()

    start_sample = asyncio.ensure_future(at(window.start))
    end_sample = asyncio.ensure_future(at(window.end))
    tag = spec.get("tag", "w")
    if workload == "enqueue":
        tasks = [enqueue_loop(conn, spec, window) for conn in conns]
    elif workload == "enqueue_batch":
        tasks = [enqueue_batch_loop(conn, spec, window) for conn in conns]
    elif workload == "cycle":
        tasks = [cycle_loop(conn, spec, window, f"{tag}-{i}") for i, conn in enumerate(conns)]
    elif workload == "next_cycle":
        tasks = [next_cycle_loop(conn, spec, window, f"{tag}-{i}") for i, conn in enumerate(conns)]
    elif workload == "batch_cycle":
        tasks = [batch_cycle_loop(conn, spec, window, f"{tag}-{i}") for i, conn in enumerate(conns)]
    elif workload == "wakeup":
        tasks = [wakeup_samples(spec, window)]
    elif workload == "sdk_worker":
        tasks = [sdk_worker_drain(spec, window)]
    elif workload == "sdk_next":
        tasks = [sdk_next_loops(spec, window, tag)]
    elif workload == "paced":
        paced_log: list[Any] = []
        spread_s = 1 / spec["rate"]  # the connections take turns: one request every 1/rate s
        tasks = [
            paced_loop(conn, spec, window, f"{tag}-{i}", i * spread_s, paced_log)
            for i, conn in enumerate(conns)
        ]
        stopper = asyncio.ensure_future(_stop_on_line(window))
    elif workload == "probe":
        probe_log: list[Any] = []
        tasks = [probe_loop(spec, window, probe_log)]
        stopper = asyncio.ensure_future(_stop_on_line(window))
    else:
        raise SystemExit(f"unknown workload {workload!r}")
    await asyncio.gather(*tasks)
    if workload == "probe":
        stopper.cancel()
        return {"requests": probe_log, "ops": PROBE_OPS}
    if workload == "paced":
        stopper.cancel()  # the thread reading stdin ends with the process (stdin is closed)
        return {"requests": paced_log, "errors": window.errors, "ops": PACED_OPS}
    if not end_sample.done():  # done before the window's end (wake-up samples, a drain): end it now
        end_sample.cancel()
        window.end = time.time()
        end_sample = asyncio.ensure_future(at(window.end))
    (cpu_start, others_start), (cpu_end, others_end) = await start_sample, await end_sample
    for conn in conns:
        conn.close()
    if httpx_client is not None:
        await httpx_client.aclose()
    end = window.end if window.first_empty_at is None else window.first_empty_at
    return {
        "jobs": window.jobs,
        "requests": window.requests,
        "errors": window.errors,
        "empty": window.empty,
        "window_s": max(1e-9, end - window.start),
        "planned_window_s": window.end - window.start,
        "latencies_ms": [round(s * 1000, 4) for s in window.latencies_s],
        "enqueue_latencies_ms": [round(s * 1000, 4) for s in window.enqueue_latencies_s],
        "cpu_s": {("sdk" if workload.startswith("sdk_") else "loadgen"): cpu_end - cpu_start}
        | {name: others_end[name] - others_start[name] for name in others_end},
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    if spec["workload"].startswith("sdk_"):
        runner = asyncio.run  # the SDK on the event loop its users get by default
    result = runner(run(spec))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
