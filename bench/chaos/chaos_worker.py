"""Client processes of the chaos harness (bench/chaos.py): a worker and a producer.

Both talk HTTP to the service replicas (a random one per call) and retry on connection errors,
timeouts, 429 and 5xx on another replica. Everything they do is written to logs that
bench/chaos.py reads afterwards; nothing here decides whether the queue behaved.

worker   leases one job at a time (long poll), "works" for a random time while heartbeating,
         appends the job to its effects log (fsync) and only then acks. It is deliberately
         naive: it never looks at its own clock to decide whether its lease is still valid,
         it just calls, so a zombie (a worker stopped past its lease) makes the calls the
         server must refuse with 409 lease_lost.
         When a heartbeat answers cancel_requested (the producer cancelled the job), it stops
         the work and releases or fails the job (the answer must say cancelled), without an
         effect; a worker that does not hear of it in time acks, and the job completes.
         With --session-ttl-ms it opens a worker session (POST .../workers/{name}/heartbeat) and
         renews it every ttl/3 (before each lease call too, whose long poll it keeps within ttl/4),
         renews its jobs' leases only every lease/3 (its lease is long: only the session holds its
         jobs in seconds), and ends the session (DELETE) on a clean exit. Its start record says
         lease_ms and session_ttl_ms; each renewal is logged ({"ev": "sess"}, with the session's
         expiry on the Redis clock), so the checker knows when the session can have lapsed.
producer enqueues jobs with ids it chooses, at a steady rate, and appends each acknowledged
         enqueue (201 or 200) to its log (fsync) before the next one. It cancels a random sample
         of its jobs (--cancel-fraction) at a random time after their enqueue (up to
         --cancel-max-ms), some of them enqueued delayed or marked slow ("work_ms" in the
         payload, which the worker honours) so that cancels find them delayed, waiting or
         active; each cancel and its answer are logged.

Logs are JSON lines written with os.write on O_APPEND descriptors (no user-space buffer), so a
SIGKILLed process loses nothing it had logged. Times are time.time() (the Redis server runs
on the same machine and clock; the service replicas never decide times).

Hold points, for deterministic fault injection: when the file <ctl-dir>/<name> exists and says
"mid", the next leased job is held "in work" (heartbeating) until the file is removed; when it
says "effect", the worker pauses after writing the next effect and before acking it. Each hold
is logged ({"ev": "hold"}) so the harness knows the instant to SIGKILL or SIGSTOP. A file
<ctl-dir>/job-<id> saying "mid" makes whichever worker leases that job next hold it the same
way: the harness uses it to have a job held by its new owner while a zombie calls for it.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import os
import random
import signal
import sys
import time
from typing import Any

import httpx

QUEUE = "chaos"
CALL_TIMEOUT_S = 5.0
RETRY_PAUSE_S = 0.05  # after a connection error: the other replica is tried at once anyway
UNAVAILABLE_PAUSE_S = 0.1  # after 503/429/5xx
LATE_EXIT_S = 5.0  # past the harness deadline, a client exits even in the middle of a retry loop
HOLD_MAX_S = 20.0  # a hold nobody releases ends by itself


class Deadline(Exception):
    pass


class Log:
    """An append-only JSON-lines file; sync=True fsyncs after the line."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: dict[str, Any], sync: bool = False) -> None:
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        if sync:
            os.fsync(self.fd)


