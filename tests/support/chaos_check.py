"""The chaos harness's checker: from a recorded history to a verdict, and nothing else.

bench/chaos.py runs the processes and injects the faults; this module only reads what the run
recorded, so the same verdict can be reached again from a kept work directory, and so a test
(tests/test_chaos_checker.py) can feed it a history with a known fault in it and see it caught.

A history is a work directory's

  clients/producer.jsonl        the producer's log (bench/chaos_worker.py)
  clients/events-<worker>.jsonl each worker process's calls and their answers
  clients/effects-<worker>.jsonl each worker process's side effects, written before its ack
  history.json                  what the harness itself recorded: the faults it planned and
                                injected, and the final reads (the queue's counts, its ledger and
                                every job's final state) or null where a final read failed
  stream.jsonl                  the queue's events as its Redis stream holds them at the end
                                (XRANGE, each entry parsed as runtime/event_feeds.py does), one
                                event a line: {"n": number, "type", "id", "at", members...}
  schedules.json                the schedules the harness put (name -> the first run time, when
                                it was put and paused), their views and every job they made
                                (read after the drain; null where the read failed); absent in a
                                run without schedules

    .venv/bin/python -m tests.support.chaos_check WORKDIR   # the verdict again, from a kept work dir
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LEASE_MS = 2000
SWEEP_MS = 200
KINDS = ("worker-kill", "worker-stop", "replica-kill", "redis-kill", "clock-skew")
LATE_MARGIN_MS = 5  # a call sent this long after its lease's known expiry is a zombie call
RELEASE_TARGET_MS = LEASE_MS + SWEEP_MS + 1000  # death -> job leased again
# A reclaimed job is first in line, but it can only be leased by a worker that asks: when every
# live worker is busy with a job (slow ones take up to 1.2 s) it waits for the first to finish.
# A release later than RELEASE_TARGET_MS is excused when no live worker was answered "nothing"
# meanwhile (the "idle" records of bench/chaos/chaos_worker.py), up to this much later.
BUSY_FLEET_MS = 2000
# Half the workers hold their jobs by a worker session: a ttl much shorter than their lease, so
# that only the session's lapse can return a dead worker's job within seconds.
SESSION_TTL_MS = 2500
SESSION_LEASE_MS = 30_000
# The contract: a lapsed session's jobs leave the ledger within ttl + sweep interval + 1 s. The
# check counts from the SIGKILL/SIGSTOP and adds this margin for what the harness itself adds:
# a renewal sent just before the signal that Redis runs a call's latency later (the replica's
# event loop shares 2 cores with ~9 busy processes: a few hundred ms), a sweep tick delayed by
# that same load, and the restarts of the replica-kill faults nearby (a starting replica takes
# a core for ~1 s). 3 s is more than all of these together seen in runs, and still well below
# the 30 s lease: a return that only the lease could explain fails however loaded the machine.
SESSION_MARGIN_MS = 3000
AOF_WINDOW_MS = 2000  # appendfsync everysec: 1 s, up to 2 s when a slow fsync postpones the write
HISTORY_FILE = "history.json"
STREAM_FILE = "stream.jsonl"
CLIENTS_DIR = "clients"
CANCEL_MARGIN_MS = 1  # Redis ms times are truncated: a lease granted this soon after a cancel's answer
FINISHED_EVENTS = ("completed", "failed", "cancelled", "deleted")
SCHEDULES_FILE = "schedules.json"
SCHEDULE_EVERY_MS = 1000
# The contract: a run is made at most sweep interval + 1 s after its time. The margin is the
# harness's own load (as SESSION_MARGIN_MS): the sweeping replica shares 2 cores with ~9 busy
# processes, and a replica restarting nearby takes a core for ~1 s.
SCHEDULE_MARGIN_MS = 800
SCHEDULE_BUDGET_MS = SWEEP_MS + 1000 + SCHEDULE_MARGIN_MS
RUN_ID = re.compile(r"(?P<schedule>.+)-r(?P<run_at>[0-9]+)")  # core/schedules.py run_job_id


@dataclass
class Fault:
    id: int
    kind: str
    target: str = ""
    variant: str = ""
    t: float = 0.0  # the instant of the signal (SIGKILL / SIGSTOP), epoch seconds
    t_end: float = 0.0  # SIGCONT, or the restarted process answering again
    skipped: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def injected(self) -> bool:
        """A planned fault that really happened; a clock skew only counts with its worker kill."""
        return not self.skipped and self.variant != "unplanned" and not self.extra.get("worker_skipped")

    @property
    def why_not_injected(self) -> str:
        if self.extra.get("worker_skipped"):
            return f"its worker kill was skipped: {self.extra['worker_skipped']}"
        return self.skipped


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        for line in f:
            if line.endswith(b"\n"):  # a line cut by SIGKILL mid-write is not a record
                records.append(json.loads(line))
    return records


@dataclass
class History:
    """Everything the verdict depends on, as a run recorded it."""

    producer: list[dict[str, Any]]
    events: dict[str, list[dict[str, Any]]]  # by worker process name
    effects: dict[str, list[dict[str, Any]]]  # by worker process name
    faults: list[Fault]
    planned: dict[str, int]  # how many faults of each kind the run set out to inject
    final_counts: dict[str, int] | None  # None: the final read failed
    final_active: list[dict[str, Any]] | None  # None: the final read failed
    final_states: dict[str, tuple[str, int | None]]  # (state, attempt); "unknown": its read failed
    stream: list[dict[str, Any]] | None = None  # the queue's events at the end; None: not read
    schedules: dict[str, Any] | None = None  # schedules.json; None: the run put no schedules

    @classmethod
    def load(cls, workdir: Path) -> History:
        clients = workdir / CLIENTS_DIR
        recorded = json.loads((workdir / HISTORY_FILE).read_text())
        final = recorded["final"]
        return cls(
            producer=read_jsonl(clients / "producer.jsonl"),
            events=_logs_by_worker(clients, "events"),
            effects=_logs_by_worker(clients, "effects"),
            faults=[Fault(**fault) for fault in recorded["faults"]],
            planned=recorded["planned"],
            final_counts=final["counts"],
            final_active=final["active"],
            final_states={job: (state, attempt) for job, (state, attempt) in final["states"].items()},
            stream=read_jsonl(workdir / STREAM_FILE) if (workdir / STREAM_FILE).exists() else None,
            schedules=(
                json.loads((workdir / SCHEDULES_FILE).read_text())
                if (workdir / SCHEDULES_FILE).exists()
                else None
            ),
        )


def _logs_by_worker(clients: Path, log: str) -> dict[str, list[dict[str, Any]]]:
    return {
        path.name[len(log) + 1 : -len(".jsonl")]: read_jsonl(path)
        for path in sorted(clients.glob(f"{log}-*.jsonl"))
    }


def record_history(
    workdir: Path,
    faults: list[Fault],
    planned: dict[str, int],
    counts: dict[str, int] | None,
    active: list[dict[str, Any]] | None,
    states: dict[str, tuple[str, int | None]],
) -> None:
    """Write what the harness itself saw beside the clients' logs: History.load reads both."""
    recorded = {
        "planned": planned,
        "faults": [asdict(fault) for fault in faults],
        "final": {"counts": counts, "active": active, "states": states},
    }
    (workdir / HISTORY_FILE).write_text(json.dumps(recorded, indent=1) + "\n")


def record_schedules(
    workdir: Path,
    every_ms: int,
    schedules: dict[str, dict[str, Any]],
    views: dict[str, dict[str, Any]] | None,
    jobs: dict[str, dict[str, Any]] | None,
) -> None:
    """The schedules the harness put ({name: {"anchor": first run time (Redis ms), "put_t",
    "pause_t": the pause PUT sent, "paused_t": answered (epoch s)}}), their views after the drain
    and every job they made ({id: {"schedule", "created_at", "state"}}); None: that read failed."""
    recorded = {"every_ms": every_ms, "schedules": schedules, "views": views, "jobs": jobs}
    (workdir / SCHEDULES_FILE).write_text(json.dumps(recorded, indent=1) + "\n")


