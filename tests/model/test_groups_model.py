"""A stateful model test of flow control (issue 15): hypothesis drives the real service over HTTP
with grouped and ungrouped jobs, the queue's settings (max_in_flight, group_max_in_flight,
max_stalls) and per-group caps, worker sessions (start, quiet, lapse, end), and every way a job
enters waiting or leaves the ledger (ack, fail with retry / delay / dead letter, release,
operator release, lease expiry + sweep, session lapse + sweep, session end, cancel, delete), and
checks against a plain model:

- every lease takes, from each member of the round (a group, or the ungrouped jobs), the first
  jobs of its line (priority, then handed-back jobs first, then first in first out);
- a lease takes as many jobs as it asks for when that many are waiting in groups with room (no
  group with room and waiting jobs is skipped: none starves), never more than a group's cap, and
  within one lease the members take turns (no member gets two more jobs than another that still
  had jobs and room);
- a member with waiting jobs and room is served within a bounded number of leases of one job;
- a lease never takes the ledger past max_in_flight (it takes exactly the room left), and a
  quiet worker's lease takes nothing;
- a job stalls (lease expired, session lapsed) past max_stalls ends failed; a lapsed session's
  jobs go back oldest lease first, as expired leases, whatever their locks say;
- after every step, each group's count of jobs in flight (Redis) is the model's (so no exit path
  leaks capacity), the queue's counts and the group listing are the model's.

The sweep interval is so long the service never sweeps by itself: the machine expires a lease
and runs the sweep script itself, as tests/model/test_state_machine.py does.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
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
from echomq_http.store.keys import QUEUE_REGISTRY, QueueKeys, queue_prefix
from echomq_http.store.scripts import lua_dir, render
from tests.support.service import running_service

GROUPS = ("g1", "g2", "g3")
UNGROUPED = ""  # the model's name for the jobs without a group
WORKERS = ("w1", "w2")
MAX_ATTEMPTS = 2
LONG_MS = 600_000
MAX_JOBS = 14
HTTP_TIMEOUT_S = 60.0

MODEL_SETTINGS = settings(
    max_examples=120,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class Job:
    id: str
    group: str
    priority: int
    state: str = "waiting"
    place: int = 0  # order in its line among equal priorities (lower first)
    attempt: int = 0
    redeliver: bool = False
    worker: str | None = None
    lease_id: str | None = None
    lease_seq: int = 0  # order of leases: a lapse gives back the oldest lease first in line
    cancel_requested: bool = False
    stalls: int = 0


@dataclass
class Model:
    jobs: dict[str, Job] = field(default_factory=dict)
    queue_cap: int | None = None  # group_max_in_flight
    max_in_flight: int | None = None
    max_stalls: int | None = None
    sessions: dict[str, str] = field(default_factory=dict)  # live sessions: worker -> state
    own_caps: dict[str, int] = field(default_factory=dict)
    lease_seqs: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    places: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def cap(self, group: str) -> float:
        if group == UNGROUPED:
            return float("inf")
        own = self.own_caps.get(group)
        if own is not None:
            return own
        return self.queue_cap if self.queue_cap is not None else float("inf")

    def to_waiting(self, job: Job, front: bool) -> None:
        job.state = "waiting"
        job.worker = job.lease_id = None
        job.place = -next(self.places) if front else next(self.places)

    def line(self, group: str) -> list[Job]:
        waiting = [job for job in self.jobs.values() if job.state == "waiting" and job.group == group]
        return sorted(waiting, key=lambda job: (-job.priority, job.place))

    def active(self, group: str) -> int:
        return sum(1 for job in self.jobs.values() if job.state == "active" and job.group == group)

    def room(self, group: str) -> float:
        return self.cap(group) - self.active(group)

    def members(self) -> list[str]:
        return sorted({job.group for job in self.jobs.values() if job.state == "waiting"})

    def in_flight(self) -> int:
        return sum(1 for job in self.jobs.values() if job.state == "active")

    def queue_room(self) -> float:
        if self.max_in_flight is None:
            return float("inf")
        return max(self.max_in_flight - self.in_flight(), 0)

    def leave_ledger(self, job: Job) -> None:
        job.worker = job.lease_id = None

    def stalled(self, job: Job) -> None:
        """Its lease expired or its session lapsed, and the sweep took it: a stall counted; past
        max_stalls, or on its last attempt, it ends failed; else first in line."""
        if self.end_cancelled_or(job):
            return
        job.stalls += 1
        if (self.max_stalls is not None and job.stalls > self.max_stalls) or job.attempt >= MAX_ATTEMPTS:
            self.leave_ledger(job)
            job.state = "failed"
        else:
            self.to_waiting(job, front=True)

    def end_cancelled_or(self, job: Job) -> bool:
        if job.cancel_requested:
            self.leave_ledger(job)
            job.state = "cancelled"
            return True
        return False


@dataclass
class Env:
    http: httpx.Client
    redis: redis.Redis
    settings: Settings
    sweep_script: Script


class GroupsMachine(RuleBasedStateMachine):
    env: ClassVar[Env]

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"gm-{secrets.token_hex(6)}"
        self.keys = QueueKeys.for_queue(self.queue)
        self.model = Model()
        self.ids = itertools.count()
        self.waited: dict[str, int] = {}  # leases of one job a member with room went without

    def teardown(self) -> None:
        client = self.env.redis
        keys = list(client.scan_iter(match=queue_prefix(self.queue) + "*", count=1000))
        if keys:
            client.delete(*keys)
        client.srem(QUEUE_REGISTRY, self.queue)

    def post(self, suffix: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.env.http.post(f"/v1/queues/{self.queue}{suffix}", json={} if body is None else body)

    def ok(self, response: httpx.Response) -> Any:
        assert response.status_code in (200, 201), response.text
        return response.json()

    def jobs_in(self, *states: str) -> list[Job]:
        return [job for job in self.model.jobs.values() if job.state in states]

    # -- setup and producing

    @initialize(
        queue_cap=st.sampled_from([None, 1, 2]),
        max_in_flight=st.sampled_from([None, None, 2, 4]),
        max_stalls=st.sampled_from([None, 0, 1]),
    )
    def start(self, queue_cap: int | None, max_in_flight: int | None, max_stalls: int | None) -> None:
        self.put_settings(queue_cap, max_in_flight, max_stalls)

    def put_settings(self, queue_cap: int | None, max_in_flight: int | None, max_stalls: int | None) -> None:
        body = {"group_max_in_flight": queue_cap, "max_in_flight": max_in_flight, "max_stalls": max_stalls}
        stored = self.ok(self.env.http.put(f"/v1/queues/{self.queue}/settings", json=body))
        assert {key: stored[key] for key in body} == body
        self.model.queue_cap, self.model.max_in_flight, self.model.max_stalls = (
            queue_cap,
            max_in_flight,
            max_stalls,
        )

    @rule(
        queue_cap=st.sampled_from([None, 1, 2]),
        max_in_flight=st.sampled_from([None, 1, 3]),
        max_stalls=st.sampled_from([None, 0, 1]),
    )
    def change_settings(
        self, queue_cap: int | None, max_in_flight: int | None, max_stalls: int | None
    ) -> None:
        self.put_settings(queue_cap, max_in_flight, max_stalls)

    @precondition(lambda self: len(self.model.jobs) < MAX_JOBS)
    @rule(
        group=st.sampled_from([*GROUPS, UNGROUPED]),
        priority=st.sampled_from([0, 0, 1]),
        count=st.integers(1, 3),
    )
    def enqueue(self, group: str, priority: int, count: int) -> None:
        jobs = [Job(f"j{next(self.ids)}", group, priority) for _ in range(count)]
        body = [
            {"payload": 1, "id": job.id, "priority": priority, "max_attempts": MAX_ATTEMPTS}
            | ({"group": group} if group else {})
            for job in jobs
        ]
        self.ok(self.post("/enqueue", {"jobs": body}))
        for job in jobs:
            self.model.jobs[job.id] = job
            self.model.to_waiting(job, front=False)

    @rule(group=st.sampled_from(GROUPS), cap=st.sampled_from([None, 1, 2, 3]))
    def set_group_cap(self, group: str, cap: int | None) -> None:
        response = self.env.http.put(f"/v1/queues/{self.queue}/groups/{group}", json={"max_in_flight": cap})
        assert self.ok(response) == {"group": group, "max_in_flight": cap}
        if cap is None:
            self.model.own_caps.pop(group, None)
        else:
            self.model.own_caps[group] = cap

    # -- leasing

    @rule(worker=st.sampled_from(WORKERS), max_jobs=st.sampled_from([1, 1, 2, 4]))
    def lease(self, worker: str, max_jobs: int) -> None:
        model = self.model
        lines = {member: model.line(member) for member in model.members()}
        rooms = {member: model.room(member) for member in lines}
        takeable = {member: int(min(len(line), max(rooms[member], 0))) for member, line in lines.items()}
        in_flight_before = model.in_flight()
        leased = self.ok(self.post("/lease", {"worker": worker, "max_jobs": max_jobs, "lease_ms": LONG_MS}))[
            "jobs"
        ]
        if model.sessions.get(worker) == "quiet":
            assert leased == []  # a quiet worker leases nothing
            return
        taken: dict[str, list[str]] = {}
        for entry in leased:
            job = model.jobs[entry["id"]]
            assert job.state == "waiting", (job, entry)
            taken.setdefault(job.group, []).append(job.id)
        # Each member's jobs are the first of its line, never more than its room.
        for member, ids in taken.items():
            assert ids == [job.id for job in lines[member][: len(ids)]], (member, ids, lines[member])
            assert len(ids) <= takeable[member], (member, ids, rooms[member])
        # As many as asked for while any member with room had jobs (no one is skipped), and never
        # past max_in_flight: exactly the room it leaves.
        assert len(leased) == min(max_jobs, sum(takeable.values()), model.queue_room()), (leased, takeable)
        if leased and model.max_in_flight is not None:
            assert in_flight_before + len(leased) <= model.max_in_flight
        # Turns: a member with jobs and room left never gets two fewer than another.
        counts = {member: len(taken.get(member, [])) for member in lines}
        for a, b in itertools.permutations(lines, 2):
            if counts[a] > counts[b] + 1:
                assert counts[b] == takeable[b], (counts, takeable)
        # Across leases of one job: a member with room is served within a round of the others.
        if max_jobs == 1 and model.queue_room() > 0:
            for member in lines:
                if takeable[member] and member not in taken:
                    self.waited[member] = self.waited.get(member, 0) + 1
                    assert self.waited[member] <= len(GROUPS) + 1, (member, self.waited)
                else:
                    self.waited.pop(member, None)
        for entry in leased:
            job = model.jobs[entry["id"]]
            job.state, job.worker, job.lease_id = "active", worker, entry["lease_id"]
            job.lease_seq = next(model.lease_seqs)
            if job.redeliver:
                job.redeliver = False
            else:
                job.attempt += 1
            assert entry["attempt"] == job.attempt

    # -- every way out of the ledger

    def draw_active(self, data: st.DataObject) -> Job:
        return data.draw(st.sampled_from(self.jobs_in("active")), label="job")

    @precondition(lambda self: self.jobs_in("active"))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        job = self.draw_active(data)
        self.ok(self.post(f"/jobs/{job.id}/ack", {"lease_id": job.lease_id}))
        self.model.leave_ledger(job)
        job.state = "completed"

    @precondition(lambda self: self.jobs_in("active"))
    @rule(data=st.data(), retry=st.booleans(), retry_after_ms=st.sampled_from([0, LONG_MS]))
    def fail(self, data: st.DataObject, retry: bool, retry_after_ms: int) -> None:
        job = self.draw_active(data)
        body = {"lease_id": job.lease_id, "error": "e", "retry": retry, "retry_after_ms": retry_after_ms}
        state = self.ok(self.post(f"/jobs/{job.id}/fail", body))["state"]
        if self.model.end_cancelled_or(job):
            expected = "cancelled"
        elif not retry or job.attempt >= MAX_ATTEMPTS:
            self.model.leave_ledger(job)
            job.state = expected = "failed"
        elif retry_after_ms:
            self.model.leave_ledger(job)
            job.state = expected = "delayed"
        else:
            self.model.to_waiting(job, front=False)
            expected = "waiting"
        assert state == expected

    @precondition(lambda self: self.jobs_in("active"))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        job = self.draw_active(data)
        state = self.ok(self.post(f"/jobs/{job.id}/release", {"lease_id": job.lease_id}))["state"]
        if not self.model.end_cancelled_or(job):
            self.model.to_waiting(job, front=True)
            job.redeliver = True
        assert state == job.state

    @precondition(lambda self: self.jobs_in("active"))
    @rule(worker=st.sampled_from(WORKERS))
    def release_worker(self, worker: str) -> None:
        self.give_back(worker, self.ok(self.post(f"/workers/{worker}/release"))["released"])

    def give_back(self, worker: str, released: list[str]) -> None:
        """An operator release or a session's end: the worker's jobs back unspent."""
        held = [job for job in self.jobs_in("active") if job.worker == worker]
        assert sorted(released) == sorted(job.id for job in held if not job.cancel_requested)
        # Given back oldest lease first in line: `released` is in that order.
        for job_id in reversed(released):
            job = self.model.jobs[job_id]
            self.model.to_waiting(job, front=True)
            job.redeliver = True
        for job in held:
            if job.state == "active":
                assert self.model.end_cancelled_or(job)

    @precondition(lambda self: self.jobs_in("active"))
    @rule(data=st.data())
    def expire_and_sweep(self, data: st.DataObject) -> None:
        job = self.draw_active(data)
        with self.env.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.lock(job.id))
            pipe.zadd(self.keys.deadlines, {job.id: 1}, xx=True)
            pipe.execute()
        self.env.sweep_script(
            keys=self.keys.script_keys, args=(self.keys.prefix, self.env.settings.sweep_batch, 0)
        )
        self.model.stalled(job)
        assert self.env.http.get(f"/v1/queues/{self.queue}/jobs/{job.id}").json()["stalls"] == job.stalls

    # -- sessions

    @rule(worker=st.sampled_from(WORKERS))
    def session_heartbeat(self, worker: str) -> None:
        answer = self.ok(self.post(f"/workers/{worker}/heartbeat", {"ttl_ms": 300_000}))
        state = self.model.sessions.setdefault(worker, "running")
        assert answer["state"] == state

    @rule(worker=st.sampled_from(WORKERS))
    def quiet(self, worker: str) -> None:
        response = self.post(f"/workers/{worker}/quiet")
        if worker not in self.model.sessions:
            assert response.status_code == 409 and response.json()["code"] == "no_session"
            return
        assert self.ok(response) == {"worker": worker, "state": "quiet"}
        self.model.sessions[worker] = "quiet"

    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data())
    def session_lapse_and_sweep(self, data: st.DataObject) -> None:
        """The worker's session runs out (its expiry put in the past, as the clock would), then
        one sweep: every job it holds goes as if its lease had expired, oldest lease first."""
        worker = data.draw(st.sampled_from(sorted(self.model.sessions)), label="worker")
        with self.env.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.session(worker), "expires_at", 1)
            pipe.zadd(self.keys.sessions, {worker: 1}, xx=True)
            pipe.execute()
        self.env.sweep_script(
            keys=self.keys.script_keys, args=(self.keys.prefix, self.env.settings.sweep_batch, 0)
        )
        del self.model.sessions[worker]
        held = sorted(
            (job for job in self.jobs_in("active") if job.worker == worker), key=lambda j: j.lease_seq
        )
        for job in reversed(held):
            self.model.stalled(job)
        assert self.env.redis.exists(self.keys.session(worker)) == 0

    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data())
    def end_session(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(sorted(self.model.sessions)), label="worker")
        response = self.env.http.delete(f"/v1/queues/{self.queue}/workers/{worker}")
        released = self.ok(response)["released"]
        del self.model.sessions[worker]
        self.give_back(worker, released)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(list(self.model.jobs.values())), label="job")
        self.ok(self.post(f"/jobs/{job.id}/cancel"))
        if job.state in ("waiting", "delayed"):
            job.state = "cancelled"
        job.cancel_requested = True

    @precondition(lambda self: self.jobs_in("waiting", "delayed", "completed", "failed", "cancelled"))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        job = data.draw(
            st.sampled_from(self.jobs_in("waiting", "delayed", "completed", "failed", "cancelled"))
        )
        assert self.env.http.delete(f"/v1/queues/{self.queue}/jobs/{job.id}").status_code == 204
        del self.model.jobs[job.id]

    # -- invariants

    @invariant()
    def sessions_match(self) -> None:
        listed = self.ok(self.env.http.get(f"/v1/queues/{self.queue}/workers"))["workers"]
        sessions = {row["worker"]: row["session"]["state"] for row in listed if row["session"]}
        assert sessions == self.model.sessions
        holders = {row["worker"]: sorted(row["jobs"]) for row in listed if row["jobs"]}
        expected: dict[str, list[str]] = {}
        for job in self.jobs_in("active"):
            expected.setdefault(job.worker or "", []).append(job.id)
        assert holders == {worker: sorted(ids) for worker, ids in expected.items()}

    @invariant()
    def groups_count_their_jobs_in_flight(self) -> None:
        for group in GROUPS:
            active = int(self.env.redis.hget(self.keys.group(group), "active") or 0)
            # (It may exceed the cap only after the cap was lowered: leases check the cap.)
            assert active == self.model.active(group), (group, active)

    @invariant()
    def counts_and_listing_match(self) -> None:
        view = self.ok(self.env.http.get(f"/v1/queues/{self.queue}"))
        for state in ("waiting", "delayed", "active", "completed", "failed", "cancelled"):
            assert view["counts"][state] == len(self.jobs_in(state)), (state, view["counts"])
        listed = self.ok(self.env.http.get(f"/v1/queues/{self.queue}/groups"))["groups"]
        got = {
            row["group"]: (row["waiting"], row["active"]) for row in listed if row["waiting"] or row["active"]
        }
        expected = {
            group: (len(self.model.line(group)), self.model.active(group))
            for group in GROUPS
            if self.model.line(group) or self.model.active(group)
        }
        assert got == expected


@pytest.mark.timeout(600)
def test_groups_behave_like_the_model(private_redis_url: str) -> None:
    service_settings = Settings(redis_url=private_redis_url, sweep_interval_ms=600_000)
    with (
        running_service(service_settings) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as http,
        redis.Redis.from_url(private_redis_url, decode_responses=True) as client,
    ):
        sweep_script = client.register_script(render(lua_dir() / "sweep.lua"))
        env = Env(http, client, service_settings, sweep_script)
        machine = type("GroupsMachineOnService", (GroupsMachine,), {"env": env})
        run_state_machine_as_test(machine, settings=MODEL_SETTINGS)
