"""Abuse harness: hostile floods against a live service while its workers run (issue 27).

    .venv/bin/python bench/abuse.py [--quick] [--seed N] [--markdown out.md] [--keep]

Starts what bench/chaos.py starts (its Cluster: a valkey-server with AOF, --replicas service
processes, sweep every 200 ms) with tokens (admin, producer, a worker token scoped to `sms-*`
for the floods, one scoped to `chaos` for the steady workers), chaos.py's producer (job ids it
chooses, each acknowledged enqueue logged) and workers (2 s leases), and a probe
(bench/loadgen.py's probe workload: GET /v1/queues/probe and an enqueue in turn, each on a new
connection, against the first process). Then floods run one after another, each bounded in count
and time, loopback only (bench/abuse_floods.py):

  sse        event streams on distinct queues sms-flood-<i> with the worker token
  silent     TCP connections that send nothing
  slowloris  headers that never end
  headers    requests with 20 MB of headers each
  progress   batch heartbeats with 64 KiB progresses while subscribers never read
  web        cross-site form posts (text/plain) and requests with a rebound Host
  queues     a producer making thousands of queues, then /ui, /metrics and /v1/queues together

While each flood holds, a worker is SIGKILLed or SIGSTOPped holding a job (chaos.py's
fault_worker), whose lease the sweep must reclaim: the job must be leased again within lease +
sweep interval + 1 s. After the floods the queue drains and chaos.py's checker judges every
job (tests/support/chaos_check.py: lost 0, every duplicate explained by the worker faults, no zombie
call accepted); tests/support/abuse_check.py judges each flood: the probes after it (from 1 s after
its end: p99 within 1 s, none failed), the memory of each service process (at most 300 MB), the
reclaim, and that the hostile requests were refused. Prints a markdown table (--markdown writes
it: bench/report.py's abuse block) and exits 1 on a failed check, 2 on a harness error or the
hard deadline, 130 on Ctrl-C. Every process it started is stopped in all cases.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import secrets
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos import (  # bench/chaos is first on sys.path
    FINAL_SETTLE_S,
    QUEUE,
    Harness,
    HarnessError,
    Profile,
    run_guarded,
    say,
    service_version,
)

from tests.support.abuse_check import Bounds, judge, latency, rss_peak, table
from tests.support.chaos_check import LEASE_MS, RELEASE_TARGET_MS, SWEEP_MS, Checker, Fault, History
from tests.support.launched import descendants

BENCH = Path(__file__).resolve().parent
FLOODS_SCRIPT = BENCH / "abuse_floods.py"
LOADGEN_SCRIPT = BENCH.parent / "perf" / "loadgen.py"
PROBE_QUEUE = "probe"
PROBE_TIMEOUT_S = 5.0
RSS_SAMPLE_S = 0.2
ENGAGE_GRACE_S = 30.0  # a flood's setup (making queues, opening thousands of sockets) may take this long
END_GRACE_S = 20.0  # past its duration, a flood process is killed
DRAIN_S = 30.0


@dataclass(frozen=True)
class AbuseProfile:
    flood_s: float  # each flood holds this long
    settle_s: float  # after a flood: the probes of its "after" window, then the next one starts
    warmup_s: float
    workers: int
    rate: float  # the producer's jobs per second
    probe_rate: float  # probes per second
    floods: dict[str, dict[str, Any]]  # flood -> its spec (counts)
    hard_deadline_s: float

    @property
    def produce_s(self) -> float:
        return self.warmup_s + len(self.floods) * (self.flood_s + self.settle_s + 3)


PROFILES = {
    "quick": AbuseProfile(
        flood_s=6,
        settle_s=3,
        warmup_s=2,
        workers=3,
        rate=20,
        probe_rate=20,
        floods={
            "sse": {"count": 200},
            "silent": {"count": 2000},
            "slowloris": {"count": 200},
            "headers": {"count": 4, "mb": 20},
            "progress": {"jobs": 14, "batches": 60, "subscribers": 4},
            "web": {"count": 50},
            "queues": {"count": 1500, "rounds": 2},
        },
        hard_deadline_s=300,
    ),
    "full": AbuseProfile(
        flood_s=10,
        settle_s=5,
        warmup_s=3,
        workers=4,
        rate=30,
        probe_rate=20,
        floods={
            "sse": {"count": 200},
            "silent": {"count": 4000},
            "slowloris": {"count": 500},
            "headers": {"count": 4, "mb": 20},
            "progress": {"jobs": 14, "batches": 200, "subscribers": 4},
            "web": {"count": 200},
            "queues": {"count": 3000, "rounds": 3},
        },
        hard_deadline_s=600,
    ),
}


def make_tokens() -> dict[str, str]:
    return {role: secrets.token_urlsafe(18) for role in ("admin", "producer", "worker", "worker_sms")}


def token_entries(tokens: dict[str, str]) -> str:
    """EMQ_AUTH_TOKENS: the steady workers' token covers only their queue, the floods' sms-*."""
    return ",".join(
        [
            f"admin:{tokens['admin']}",
            f"producer:{tokens['producer']}",
            f"worker:{tokens['worker']}:{QUEUE}",
            f"worker:{tokens['worker_sms']}:sms-*",
        ]
    )


class Lines:
    """A child's stdout, line by line, read by a thread (so a wait can time out)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def pump() -> None:
            for line in stdout:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def next(self, timeout_s: float) -> str | None:
        """The next line, or None at the end or after timeout_s."""
        try:
            return self.lines.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None