def schedule_of(job: str, names: Any) -> tuple[str, int] | None:
    """(schedule, run time) of a job id a run of one of these schedules makes, else None."""
    match = RUN_ID.fullmatch(job)
    if match is None or match["schedule"] not in names:
        return None
    return match["schedule"], int(match["run_at"])


def record_stream(workdir: Path, events: list[dict[str, Any]]) -> None:
    """The queue's events as the harness read them from Redis at the end: History.load reads them."""
    with open(workdir / STREAM_FILE, "w") as f:
        f.writelines(json.dumps(event, separators=(",", ":")) + "\n" for event in events)


@dataclass(frozen=True)
class Finding:
    """One failed check: its kind (lost, duplicate, early-lease, ...) and the job, fault kind or
    read it is about."""

    kind: str
    subject: str | None
    message: str


# ----------------------------------------------------------------------------------------------
# The checks: everything below reads the history, nothing else.
# ----------------------------------------------------------------------------------------------


@dataclass
class Lease:
    id: str
    job: str
    inst: str
    fence: int
    grant_ms: int  # Redis time of the grant: lease_expires_at - lease_ms
    t_recv: float
    exp_ms: int  # latest lease_expires_at the worker was told (lease or heartbeat response)
    ambiguous: bool = False  # a renewal may have happened that the worker never heard of
    lease_ms: int = LEASE_MS
    session_ttl_ms: int | None = None  # the worker's session ttl; None: a worker without a session
    covered_ms: float | None = None  # Redis ms from which a session of the worker covered the lease
    lapse_ms: float | None = None  # earliest its session can have lapsed after that: from then on
    # the lease may be taken (None: no session ever covered it, only the lease holds it)
    effect_t: float | None = None
    ack_status: int | None = None
    ack_call: dict[str, Any] | None = None
    stop_call: dict[str, Any] | None = None  # release or fail of a job whose cancellation was requested
    abandoned: bool = False
    end_t: float | None = None  # when the worker let go of it: its ack's answer, or abandoning it
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def end_lo_ms(self) -> float:
        """The earliest the lease can have ended without its worker letting go: its expiry, or
        its worker's session lapsing."""
        return self.exp_ms if self.lapse_ms is None else min(self.exp_ms, self.lapse_ms)

    @property
    def renewed_ms(self) -> float:
        """When it was last held for sure: the last renewal of what ends it first."""
        if self.lapse_ms is not None and self.lapse_ms < self.exp_ms:
            assert self.session_ttl_ms is not None
            return self.lapse_ms - self.session_ttl_ms
        return self.exp_ms - self.lease_ms


def session_lapse(renewals: list[tuple[float, float]], grant_ms: float) -> tuple[float | None, float | None]:
    """(covered from, earliest lapse) of a lease granted at grant_ms, from the worker's session
    renewals it heard answered, each (Redis ms it ran at, expiry): the session covers the lease
    from its grant when live then, else from the first renewal after it; it lapses at the first
    expiry no renewal made before it extends. A renewal the worker never heard of can only
    have extended it, so this is the earliest lapse. (None, None): no session covered it."""
    live = [expiry for ran, expiry in renewals if ran <= grant_ms and expiry > grant_ms]
    if live:
        covered, cover = grant_ms, max(live)
    else:
        later = [(ran, expiry) for ran, expiry in renewals if ran > grant_ms]
        if not later:
            return None, None
        covered, cover = min(later)
    for ran, expiry in sorted(renewals):  # by when they ran: extend while renewed in time
        if ran >= cover:
            break
        cover = max(cover, expiry)
    return covered, cover


