"""A stateful model test (issue 3): hypothesis drives the REAL service over HTTP and checks every
answer, and the whole queue after every step, against a plain Python model of the contract
(the OpenAPI document, openapi/openapi.json, and the README).

One service runs on a valkey-server of the test's own, with a sweep interval so long that it
never sweeps by itself: the state machine decides when leases expire and when the sweep runs.
- "expire" plays the Redis clock running past a lease: the job's lock disappears and its entry in
  the deadline index says it ran out (in the order the leases were expired). Deleting the lock
  alone would not do: the sweep finds expired leases through that index, never by scanning the
  ledger, so a lock that vanished before its deadline is only reclaimed once the deadline passes.
- "sweep" runs the sweep script once for the queue (lua/sweep.lua, loaded the way the service
  loads it), as a replica's sweeper would.
- "promote" runs a delayed job now (the back of its priority's line); any other job answers 409
  not_delayed and a missing one 404, changing nothing.
- "cancel" cancels any job (or a missing one): a waiting or delayed job ends cancelled at once and
  is never leased again; an active one gets cancel_requested, and its fail, release, operator
  release or expired lease then end it cancelled (an ack still completes it).
The model also records, per job, the event types each transition must write (lua/*.lua emit
them in the same script call), and an invariant reads the queue's event stream (XRANGE, only the
entries added since the last step) and compares each job's events with that story.
Each hypothesis example uses a fresh queue, so examples are independent.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis.commands.core import Script

from echomq_http.config import Settings
from echomq_http.runtime.event_feeds import parse_entry
from echomq_http.store.keys import QUEUE_REGISTRY, QueueKeys, queue_prefix
from echomq_http.store.scripts import lua_dir, render
from tests.support.service import running_service

STATES = ("waiting", "delayed", "active", "completed", "failed", "cancelled")
FINISHED = ("completed", "failed", "cancelled")
WORKERS = ("w1", "w2", "w3")
CLIENT_IDS = ("a", "b", "c", "d", "e", "f")
CANCEL_REASONS = st.sampled_from([None, None, "stop", "no longer needed"])
MAX_JOBS = 8  # per example: enough for interesting orders, few enough to check every job each step
LONG_MS = 600_000  # delays and leases that never run out during an example (a whole run is ~1 min)
LEASE_MS = st.sampled_from([120_000, LONG_MS])
HTTP_TIMEOUT_S = 60.0
LOCK_SLACK_MS = 5


@dataclass(frozen=True)
class Spec:
    """What an enqueue asks for."""

    client_id: str | None  # None: the service chooses the id
    priority: int
    max_attempts: int
    delayed: bool


SPECS = st.builds(
    Spec,
    client_id=st.none() | st.sampled_from(CLIENT_IDS),
    priority=st.integers(0, 3),
    max_attempts=st.integers(1, 3),
    delayed=st.sampled_from([False, False, False, True]),  # mostly leasable
)

MODEL_SETTINGS = settings(
    max_examples=250,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,  # the same examples on every run, so CI is reproducible
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# ---------------------------------------------------------------------------------------------
# The model: what the contract says the queue holds, without Redis or HTTP.


@dataclass
class Job:
    id: str
    priority: int
    max_attempts: int
    payload: Any
    state: str
    attempt: int = 0
    redeliver: bool = False  # given back by a release: the next lease does not spend an attempt
    lease_id: str | None = None  # the current lease while active
    worker: str | None = None
    lease_ms: int = 0
    lease_expires_at: int | None = None
    lease_seq: int = 0  # order of leases in the model: the ledger is oldest first
    expired: bool = False  # its lock ran out; still in the ledger until the sweep finds it
    expired_seq: int = 0  # order of expiry: the sweep returns the first expired first in line
    done_lease: str | None = None  # the lease that completed it: acking again answers 200
    # The last lease a worker ended (ack, fail, release) and how: the same call again answers
    # as it did then (a fail or release; a repeated ack goes by done_lease).
    ended: tuple[str, str, Any] | None = None
    result: Any = None
    cancel_requested: bool = False  # sticks: a cancelled job's always was requested
    cancel_reason: str | None = None  # the first cancel's reason: the cancelled job's error
    stalls: int = 0  # expired leases the sweep reclaimed or dead-lettered


class QueueModel:
    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}  # insertion order, so that drawing a job is reproducible
        self.waiting: dict[int, list[str]] = {}  # priority -> ids, the next one to lease first
        self.paused = False
        self.issued: list[tuple[str, str]] = []  # every (job id, lease id) ever handed out
        self.gone: dict[str, None] = {}  # deleted ids not enqueued again (ordered, for replays)
        # The events each job's transitions wrote, in order, by id (all its lives: an id deleted
        # and enqueued again goes on); the queue's own (paused, resumed) under None.
        self.events: dict[str | None, list[str]] = {}
        self._lease_seq = itertools.count(1)
        self._expired_seq = itertools.count(1)

    # -- reading

    def in_state(self, *states: str) -> list[Job]:
        return [job for job in self.jobs.values() if job.state in states]

    def counts(self) -> dict[str, int]:
        # No flows in this model: no job ever waits for children.
        return {**{state: len(self.in_state(state)) for state in STATES}, "waiting_children": 0}

    def live_lease(self, job_id: str) -> str | None:
        job = self.jobs.get(job_id)
        if job is None or job.state != "active" or job.expired:
            return None
        return job.lease_id

    def ledger(self) -> list[Job]:
        """In flight, expired or not, oldest lease first."""
        return sorted(self.in_state("active"), key=lambda job: job.lease_seq)

    def holdings(self) -> dict[str, set[str]]:
        held: dict[str, set[str]] = {}
        for job in self.in_state("active"):
            held.setdefault(job.worker or "", set()).add(job.id)
        return held

    def waiting_order(self) -> list[str]:
        """Higher priority first; within one, the list's order."""
        return [
            job_id for priority in sorted(self.waiting, reverse=True) for job_id in self.waiting[priority]
        ]

    def emit(self, job_id: str | None, kind: str) -> None:
        self.events.setdefault(job_id, []).append(kind)

    # -- moving jobs in and out of waiting

    def _to_waiting(self, job: Job, *, front: bool) -> None:
        """Released and reclaimed jobs are leased next (front); new, retried and redriven ones
        join the back of their priority."""
        job.state = "waiting"
        line = self.waiting.setdefault(job.priority, [])
        line.insert(0, job.id) if front else line.append(job.id)

    def _leave_waiting(self, job: Job) -> None:
        if job.state == "waiting":
            self.waiting[job.priority].remove(job.id)

    def _leave_ledger(self, job: Job) -> None:
        job.lease_id = job.worker = job.lease_expires_at = None
        job.expired = False

    # -- transitions, one per operation

    def enqueue(self, job_id: str, priority: int, max_attempts: int, delayed: bool, payload: Any) -> Job:
        job = Job(job_id, priority, max_attempts, payload, state="delayed")
        self.jobs[job_id] = job
        self.gone.pop(job_id, None)
        if not delayed:
            self._to_waiting(job, front=False)
        self.emit(job_id, "enqueued")
        return job

    def lease(self, worker: str, lease_ms: int, max_jobs: int) -> list[Job]:
        """The jobs a lease must hand out, in order; a paused queue leases nothing."""
        if self.paused:
            return []
        leased = []
        for job_id in self.waiting_order()[:max_jobs]:
            job = self.jobs[job_id]
            self._leave_waiting(job)
            job.state, job.worker, job.lease_ms = "active", worker, lease_ms
            job.lease_seq = next(self._lease_seq)
            if job.redeliver:  # a delivery given back by a release is not counted
                job.redeliver = False
            else:
                job.attempt += 1
            leased.append(job)
            self.emit(job_id, "leased")
        return leased

    def ack(self, job: Job, result: Any) -> None:
        job.done_lease, job.result = job.lease_id, result
        job.ended = (job.lease_id or "", "ack", None)
        self._leave_ledger(job)
        job.state = "completed"
        self.emit(job.id, "completed")

    def _cancelled(self, job: Job) -> None:
        """Out of waiting, delayed or the ledger: cancelled, kept, never leased again."""
        self._leave_waiting(job)
        self._leave_ledger(job)
        job.state, job.cancel_requested = "cancelled", True
        self.emit(job.id, "cancelled")

    def cancel(self, job: Job, reason: str | None) -> None:
        """Waiting or delayed: cancelled now. Active: cancellation requested (once). Finished:
        nothing changes."""
        if job.state in ("waiting", "delayed"):
            job.cancel_reason = reason
            self._cancelled(job)
        elif job.state == "active" and not job.cancel_requested:
            job.cancel_requested, job.cancel_reason = True, reason
            self.emit(job.id, "cancel_requested")

    def promote(self, job: Job) -> bool:
        """A delayed job joins the back of its priority now; any other is left as it is."""
        if job.state != "delayed":
            return False
        self._to_waiting(job, front=False)
        self.emit(job.id, "promoted")
        return True

    def fail(self, job: Job, retry: bool, retry_after_ms: int | None) -> str:
        if job.cancel_requested:  # whatever retry says
            self._cancelled(job)
            return job.state
        self._leave_ledger(job)
        if not retry or job.attempt >= job.max_attempts:
            job.state = "failed"
            self.emit(job.id, "failed")
            return job.state
        if retry_after_ms:  # the job's own backoff is fixed 0 ms
            job.state = "delayed"
        else:
            self._to_waiting(job, front=False)
        self.emit(job.id, "retrying")
        return job.state

    def release(self, job: Job) -> str:
        if job.cancel_requested:
            self._cancelled(job)
            return job.state
        self._leave_ledger(job)
        job.redeliver = True
        self._to_waiting(job, front=True)
        self.emit(job.id, "released")
        return job.state

    def release_worker(self, worker: str) -> list[Job]:
        """Everything the worker holds, live or expired; the oldest lease ends up first in line.
        Jobs whose cancellation was requested end cancelled and are not among the released."""
        held = [job for job in self.ledger() if job.worker == worker]
        for job in reversed(held):
            self.release(job)
        return [job for job in held if job.state != "cancelled"]

    def expire(self, job: Job) -> int:
        job.expired = True
        job.expired_seq = next(self._expired_seq)
        return job.expired_seq

    def sweep(self) -> tuple[int, int]:
        """Expired leases go back to the front (their attempt spent), or to failed when that was
        the last attempt; the first to expire ends up first in line. -> (reclaimed, dead)"""
        expired = sorted((job for job in self.in_state("active") if job.expired), key=lambda j: j.expired_seq)
        reclaimed = dead = 0
        for job in reversed(expired):
            if job.cancel_requested:  # cancelled: no stall counted, not a reclaim
                self._cancelled(job)
                continue
            self._leave_ledger(job)
            job.stalls += 1
            if job.attempt >= job.max_attempts:
                job.state = "failed"
                dead += 1
                self.emit(job.id, "failed")
            else:
                self._to_waiting(job, front=True)
                reclaimed += 1
                self.emit(job.id, "reclaimed")
        return reclaimed, dead

    def delete(self, job: Job) -> None:
        self._leave_waiting(job)
        del self.jobs[job.id]
        self.gone[job.id] = None
        self.emit(job.id, "deleted")

    def redrive(self, ids: list[str]) -> None:
        """Back of the line, attempts reset, in the order the service answered."""
        for job_id in ids:
            job = self.jobs[job_id]
            job.attempt = 0
            self._to_waiting(job, front=False)
            self.emit(job_id, "enqueued")