class RssSampler:
    """VmRSS of each service process (and anything it started), every RSS_SAMPLE_S."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.samples: dict[str, list[list[float]]] = {name: [] for name in pids}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stopped.wait(RSS_SAMPLE_S):
            now = time.time()
            for name, pid in self.pids.items():
                sizes = [vm_rss_mb(p) for p in descendants(pid)]
                self.samples[name].append([round(now, 3), round(max(sizes, default=0.0), 1)])


def vm_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class AbuseHarness(Harness):
    def __init__(self, args: argparse.Namespace, abuse: AbuseProfile) -> None:
        self.abuse = abuse
        self.tokens = make_tokens()
        jobs = int(abuse.rate * abuse.produce_s)
        profile = Profile(
            jobs=jobs,
            workers=abuse.workers,
            produce_s=abuse.produce_s,
            faults={},
            drain_s=DRAIN_S,
            hard_deadline_s=abuse.hard_deadline_s,
            cancel_fraction=0.0,
        )
        tokens = {
            "admin": self.tokens["admin"],
            "producer": self.tokens["producer"],
            "worker": self.tokens["worker"],
        }
        super().__init__(args, profile, prefix="emq-abuse-", replicas=args.replicas, tokens=tokens)
        self.floods: list[dict[str, Any]] = []
        self.probes: list[list[Any]] = []
        self.rss: RssSampler | None = None
        self.floods_from = 0.0
        self.floods_until = 0.0

    def run(self) -> int:
        cluster = self.cluster
        cluster.session_workers = False  # every job held by its lease: the sweep alone reclaims it
        cluster.service_env = {"EMQ_AUTH_TOKENS": token_entries(self.tokens)}
        self.service_version = service_version(cluster.service_dir)
        say(
            f"abuse {self.args.profile}: service {self.service_version} ({cluster.service_dir}), seed "
            f"{self.args.seed}, {len(cluster.urls)} service process(es), {self.abuse.workers} workers, lease "
            f"{LEASE_MS} ms, sweep {SWEEP_MS} ms, floods of {self.abuse.flood_s:.0f} s; "
            f"work dir {self.workdir}"
        )
        cluster.start_redis()
        for slot in range(len(cluster.urls)):
            cluster.start_replica(slot, wait=False)
        for slot in range(len(cluster.urls)):
            cluster.wait_replica(slot)
        self.rss = RssSampler(
            {f"service{slot}": child.pid for slot, child in enumerate(cluster.replicas) if child}
        )
        self.rss.thread.start()
        for slot in range(self.profile.workers):
            cluster.start_worker(slot)
        cluster.start_producer()
        probe, probe_lines = self.start_probe()
        self.idle(self.abuse.warmup_s)
        self.floods_from = time.time()
        kinds = ["worker-kill", "worker-stop"]
        for i, name in enumerate(self.abuse.floods):
            fault = Fault(id=i + 1, kind=kinds[i % 2], variant=("mid", "effect")[(i // 2) % 2])
            fault.extra["session"] = False
            self.planned[fault.kind] = self.planned.get(fault.kind, 0) + 1
            self.run_flood(name, fault)
        self.floods_until = time.time()
        assert probe.stdin is not None
        probe.stdin.write("stop\n")
        probe.stdin.flush()
        line = probe_lines.next(PROBE_TIMEOUT_S + 10)
        self.probes = json.loads(line)["requests"] if line else []
        if not line:
            self.errors.append("the probe reported nothing")
        self.rss.stopped.set()
        evidence = {"floods": self.floods, "probes": self.probes, "rss": self.rss.samples}
        (self.workdir / "abuse.json").write_text(json.dumps(evidence) + "\n")
        self.finish()
        return 0

    def start_probe(self) -> tuple[subprocess.Popen[str], Lines]:
        spec = {
            "workload": "probe",
            "urls": [self.cluster.urls[0]],
            "queue": PROBE_QUEUE,
            "rate": self.abuse.probe_rate,
            "timeout_s": PROBE_TIMEOUT_S,
            "headers": {"Authorization": f"Bearer {self.tokens['producer']}"},
            "payload": {"probe": 1},
            "concurrency": 1,
        }
        probe = subprocess.Popen(
            [sys.executable, str(LOADGEN_SCRIPT), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.cluster.logs / "probe.log", "wb"),  # noqa: SIM115 - lives with the process
            text=True,
            start_new_session=True,  # killed as a group with the rest
        )
        self.track_process("probe", probe)
        lines = Lines(probe)
        if (lines.next(30) or "").strip() != "ready":
            raise HarnessError("the probe did not start; see logs/probe.log")
        now = time.time()
        assert probe.stdin is not None
        probe.stdin.write(f"go {now:.6f} {now + self.hard_deadline_s:.6f}\n")
        probe.stdin.flush()
        return probe, lines

    def track_process(self, name: str, process: subprocess.Popen[Any]) -> None:
        """Stopped with the rest (Cluster.kill_everything)."""
        from chaos import Child

        child = Child(name, [], self.cluster.logs / f"{name}.log")
        child.proc = process  # type: ignore[assignment]
        child.expected_exit = True
        self.cluster.children.append(child)

    def flood_spec(self, name: str) -> dict[str, Any]:
        return {
            "url": self.cluster.urls[0],
            "tokens": {k: self.tokens[k] for k in ("admin", "producer", "worker_sms")},
            "duration_s": self.abuse.flood_s,
            **self.abuse.floods[name],
        }

    def run_flood(self, name: str, fault: Fault) -> None:
        """One flood; a worker fault once it is engaged; then its after window."""
        started = time.time()
        process = subprocess.Popen(
            [sys.executable, str(FLOODS_SCRIPT), name, json.dumps(self.flood_spec(name))],
            stdout=subprocess.PIPE,
            stderr=open(self.cluster.logs / f"flood-{name}.log", "wb"),  # noqa: SIM115
            text=True,
            start_new_session=True,  # killed as a group with the rest
        )
        self.track_process(f"flood-{name}", process)
        lines = Lines(process)
        record: dict[str, Any] = {"name": name, "started": started, "fault_id": fault.id}
        line = self.wait_line(lines, self.abuse.flood_s + ENGAGE_GRACE_S)
        if line and line.startswith("engaged"):
            record["engaged"] = float(line.split()[1])
            self.faults.append(fault)
            fault.t = time.time()
            self.run_fault(fault)
        else:
            fault.skipped = "the flood never engaged"
            self.faults.append(fault)
        summary = None
        end_by = started + self.abuse.flood_s + ENGAGE_GRACE_S + END_GRACE_S
        while summary is None and time.time() < end_by:
            line = self.wait_line(lines, end_by - time.time())
            if line is None:
                break
            if line.startswith("{"):
                summary = json.loads(line)
        if process.poll() is None:
            process.kill()
        process.wait()
        record["summary"] = summary
        record["ended"] = summary.pop("ended") if summary else time.time()
        self.floods.append(record)
        what = f"{fault.kind}/{fault.variant} {fault.target}" + (
            f" SKIPPED: {fault.skipped}" if fault.skipped else ""
        )
        say(f"  [{started - self.started:6.1f}s +{record['ended'] - started:.1f}s] {name}: {summary}; {what}")
        self.idle(max(0.0, record["ended"] + self.abuse.settle_s + 1.0 - time.time()))

    def wait_line(self, lines: Lines, timeout_s: float) -> str | None:
        """The flood's next line, supervising the cluster meanwhile."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            line = lines.next(min(0.05, end - time.monotonic()))
            if line is not None:
                return line.strip()
            self.supervise()
        return None

    def finish(self) -> None:
        """chaos.py's end: the producer finishes, the queue drains, the final reads."""
        cluster = self.cluster
        assert cluster.producer is not None
        produced_by = time.monotonic() + DRAIN_S
        while cluster.producer.alive() and time.monotonic() < produced_by:
            self.idle(0.1)
        if cluster.producer.alive():
            self.errors.append(f"the producer had not finished {DRAIN_S:.0f} s after the floods")
            cluster.producer.stop()
        drain_end = time.monotonic() + DRAIN_S
        while time.monotonic() < drain_end:
            counts = self.counts()
            if counts and counts["waiting"] + counts["delayed"] + counts["active"] == 0:
                break
            self.idle(0.25)
        else:
            self.errors.append(f"the queue did not drain within {DRAIN_S:.0f} s: {self.counts()}")
        self.stop_workers()
        time.sleep(FINAL_SETTLE_S)
        from tests.support.chaos_check import record_history, record_stream

        self.final_counts = self.read_final(f"/v1/queues/{QUEUE}", "counts")
        self.final_active = self.read_final(f"/v1/queues/{QUEUE}/active", "jobs")
        self.final_states = self.fetch_states(set())
        stream = self.read_stream()
        if stream is not None:
            record_stream(self.workdir, stream)
        record_history(
            self.workdir, self.faults, self.planned, self.final_counts, self.final_active, self.final_states
        )
        for child in [*cluster.replicas, cluster.redis]:
            if child is not None:
                child.stop()