class Checker:
    """Judges one History: run() returns the figures, the failures (messages, as printed) and the
    findings (the same failures with their kind and subject)."""

    def __init__(self, history: History, aof_window_s: float, strict_timing: bool = False) -> None:
        self.history = history
        self.faults = [fault for fault in history.faults if not fault.skipped]
        self.window_s = aof_window_s
        self.strict_timing = strict_timing
        self.failures: list[str] = []
        self.findings: list[Finding] = []
        self.leases: dict[str, Lease] = {}
        self.by_job: dict[str, list[Lease]] = defaultdict(list)
        self.calls: list[tuple[Lease, dict[str, Any], bool, bool]] = []  # lease, call, late, ambiguous
        self.callerrs: list[dict[str, Any]] = []
        self.kind_of_inst_kill: dict[str, Fault] = {}
        self.stops: dict[str, list[Fault]] = defaultdict(list)
        self.session_ttl: dict[str, int] = {}  # worker process -> its session's ttl (with a session)
        self.renewals: dict[str, list[tuple[float, float]]] = defaultdict(list)  # (ran, expiry) ms
        self.idle_answers: list[tuple[str, float]] = []  # (worker, when) of leases answered empty
        for fault in self.faults:
            if fault.kind in ("worker-kill",):
                self.kind_of_inst_kill[fault.target] = fault
            elif fault.kind == "worker-stop":
                self.stops[fault.target].append(fault)
            elif (
                fault.kind == "clock-skew"
                and fault.extra.get("worker")
                and not fault.extra.get("worker_skipped")
            ):
                self.kind_of_inst_kill[fault.extra["worker"]] = fault
        self.redis_kills = [fault for fault in self.faults if fault.kind == "redis-kill"]
        self.outages = [fault for fault in self.faults if fault.kind in ("replica-kill", "clock-skew")]
        self.figures: dict[str, dict[str, Any]] = {
            kind: {
                "planned": history.planned.get(kind, 0),
                "injected": sum(1 for f in history.faults if f.kind == kind and f.injected),
                "unplanned": sum(1 for f in history.faults if f.kind == kind and f.variant == "unplanned"),
                "skipped": sum(1 for f in history.faults if f.kind == kind and f.skipped),
                "jobs_affected": 0,
                "lost": 0,
                "duplicated": 0,
                "explained": 0,
                "max_release_ms": None,
                "zombie_calls": 0,
                "zombie_refused": 0,
                "session_jobs": 0,  # jobs held under a session when the fault hit its worker
                "session_returned": 0,  # of them, back within the budget
                "session_exempt": 0,  # of them, Redis was down meanwhile: not judged
                "max_session_return_ms": None,
            }
            for kind in (*KINDS, "no-fault")
        }

        # The jobs the schedules made (they join the queue beside the producer's): every id of
        # the form <schedule>-r<run time> the final listing, a worker or a final read names.
        self.schedule_jobs: dict[str, tuple[str, int]] = {}
        record = history.schedules
        if record is not None:
            names = set(record["schedules"])
            seen = set(record.get("jobs") or {}) | set(history.final_states)
            seen.update(r["job"] for records in history.effects.values() for r in records)
            for job in seen:
                parsed = schedule_of(job, names)
                if parsed is not None:
                    self.schedule_jobs[job] = parsed

    def fail(self, kind: str, message: str, subject: str | None = None) -> None:
        self.failures.append(message)
        self.findings.append(Finding(kind, subject, message))

    def load(self) -> None:
        for inst in sorted(self.history.events):
            current: Lease | None = None
            lease_ms = LEASE_MS
            for logged in self.history.events[inst]:
                record = dict(logged)  # annotated below; the history itself stays as recorded
                ev = record["ev"]
                if ev == "start":
                    lease_ms = record.get("lease_ms") or LEASE_MS
                    if record.get("session_ttl_ms"):
                        self.session_ttl[inst] = record["session_ttl_ms"]
                elif ev == "sess" and record["st"] == 200 and inst in self.session_ttl:
                    self.renewals[inst].append((record["exp"] - self.session_ttl[inst], record["exp"]))
                elif ev == "lease":
                    current = Lease(
                        id=record["lease"],
                        job=record["job"],
                        inst=inst,
                        fence=record["fence"],
                        grant_ms=record["exp"] - record.get("lease_ms", lease_ms),
                        t_recv=record["t"],
                        exp_ms=record["exp"],
                        lease_ms=record.get("lease_ms", lease_ms),
                        session_ttl_ms=self.session_ttl.get(inst),
                    )
                    self.leases[current.id] = current
                    self.by_job[current.job].append(current)
                elif ev in ("hb", "ack", "stop"):
                    assert current is not None and current.id == record["lease"]
                    # Sent after the lease's end: must be refused. Answered before it: must be
                    # accepted. In between, Redis ran it around the lease's end: either is right.
                    late = record["ts"] * 1000 > current.exp_ms + LATE_MARGIN_MS
                    record.update(
                        op=record["op"] if ev == "stop" else ev,
                        _late=late,
                        _in_time=record["t"] * 1000 < current.exp_ms,
                        _ambiguous=current.ambiguous,
                    )
                    self.calls.append((current, record, late, current.ambiguous))
                    if ev == "hb" and record["st"] == 200:
                        current.exp_ms = max(current.exp_ms, record["exp"])
                        current.ambiguous = False
                    if ev == "ack":
                        current.ack_status = record["st"]
                        current.ack_call = record
                        current.end_t = record["t"]
                    if ev == "stop":
                        current.stop_call = record
                        current.end_t = record["t"]
                elif ev == "idle":
                    self.idle_answers.append((inst, record["t"]))
                elif ev == "callerr":
                    record["inst"] = inst
                    self.callerrs.append(record)
                    if (
                        current is not None
                        and record.get("op") in ("hb", "ack", "release", "fail")
                        and record.get("job") == current.job
                    ):
                        current.errors.append(record)
                        # It may have reached Redis and renewed the lease - unless it was refused
                        # before sending, or sent when the lease had already ended.
                        sent_in_time = record["ts"] * 1000 <= current.exp_ms + LATE_MARGIN_MS
                        if record["err"] not in ("ConnectError", "ConnectTimeout") and sent_in_time:
                            current.ambiguous = True
                elif ev == "abandon":
                    assert current is not None
                    current.abandoned = True
                    current.end_t = record["t"]
        for inst in sorted(self.history.effects):
            for record in self.history.effects[inst]:
                lease = self.leases.get(record["lease"])
                if lease is None:
                    self.fail(
                        "unknown-lease",
                        f"effect of {record['job']} under an unknown lease {record['lease']}",
                        record["job"],
                    )
                    continue
                lease.effect_t = record["t"]
        for leases in self.by_job.values():
            leases.sort(key=lambda lease: (lease.grant_ms, lease.fence))
        self.load_sessions()

    def load_sessions(self) -> None:
        """A lease held under a session may end early, when the session lapses: a call answered
        before the earliest lapse must be accepted, one sent after the job was leased again (so
        certainly taken) must be refused, and in between either answer is right (the sweep takes
        it at its next tick)."""
        for lease in self.leases.values():
            if lease.session_ttl_ms is not None:
                lease.covered_ms, lease.lapse_ms = session_lapse(self.renewals[lease.inst], lease.grant_ms)
        calls = []
        for lease, call, late, ambiguous in self.calls:
            if lease.lapse_ms is not None:
                taken = next(
                    (o.grant_ms for o in self.by_job[lease.job] if o.grant_ms > lease.grant_ms), None
                )
                late = late or (taken is not None and call["ts"] * 1000 > taken + LATE_MARGIN_MS)
                call["_late"] = late
                call["_in_time"] = call["_in_time"] and call["t"] * 1000 < lease.lapse_ms
            calls.append((lease, call, late, ambiguous))
        self.calls = calls

    # -- attribution helpers ----------------------------------------------------------------------
    def redis_kill_between(self, start_s: float, end_s: float) -> Fault | None:
        return next((f for f in self.redis_kills if start_s <= f.t <= end_s), None)

    def redis_down_overlaps(self, start_s: float, end_s: float) -> Fault | None:
        return next((f for f in self.redis_kills if f.t <= end_s and f.t_end + 1.0 >= start_s), None)

    def replica_down_overlaps(self, lease: Lease, start_s: float, end_s: float) -> Fault | None:
        if not lease.errors:
            return None
        return next((f for f in self.outages if f.t <= end_s and f.t_end >= start_s), None)

    def stop_of(self, inst: str, start_s: float, end_s: float) -> Fault | None:
        return next((f for f in self.stops.get(inst, []) if f.t <= end_s and f.t_end >= start_s), None)

    def cause_of_late(self, lease: Lease, call_ts: float) -> str:
        """Why did a worker call after its lease had ended? The kind of fault, or no-fault."""
        renewed_s = lease.renewed_ms / 1000
        stop = self.stop_of(lease.inst, lease.t_recv - 1, call_ts)
        if stop is not None:
            return stop.kind
        if self.redis_down_overlaps(renewed_s, call_ts) is not None:
            return "redis-kill"
        outage = self.replica_down_overlaps(lease, renewed_s, call_ts)
        if outage is not None:
            return outage.kind
        return "no-fault"  # the worker overran its lease on its own (a slow machine): refused, correctly

    # -- the checks -------------------------------------------------------------------------------
    def check_faults_injected(self) -> None:
        """A run proves only what it put the queue through: fewer faults than planned fails it."""
        for kind, planned in self.history.planned.items():
            injected = self.figures[kind]["injected"]
            if injected >= planned:
                continue
            why = sorted({f.why_not_injected for f in self.history.faults if f.kind == kind} - {""})
            self.fail(
                "faults-short",
                f"{kind}: injected {injected} of {planned} planned faults"
                + (f" ({'; '.join(why)})" if why else " (the rest were never attempted)"),
                kind,
            )

    def check_final_reads(self) -> None:
        """A final read that failed leaves the run unproven: nothing may pass for want of data."""
        history = self.history
        if history.final_counts is None:
            self.fail(
                "final-read",
                "final read failed: the queue's counts could not be read (retried until its deadline), "
                "so nothing shows that no job was left waiting, delayed or failed",
                "counts",
            )
        if history.final_active is None:
            self.fail(
                "final-read",
                "final read failed: the in-flight ledger could not be read (retried until its deadline), "
                "so nothing shows that no job was left active",
                "ledger",
            )
        # every job the producer sent or a worker did must have been read back
        jobs = {r["job"] for r in history.producer if r["ev"] == "send"}
        jobs.update(r["job"] for records in history.effects.values() for r in records)
        jobs.update(self.schedule_jobs)
        unread = sorted(job for job in jobs if history.final_states.get(job, ("unknown",))[0] == "unknown")
        if unread:
            self.fail(
                "final-read",
                f"final read failed for {len(unread)} jobs (retried until its deadline), so their fate is "
                f"unknown: {unread[:5]}",
                unread[0],
            )

    def run(self) -> dict[str, Any]:
        """Every invariant in turn (invariants(), each failing through fail()), then the figures."""
        self.prepare()
        for invariant in self.invariants():
            invariant()
        return self.summary()

    def invariants(self) -> list[Callable[[], None]]:
        """The invariants, in the order their failures are listed."""
        return [
            self.check_faults_injected,
            self.check_final_reads,
            self.check_producer,
            self.check_calls,
            self.check_lease_order,
            self.check_fences_unique,
            self.check_releases,
            self.check_sessions_exercised,
            self.check_duplicates,
            self.check_acked_enqueues_completed,
            self.check_schedule_jobs_completed,
            self.check_nothing_unexpected,
            self.check_counts,
            self.check_nothing_left,
            self.check_no_server_errors,
            self.check_cancelled_jobs,
            self.check_event_stream,
            self.check_schedule_runs,
        ]

    def prepare(self) -> None:
        """What the invariants share: the producer's sends and acknowledged enqueues, each job's
        effects and final state, and the figures they fill in."""
        self.cancel_sent = {r["job"] for r in self.history.producer if r["ev"] == "cancel_send"}
        self.load()
        self.sent = {r["job"] for r in self.history.producer if r["ev"] == "send"}
        self.acked: dict[str, dict[str, Any]] = {}
        for record in self.history.producer:
            if record["ev"] == "ack":
                self.acked.setdefault(record["job"], record)
        self.effects: dict[str, list[Lease]] = defaultdict(list)
        for lease in self.leases.values():
            if lease.effect_t is not None:
                self.effects[lease.job].append(lease)
        self.states = self.history.final_states
        self.valid_refused: list[tuple[Lease, dict[str, Any]]] = []
        self.reclaim_gaps_ms: list[float] = []
        self.session_reclaim_gaps_ms: list[float] = []  # leases a session held: from its last renewal
        self.skew_reclaim_gaps_ms: list[float] = []
        self.early_leases = 0
        self.duplicate_details: list[dict[str, Any]] = []
        self.lost: list[dict[str, Any]] = []
        self.lost_in_aof_window: list[dict[str, Any]] = []
        self.unexpected: list[str] = []
        self.done: set[str] = set()
        self.cancels: dict[str, Any] = {}
        self.events: dict[str, Any] = {}
        self.schedules: dict[str, Any] | None = None

    def check_producer(self) -> None:
        """The producer never stopped on an unexpected answer, and every enqueue was answered."""
        producer = self.history.producer
        if any(r["ev"] == "fatal" for r in producer):
            self.fail(
                "producer",
                "the producer stopped on an unexpected answer: "
                + str([r for r in producer if r["ev"] == "fatal"]),
            )
        unacked = sorted(self.sent - set(self.acked))
        if unacked:
            self.fail(
                "unacked-enqueue",
                f"{len(unacked)} enqueues were never acknowledged (producer cut short): {unacked[:5]}",
                unacked[0],
            )

    def check_calls(self) -> None:
        """Zombie and late calls: a call made after its lease ended must be refused; a call made
        in time must not be (but across a Redis restart)."""
        for lease, call, late, ambiguous in self.calls:
            if call["st"] not in (200, 404, 409):
                continue
            if late and not ambiguous:
                kind = self.cause_of_late(lease, call["ts"])
                fig = self.figures[kind]
                fig["zombie_calls"] += 1
                if any(
                    other is not lease
                    and other.grant_ms / 1000 <= call["ts"]
                    and (other.end_t or 1e18) >= call["t"]
                    for other in self.by_job[lease.job]
                ):
                    fig["zombie_while_held"] = fig.get("zombie_while_held", 0) + 1
                if call["st"] != 200:
                    fig["zombie_refused"] += 1
                else:
                    self.fail(
                        "zombie-accepted",
                        f"zombie call ACCEPTED: {call['op']} of {lease.job} by {lease.inst} sent "
                        f"{call['ts'] * 1000 - lease.exp_ms:.0f} ms after its lease {lease.id[:8]} expired",
                        lease.job,
                    )
            elif call["_in_time"] and call["st"] == 409:
                kill = self.redis_kill_between(lease.grant_ms / 1000 - self.window_s, call["ts"])
                if kill is None:
                    self.valid_refused.append((lease, call))
                    self.fail(
                        "valid-lease-refused",
                        f"a valid lease was refused: {call['op']} of {lease.job} by {lease.inst} "
                        "answered 409 "
                        f"{lease.end_lo_ms - call['t'] * 1000:.0f} ms before the lease's end"
                        + (" (its session's earliest lapse)" if lease.end_lo_ms < lease.exp_ms else "")
                        + " (no Redis restart)",
                        lease.job,
                    )

    def check_lease_order(self) -> None:
        """Leases: never granted again before the previous one ended; fences only go up."""
        gaps_ms = self.reclaim_gaps_ms
        session_gaps_ms = self.session_reclaim_gaps_ms
        skew_gaps_ms = self.skew_reclaim_gaps_ms
        for job, leases in self.by_job.items():
            for prev, nxt in itertools.pairwise(leases):
                if nxt.fence <= prev.fence and (
                    self.redis_kill_between(prev.t_recv - self.window_s, nxt.t_recv) is None
                ):
                    self.fail("fence", f"fence went back for {job}: {prev.fence} then {nxt.fence}", job)
                if prev.ack_status == 200:
                    continue  # only after a Redis rollback; checked with the duplicates
                gap = nxt.grant_ms - prev.renewed_ms
                by_session = prev.end_lo_ms < prev.exp_ms
                (session_gaps_ms if by_session else gaps_ms).append(gap)
                for fault in self.faults:
                    if fault.kind == "clock-skew" and fault.t <= nxt.grant_ms / 1000 <= fault.t_end:
                        skew_gaps_ms.append(gap)
                if nxt.grant_ms < prev.end_lo_ms:
                    kill = self.redis_kill_between(
                        prev.renewed_ms / 1000 - self.window_s, nxt.grant_ms / 1000
                    )
                    if kill is None:
                        self.early_leases += 1
                        until = (
                            f"{prev.inst}'s session could lapse at {prev.end_lo_ms:.0f} at the earliest"
                            if by_session
                            else f"{prev.inst}'s lease ran until {prev.exp_ms}"
                        )
                        self.fail(
                            "early-lease",
                            f"lease granted early: {job} leased to {nxt.inst} at {nxt.grant_ms} while "
                            f"{until} ({prev.end_lo_ms - nxt.grant_ms:.0f} ms early)",
                            job,
                        )

    def check_fences_unique(self) -> None:
        """No fence is given to two leases (but across a Redis restart)."""
        by_fence: dict[int, list[Lease]] = defaultdict(list)
        for lease in self.leases.values():
            by_fence[lease.fence].append(lease)
        for fence, same in by_fence.items():
            if len(same) > 1:
                same.sort(key=lambda lease: lease.t_recv)
                if self.redis_kill_between(same[0].t_recv - self.window_s, same[-1].t_recv) is None:
                    self.fail(
                        "fence",
                        f"fence {fence} was given to {len(same)} leases: {[(x.job, x.inst) for x in same]}",
                        same[0].job,
                    )

    def busy_fleet(self, dead: str, t_death: float, grant_ms: float, delay_ms: float) -> bool:
        """Whether a late release is explained by every live worker being busy: none of them was
        answered an empty lease between the time the job was surely back in line and its grant,
        and it came within BUSY_FLEET_MS of the target."""
        if delay_ms > RELEASE_TARGET_MS + BUSY_FLEET_MS:
            return False
        back_in_line_s = t_death + RELEASE_TARGET_MS / 1000
        return not any(inst != dead and back_in_line_s < t < grant_ms / 1000 for inst, t in self.idle_answers)

    def check_releases(self) -> None:
        """Death -> leased again in time, and the jobs each fault hit (its figures)."""

        def next_lease(job: str, after_s: float) -> Lease | None:
            return next((lease for lease in self.by_job[job] if lease.grant_ms / 1000 > after_s), None)

        for fault in self.faults:
            if fault.kind in ("worker-kill", "worker-stop") or (
                fault.kind == "clock-skew" and fault.extra.get("worker")
            ):
                inst = fault.target if fault.kind != "clock-skew" else fault.extra["worker"]
                t_death = fault.t if fault.kind != "clock-skew" else fault.extra["worker_t"]
                held = [
                    lease
                    for lease in self.leases.values()
                    if lease.inst == inst
                    and lease.t_recv <= t_death
                    and (lease.end_t is None or lease.end_t > t_death)
                ]
                fig = self.figures[fault.kind]
                fig["jobs_affected"] += len(held)
                if fault.extra.get("job") and fault.extra["job"] not in {lease.job for lease in held}:
                    fig["missed"] = fig.get("missed", 0) + 1  # the harness's hold went wrong
                for lease in held:
                    if lease.covered_ms is not None and lease.covered_ms <= t_death * 1000:
                        self.check_session_return(fault, lease, t_death, fig)
                        continue
                    again = next_lease(lease.job, t_death)
                    if again is None:
                        continue  # completed by the dead worker's own ack (its answer was lost), see below
                    delay = again.grant_ms - t_death * 1000
                    fault.extra.setdefault("release_ms", []).append(round(delay))
                    if self.redis_down_overlaps(t_death, again.grant_ms / 1000) is not None:
                        fault.extra["release_during_redis_outage"] = True
                        continue  # Redis was down meanwhile: no sweep could run; not a fair timing
                    if delay > RELEASE_TARGET_MS and self.busy_fleet(inst, t_death, again.grant_ms, delay):
                        fault.extra.setdefault("release_busy_ms", []).append(round(delay))
                        continue
                    fig["max_release_ms"] = max(fig["max_release_ms"] or 0, delay)
                    if delay > RELEASE_TARGET_MS and self.strict_timing:
                        self.fail(
                            "slow-release",
                            f"{fault.kind} #{fault.id}: {lease.job} leased again {delay:.0f} ms "
                            "after the fault",
                            lease.job,
                        )
            elif fault.kind == "redis-kill":
                held = {
                    lease.job
                    for lease in self.leases.values()
                    if lease.t_recv <= fault.t and (lease.end_t is None or lease.end_t > fault.t)
                }
                failed = {
                    e.get("job") or f"lease:{e['inst']}:{e['ts']}"
                    for e in self.callerrs
                    if fault.t <= e["ts"] <= fault.t_end + 1.0
                }
                fig = self.figures["redis-kill"]
                fig["jobs_affected"] += len(held | {j for j in failed if not j.startswith("lease:")})
            if fault.kind in ("replica-kill", "clock-skew"):
                port_slot = 0 if fault.kind == "clock-skew" else int(fault.target[-1])
                failed = {
                    e["job"]
                    for e in self.callerrs
                    if e.get("job") and e["r"] == port_slot and fault.t <= e["ts"] <= fault.t_end
                }
                failed_calls = [
                    e for e in self.callerrs if e["r"] == port_slot and fault.t <= e["ts"] <= fault.t_end
                ]
                fault.extra["calls_failed_over"] = len(failed_calls)
                if fault.kind == "replica-kill":
                    self.figures["replica-kill"]["jobs_affected"] += len(failed)
                self.figures[fault.kind]["calls_failed_over"] = self.figures[fault.kind].get(
                    "calls_failed_over", 0
                ) + len(failed_calls)

    def check_duplicates(self) -> None:
        """Duplicates: each effect beyond one per job must be explained."""
        for job, leases in self.effects.items():
            # a cancelled job was completed by none of its effects: each must be explained
            cancelled = self.states.get(job, ("",))[0] == "cancelled"
            if len(leases) < 2 and not cancelled:
                continue
            leases.sort(key=lambda lease: lease.grant_ms)
            oks = [lease for lease in leases if lease.ack_status == 200]
            unknown = [lease for lease in leases if lease.ack_status is None]
            completing = oks[-1] if oks else (unknown[-1] if unknown else None)
            if cancelled:
                completing = None
            if completing is None and self.states.get(job, ("",))[0] == "completed":
                self.fail(
                    "duplicate",
                    f"{job} is completed but none of its {len(leases)} effects had its ack accepted",
                    job,
                )
            for lease in leases:
                if lease is completing:
                    continue
                kind, why = self.explain_extra(lease, completing)
                self.duplicate_details.append(
                    {"job": job, "lease": lease.id, "worker": lease.inst, "kind": kind, "why": why}
                )
                if kind is None:
                    self.fail("duplicate", f"unexplained duplicate: {job} done by {lease.inst} ({why})", job)
                else:
                    self.figures[kind]["duplicated"] += 1
                    self.figures[kind]["explained"] += 1

    def check_acked_enqueues_completed(self) -> None:
        """Every acknowledged enqueue completed (or was lost in the AOF window of a Redis kill)."""
        for job, record in self.acked.items():
            state = self.states.get(job, ("unknown", None))[0]
            if state == "unknown":
                continue  # its final read failed: a failure of its own (check_final_reads)
            if job in self.effects and state == "completed":
                continue
            if state == "cancelled":
                if job not in self.cancel_sent:
                    self.fail("unexpected-cancel", f"{job} ended cancelled but nobody cancelled it", job)
                continue  # its effects, if any, were explained with the duplicates
            if job in self.effects:
                self.fail("state", f"{job} has an effect but its final state is {state}", job)
                continue
            kill = next((f for f in self.redis_kills if f.t - self.window_s <= record["t"] <= f.t), None)
            if state == "absent" and kill is not None:
                self.lost_in_aof_window.append(
                    {
                        "job": job,
                        "acked_before_kill_ms": round((kill.t - record["t"]) * 1000),
                        "kill": kill.id,
                    }
                )
                self.figures["redis-kill"]["lost"] += 1
            else:
                self.lost.append({"job": job, "state": state, "acked_at": record["t"]})
                self.fail(
                    "lost",
                    f"LOST: {job} was acknowledged (HTTP {record['st']}) and never completed; "
                    f"final state {state}",
                    job,
                )

    def check_schedule_jobs_completed(self) -> None:
        """Every job a schedule made completed (a Redis restart's undone runs aside)."""
        for job, (schedule, _) in sorted(self.schedule_jobs.items()):
            state = self.states.get(job, ("unknown", None))[0]
            if state == "unknown" or (job in self.effects and state == "completed"):
                continue
            if state == "cancelled":
                self.fail("unexpected-cancel", f"{job} (schedule {schedule}) ended cancelled", job)
                continue
            # A run undone by a Redis restart is made again (same id: the schedule's advance was
            # undone with it), but for the earliest undone run only: one catch-up stands for the
            # rest, so a later undone run's job stays gone after a worker did it.
            granted = min((lease.grant_ms / 1000 for lease in self.by_job.get(job, [])), default=None)
            kill = None
            if state == "absent" and granted is not None:
                kill = next((f for f in self.redis_kills if f.t - self.window_s <= granted <= f.t), None)
            if kill is not None:
                self.lost_in_aof_window.append(
                    {"job": job, "leased_before_kill_ms": round((kill.t - granted) * 1000), "kill": kill.id}
                )
                self.figures["redis-kill"]["lost"] += 1
            elif state == "absent" or job not in self.effects:
                self.lost.append({"job": job, "state": state, "schedule": schedule})
                self.fail(
                    "lost",
                    f"LOST: {job}, made by schedule {schedule}, never completed; final state {state}",
                    job,
                )
            else:
                self.fail("state", f"{job} has an effect but its final state is {state}", job)

    def check_nothing_unexpected(self) -> None:
        """Nothing completed that was not enqueued, nor without an effect."""
        self.unexpected = sorted(set(self.effects) - self.sent - set(self.schedule_jobs))
        for job in self.unexpected:
            self.fail("unexpected", f"unexpected completion: {job} was never enqueued", job)
        for job, (state, _) in self.states.items():
            if state == "completed" and job not in self.effects:
                self.fail("unexpected", f"{job} is completed but no worker recorded its effect", job)

    def check_counts(self) -> None:
        """The queue's counts agree with what the workers completed and what ended cancelled."""
        final_counts = self.history.final_counts or {}  # None: failed by check_final_reads
        done = self.done = {
            job
            for job in set(self.effects) & (set(self.acked) | set(self.schedule_jobs))
            if self.states.get(job, ("",))[0] not in ("cancelled", "absent")  # absent: lost (or undone)
        }
        completed_count = final_counts.get("completed")
        if completed_count is not None and completed_count != len(done):
            self.fail(
                "counts",
                f"the queue counts {completed_count} completed jobs, the workers completed {len(done)}",
            )
        cancelled_count = final_counts.get("cancelled")
        ended_cancelled = sum(1 for state, _ in self.states.values() if state == "cancelled")
        if cancelled_count is not None and cancelled_count != ended_cancelled:
            self.fail(
                "counts",
                f"the queue counts {cancelled_count} cancelled jobs; {ended_cancelled} are cancelled",
            )

    def check_nothing_left(self) -> None:
        """No job still active, waiting, delayed or failed at the end."""
        final_counts = self.history.final_counts or {}  # None: failed by check_final_reads
        final_active = self.history.final_active or []
        if final_active:
            self.fail(
                "still-active",
                f"{len(final_active)} jobs still active after the workers stopped and lease + sweep "
                f"passed: {final_active[:3]}",
                final_active[0].get("id"),
            )
        for key in ("waiting", "delayed", "failed"):
            if final_counts.get(key):
                self.fail("left-over", f"{final_counts[key]} jobs {key} at the end")

    def check_no_server_errors(self) -> None:
        """No call answered 500."""
        server_errors = [e for e in self.callerrs if e["err"].startswith("500")]
        if server_errors:
            self.fail("server-error", f"{len(server_errors)} calls answered 500: {server_errors[:3]}")

    def check_cancelled_jobs(self) -> None:
        """Cancels: see check_cancels."""
        self.cancels = self.check_cancels(self.states)

    def check_event_stream(self) -> None:
        """The queue's events: see check_events."""
        self.events = self.check_events(self.states)

    def check_schedule_runs(self) -> None:
        """Schedules: see check_schedules."""
        self.schedules = self.check_schedules()

    def summary(self) -> dict[str, Any]:
        """The figures of the run, once every invariant has run."""
        history = self.history
        final_active = history.final_active or []
        orphans = 0  # leases the service granted but no worker received (answer lost with a replica)
        for job, (_, attempt) in self.states.items():
            if attempt is not None:
                orphans += max(0, attempt - len(self.by_job.get(job, [])))
        gaps_ms, session_gaps_ms = self.reclaim_gaps_ms, self.session_reclaim_gaps_ms
        skew_gaps_ms = self.skew_reclaim_gaps_ms
        zombie_total = sum(f["zombie_calls"] for f in self.figures.values())
        zombie_refused = sum(f["zombie_refused"] for f in self.figures.values())
        return {
            "acked_enqueues": len(self.acked),
            "schedule_jobs": len(self.schedule_jobs),
            "schedules": self.schedules,
            "completed": len(self.done),
            "cancels": self.cancels,
            "events": self.events,
            "effects": sum(len(v) for v in self.effects.values()),
            "lost": self.lost,
            "lost_in_aof_window": self.lost_in_aof_window,
            "unexpected": self.unexpected,
            "duplicates": len(self.duplicate_details),
            "duplicate_details": self.duplicate_details,
            "zombie_calls": zombie_total,
            "zombie_refused": zombie_refused,
            "valid_leases_refused": len(self.valid_refused),
            "early_leases": self.early_leases,
            "reclaims": len(gaps_ms),
            "min_reclaim_gap_ms": min(gaps_ms) if gaps_ms else None,
            "session_reclaims": len(session_gaps_ms),
            "min_session_reclaim_gap_ms": min(session_gaps_ms) if session_gaps_ms else None,
            "clock_skew_reclaims": len(skew_gaps_ms),
            "clock_skew_min_gap_ms": min(skew_gaps_ms) if skew_gaps_ms else None,
            "leases_never_received": orphans,
            "leases_logged": len(self.leases),
            "calls_retried": len(self.callerrs),
            "still_active": len(final_active),
            "final_counts": history.final_counts,
            "figures": self.figures,
            "failures": self.failures,
            "findings": [asdict(finding) for finding in self.findings],
        }

    # -- schedules --------------------------------------------------------------------------------
    def schedule_outages(self) -> list[tuple[float, float, int]]:
        """When runs may be missed or late: (start ms, end ms, outages merged into it). Redis
        down, from AOF window before its SIGKILL (runs made then may be undone and made again
        after the restart), and both replicas down (nothing sweeps); each until it is back plus
        sweep + 1 s + the margin."""
        spans = [(f.t - self.window_s, f.t_end) for f in self.redis_kills]
        down: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
        for fault in self.faults:
            if fault.kind == "replica-kill" and fault.target[-1:] in ("0", "1"):
                down[int(fault.target[-1])].append((fault.t, fault.t_end))
            elif fault.kind == "clock-skew":
                down[0].append((fault.t, fault.t_end))
        for start0, end0 in down[0]:
            for start1, end1 in down[1]:
                if max(start0, start1) < min(end0, end1):
                    spans.append((max(start0, start1), min(end0, end1)))
        windows: list[list[float]] = []
        for start, end in sorted(spans):
            start_ms, end_ms = start * 1000, end * 1000 + SCHEDULE_BUDGET_MS
            if windows and start_ms <= windows[-1][1]:
                windows[-1][1] = max(windows[-1][1], end_ms)
                windows[-1][2] += 1
            else:
                windows.append([start_ms, end_ms, 1])
        return [(start, end, int(count)) for start, end, count in windows]

    def check_schedules(self) -> dict[str, Any] | None:
        """Each every_ms schedule the harness put made one job per run time, and missed none but
        across an outage (schedule_outages): (a) every job's run time is on the schedule's grid
        (its first run + k * every_ms), none made twice (distinct ids on one grid: run times
        every_ms apart or more), none after its pause was answered; (b) every grid point from
        its first run to its pause less the budget was made, or lies in an outage window and
        the last run made before it is its catch-up run (made after it); in one window at most
        one catch-up run (made a whole interval late or more) per outage merged into it; (c) the
        schedule's runs count its jobs, its last_run_at is the last of them; (d) a run outside
        every outage window is made within sweep + 1 s + margin of its time (the job's
        created_at, Redis clock, less the run time), never before it."""
        record = self.history.schedules
        if record is None:
            return None
        windows = self.schedule_outages()
        figures: dict[str, Any] = {
            "schedules": len(record["schedules"]),
            "every_ms": record["every_ms"],
            "budget_ms": SCHEDULE_BUDGET_MS,
            "read": record["views"] is not None and record["jobs"] is not None,
            "runs": 0,
            "runs_agree": 0,
            "off_grid": 0,
            "twice": 0,
            "missed": 0,
            "missed_outside": 0,
            "outage_windows": len(windows),
            "catch_up_runs": 0,
            "late_in_outage": 0,
            "max_late_in_outage_ms": None,
            "lateness_ms": [],
        }
        if not figures["read"]:
            self.fail("final-read", "final read failed: the schedules or the jobs they made", "schedules")
            return figures
        for job, listed in record["jobs"].items():
            if job not in self.schedule_jobs:
                self.fail("schedule-id", f"{job} names schedule {listed.get('schedule')}: not a run id", job)
        for name, spec in sorted(record["schedules"].items()):
            self.check_schedule(name, spec, record, windows, figures)
        return figures

    def check_schedule(
        self,
        name: str,
        spec: dict[str, Any],
        record: dict[str, Any],
        windows: list[tuple[float, float, int]],
        figures: dict[str, Any],
    ) -> None:
        every_ms, anchor = record["every_ms"], spec["anchor"]
        # run time -> its job as the final listing shows it (None: not listed, a worker did it)
        made = {
            run_at: record["jobs"].get(job)
            for job, (schedule, run_at) in self.schedule_jobs.items()
            if schedule == name
        }
        listed = {run_at: job for run_at, job in made.items() if job is not None}
        run_times = sorted(made)

        def window_of(at_ms: float) -> int | None:
            return next((i for i, (start, end, _) in enumerate(windows) if start <= at_ms <= end), None)

        # (a) on the grid, each run time once, none after the pause
        for run_at, job in sorted(listed.items()):
            if job.get("schedule") != name:
                self.fail(
                    "schedule-id", f"{name}-r{run_at}'s view names schedule {job.get('schedule')}", name
                )
        off = [run_at for run_at in run_times if run_at < anchor or (run_at - anchor) % every_ms]
        figures["off_grid"] += len(off)
        if off:
            self.fail(
                "schedule-grid",
                f"{name}: {len(off)} jobs off its grid ({anchor} + k * {every_ms}), the first for {off[0]}",
                name,
            )
        for before, after in itertools.pairwise(run_times):
            if after - before < every_ms:
                figures["twice"] += 1
                self.fail(
                    "schedule-twice",
                    f"{name}: jobs for run times {before} and {after}, {after - before} ms apart "
                    f"(every {every_ms} ms): one run made twice",
                    name,
                )
        if spec.get("paused_t") is not None and run_times and run_times[-1] > spec["paused_t"] * 1000:
            self.fail("schedule-after-pause", f"{name}: a run at {run_times[-1]} after its pause", name)
        # (c) its view counts its jobs (those the final listing has: a run undone by a Redis
        # restart is undone in the count too)
        figures["runs"] += len(listed)
        view = record["views"].get(name)
        last = max(listed, default=None)
        if view is None:
            self.fail("schedule-gone", f"{name} is gone at the end", name)
        elif (view["runs"], view.get("last_run_at")) == (len(listed), last):
            figures["runs_agree"] += 1
        else:
            self.fail(
                "schedule-runs",
                f"{name}: runs {view['runs']} (last_run_at {view.get('last_run_at')}) but {len(listed)} "
                f"jobs (last run time {last})",
                name,
            )
        # (b) every grid point until the pause less the budget made, or missed in an outage
        if spec.get("pause_t") is not None:
            until_ms = int(spec["pause_t"] * 1000) - SCHEDULE_BUDGET_MS
        else:  # never paused (the run was cut short): up to its last run
            until_ms = run_times[-1] if run_times else anchor - every_ms
        missing = [point for point in range(anchor, until_ms + 1, every_ms) if point not in made]
        figures["missed"] += len(missing)
        outside = [point for point in missing if window_of(point) is None]
        figures["missed_outside"] += len(outside)
        if outside:
            self.fail(
                "schedule-missed",
                f"{name}: {len(outside)} runs missed with Redis and a replica up, first at {outside[0]}",
                name,
            )
        for point in missing:
            if point in outside:
                continue
            before = [run_at for run_at in listed if run_at < point]
            if not before or listed[max(before)]["created_at"] < point:
                self.fail(
                    "schedule-catch-up",
                    f"{name}: run {point} missed in an outage, and no run made after it stands for it",
                    name,
                )
                break
        # (d) lateness; in an outage window, at most one catch-up run per outage
        catch_ups: dict[int, int] = defaultdict(int)
        for run_at, job in sorted(listed.items()):
            late_ms = job["created_at"] - run_at
            if late_ms < 0:
                self.fail("schedule-early", f"{name}: run {run_at} made {-late_ms} ms before its time", name)
            window = window_of(run_at)
            if window is None:
                figures["lateness_ms"].append(late_ms)
                if late_ms > SCHEDULE_BUDGET_MS:
                    self.fail(
                        "schedule-late",
                        f"{name}: run {run_at} made {late_ms} ms after its time with Redis and a replica up "
                        f"(budget sweep + 1 s + {SCHEDULE_MARGIN_MS} ms margin = {SCHEDULE_BUDGET_MS} ms)",
                        name,
                    )
                continue
            figures["late_in_outage"] += 1
            figures["max_late_in_outage_ms"] = max(figures["max_late_in_outage_ms"] or 0, late_ms)
            if late_ms >= every_ms:  # made once the next run time had come: it stood for that one too
                catch_ups[window] += 1
        for window, count in catch_ups.items():
            figures["catch_up_runs"] += count
            if count > windows[window][2]:
                self.fail(
                    "schedule-catch-up",
                    f"{name}: {count} catch-up runs in one outage window of {windows[window][2]} "
                    "outage(s): one catch-up run per outage stands for all the runs it missed",
                    name,
                )

    # -- cancellations ------------------------------------------------------------------------------
    def check_cancels(self, states: dict[str, tuple[str, int | None]]) -> dict[str, Any]:
        """The producer's cancels: after a cancel was answered the job is never leased again (it
        was finished, is cancelled, or only its cancellation was requested: then an ack completes
        it and anything else cancels it); it ends cancelled, or completed when its worker acked
        first, never lost; a cancel that found it waiting or delayed is not undone. A worker that
        heard of the cancellation and released or failed the job was told it is cancelled. Only a
        Redis restart within the AOF window of the cancel may undo it."""
        figures: dict[str, Any] = {
            "sent": len(self.cancel_sent),
            "answered": {},
            "ended_cancelled": 0,
            "ended_completed": 0,
            "stopped_by_worker": 0,
        }
        answers: dict[str, dict[str, Any]] = {}
        for record in self.history.producer:
            if record["ev"] == "cancel" and record["st"] == 200:
                answers.setdefault(record["job"], record)
                figures["answered"][record["state"]] = figures["answered"].get(record["state"], 0) + 1
        for job in sorted(self.cancel_sent):
            state = states.get(job, ("unknown", None))[0]
            if state in ("cancelled", "completed"):
                figures["ended_" + state] += 1
            elif state not in ("unknown", "absent"):  # absent: the lost-enqueue check says why
                self.fail("lost", f"LOST: {job} was cancelled, yet ended {state}", job)
            answer = answers.get(job)
            if answer is None:
                continue
            for lease in self.by_job.get(job, []):
                if lease.grant_ms <= answer["t"] * 1000 + CANCEL_MARGIN_MS:
                    continue
                # a Redis restart within the AOF window after the cancel may have undone it
                undo_by = min(answer["t"] + self.window_s, lease.grant_ms / 1000)
                kill = self.redis_kill_between(answer["ts"], undo_by)
                if kill is None:
                    self.fail(
                        "leased-after-cancel",
                        f"{job} was leased to {lease.inst} (fence {lease.fence}) "
                        f"{lease.grant_ms - answer['t'] * 1000:.0f} ms after its cancel was answered "
                        f"({answer['state']})",
                        job,
                    )
            if (
                answer["state"] == "cancelled"
                and state == "completed"
                and self.redis_kill_between(answer["ts"], answer["t"] + self.window_s) is None
            ):
                self.fail("cancel-undone", f"{job}'s cancel answered cancelled, yet it completed", job)
        for lease in self.leases.values():
            call = lease.stop_call
            if call is None or call["st"] != 200:
                continue
            figures["stopped_by_worker"] += 1
            if call["state"] != "cancelled":
                self.fail(
                    "cancel-ignored",
                    f"{lease.job}: {call['op']} by {lease.inst} after cancel_requested answered "
                    f"{call['state']}, not cancelled",
                    lease.job,
                )
        return figures

    # -- the events ------------------------------------------------------------------------------
    def check_events(self, states: dict[str, tuple[str, int | None]]) -> dict[str, Any]:
        """The queue's events, as its stream holds them at the end, tell each job's story in an
        order that can have happened: numbered 1, 2, 3... with no gap; a job's first event is
        enqueued; a leased event only for a queued job, with a fence above the job's last one;
        nothing after completed, failed, cancelled or deleted (but a redrive's enqueued after
        failed, and a new job of the same id after deleted); a job with cancel_requested is not
        retried, released or reclaimed; the story ends in the job's final state (completed ->
        completed, ...); every lease a worker received is there (unless a Redis restart undid
        it); no event carries a lease id or a payload. Events are written by the script of
        their transition, so a Redis restart from the AOF keeps or loses both together."""
        stream = self.history.stream
        figures: dict[str, Any] = {"read": stream is not None, "events": 0, "jobs": 0, "trimmed": False}
        if stream is None:
            self.fail("final-read", "final read failed: the queue's event stream was not read", "events")
            return figures
        figures["events"] = len(stream)
        if stream and stream[0]["n"] != 1:
            figures["trimmed"] = True  # the beginning is gone: stories may start midway
        lease_ids = set(self.leases)
        phase: dict[str, str] = {}
        fences: dict[str, int] = {}
        leased: set[tuple[str, int]] = set()
        partial: set[str] = set()  # trimmed: the job's story starts midway
        broken: set[str] = set()  # already reported: one finding per job's story
        expected_n = stream[0]["n"] if stream else 1
        queued = ("waiting", "delayed")
        for event in stream:
            kind, job, n = event["type"], event.get("id"), event["n"]
            if n != expected_n:
                self.fail("events-order", f"event {n} follows event {expected_n - 1}", job)
            expected_n = n + 1
            if (
                "lease_id" in event
                or "payload" in event
                or any(isinstance(value, str) and value in lease_ids for value in event.values())
            ):
                self.fail("events-leak", f"event {n} ({kind} of {job}) carries a lease id or a payload", job)
            if job is None:
                continue
            now = phase.get(job)
            if now is None and kind != "enqueued":
                if figures["trimmed"]:
                    partial.add(job)
                    now = {"leased": "queued", "enqueued": None}.get(kind, "active")
                else:
                    self.fail("events-story", f"{job}'s first event is {kind} (event {n}), not enqueued", job)
                    broken.add(job)
            allowed = {
                "enqueued": now in (None, "deleted") or (now == "failed" and event.get("redriven") is True),
                "leased": now == "queued",
                "progress": now in ("active", "active-cr"),
                "completed": now in ("active", "active-cr"),
                "retrying": now == "active",
                "failed": now == "active",
                "released": now == "active",
                "reclaimed": now == "active",
                "cancel_requested": now == "active",
                "cancelled": now in ("queued", "active-cr"),
                "deleted": now in ("queued", "completed", "failed", "cancelled"),
            }.get(kind, False)
            if not allowed and job not in partial and job not in broken:
                self.fail("events-story", f"{job}: {kind} (event {n}) after {now or 'nothing'}", job)
                broken.add(job)
            if kind == "leased":
                fence = int(event["fence"])
                if fence <= fences.get(job, 0) and job not in broken:
                    self.fail("events-story", f"{job}: leased with fence {fence} after {fences[job]}", job)
                    broken.add(job)
                fences[job] = fence
                leased.add((job, fence))
            phase[job] = {
                "enqueued": "queued", "leased": "active", "retrying": "queued", "released": "queued",
                "reclaimed": "queued", "cancel_requested": "active-cr",
            }.get(kind, kind if kind in FINISHED_EVENTS else phase.get(job, "active"))  # fmt: skip
        figures["jobs"] = len(phase)
        ends = {"queued": queued, "active": ("active",), "active-cr": ("active",), "deleted": ("absent",)}
        for job, (state, _) in sorted(states.items()):
            if state == "unknown" or job in partial or job in broken:
                continue
            end = phase.get(job)
            if end is None:
                if state != "absent" and not figures["trimmed"]:
                    self.fail("events-story", f"{job} is {state} but has no events", job)
                continue
            if state not in ends.get(end, (end,)):
                self.fail("events-story", f"{job}'s events end {end}, but its final state is {state}", job)
        for lease in self.leases.values():
            if (lease.job, lease.fence) in leased or lease.job in partial:
                continue
            undone = self.redis_kill_between(lease.grant_ms / 1000, lease.t_recv + self.window_s)
            if figures["trimmed"] or undone is not None:
                continue  # trimmed away, or undone by a Redis restart within the AOF window
            self.fail(
                "events-story",
                f"{lease.job}: no leased event for the lease {lease.inst} received (fence {lease.fence})",
                lease.job,
            )
        return figures

    def check_session_return(self, fault: Fault, lease: Lease, t_death: float, fig: dict[str, Any]) -> None:
        """A job its session held when its worker was SIGKILLed or SIGSTOPped leaves the ledger
        (the sweep takes it: reclaimed, dead-lettered or cancelled) or is leased again within
        ttl + sweep interval + 1 s (the contract) + SESSION_MARGIN_MS, counted from the signal. A
        later return is not judged when Redis was down within that budget (no sweep could run;
        as for leases), an earlier one always counts."""
        assert lease.session_ttl_ms is not None
        budget_ms = lease.session_ttl_ms + SWEEP_MS + 1000 + SESSION_MARGIN_MS
        death_ms = t_death * 1000
        fig["session_jobs"] += 1
        back = [o.grant_ms for o in self.by_job[lease.job] if o.grant_ms > lease.grant_ms]
        # the queue's own word: the job's first event after this lease's leased event that
        # takes it from its worker
        story = [e for e in self.history.stream or [] if e.get("id") == lease.job]
        mine = next(
            (i for i, e in enumerate(story) if e["type"] == "leased" and int(e["fence"]) == lease.fence), None
        )
        if mine is not None:
            left = ("reclaimed", "failed", "cancelled", "released", "retrying", "completed", "deleted")
            taken = next((e["at"] for e in story[mine + 1 :] if e["type"] in left), None)
            if taken is not None:
                back.append(taken)
        back_ms = min(back, default=None)
        delay = None if back_ms is None else back_ms - death_ms
        fault.extra.setdefault("session_return_ms", []).append(None if delay is None else round(delay))
        if delay is not None and delay <= budget_ms:
            fig["session_returned"] += 1
            fig["max_session_return_ms"] = max(fig["max_session_return_ms"] or 0, delay)
            return
        if self.redis_down_overlaps(t_death, t_death + budget_ms / 1000) is not None:
            fig["session_exempt"] += 1
            return
        if delay is not None:
            fig["max_session_return_ms"] = max(fig["max_session_return_ms"] or 0, delay)
        when = "never" if delay is None else f"{delay:.0f} ms after the fault"
        self.fail(
            "slow-session-return",
            f"{fault.kind} #{fault.id}: {lease.job}, held by {lease.inst} under a session "
            f"(ttl {lease.session_ttl_ms} ms, lease {lease.lease_ms} ms), left it {when}; "
            f"budget {budget_ms} ms (ttl + sweep + 1 s + {SESSION_MARGIN_MS} ms margin)",
            lease.job,
        )

    def check_sessions_exercised(self) -> None:
        """Workers with sessions and planned worker kills: at least one kill must have hit a job a
        session held (else the run proves nothing about lapses)."""
        if not self.session_ttl or not self.history.planned.get("worker-kill"):
            return
        fig = self.figures["worker-kill"]
        if fig["session_jobs"] - fig["session_exempt"] <= 0:
            self.fail(
                "faults-short",
                "worker-kill: no kill hit a job held under a worker session (sessions unexercised)",
                "sessions",
            )

    def explain_extra(self, lease: Lease, completing: Lease | None) -> tuple[str | None, str]:
        """(fault kind, reason) for an effect that did not complete its job, or (None, reason)."""
        if lease.ack_status is None:
            kill = self.kind_of_inst_kill.get(lease.inst)
            if kill is not None and lease.effect_t is not None:
                t_kill = kill.t if kill.kind == "worker-kill" else kill.extra["worker_t"]
                if lease.effect_t <= t_kill:
                    return kill.kind, "SIGKILLed after writing the effect, before its ack was answered"
            return None, "no ack answer and the worker was not killed"
        call = lease.ack_call
        assert call is not None
        if lease.ack_status == 200:
            kill = next((f for f in self.redis_kills if f.t - self.window_s <= call["t"] <= f.t), None)
            # completing None: the job ended cancelled, so this accepted ack was undone
            if kill is not None and (completing is None or completing.grant_ms / 1000 > kill.t):
                return "redis-kill", "its ack was lost with the Redis restart (AOF everysec window)"
            return None, "two acks of one job were both accepted"
        if not call["_in_time"] or call["_ambiguous"]:
            kind = self.cause_of_late(lease, call["ts"])
            reasons = {
                "worker-stop": "the worker was SIGSTOPped past its lease; its late ack was refused",
                "redis-kill": "Redis was down while the lease ran out; the late ack was refused",
                "replica-kill": "calls failed over while a replica was down and the lease ran out",
                "clock-skew": "calls failed over while a replica was down and the lease ran out",
                "no-fault": "the worker overran its lease on its own; the late ack was refused",
            }
            return kind, reasons[kind]
        if self.redis_kill_between(lease.grant_ms / 1000 - self.window_s, call["ts"]) is not None:
            return "redis-kill", "the lease was lost with the Redis restart"
        return None, f"ack answered {lease.ack_status} while the lease was valid"


def main(argv: list[str]) -> int:
    """The verdict again from a kept work directory (default AOF window, no strict timing)."""
    if len(argv) != 1:
        print("usage: chaos_check.py WORKDIR", file=sys.stderr)
        return 2
    result = Checker(History.load(Path(argv[0])), aof_window_s=AOF_WINDOW_MS / 1000).run()
    for failure in result["failures"]:
        print(f"  FAIL: {failure}")
    print(f"verdict: {'FAIL' if result['failures'] else 'PASS'}")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