# ---------------------------------------------------------------------------------------------
# The machine: every rule makes the same move on the service and on the model and compares.


@dataclass
class Env:
    http: httpx.Client
    redis: redis.Redis  # decode_responses=True
    raw: redis.Redis  # bytes, for the event stream (read as runtime/event_feeds.py reads it)
    settings: Settings
    sweep_script: Script  # lua/sweep.lua, registered on the client above


def lease_body(action: str, lease_id: str) -> dict[str, Any]:
    """A well-formed body for a job-level call (bodies with unknown fields are rejected)."""
    return {"lease_id": lease_id, "error": "late"} if action == "fail" else {"lease_id": lease_id}


def job_view_unchanged(before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    assert after == before, f"a refused call changed the job:\n before {before}\n after  {after}"


class QueueMachine(RuleBasedStateMachine):
    env: ClassVar[Env]  # set by the test on a subclass

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"sm-{secrets.token_hex(6)}"
        self.keys = QueueKeys.for_queue(self.queue)
        self.model = QueueModel()
        self.payloads = itertools.count()
        self.max_fence = 0
        self.attempt_high_water: dict[str, int] = {}  # attempts never go down (but redrive resets)
        self.events_read = 0  # the number of the last event read from the queue's stream
        self.seen_events: dict[str | None, list[str]] = {}  # by job id, as read; None: the queue's

    def teardown(self) -> None:
        client = self.env.redis
        keys = list(client.scan_iter(match=queue_prefix(self.queue) + "*", count=1000))
        if keys:
            client.delete(*keys)
        client.srem(QUEUE_REGISTRY, self.queue)

    # -- helpers

    def path(self, suffix: str = "") -> str:
        return f"/v1/queues/{self.queue}{suffix}"

    def post(self, suffix: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.env.http.post(self.path(suffix), json={} if body is None else body)

    def get(self, suffix: str = "") -> httpx.Response:
        return self.env.http.get(self.path(suffix))

    def view(self, job_id: str) -> dict[str, Any] | None:
        response = self.get(f"/jobs/{job_id}")
        if response.status_code == 404:
            assert_problem(response, 404, "job_not_found")
            return None
        assert response.status_code == 200, response.text
        return response.json()

    def redis_now_ms(self) -> int:
        seconds, micros = self.env.redis.time()
        return seconds * 1000 + micros // 1000

    def draw_job(self, data: st.DataObject, *states: str) -> Job:
        jobs = self.model.in_state(*states) if states else list(self.model.jobs.values())
        return data.draw(st.sampled_from(jobs), label="job")

    def has(self, *states: str) -> bool:
        return bool(self.model.in_state(*states))

    def refused(self, job_id: str, action: str, body: dict[str, Any]) -> None:
        """A call with a lease that is not the job's live lease: 409 lease_lost (404 when the job
        is gone), and nothing about the job changes."""
        before = self.view(job_id)
        response = self.post(f"/jobs/{job_id}/{action}", body)
        if job_id in self.model.jobs:
            assert_problem(response, 409, "lease_lost")
        else:
            assert_problem(response, 404, "job_not_found")
        job_view_unchanged(before, self.view(job_id))

    # -- producing

    @initialize(
        specs=st.lists(SPECS, min_size=1, max_size=5),
        leases=st.lists(st.tuples(st.sampled_from(WORKERS), st.integers(1, 3)), max_size=2),
    )
    def seed(self, specs: list[Spec], leases: list[tuple[str, int]]) -> None:
        """Start with a few jobs, some already in flight, so that most steps have work to do
        (hypothesis enables a random subset of the rules in each example)."""
        for spec in specs:
            self.enqueue(spec)
        for worker, max_jobs in leases:
            self.lease(worker, max_jobs, LONG_MS)

    @precondition(lambda self: len(self.model.jobs) < MAX_JOBS)
    @rule(spec=SPECS)
    def enqueue(self, spec: Spec) -> None:
        payload = {"n": next(self.payloads)}
        body: dict[str, Any] = {
            "payload": payload,
            "priority": spec.priority,
            "max_attempts": spec.max_attempts,
            "backoff": {"type": "fixed", "delay_ms": 0},  # a retry goes straight back to waiting
        }
        if spec.client_id is not None:
            body["id"] = spec.client_id
        if spec.delayed:
            body["delay_ms"] = LONG_MS
        stored = self.model.jobs.get(spec.client_id) if spec.client_id else None
        response = self.post("/jobs", body)
        if stored is not None:  # the id is taken: idempotent, nothing changes
            assert response.status_code == 200, response.text
            expected = {"id": stored.id, "queue": self.queue, "state": stored.state, "created": False}
            assert response.json() == expected
            return
        assert response.status_code == 201, response.text
        answer = response.json()
        state = "delayed" if spec.delayed else "waiting"
        assert answer["created"] is True and answer["state"] == state and answer["queue"] == self.queue
        assert spec.client_id is None or answer["id"] == spec.client_id
        self.model.enqueue(answer["id"], spec.priority, spec.max_attempts, spec.delayed, payload)
        self.attempt_high_water.pop(answer["id"], None)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data(), priority=st.integers(0, 3), max_attempts=st.integers(1, 3), delayed=st.booleans())
    def enqueue_existing_id(
        self, data: st.DataObject, priority: int, max_attempts: int, delayed: bool
    ) -> None:
        """Enqueue is idempotent by id: 200, created false, the stored job's state, job unchanged."""
        job = self.draw_job(data)
        before = self.view(job.id)
        body = {"id": job.id, "payload": "other", "priority": priority, "max_attempts": max_attempts}
        response = self.post("/jobs", {**body, **({"delay_ms": LONG_MS} if delayed else {})})
        assert response.status_code == 200, response.text
        assert response.json() == {"id": job.id, "queue": self.queue, "state": job.state, "created": False}
        job_view_unchanged(before, self.view(job.id))

    # -- working

    @rule(worker=st.sampled_from(WORKERS), max_jobs=st.integers(1, 3), lease_ms=LEASE_MS)
    def lease(self, worker: str, max_jobs: int, lease_ms: int) -> None:
        """Jobs come out in the model's order: priority, then front (given back) before back."""
        before = self.redis_now_ms()
        response = self.post("/lease", {"worker": worker, "lease_ms": lease_ms, "max_jobs": max_jobs})
        after = self.redis_now_ms()
        assert response.status_code == 200, response.text
        got = response.json()["jobs"]
        cancelled = {job.id for job in self.model.in_state("cancelled")}
        assert not cancelled & {item["id"] for item in got}, "a cancelled job was leased"
        expected = self.model.lease(worker, lease_ms, max_jobs)
        assert [item["id"] for item in got] == [job.id for job in expected], (
            f"lease order: service {[item['id'] for item in got]}, model {[job.id for job in expected]}"
        )
        issued = {lease_id for _, lease_id in self.model.issued}
        for job, item in zip(expected, got, strict=True):
            assert item["queue"] == self.queue and item["name"] is None and item["payload"] == job.payload
            assert (item["attempt"], item["max_attempts"]) == (job.attempt, job.max_attempts), item
            assert before + lease_ms <= item["lease_expires_at"] <= after + lease_ms, item
            assert item["fence"] > self.max_fence, "a fence went back"  # one counter per queue (README)
            assert item["lease_id"] not in issued, "a lease id was handed out twice"
            assert len(item["lease_id"]) >= 32  # >= 128 random bits, hex
            self.max_fence = item["fence"]
            job.lease_id, job.lease_expires_at = item["lease_id"], item["lease_expires_at"]
            self.model.issued.append((job.id, item["lease_id"]))

    @precondition(lambda self: self.has("active"))
    @rule(data=st.data(), lease_ms=st.none() | LEASE_MS)
    def heartbeat(self, data: st.DataObject, lease_ms: int | None) -> None:
        job = self.draw_job(data, "active")
        body: dict[str, Any] = {"lease_id": job.lease_id}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if job.expired:  # its current lease id is no longer a live lease
            return self.refused(job.id, "heartbeat", body)
        before = self.redis_now_ms()
        response = self.post(f"/jobs/{job.id}/heartbeat", body)
        after = self.redis_now_ms()
        assert response.status_code == 200, response.text
        answer = response.json()
        length = lease_ms or job.lease_ms  # default: the lease's own length
        assert answer["id"] == job.id and answer["lease_id"] == job.lease_id
        assert answer["cancel_requested"] is job.cancel_requested, (job, answer)
        assert before + length <= answer["lease_expires_at"] <= after + length, answer
        job.lease_expires_at = answer["lease_expires_at"]
        return None

    @precondition(lambda self: self.has("active"))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        job = self.draw_job(data, "active")
        result = {"by": job.worker, "attempt": job.attempt}
        body = {"lease_id": job.lease_id, "result": result}
        if job.expired:
            return self.refused(job.id, "ack", body)
        response = self.post(f"/jobs/{job.id}/ack", body)
        assert response.status_code == 200, response.text
        assert response.json() == {"id": job.id, "state": "completed"}
        self.model.ack(job, result)
        return None

    @precondition(lambda self: any(job.done_lease for job in self.model.in_state("completed")))
    @rule(data=st.data())
    def ack_again(self, data: st.DataObject) -> None:
        """A worker whose ack response was lost retries it: 200 again, nothing changes."""
        job = data.draw(st.sampled_from([j for j in self.model.in_state("completed") if j.done_lease]))
        before = self.view(job.id)
        response = self.post(f"/jobs/{job.id}/ack", {"lease_id": job.done_lease, "result": "again"})
        assert response.status_code == 200, response.text
        assert response.json() == {"id": job.id, "state": "completed"}
        job_view_unchanged(before, self.view(job.id))

    @precondition(lambda self: self.has("active"))
    @rule(data=st.data(), retry=st.booleans(), retry_after_ms=st.sampled_from([None, None, 0, LONG_MS]))
    def fail(self, data: st.DataObject, retry: bool, retry_after_ms: int | None) -> None:
        job = self.draw_job(data, "active")
        body: dict[str, Any] = {"lease_id": job.lease_id, "error": "boom", "retry": retry}
        if retry_after_ms is not None:
            body["retry_after_ms"] = retry_after_ms
        if job.expired:
            return self.refused(job.id, "fail", body)
        response = self.post(f"/jobs/{job.id}/fail", body)
        assert response.status_code == 200, response.text
        attempt, lease_id = job.attempt, job.lease_id or ""
        state = self.model.fail(job, retry, retry_after_ms)
        assert response.json() == {"id": job.id, "state": state, "attempt": attempt}
        job.ended = (lease_id, "fail", response.json())
        return None

    @precondition(lambda self: self.has("active"))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Graceful shutdown: the job is leased next and this delivery does not count."""
        job = self.draw_job(data, "active")
        body = {"lease_id": job.lease_id}
        if job.expired:
            return self.refused(job.id, "release", body)
        response = self.post(f"/jobs/{job.id}/release", body)
        assert response.status_code == 200, response.text
        lease_id = job.lease_id or ""
        state = self.model.release(job)  # cancelled instead when its cancellation was requested
        assert response.json() == {"id": job.id, "state": state}
        job.ended = (lease_id, "release", response.json())
        return None

    @precondition(lambda self: self.model.issued)
    @rule(
        data=st.data(),
        action=st.sampled_from(["heartbeat", "ack", "fail", "release"]),
        source=st.sampled_from(["stale", "stale", "random", "missing job"]),
        random_lease=st.binary(min_size=16, max_size=16).map(bytes.hex),
    )
    def call_with_lost_lease(self, data: st.DataObject, action: str, source: str, random_lease: str) -> None:
        """A lease from an earlier delivery of the job (or of a deleted job of the same id), a
        made-up one, or a job that does not exist: refused, and nothing changes."""
        if source == "missing job" or not self.model.jobs:
            return self.refused("nope", action, lease_body(action, random_lease))
        if source == "random":
            return self.refused(self.draw_job(data).id, action, lease_body(action, random_lease))
        stale = [
            (job_id, lease) for job_id, lease in self.model.issued if self.model.live_lease(job_id) != lease
        ]
        # acking again with the lease that completed the job is not stale: see ack_again
        if action == "ack":
            stale = [
                (i, lease)
                for i, lease in stale
                if i not in self.model.jobs or self.model.jobs[i].done_lease != lease
            ]
        if not stale:
            return None
        job_id, lease_id = data.draw(st.sampled_from(stale), label="stale lease")
        job = self.model.jobs.get(job_id)
        if (
            action != "ack"
            and job is not None
            and job.ended is not None
            and job.ended[:2] == (lease_id, action)
        ):
            # The lease's last call again (a retry whose answer was lost): answered as then.
            before = self.view(job_id)
            response = self.post(f"/jobs/{job_id}/{action}", lease_body(action, lease_id))
            assert response.status_code == 200 and response.json() == job.ended[2], response.text
            job_view_unchanged(before, self.view(job_id))
            return None
        return self.refused(job_id, action, lease_body(action, lease_id))

    # -- the Redis clock and the sweep

    @precondition(lambda self: any(not job.expired for job in self.model.in_state("active")))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """The lease runs out: the lock is gone and the deadline index says it expired (in the
        order of these calls); the job stays in the ledger until a sweep."""
        job = data.draw(st.sampled_from([j for j in self.model.in_state("active") if not j.expired]))
        deadline = self.model.expire(job)
        with self.env.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.lock(job.id))
            pipe.zadd(self.keys.deadlines, {job.id: deadline}, xx=True)
            assert pipe.execute() == [1, 0]  # the lock existed; the deadline entry existed

    @precondition(lambda self: self.has("active"))  # with live leases too: those must stay
    @rule()
    def sweep(self) -> None:
        """One run of the sweep script, the call a replica's sweeper makes for this queue."""
        args = (self.keys.prefix, self.env.settings.sweep_batch, 0)
        reply = self.env.sweep_script(keys=self.keys.script_keys, args=args)
        reclaimed, dead = self.model.sweep()
        # {reclaimed, dead_lettered, promoted, deleted, more, stale, offset, schedules_due, outbox,
        # flows_due}: nothing is due, nothing is old, no index entry is without its job, the ledger
        # is read whole, the queue has no schedule and no flow
        assert reply == [reclaimed, dead, 0, 0, 0, 0, 0, 0, 0, 0]

    # -- operating

    @precondition(lambda self: self.has("active"))
    @rule(worker=st.sampled_from(WORKERS))
    def release_worker(self, worker: str) -> None:
        """An operator declares the worker dead: all it holds, live or expired, goes back now."""
        response = self.post(f"/workers/{worker}/release")
        assert response.status_code == 200, response.text
        expected = {job.id for job in self.model.release_worker(worker)}
        released = response.json()["released"]
        assert sorted(released) == sorted(expected) and len(released) == len(set(released))

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data(), missing=st.sampled_from([False, False, True]))
    def delete(self, data: st.DataObject, missing: bool) -> None:
        if missing:
            job_id = data.draw(st.sampled_from(list(self.model.gone) or ["nope"]))
            return assert_problem(self.env.http.delete(self.path(f"/jobs/{job_id}")), 404, "job_not_found")
        job = self.draw_job(data)
        before = self.view(job.id)
        response = self.env.http.delete(self.path(f"/jobs/{job.id}"))
        if job.state == "active":  # expired or not: still in the ledger
            assert_problem(response, 409, "job_active")
            return job_view_unchanged(before, self.view(job.id))
        assert response.status_code == 204, response.text
        assert response.content == b""
        self.model.delete(job)
        self.attempt_high_water.pop(job.id, None)
        return None

    @rule(paused=st.sampled_from([True, False, False]))  # mostly resumed, so that leases find work
    def pause_or_resume(self, paused: bool) -> None:
        response = self.post("/pause" if paused else "/resume")
        assert response.status_code == 200, response.text
        assert response.json() == {"name": self.queue, "paused": paused}
        if paused != self.model.paused:  # an event only when the flag changes
            self.model.emit(None, "paused" if paused else "resumed")
        self.model.paused = paused

    @rule(data=st.data(), reason=CANCEL_REASONS, missing=st.sampled_from([False, False, False, True]))
    def cancel(self, data: st.DataObject, reason: str | None, missing: bool) -> None:
        """Any job in any state (expired leases included), or one that does not exist: 404."""
        body = {} if reason is None else {"reason": reason}
        if missing or not self.model.jobs:
            job_id = data.draw(st.sampled_from([*self.model.gone, "nope"]), label="missing id")
            return assert_problem(self.post(f"/jobs/{job_id}/cancel", body), 404, "job_not_found")
        job = self.draw_job(data)
        response = self.post(f"/jobs/{job.id}/cancel", body)
        assert response.status_code == 200, response.text
        self.model.cancel(job, reason)
        expected = {"id": job.id, "state": job.state, "cancel_requested": job.cancel_requested}
        assert response.json() == expected, (job, response.json())
        return None

    @rule(data=st.data(), missing=st.sampled_from([False, False, False, True]))
    def promote(self, data: st.DataObject, missing: bool) -> None:
        """Any job in any state (mostly delayed ones), or one that does not exist: 404."""
        if missing or not self.model.jobs:
            job_id = data.draw(st.sampled_from([*self.model.gone, "nope"]), label="missing id")
            return assert_problem(self.post(f"/jobs/{job_id}/promote"), 404, "job_not_found")
        delayed = self.model.in_state("delayed")
        job = (
            data.draw(st.sampled_from(delayed))
            if delayed and data.draw(st.booleans())
            else self.draw_job(data)
        )
        before = self.view(job.id)
        response = self.post(f"/jobs/{job.id}/promote")
        if not self.model.promote(job):
            assert_problem(response, 409, "not_delayed")
            return job_view_unchanged(before, self.view(job.id))
        assert response.status_code == 200, response.text
        assert response.json() == {"id": job.id, "state": "waiting"}
        return None

    @precondition(lambda self: self.has("failed"))
    @rule(data=st.data(), listed=st.booleans())
    def redrive(self, data: st.DataObject, listed: bool) -> None:
        """All dead letters, or the listed ids; listed ids that are not dead letters (or repeated,
        or missing) are left alone."""
        failed = [job.id for job in self.model.in_state("failed")]
        if listed:
            candidates = [*self.model.jobs, "nope"]
            ids = data.draw(st.lists(st.sampled_from(candidates), max_size=4), label="ids")
            response = self.post("/failed/retry", {"ids": ids})
            expected = {job_id for job_id in ids if job_id in failed}
        else:
            response = self.post("/failed/retry", {})
            expected = set(failed)
        assert response.status_code == 200, response.text
        retried = response.json()["retried"]
        assert sorted(retried) == sorted(expected) and len(retried) == len(set(retried))
        self.model.redrive(retried)
        for job_id in retried:  # attempts are reset: the high-water mark starts again
            self.attempt_high_water.pop(job_id, None)

    # -- invariants, after every step

    @invariant()
    def counts_match(self) -> None:
        """Each job is in exactly one state: the counts are the model's and add up to its jobs."""
        response = self.get()
        assert response.status_code == 200, response.text
        view = response.json()
        assert view["name"] == self.queue and view["paused"] is self.model.paused
        assert view["counts"] == self.model.counts()
        assert sum(view["counts"].values()) == len(self.model.jobs)

    @invariant()
    def every_job_matches(self) -> None:
        for job in self.model.jobs.values():
            view = self.view(job.id)
            assert view is not None, f"{job.id} is missing"
            active = job.state == "active"
            assert view["state"] == job.state, (job, view)
            assert (view["attempt"], view["max_attempts"], view["priority"]) == (
                job.attempt,
                job.max_attempts,
                job.priority,
            ), (job, view)
            assert view["payload"] == job.payload and view["result"] == (
                job.result if job.state == "completed" else None
            )
            assert view["worker"] == (job.worker if active else None), (job, view)
            assert view["lease_expires_at"] == (job.lease_expires_at if active else None), (job, view)
            assert view["attempt"] >= self.attempt_high_water.get(job.id, 0), "attempts went down"
            self.attempt_high_water[job.id] = view["attempt"]
            flags = (view["cancel_requested"], view["stalls"])
            assert flags == (job.cancel_requested, job.stalls), (job, view)
            assert (view["finished_at"] is not None) is (job.state in FINISHED), (job, view)
            # Only a delayed job has a due time; a leased one was delayed by a retry's backoff.
            assert (view["run_at"] is not None) is (job.state == "delayed"), (job, view)
            reason = ("retry" if job.attempt else "delay") if job.state == "delayed" else None
            assert view["delay_reason"] == reason, (job, view)
            if job.state == "cancelled":
                assert view["error"] == (job.cancel_reason or "cancelled"), (job, view)
        for job_id in self.model.gone:
            assert self.view(job_id) is None, f"deleted job {job_id} is still there"

    @invariant()
    def active_means_one_live_lock(self) -> None:
        """Each in-flight job has exactly one lock naming its lease and worker, with a TTL;
        an expired one has none; a job that is not in flight has none."""
        jobs = list(self.model.jobs.values())
        with self.env.redis.pipeline(transaction=True) as pipe:  # one instant: TIME and every lock
            pipe.time()
            for job in jobs:
                pipe.get(self.keys.lock(job.id))
                pipe.pttl(self.keys.lock(job.id))
            (seconds, micros), *replies = pipe.execute()
        now = seconds * 1000 + micros // 1000
        for job, value, ttl in zip(jobs, replies[::2], replies[1::2], strict=True):
            if job.state == "active" and not job.expired:
                assert value == f"{job.lease_id}:{job.worker}", (job, value)
                # the lock runs out when the lease says it does (rounding to the ms aside)
                assert job.lease_expires_at is not None
                assert abs(now + ttl - job.lease_expires_at) <= LOCK_SLACK_MS, (job, now, ttl)
            else:
                assert value is None, (job, value)

    @invariant()
    def ledger_matches(self) -> None:
        """The ledger holds exactly the in-flight jobs (expired but unswept included), oldest
        lease first, attributed to the right worker; /workers and ?worker= agree."""
        response = self.get("/active")
        assert response.status_code == 200, response.text
        expected = [(job.id, job.worker, job.attempt, job.lease_expires_at) for job in self.model.ledger()]
        got = [(e["id"], e["worker"], e["attempt"], e["lease_expires_at"]) for e in response.json()["jobs"]]
        assert got == expected
        response = self.get("/workers")
        assert response.status_code == 200, response.text
        workers = {entry["worker"]: set(entry["jobs"]) for entry in response.json()["workers"]}
        assert workers == self.model.holdings()
        for worker in sorted(self.model.holdings()):
            response = self.env.http.get(self.path("/active"), params={"worker": worker})
            assert response.status_code == 200, response.text
            mine = [e["id"] for e in response.json()["jobs"]]
            assert mine == [job.id for job in self.model.ledger() if job.worker == worker]

    @invariant()
    def events_tell_the_story(self) -> None:
        """The queue's events, read straight from its stream (only what the last step added), are
        numbered 1, 2, 3... and, job by job, exactly the transitions the model went through."""
        key = self.keys.events
        entries = self.env.raw.xrange(key, f"(0-{self.events_read}", "+")
        for entry_id, fields in entries:
            for event in parse_entry(self.queue, entry_id, fields):
                assert event.number == self.events_read + 1, f"event {event.number} after {self.events_read}"
                self.events_read = event.number
                self.seen_events.setdefault(event.job_id, []).append(event.kind)
                assert b"lease_id" not in event.frame and b"payload" not in event.frame, event.frame
        assert self.seen_events == self.model.events, (
            f"events (read) {self.seen_events}\n model        {self.model.events}"
        )

    @invariant()
    def dead_letters_match(self) -> None:
        response = self.env.http.get(self.path("/failed"), params={"limit": 1000})
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["total"] == len(self.model.in_state("failed"))
        assert sorted(job["id"] for job in page["jobs"]) == sorted(
            job.id for job in self.model.in_state("failed")
        )
        assert all(job["state"] == "failed" for job in page["jobs"])


def assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["code"] == code, body


@pytest.mark.timeout(600)
def test_service_behaves_like_the_model(private_redis_url: str) -> None:
    service_settings = Settings(redis_url=private_redis_url, sweep_interval_ms=600_000)
    with (
        running_service(service_settings) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as http,
        redis.Redis.from_url(private_redis_url, decode_responses=True) as client,
        redis.Redis.from_url(private_redis_url) as raw,
    ):
        sweep_script = client.register_script(render(lua_dir() / "sweep.lua"))
        env = Env(http, client, raw, service_settings, sweep_script)
        machine = type("QueueMachineOnService", (QueueMachine,), {"env": env})
        run_state_machine_as_test(machine, settings=MODEL_SETTINGS)