class Api:
    """POSTs to a random replica; retries anything that is not a definite answer."""

    def __init__(
        self, urls: list[str], rng: random.Random, events: Log, deadline: float, token: str | None = None
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else None
        self.clients = [httpx.Client(base_url=url, timeout=CALL_TIMEOUT_S, headers=headers) for url in urls]
        self.rng = rng
        self.events = events
        self.deadline = deadline

    def post(
        self,
        op: str,
        path: str,
        body: dict[str, Any] | None,
        job: str | None = None,
        timeout: float = CALL_TIMEOUT_S,
        method: str = "POST",
    ) -> tuple[int, Any, float, float, int]:
        """(status, json body, send time, receive time, replica) of the first definite answer:
        2xx, 400, 404, 409. Every other outcome is logged as a callerr and retried."""
        while True:
            if time.time() > self.deadline + LATE_EXIT_S:
                raise Deadline(op)
            replica = self.rng.randrange(len(self.clients))
            sent = time.time()
            try:
                response = self.clients[replica].request(method, path, json=body, timeout=timeout)
            except httpx.TransportError as error:
                self.events.write(
                    {
                        "ev": "callerr",
                        "op": op,
                        "job": job,
                        "err": type(error).__name__,
                        "ts": sent,
                        "t": time.time(),
                        "r": replica,
                    }
                )
                time.sleep(RETRY_PAUSE_S)
                continue
            received = time.time()
            status = response.status_code
            if status in (429,) or status >= 500:
                code = None
                with contextlib.suppress(ValueError, AttributeError):
                    code = response.json().get("code")
                self.events.write(
                    {
                        "ev": "callerr",
                        "op": op,
                        "job": job,
                        "err": f"{status}:{code}",
                        "ts": sent,
                        "t": received,
                        "r": replica,
                    }
                )
                time.sleep(UNAVAILABLE_PAUSE_S)
                continue
            try:
                payload = response.json()
            except ValueError:
                payload = None
            return status, payload, sent, received, replica


def ctl_command(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


class Session:
    """The worker's session: renewed every ttl/3 by renew_if_due; None ttl: no session."""

    def __init__(self, api: Api, events: Log, name: str, ttl_ms: int | None) -> None:
        self.api, self.events, self.ttl_ms = api, events, ttl_ms
        self.path = f"/v1/queues/{QUEUE}/workers/{name}"
        self.period_s = (ttl_ms or 0) / 3000
        self.due = 0.0  # time.time() of the next renewal

    def renew_if_due(self) -> None:
        if self.ttl_ms is None or time.time() < self.due:
            return
        status, body, sent, received, replica = self.api.post(
            "sess", self.path + "/heartbeat", {"ttl_ms": self.ttl_ms, "info": {"pid": os.getpid()}}
        )
        record: dict[str, Any] = {"ev": "sess", "st": status, "ts": sent, "t": received, "r": replica}
        if status == 200:
            record.update(exp=body["session_expires_at"], state=body["state"])
        else:
            record["code"] = (body or {}).get("code")
        self.events.write(record)
        self.due = sent + self.period_s

    def end(self) -> None:
        """DELETE the session: the jobs still held (none after a clean stop) go back unspent."""
        if self.ttl_ms is None:
            return
        status, body, sent, received, replica = self.api.post("sess_end", self.path, None, method="DELETE")
        released = (body or {}).get("released") if status == 200 else None
        self.events.write(
            {"ev": "sess_end", "st": status, "released": released, "ts": sent, "t": received, "r": replica}
        )


def run_worker(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    events = Log(os.path.join(args.dir, f"events-{args.name}.jsonl"))
    effects = Log(os.path.join(args.dir, f"effects-{args.name}.jsonl"))
    api = Api(args.urls.split(","), rng, events, args.deadline, args.token)
    ctl = os.path.join(args.ctl, args.name)
    lease_ms = args.lease_ms
    heartbeat_s = lease_ms / 3000
    session = Session(api, events, args.name, args.session_ttl_ms)
    # A session must be renewed while the worker waits in a long poll: keep the poll within ttl/4.
    wait_ms = args.wait_ms if session.ttl_ms is None else min(args.wait_ms, session.ttl_ms // 4)
    stopping = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True  # finish the job in hand, then exit

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    events.write(
        {
            "ev": "start",
            "name": args.name,
            "pid": os.getpid(),
            "t": time.time(),
            "lease_ms": lease_ms,
            "session_ttl_ms": session.ttl_ms,
        }
    )
    lease_path = f"/v1/queues/{QUEUE}/lease"
    lease_numbers = itertools.count()
    try:
        while not stopping:
            if time.time() > args.deadline:
                break
            session.renew_if_due()
            status, body, sent, received, replica = api.post(
                "lease",
                lease_path,
                # One request id per lease, kept by Api.post's retries: a retry after a lost answer
                # gets the jobs the first call leased instead of leaving them held until their lease
                # ends (30 s for a session worker, longer than the drain allows).
                {
                    "worker": args.name,
                    "lease_ms": lease_ms,
                    "max_jobs": 1,
                    "wait_ms": wait_ms,
                    "request_id": f"{os.getpid()}-{next(lease_numbers)}",
                },
                timeout=wait_ms / 1000 + CALL_TIMEOUT_S,
            )
            if status != 200:
                events.write({"ev": "fatal", "op": "lease", "status": status, "body": body, "t": received})
                return 3
            if not body["jobs"]:  # told "nothing": the checker's proof that this worker was free
                events.write({"ev": "idle", "ts": sent, "t": received})
            for job in body["jobs"]:
                work(
                    api, events, effects, rng, ctl, job, sent, received, replica, lease_ms, heartbeat_s,
                    session, args,
                )  # fmt: skip
        session.end()
    except Deadline:
        events.write({"ev": "deadline", "t": time.time()})
        return 4
    events.write({"ev": "exit", "t": time.time()})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM during shutdown is no crash
    return 0


def work(
    api: Api,
    events: Log,
    effects: Log,
    rng: random.Random,
    ctl: str,
    job: dict[str, Any],
    sent: float,
    received: float,
    replica: int,
    lease_ms: int,
    heartbeat_s: float,
    session: Session,
    args: argparse.Namespace,
) -> None:
    job_id, lease_id = job["id"], job["lease_id"]
    events.write(
        {
            "ev": "lease",
            "job": job_id,
            "lease": lease_id,
            "fence": job["fence"],
            "attempt": job["attempt"],
            "exp": job["lease_expires_at"],
            "lease_ms": lease_ms,
            "ts": sent,
            "t": received,
            "r": replica,
        }
    )
    base = f"/v1/queues/{QUEUE}/jobs/{job_id}"
    payload = job.get("payload")
    if isinstance(payload, dict) and payload.get("work_ms"):  # the producer asked for a slow job
        duration = payload["work_ms"] / 1000
    elif rng.random() < args.long_fraction:
        duration = rng.uniform(args.long_min_ms, args.long_max_ms) / 1000
    else:
        duration = rng.uniform(args.work_min_ms, args.work_max_ms) / 1000
    start = time.time()
    work_end = start + duration
    next_beat = start + heartbeat_s
    holding = None
    job_ctl = os.path.join(os.path.dirname(ctl), f"job-{job_id}")
    for path in (ctl, job_ctl):
        if ctl_command(path) == "mid":
            holding = path
            events.write({"ev": "hold", "at": "mid", "job": job_id, "lease": lease_id, "t": time.time()})
            break
    while True:
        session.renew_if_due()
        now = time.time()
        if now >= next_beat:
            status, body, hb_sent, hb_received, r = api.post(
                "hb", base + "/heartbeat", {"lease_id": lease_id}, job=job_id
            )
            record = {
                "ev": "hb",
                "job": job_id,
                "lease": lease_id,
                "st": status,
                "ts": hb_sent,
                "t": hb_received,
                "r": r,
            }
            if status == 200:
                record["exp"] = body["lease_expires_at"]
            else:
                record["code"] = (body or {}).get("code")
            if status == 200:
                record["cancel"] = bool(body.get("cancel_requested"))
            events.write(record)
            if status != 200:  # 409 lease_lost or 404: the job is no longer ours; drop the work
                events.write(
                    {"ev": "abandon", "job": job_id, "lease": lease_id, "why": status, "t": time.time()}
                )
                return
            if record["cancel"] and not holding:  # cancelled: stop, give it up; it ends cancelled
                stop_cancelled(api, events, rng, base, job_id, lease_id)
                return
            next_beat = hb_sent + heartbeat_s
            continue
        if holding:
            if ctl_command(holding) is None or now - start > HOLD_MAX_S:
                holding = None
                work_end = now
            else:
                time.sleep(min(0.01, max(0.0, next_beat - now)))
                continue
        if now >= work_end:
            break
        wake = min(next_beat, work_end, session.due if session.ttl_ms else work_end)
        time.sleep(max(0.0, wake - now))
    # The side effect, durable before the ack: a crash from here on means a redelivery.
    effects.write({"job": job_id, "lease": lease_id, "fence": job["fence"], "t": time.time()}, sync=True)
    if ctl_command(ctl) == "effect":
        events.write({"ev": "hold", "at": "effect", "job": job_id, "lease": lease_id, "t": time.time()})
        held = time.time()
        while ctl_command(ctl) is not None and time.time() - held < HOLD_MAX_S:
            session.renew_if_due()  # held alive, as a slow ack would be
            time.sleep(0.005)
    status, body, ack_sent, ack_received, r = api.post(
        "ack", base + "/ack", {"lease_id": lease_id}, job=job_id
    )
    events.write(
        {
            "ev": "ack",
            "job": job_id,
            "lease": lease_id,
            "st": status,
            "code": (body or {}).get("code"),
            "ts": ack_sent,
            "t": ack_received,
            "r": r,
        }
    )


def stop_cancelled(api: Api, events: Log, rng: random.Random, base: str, job_id: str, lease_id: str) -> None:
    """The job's cancellation was requested: release it or fail it (with retry: it must not be
    retried all the same). A 200 answers state cancelled."""
    op = rng.choice(["release", "fail"])
    body: dict[str, Any] = {"lease_id": lease_id}
    if op == "fail":
        body.update(error="cancelled by the producer", retry=True)
    status, answer, sent, received, r = api.post(op, f"{base}/{op}", body, job=job_id)
    record = {
        "ev": "stop", "op": op, "job": job_id, "lease": lease_id, "st": status,
        "state": (answer or {}).get("state"), "code": (answer or {}).get("code"),
        "ts": sent, "t": received, "r": r,
    }  # fmt: skip
    events.write(record)


def run_producer(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    log = Log(os.path.join(args.dir, "producer.jsonl"))
    api = Api(args.urls.split(","), rng, log, args.deadline, args.token)
    path = f"/v1/queues/{QUEUE}/jobs"
    started = time.time()
    log.write({"ev": "start", "pid": os.getpid(), "t": started, "jobs": args.jobs})
    cancels: list[tuple[float, str]] = []  # (when, job id), a heap

    def cancel(job_id: str) -> None:
        log.write({"ev": "cancel_send", "job": job_id, "t": time.time()})
        status, body, sent, received, replica = api.post(
            "cancel", f"{path}/{job_id}/cancel", {"reason": "chaos"}, job=job_id
        )
        # 404: only when the enqueue itself was lost (a Redis restart within the AOF window)
        record = {"ev": "cancel", "job": job_id, "st": status, "ts": sent, "t": received, "r": replica}
        if status == 200:
            record.update(state=body["state"], cr=body["cancel_requested"])
        log.write(record, sync=True)

    def wait_until(when: float) -> None:
        """Sleeps until `when`, making the cancels that fall due meanwhile."""
        while True:
            if cancels and cancels[0][0] <= when:
                at, job_id = heapq.heappop(cancels)
                pause = at - time.time()
                if pause > 0:
                    time.sleep(pause)
                cancel(job_id)
                continue
            pause = when - time.time()
            if pause > 0:
                time.sleep(pause)
            return

    try:
        for n in range(args.jobs):
            wait_until(started + n / args.rate)
            job_id = f"{args.prefix}{n:06d}"
            request: dict[str, Any] = {"id": job_id, "payload": {"n": n}, "max_attempts": args.max_attempts}
            if rng.random() < args.cancel_fraction:
                heapq.heappush(cancels, (time.time() + rng.uniform(0, args.cancel_max_ms) / 1000, job_id))
                shape = rng.random()
                if shape < 0.2:  # delayed: the cancel mostly finds it delayed
                    request["delay_ms"] = round(rng.uniform(200, args.cancel_max_ms))
                elif shape < 0.7:  # slow: the cancel mostly finds it active
                    request["payload"]["work_ms"] = round(rng.uniform(300, 1200))
            log.write({"ev": "send", "job": job_id, "t": time.time()})
            status, body, sent, received, replica = api.post("enqueue", path, request, job=job_id)
            if status not in (200, 201) or body.get("id") != job_id:
                log.write({"ev": "fatal", "job": job_id, "status": status, "body": body, "t": received})
                return 3
            log.write(
                {
                    "ev": "ack",
                    "job": job_id,
                    "st": status,
                    "state": body["state"],
                    "ts": sent,
                    "t": received,
                    "r": replica,
                },
                sync=True,
            )
        wait_until(max([at for at, _ in cancels], default=0.0))
    except Deadline:
        log.write({"ev": "deadline", "t": time.time()})
        return 4
    log.write({"ev": "done", "t": time.time()})
    return 0


def main() -> int:
    args = arguments().parse_args()
    return run(args)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["worker", "producer"])
    parser.add_argument("--urls", required=True, help="comma-separated replica base URLs")
    parser.add_argument("--dir", required=True, help="where the logs go")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, required=True, help="epoch seconds: stop by then")
    parser.add_argument("--name", default="w0")
    parser.add_argument("--token", default=None, help="a bearer token, when the service has tokens")
    parser.add_argument("--ctl", default=".")
    parser.add_argument("--lease-ms", type=int, default=2000)
    parser.add_argument("--wait-ms", type=int, default=1000)
    parser.add_argument(
        "--session-ttl-ms", type=int, default=None, help="worker: open a worker session with this ttl"
    )
    parser.add_argument("--work-min-ms", type=float, default=2)
    parser.add_argument("--work-max-ms", type=float, default=30)
    parser.add_argument("--long-fraction", type=float, default=0.02)
    parser.add_argument("--long-min-ms", type=float, default=1000)
    parser.add_argument("--long-max-ms", type=float, default=3000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="producer: jobs per second")
    parser.add_argument("--prefix", default="j")
    parser.add_argument("--max-attempts", type=int, default=100)
    parser.add_argument("--cancel-fraction", type=float, default=0.0, help="producer: jobs it cancels")
    parser.add_argument("--cancel-max-ms", type=float, default=1500, help="producer: cancel within this")
    return parser


def run(args: argparse.Namespace) -> int:
    _die_with_parent()
    return run_worker(args) if args.role == "worker" else run_producer(args)


def _die_with_parent() -> None:
    """If the harness itself is SIGKILLed, do not outlive it (Linux; elsewhere the deadline does)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:
            sys.exit(5)


if __name__ == "__main__":
    sys.exit(main())