def verdict(harness: AbuseHarness, bounds: Bounds) -> tuple[list[str], str, dict[str, Any]]:
    """(failures, the markdown, the figures) of a finished run."""
    history = History.load(harness.workdir)
    result = Checker(history, aof_window_s=2.0, strict_timing=True).run()
    releases = {fault.id: fault.extra.get("release_ms") for fault in history.faults}
    busy = {fault.id: fault.extra.get("release_busy_ms") for fault in history.faults}
    skipped = {fault.id: fault.skipped for fault in history.faults}
    floods = []
    for flood in harness.floods:
        fault = next(f for f in history.faults if f.id == flood["fault_id"])
        floods.append(
            flood
            | {
                "fault": {
                    "kind": fault.kind,
                    "t": fault.t,
                    "skipped": skipped[fault.id],
                    "release_ms": releases[fault.id],
                    "release_busy_ms": busy[fault.id],
                }
            }
        )
    assert harness.rss is not None
    rss = harness.rss.samples
    rows = judge(floods, harness.probes, rss, bounds, harness.floods_until)
    baseline = latency(harness.probes, harness.started, harness.floods_from)
    baseline_rss = rss_peak(rss, harness.started, harness.floods_from)
    failures = [f for row in rows for f in row.failures] + result["failures"] + harness.errors
    lost = len(result["lost"])
    read = sum(1 for state, _ in history.final_states.values() if state != "unknown")
    explained = sum(1 for d in result["duplicate_details"] if d["kind"])
    summary = (
        f"{result['acked_enqueues']} jobs enqueued by the steady producer ({read} of "
        f"{len(history.final_states)} ids read back): lost {lost}, duplicates {result['duplicates']} "
        f"({explained} explained by the worker faults), zombie calls refused "
        f"{result['zombie_refused']}/{result['zombie_calls']}, still active "
        f"{result['still_active']}. Bounds: probe p99 after a flood <= {bounds.p99_ms:.0f} ms (from "
        f"{bounds.recover_s:.0f} s after its end), RSS <= {bounds.rss_mb:.0f} MB per service process, a "
        f"worker fault's job leased again within {bounds.release_ms / 1000:.1f} s (lease + sweep + 1 s). "
        f"Verdict: {'PASS' if not failures else f'FAIL ({len(failures)} failed checks)'}."
    )
    markdown = table(rows, baseline, baseline_rss) + "\n\n" + summary + "\n"
    figures = {
        "rows": [asdict(row) for row in rows],
        "lost": lost,
        "duplicates": result["duplicates"],
        "explained": explained,
        "failures": failures,
    }
    return failures, markdown, figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description="EchoMQ abuse harness: hostile floods against a live service with workers running.",
        epilog="Exit codes: 0 pass, 1 a check failed, 2 harness error or hard deadline, 130 interrupted.",
    )
    parser.add_argument("--quick", action="store_true", help="the quick profile (under ~2 minutes)")
    parser.add_argument(
        "--replicas", type=int, default=1, choices=(1, 2), help="service processes (default 1)"
    )
    parser.add_argument(
        "--only", help=f"these floods only (comma-separated: {','.join(PROFILES['full'].floods)})"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--p99-ms", type=float, default=Bounds.p99_ms)
    parser.add_argument("--rss-mb", type=float, default=Bounds.rss_mb)
    parser.add_argument("--markdown", help="write the table here (bench/report.py)")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--service-dir", help="run the service of this checkout (default: this one)")
    parser.add_argument("--workdir", help="keep everything here (default: a temporary directory)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory even when the run passes"
    )
    args = parser.parse_args()
    args.profile = "quick" if args.quick else "full"
    args.hard_deadline_s = None
    args.only_floods = args.only
    args.only = None  # chaos.py's --only (fault kinds) does not apply
    args.faketime_lib = None
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    abuse = PROFILES[args.profile]
    if args.only_floods:
        chosen = args.only_floods.split(",")
        unknown = set(chosen) - set(abuse.floods)
        if unknown:
            parser.error(f"--only: unknown floods {sorted(unknown)}")
        abuse = AbuseProfile(
            **(asdict(abuse) | {"floods": {k: v for k, v in abuse.floods.items() if k in chosen}})
        )
    harness = AbuseHarness(args, abuse)

    def clean_up() -> None:
        if harness.rss is not None:
            harness.rss.stopped.set()
        harness.cluster.kill_everything()

    code = run_guarded(harness.run, harness.hard_deadline_s, clean_up)
    if code != 0:
        say(f"evidence kept in {harness.workdir}")
        return code
    bounds = Bounds(p99_ms=args.p99_ms, rss_mb=args.rss_mb, release_ms=RELEASE_TARGET_MS)
    failures, markdown, figures = verdict(harness, bounds)
    wall = time.time() - harness.started
    say("")
    say(markdown.rstrip())
    say(f"\nwall {wall:.0f} s")
    for failure in failures[:40]:
        say(f"  FAIL: {failure}")
    if args.markdown:
        Path(args.markdown).write_text(markdown)
    if args.out:
        Path(args.out).write_text(
            json.dumps(figures | {"wall_s": round(wall, 1), "profile": args.profile}, indent=1, default=str)
            + "\n"
        )
    if failures or args.keep:
        say(f"evidence kept in {harness.workdir}")
    else:
        shutil.rmtree(harness.workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
