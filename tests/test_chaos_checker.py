"""The chaos harness's checker (bench/chaos_check.py) catches what it is there to catch.

Each case is a small recorded history, written to a work directory exactly as a run leaves it
(the clients' JSON-lines logs from bench/chaos_worker.py, history.json from bench/chaos.py), and
read back by History.load as the harness itself does, with the queue's events as the harness
reads them from the Redis stream at the end (stream.jsonl). A clean history passes, with or
without cancellations; a lost job, a job acked twice with no worker dead, a job leased again
while its lease was live, a job leased after its cancel was answered, events that tell a story
that cannot have happened, too few faults and a failed final read each fail the verdict, named
by kind and job. With worker sessions: a dead worker's job that its session gives back in
seconds passes; one given back late or never, one leased again before the session can have
lapsed, a stopped worker's accepted zombie ack, and a session lease refused while its session
was live each fail. No Redis is needed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos_check import LEASE_MS, Checker, Fault, History, main, record_history

T0_MS = 1_700_000_000_000  # the Redis clock at the run's start
A, B, C, D, E, F, G = (f"s7-00000{n}" for n in range(7))  # job ids as the producer makes them


def at(ms: float) -> float:
    """A client's time.time() this many ms into the run (same clock as Redis: one machine)."""
    return (T0_MS + ms) / 1000


# -- records, field for field as bench/chaos_worker.py writes them ------------------------------


def send(job: str, ms: int) -> dict[str, Any]:
    return {"ev": "send", "job": job, "t": at(ms)}


def enqueued(job: str, ms: int) -> dict[str, Any]:
    return {"ev": "ack", "job": job, "st": 201, "state": "waiting", "ts": at(ms - 4), "t": at(ms), "r": 0}


def start(name: str, ms: int) -> dict[str, Any]:
    return {"ev": "start", "name": name, "pid": 4000 + ms, "t": at(ms)}


def lease(job: str, lease_id: str, fence: int, attempt: int, ms: int) -> dict[str, Any]:
    """Granted (Redis time) at ms, so lease_expires_at is ms + the lease."""
    exp = T0_MS + ms + LEASE_MS
    return {
        "ev": "lease", "job": job, "lease": lease_id, "fence": fence, "attempt": attempt,
        "exp": exp, "ts": at(ms - 300), "t": at(ms), "r": 1,
    }  # fmt: skip


def heartbeat(job: str, lease_id: str, ms: int, renewed_to_ms: int | None) -> dict[str, Any]:
    record = {"ev": "hb", "job": job, "lease": lease_id, "st": 200, "ts": at(ms - 2), "t": at(ms), "r": 0}
    if renewed_to_ms is None:
        record.update(st=409, code="lease_lost")
    else:
        record["exp"] = T0_MS + renewed_to_ms
    return record


def abandon(job: str, lease_id: str, ms: int) -> dict[str, Any]:
    return {"ev": "abandon", "job": job, "lease": lease_id, "why": 409, "t": at(ms)}


def hold_after_effect(job: str, lease_id: str, ms: int) -> dict[str, Any]:
    return {"ev": "hold", "at": "effect", "job": job, "lease": lease_id, "t": at(ms)}


def ack(job: str, lease_id: str, ms: int) -> dict[str, Any]:
    return {
        "ev": "ack", "job": job, "lease": lease_id, "st": 200, "code": None,
        "ts": at(ms - 2), "t": at(ms), "r": 1,
    }  # fmt: skip


def effect(job: str, lease_id: str, fence: int, ms: int) -> dict[str, Any]:
    return {"job": job, "lease": lease_id, "fence": fence, "t": at(ms)}


def cancel_sent(job: str, ms: int) -> dict[str, Any]:
    return {"ev": "cancel_send", "job": job, "t": at(ms)}


def cancelled(job: str, ms: int, state: str) -> dict[str, Any]:
    """The producer's cancel, answered with the job's state then."""
    return {"ev": "cancel", "job": job, "st": 200, "ts": at(ms - 3), "t": at(ms), "r": 0,
            "state": state, "cr": True}  # fmt: skip


def heard_cancel(job: str, lease_id: str, ms: int, renewed_to_ms: int) -> dict[str, Any]:
    return {**heartbeat(job, lease_id, ms, renewed_to_ms), "cancel": True}


def stop(job: str, lease_id: str, op: str, ms: int, state: str = "cancelled") -> dict[str, Any]:
    """A worker's release or fail of a job whose cancellation was requested."""
    return {"ev": "stop", "op": op, "job": job, "lease": lease_id, "st": 200, "state": state,
            "code": None, "ts": at(ms - 2), "t": at(ms), "r": 0}  # fmt: skip


# -- the queue's events, as bench/chaos.py reads them from the stream (runtime/event_feeds.py) ---


def event(kind: str, job: str, ms: int, **members: Any) -> dict[str, Any]:
    """One event of the stream; numbered by `numbered`."""
    return {"type": kind, "queue": "chaos", "id": job, "at": T0_MS + ms, **members}


def numbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In the order of their times, numbered 1, 2, 3... as the stream numbers them."""
    ordered = sorted(events, key=lambda e: e["at"])
    return [{**e, "n": n} for n, e in enumerate(ordered, start=1)]


def leased(job: str, fence: int, attempt: int, ms: int, worker: str) -> dict[str, Any]:
    return event(
        "leased", job, ms, worker=worker, attempt=attempt, fence=fence, lease_expires_at=T0_MS + ms + LEASE_MS
    )


def done(job: str, ms: int, worker: str, attempt: int) -> dict[str, Any]:
    return event("completed", job, ms, worker=worker, attempt=attempt)


def queued(job: str, ms: int) -> dict[str, Any]:
    return event("enqueued", job, ms, state="waiting")


# -- a clean run: three jobs, one worker SIGKILLed between its effect and its ack -----------------


def clean_run() -> dict[str, Any]:
    """What a run records, file by file. w0g0 does A, then writes C's effect and is SIGKILLed
    before acking it; w1g0 does B and, once C's lease has run out, C again (an explained
    duplicate); w0g1 is the process that took w0g0's slot."""
    return {
        "clients": {
            "producer.jsonl": [
                {"ev": "start", "pid": 3999, "t": at(0), "jobs": 3},
                send(A, 100),
                enqueued(A, 104),
                send(B, 120),
                enqueued(B, 124),
                send(C, 140),
                enqueued(C, 144),
                {"ev": "done", "t": at(150)},
            ],
            "events-w0g0.jsonl": [
                start("w0g0", 0),
                lease(A, "lease-a1", 1, 1, 200),
                ack(A, "lease-a1", 220),
                lease(C, "lease-c1", 3, 1, 300),
                hold_after_effect(C, "lease-c1", 311),
            ],
            "effects-w0g0.jsonl": [effect(A, "lease-a1", 1, 210), effect(C, "lease-c1", 3, 310)],
            "events-w1g0.jsonl": [
                start("w1g0", 0),
                lease(B, "lease-b1", 2, 1, 250),
                ack(B, "lease-b1", 270),
                lease(C, "lease-c2", 4, 2, 2450),
                ack(C, "lease-c2", 2470),
                {"ev": "exit", "t": at(3000)},
            ],
            "effects-w1g0.jsonl": [effect(B, "lease-b1", 2, 260), effect(C, "lease-c2", 4, 2460)],
            "events-w0g1.jsonl": [start("w0g1", 520), {"ev": "exit", "t": at(3000)}],
        },
        "stream.jsonl": numbered(
            [
                queued(A, 103),
                queued(B, 123),
                queued(C, 143),
                leased(A, 1, 1, 200, "w0g0"),
                done(A, 219, "w0g0", 1),
                leased(B, 2, 1, 250, "w1g0"),
                done(B, 269, "w1g0", 1),
                leased(C, 3, 1, 300, "w0g0"),
                event("reclaimed", C, 2400, worker="w0g0", attempt=1),
                leased(C, 4, 2, 2450, "w1g0"),
                done(C, 2469, "w1g0", 2),
            ]
        ),
        "history.json": {
            "planned": {"worker-kill": 1},
            "faults": [
                {
                    "id": 1,
                    "kind": "worker-kill",
                    "target": "w0g0",
                    "variant": "effect",
                    "t": at(500),
                    "t_end": at(520),
                    "skipped": "",
                    "extra": {"job": C},
                }
            ],
            "final": {
                "counts": {"waiting": 0, "delayed": 0, "active": 0, "completed": 3, "failed": 0},
                "active": [],
                "states": {A: ["completed", 1], B: ["completed", 1], C: ["completed", 2]},
            },
        },
    }


def write(run: dict[str, Any], workdir: Path) -> Path:
    clients = workdir / "clients"
    clients.mkdir(parents=True)
    for name, records in run["clients"].items():
        (clients / name).write_text("".join(json.dumps(record) + "\n" for record in records))
    (workdir / "history.json").write_text(json.dumps(run["history.json"]))
    if run.get("stream.jsonl") is not None:
        (workdir / "stream.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run["stream.jsonl"]))
    return workdir


def verdict(run: dict[str, Any], workdir: Path) -> dict[str, Any]:
    return Checker(History.load(write(run, workdir)), aof_window_s=2.0).run()


def findings(result: dict[str, Any]) -> set[tuple[str, str | None]]:
    return {(finding["kind"], finding["subject"]) for finding in result["findings"]}


# -- the cases -------------------------------------------------------------------------------------


def test_a_clean_history_passes(tmp_path: Path) -> None:
    result = verdict(clean_run(), tmp_path)
    assert result["failures"] == []
    assert (result["acked_enqueues"], result["completed"], result["lost"]) == (3, 3, [])
    kill = result["figures"]["worker-kill"]
    assert (kill["planned"], kill["injected"], kill["duplicated"], kill["explained"]) == (1, 1, 1, 1)


def test_a_lost_job_fails_and_is_named(tmp_path: Path) -> None:
    run = clean_run()
    producer = run["clients"]["producer.jsonl"]
    producer[-1:-1] = [send(D, 146), enqueued(D, 149)]  # acknowledged, then no worker ever saw it
    run["history.json"]["final"]["states"][D] = ["absent", None]
    result = verdict(run, tmp_path)
    assert findings(result) == {("lost", D)}
    assert result["lost"] == [{"job": D, "state": "absent", "acked_at": at(149)}]
    assert any(f"LOST: {D}" in failure for failure in result["failures"])


def test_a_job_acked_by_two_live_workers_fails_as_a_duplicate(tmp_path: Path) -> None:
    run = clean_run()
    events = run["clients"]["events-w0g1.jsonl"]
    events[1:1] = [lease(B, "lease-b2", 5, 2, 1000), ack(B, "lease-b2", 1020)]
    run["clients"]["effects-w0g1.jsonl"] = [effect(B, "lease-b2", 5, 1010)]
    run["history.json"]["final"]["states"][B] = ["completed", 2]
    # the service that did it wrote it down too: a completed job leased again
    run["stream.jsonl"] = numbered(
        [*run["stream.jsonl"], leased(B, 5, 2, 1000, "w0g1"), done(B, 1019, "w0g1", 2)]
    )
    result = verdict(run, tmp_path)
    assert findings(result) == {("duplicate", B), ("events-story", B)}
    assert result["duplicate_details"][-1]["why"] == "two acks of one job were both accepted"


def test_a_job_leased_again_during_its_live_lease_fails_as_an_early_reclaim(tmp_path: Path) -> None:
    run = clean_run()
    producer = run["clients"]["producer.jsonl"]
    producer[-1:-1] = [send(E, 146), enqueued(E, 149)]
    # w1g0 holds E and renews it until 3666; w0g1 is granted E at 2000, and w1g0's next
    # heartbeat is refused though its lease is live
    w1g0 = run["clients"]["events-w1g0.jsonl"]
    w1g0[3:3] = [
        lease(E, "lease-e1", 5, 1, 1000),
        heartbeat(E, "lease-e1", 1666, renewed_to_ms=3666),
        heartbeat(E, "lease-e1", 2330, renewed_to_ms=None),
        abandon(E, "lease-e1", 2331),
    ]
    run["clients"]["events-w0g1.jsonl"][1:1] = [lease(E, "lease-e2", 6, 2, 2000), ack(E, "lease-e2", 2020)]
    run["clients"]["effects-w0g1.jsonl"] = [effect(E, "lease-e2", 6, 2010)]
    final = run["history.json"]["final"]
    final["states"][E] = ["completed", 2]
    final["counts"]["completed"] = 4
    # its events can have happened (a sweep that reclaims early): only the lease times tell
    run["stream.jsonl"] = numbered(
        [
            *run["stream.jsonl"],
            queued(E, 148),
            leased(E, 5, 1, 1000, "w1g0"),
            event("reclaimed", E, 1990, worker="w1g0", attempt=1),
            leased(E, 6, 2, 2000, "w0g1"),
            done(E, 2019, "w0g1", 2),
        ]
    )
    result = verdict(run, tmp_path)
    assert findings(result) == {("early-lease", E), ("valid-lease-refused", E)}
    assert result["early_leases"] == 1
    assert any("(1666 ms early)" in failure for failure in result["failures"])


@pytest.mark.parametrize(
    ("kind", "fault", "why"),
    [
        (
            "worker-kill",
            {"id": 2, "kind": "worker-kill", "target": "w1g0", "variant": "mid", "t": at(900),
             "t_end": 0.0, "skipped": "the worker got no job to hold in time", "extra": {}},
            "the worker got no job to hold in time",
        ),
        (
            "clock-skew",
            {"id": 2, "kind": "clock-skew", "target": "replica0 down, replica1 under faketime +30s",
             "variant": "", "t": at(900), "t_end": at(4000), "skipped": "",
             "extra": {"worker": "w1g0", "worker_t": 0.0, "job": None,
                       "worker_skipped": "the worker got no job to hold in time"}},
            "its worker kill was skipped",
        ),
    ],
)  # fmt: skip
def test_fewer_faults_than_planned_fail_the_run(
    tmp_path: Path, kind: str, fault: dict[str, Any], why: str
) -> None:
    run = clean_run()
    recorded = run["history.json"]
    recorded["planned"][kind] = recorded["planned"].get(kind, 0) + 1
    recorded["faults"].append(fault)
    result = verdict(run, tmp_path)
    assert findings(result) == {("faults-short", kind)}
    injected = 1 if kind == "worker-kill" else 0
    [failure] = result["failures"]
    assert failure.startswith(f"{kind}: injected {injected} of {injected + 1} planned faults (")
    assert why in failure


@pytest.mark.parametrize(
    ("spoil", "subject"),
    [
        (lambda final: final.update(counts=None), "counts"),
        (lambda final: final.update(active=None), "ledger"),
        (lambda final: final["states"].update({C: ["unknown", None]}), C),
        (lambda final: final["states"].pop(C), C),
    ],
    ids=["counts", "ledger", "a job's state", "a job never read"],
)
def test_a_failed_final_read_fails_the_run(tmp_path: Path, spoil: Any, subject: str) -> None:
    run = clean_run()
    spoil(run["history.json"]["final"])
    result = verdict(run, tmp_path)
    assert findings(result) == {("final-read", subject)}
    assert result["failures"][0].startswith("final read failed")


def test_the_harness_records_history_json_in_the_format_of_these_cases(tmp_path: Path) -> None:
    run = clean_run()
    recorded = copy.deepcopy(run["history.json"])
    final = recorded["final"]
    states = {job: (state, attempt) for job, (state, attempt) in final["states"].items()}
    faults = [Fault(**fault) for fault in recorded["faults"]]
    record_history(tmp_path, faults, recorded["planned"], final["counts"], final["active"], states)
    assert json.loads((tmp_path / "history.json").read_text()) == recorded


def test_a_kept_work_dir_can_be_judged_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(write(clean_run(), tmp_path / "clean"))]) == 0
    run = clean_run()
    run["history.json"]["final"]["states"][C] = ["waiting", 2]
    assert main([str(write(run, tmp_path / "stuck"))]) == 1
    assert f"{C} has an effect but its final state is waiting" in capsys.readouterr().out


# -- cancellations and the events --------------------------------------------------------------


def cancelled_run() -> dict[str, Any]:
    """The clean run, and three jobs the producer cancels: D while it waits (cancelled at once),
    E while w0g1 works on it (its heartbeat hears of it, it releases E: cancelled), F just
    before w0g1 acks it (the ack completes it)."""
    run = clean_run()
    producer = run["clients"]["producer.jsonl"]
    producer[-1:-1] = [
        send(D, 146), enqueued(D, 149), send(E, 150), enqueued(E, 152), send(F, 154), enqueued(F, 156),
        cancel_sent(D, 160), cancelled(D, 163, "cancelled"),
        cancel_sent(E, 695), cancelled(E, 700, "active"),
        cancel_sent(F, 1405), cancelled(F, 1410, "active"),
    ]  # fmt: skip
    run["clients"]["events-w0g1.jsonl"][1:1] = [
        lease(E, "lease-e1", 5, 1, 600),
        heard_cancel(E, "lease-e1", 1266, renewed_to_ms=3266),
        stop(E, "lease-e1", "release", 1270),
        lease(F, "lease-f1", 6, 1, 1400),
        ack(F, "lease-f1", 1420),
    ]
    run["clients"]["effects-w0g1.jsonl"] = [effect(F, "lease-f1", 6, 1415)]
    final = run["history.json"]["final"]
    final["states"].update({D: ["cancelled", 0], E: ["cancelled", 1], F: ["completed", 1]})
    final["counts"].update(completed=4, cancelled=2)
    run["stream.jsonl"] = numbered(
        [
            *run["stream.jsonl"],
            queued(D, 148),
            queued(E, 151),
            queued(F, 155),
            event("cancelled", D, 161),
            leased(E, 5, 1, 600, "w0g1"),
            event("cancel_requested", E, 698),
            event("cancelled", E, 1268),
            leased(F, 6, 1, 1400, "w0g1"),
            event("cancel_requested", F, 1408),
            done(F, 1419, "w0g1", 1),
        ]
    )
    return run


def test_a_clean_history_with_cancellations_passes(tmp_path: Path) -> None:
    result = verdict(cancelled_run(), tmp_path)
    assert result["failures"] == []
    assert result["completed"] == 4
    cancels = result["cancels"]
    assert cancels["answered"] == {"cancelled": 1, "active": 2}
    assert (cancels["ended_cancelled"], cancels["ended_completed"], cancels["stopped_by_worker"]) == (2, 1, 1)
    assert result["events"] == {"read": True, "events": 21, "jobs": 6, "trimmed": False}


def leased_after_its_cancel(run: dict[str, Any]) -> None:
    """w0g1 is granted D at 2000, 1.8 s after D's cancel answered cancelled, and completes it."""
    run["clients"]["events-w0g1.jsonl"][-1:-1] = [lease(D, "lease-d1", 7, 1, 2000), ack(D, "lease-d1", 2020)]
    run["clients"]["effects-w0g1.jsonl"].append(effect(D, "lease-d1", 7, 2010))
    final = run["history.json"]["final"]
    final["states"][D] = ["completed", 1]
    final["counts"].update(completed=5, cancelled=1)


def test_a_job_leased_after_its_cancel_fails(tmp_path: Path) -> None:
    run = cancelled_run()
    leased_after_its_cancel(run)
    run["stream.jsonl"] = numbered(
        [*run["stream.jsonl"], leased(D, 7, 1, 2000, "w0g1"), done(D, 2019, "w0g1", 1)]
    )
    result = verdict(run, tmp_path)
    assert findings(result) == {("leased-after-cancel", D), ("cancel-undone", D), ("events-story", D)}
    assert any(f"{D} was leased to w0g1 (fence 7) 1837 ms after its cancel" in f for f in result["failures"])
    assert any(f"{D}: leased (event " in f and "after cancelled" in f for f in result["failures"])


def test_a_cancel_undone_by_a_redis_restart_in_its_aof_window_is_not_a_failure(tmp_path: Path) -> None:
    """Redis SIGKILLed 0.8 s after the cancel and restarted from its AOF: the cancel (and its
    event) may be gone, and the job leased and completed after all."""
    run = cancelled_run()
    leased_after_its_cancel(run)
    run["history.json"]["faults"].append(
        {"id": 2, "kind": "redis-kill", "target": "redis", "variant": "short", "t": at(1000),
         "t_end": at(1500), "skipped": "", "extra": {}}
    )  # fmt: skip
    stream = [e for e in run["stream.jsonl"] if not (e["id"] == D and e["type"] == "cancelled")]
    run["stream.jsonl"] = numbered([*stream, leased(D, 7, 1, 2000, "w0g1"), done(D, 2019, "w0g1", 1)])
    result = verdict(run, tmp_path)
    assert result["failures"] == []


def spoil_stream(run: dict[str, Any], job: str, kind: str, **change: Any) -> None:
    """Changes (or, with drop=True, drops) the job's first event of this kind; renumbers."""
    stream = run["stream.jsonl"]
    i = next(i for i, e in enumerate(stream) if e["id"] == job and e["type"] == kind)
    if change.pop("drop", False):
        del stream[i]
    else:
        stream[i].update(change)
    run["stream.jsonl"] = numbered(stream)


def shift_numbers_from(run: dict[str, Any], n: int) -> None:
    for e in run["stream.jsonl"]:
        if e["n"] >= n:
            e["n"] += 1


def swap_fences(run: dict[str, Any]) -> None:
    """C's leases as the workers logged them (fences 3 and 4), in the events the other way round."""
    first, second = (e for e in run["stream.jsonl"] if e["id"] == C and e["type"] == "leased")
    first["fence"], second["fence"] = second["fence"], first["fence"]


def add_event(run: dict[str, Any], e: dict[str, Any]) -> None:
    run["stream.jsonl"] = numbered([*run["stream.jsonl"], e])


STORY = "events-story"


@pytest.mark.parametrize(
    ("spoil", "kind", "subject", "message"),
    [
        (
            lambda run: spoil_stream(run, C, "reclaimed", at=T0_MS + 2455),
            STORY, C, "leased (event 9) after active",
        ),
        (
            lambda run: spoil_stream(run, C, "enqueued", at=T0_MS + 2500),
            STORY, C, "first event is leased",
        ),
        (swap_fences, STORY, C, "leased with fence 3 after 4"),
        (
            lambda run: spoil_stream(run, A, "completed", drop=True),
            STORY, A, "events end active, but its final state is completed",
        ),
        (
            lambda run: spoil_stream(run, B, "leased", fence=7),
            STORY, B, "no leased event for the lease w1g0 received (fence 2)",
        ),
        # event 5 is A's completed
        (lambda run: shift_numbers_from(run, 5), "events-order", A, "event 6 follows event 4"),
        (
            lambda run: spoil_stream(run, A, "leased", lease_id="lease-a1"),
            "events-leak", A, "carries a lease id",
        ),
        (
            lambda run: spoil_stream(run, A, "completed", result="lease-a1"),
            "events-leak", A, "carries a lease id",
        ),
        (
            lambda run: spoil_stream(run, B, "enqueued", payload={"n": 1}),
            "events-leak", B, "or a payload",
        ),
        (
            lambda run: run.update({"stream.jsonl": None}),
            "final-read", "events", "event stream was not read",
        ),
    ],
    ids=[
        "leased before its reclaim",
        "enqueued last",
        "fences going down",
        "no completed event",
        "a lease not in the events",
        "a gap in the numbers",
        "a lease id",
        "a lease id as a value",
        "a payload",
        "the stream not read",
    ],
)  # fmt: skip
def test_events_that_cannot_have_happened_fail(
    tmp_path: Path, spoil: Any, kind: str, subject: str, message: str
) -> None:
    run = clean_run()
    spoil(run)
    result = verdict(run, tmp_path)
    assert findings(result) == {(kind, subject)}
    assert any(message in failure for failure in result["failures"]), result["failures"]


@pytest.mark.parametrize(
    ("spoil", "subject", "message"),
    [
        # events alone: D leased after it was cancelled (no worker ever said so)
        (lambda run: add_event(run, leased(D, 7, 1, 2000, "w0g1")), D, "leased (event 19) after cancelled"),
        # E's cancellation was requested, yet it was released to waiting (and then cancelled there)
        (
            lambda run: add_event(run, event("released", E, 1267, worker="w0g1")),
            E, "released (event 15) after active-cr",
        ),
        (
            lambda run: spoil_stream(run, F, "cancel_requested", at=T0_MS + 1500),
            F, "cancel_requested (event 18) after completed",
        ),
    ],
    ids=["leased after cancelled", "released after cancel_requested", "cancel_requested after completed"],
)  # fmt: skip
def test_cancellation_events_that_cannot_have_happened_fail(
    tmp_path: Path, spoil: Any, subject: str, message: str
) -> None:
    run = cancelled_run()
    spoil(run)
    result = verdict(run, tmp_path)
    assert findings(result) == {(STORY, subject)}
    assert any(message in failure for failure in result["failures"]), result["failures"]


def test_a_worker_told_anything_but_cancelled_after_cancel_requested_fails(tmp_path: Path) -> None:
    run = cancelled_run()
    events = run["clients"]["events-w0g1.jsonl"]
    events[3] = stop(E, "lease-e1", "release", 1270, state="waiting")
    assert findings(verdict(run, tmp_path)) == {("cancel-ignored", E)}


def test_a_job_cancelled_by_nobody_fails(tmp_path: Path) -> None:
    run = cancelled_run()
    producer = run["clients"]["producer.jsonl"]
    producer[:] = [r for r in producer if not (r["ev"].startswith("cancel") and r["job"] == D)]
    assert findings(verdict(run, tmp_path)) == {("unexpected-cancel", D)}


def test_a_cancelled_job_that_ends_neither_cancelled_nor_completed_is_lost(tmp_path: Path) -> None:
    run = cancelled_run()
    final = run["history.json"]["final"]
    final["states"][D] = ["waiting", 0]
    final["counts"].update(waiting=1, cancelled=1)
    result = verdict(run, tmp_path)
    # the stream ends D cancelled: the final read and the events disagree too
    assert findings(result) == {("lost", D), ("events-story", D), ("left-over", None)}
    assert any(f"LOST: {D} was cancelled, yet ended waiting" in f for f in result["failures"])


# -- worker sessions: a dead worker's jobs come back when its session lapses -------------------

SESSION_TTL = 2500
SESSION_LEASE = 30_000


def session_start(name: str, ms: int) -> dict[str, Any]:
    return {**start(name, ms), "lease_ms": SESSION_LEASE, "session_ttl_ms": SESSION_TTL}


def renewed(ms: int) -> dict[str, Any]:
    """A session heartbeat run by Redis at ms, answered then: the session lapses ttl later."""
    return {"ev": "sess", "st": 200, "exp": T0_MS + ms + SESSION_TTL, "state": "running",
            "ts": at(ms - 3), "t": at(ms), "r": 0}  # fmt: skip


def session_lease(job: str, lease_id: str, fence: int, attempt: int, ms: int) -> dict[str, Any]:
    return {
        **lease(job, lease_id, fence, attempt, ms),
        "exp": T0_MS + ms + SESSION_LEASE,
        "lease_ms": SESSION_LEASE,
    }


def session_run(back_ms: int = 3900, **kill: Any) -> dict[str, Any]:
    """The clean run, and w2g0, a worker with a session (ttl 2.5 s, lease 30 s): it leases G at
    1000, renews its session until 1300 (so it can lapse at 3800) and is SIGKILLed at 1500
    holding G; the sweep reclaims G at back_ms and w1g0 leases it 50 ms later."""
    run = clean_run()
    producer = run["clients"]["producer.jsonl"]
    producer[-1:-1] = [send(G, 146), enqueued(G, 149)]
    run["clients"]["events-w2g0.jsonl"] = [
        session_start("w2g0", 0),
        renewed(10),
        renewed(845),
        session_lease(G, "lease-g1", 5, 1, 1000),
        {"ev": "hold", "at": "mid", "job": G, "lease": "lease-g1", "t": at(1001)},
        renewed(1300),
    ]
    w1g0 = run["clients"]["events-w1g0.jsonl"]
    w1g0[-1:] = [lease(G, "lease-g2", 6, 2, back_ms + 50), ack(G, "lease-g2", back_ms + 70),
                 {"ev": "exit", "t": at(back_ms + 100)}]  # fmt: skip
    run["clients"]["effects-w1g0.jsonl"].append(effect(G, "lease-g2", 6, back_ms + 60))
    recorded = run["history.json"]
    recorded["planned"]["worker-kill"] = 2
    recorded["faults"].append(
        {"id": 2, "kind": "worker-kill", "target": "w2g0", "variant": "mid", "t": at(1500),
         "t_end": at(1520), "skipped": "", "extra": {"job": G, "session": True, **kill}}
    )  # fmt: skip
    final = recorded["final"]
    final["states"][G] = ["completed", 2]
    final["counts"]["completed"] = 4
    run["stream.jsonl"] = numbered(
        [
            *run["stream.jsonl"],
            queued(G, 148),
            {**leased(G, 5, 1, 1000, "w2g0"), "lease_expires_at": T0_MS + 1000 + SESSION_LEASE},
            event("reclaimed", G, back_ms, worker="w2g0", attempt=1),
            leased(G, 6, 2, back_ms + 50, "w1g0"),
            done(G, back_ms + 69, "w1g0", 2),
        ]
    )
    return run


def test_a_session_lapse_that_returns_the_job_in_seconds_passes(tmp_path: Path) -> None:
    result = verdict(session_run(), tmp_path)
    assert result["failures"] == []
    kill = result["figures"]["worker-kill"]
    assert (kill["session_jobs"], kill["session_returned"], kill["session_exempt"]) == (1, 1, 0)
    assert kill["max_session_return_ms"] == 2400  # the reclaim, 2.4 s after the SIGKILL
    assert (result["session_reclaims"], result["min_session_reclaim_gap_ms"]) == (1, 2650)


def test_a_session_lapse_that_returns_the_job_late_fails(tmp_path: Path) -> None:
    """Reclaimed 7.5 s after the kill: within the 30 s lease, beyond ttl + sweep + 1 s + 3 s."""
    result = verdict(session_run(back_ms=9000), tmp_path)
    assert findings(result) == {("slow-session-return", G)}
    [failure] = result["failures"]
    assert "left it 7500 ms after the fault; budget 6700 ms" in failure


def test_a_job_a_session_never_gave_back_fails(tmp_path: Path) -> None:
    """G stays with the dead worker (no reclaim, no new lease) and ends active."""
    run = session_run()
    run["clients"]["events-w1g0.jsonl"][-3:-1] = []
    run["clients"]["effects-w1g0.jsonl"].pop()
    final = run["history.json"]["final"]
    final["states"][G] = ["active", 1]
    final["counts"].update(completed=3, active=1)
    final["active"] = [{"id": G, "worker": "w2g0", "lease_expires_at": T0_MS + 31_000}]
    run["stream.jsonl"] = numbered([e for e in run["stream.jsonl"] if not (e["id"] == G and e["n"] > 13)])
    result = verdict(run, tmp_path)
    assert ("slow-session-return", G) in findings(result)
    assert any("left it never" in failure for failure in result["failures"])


def test_a_session_lapse_while_redis_was_down_is_not_judged(tmp_path: Path) -> None:
    run = session_run(back_ms=9000)
    run["history.json"]["planned"]["redis-kill"] = 1
    run["history.json"]["faults"].append(
        {"id": 3, "kind": "redis-kill", "target": "redis", "variant": "long", "t": at(2000),
         "t_end": at(8500), "skipped": "", "extra": {}}
    )  # fmt: skip
    result = verdict(run, tmp_path)
    kill = result["figures"]["worker-kill"]
    assert (kill["session_jobs"], kill["session_returned"], kill["session_exempt"]) == (1, 0, 1)
    # and a run whose only session kill was not judged has not exercised sessions
    assert findings(result) == {("faults-short", "sessions")}


def test_a_job_leased_again_before_its_session_can_have_lapsed_fails(tmp_path: Path) -> None:
    """Renewed at 1300 (live until 3800), yet G was reclaimed at 2000 and leased again."""
    result = verdict(session_run(back_ms=2000), tmp_path)
    assert findings(result) == {("early-lease", G)}
    assert any("w2g0's session could lapse at" in f and "(1750 ms early)" in f for f in result["failures"])


def test_sessions_no_kill_exercised_fail_the_run(tmp_path: Path) -> None:
    """Workers with sessions, but the planned kills all hit workers without one."""
    run = session_run()
    [kill] = [f for f in run["history.json"]["faults"] if f["id"] == 2]
    kill.update(kind="worker-stop", extra={"job": G, "session": True})
    run["history.json"]["planned"] = {"worker-kill": 1, "worker-stop": 1}
    result = verdict(run, tmp_path)
    assert findings(result) == {("faults-short", "sessions")}
    assert result["figures"]["worker-stop"]["session_returned"] == 1


def test_a_session_return_in_time_counts_even_with_redis_down_meanwhile(tmp_path: Path) -> None:
    run = session_run()
    run["history.json"]["planned"]["redis-kill"] = 1
    run["history.json"]["faults"].append(
        {"id": 3, "kind": "redis-kill", "target": "redis", "variant": "short", "t": at(5000),
         "t_end": at(5800), "skipped": "", "extra": {}}
    )  # fmt: skip
    result = verdict(run, tmp_path)
    assert result["failures"] == []
    kill = result["figures"]["worker-kill"]
    assert (kill["session_jobs"], kill["session_returned"], kill["session_exempt"]) == (1, 1, 0)


def stopped_session_run(ack_status: int) -> dict[str, Any]:
    """session_run, but w2g0 is SIGSTOPped at 1500 and resumed at 5000 (its session lapsed at
    3800; G was leased again at 3950): it renews its session (a new one), writes G's effect and
    acks it, a zombie call that must be refused."""
    run = session_run()
    recorded = run["history.json"]
    recorded["planned"] = {"worker-stop": 1}
    [fault] = [f for f in recorded["faults"] if f["id"] == 2]
    fault.update(kind="worker-stop", t_end=at(5000))
    ack_call = {**ack(G, "lease-g1", 5020), "st": ack_status}
    if ack_status == 409:
        ack_call["code"] = "lease_lost"
    run["clients"]["events-w2g0.jsonl"] += [renewed(5010), ack_call]
    run["clients"]["effects-w2g0.jsonl"] = [effect(G, "lease-g1", 5, 5015)]
    return run


def test_a_stopped_session_workers_refused_zombie_ack_passes(tmp_path: Path) -> None:
    result = verdict(stopped_session_run(409), tmp_path)
    assert result["failures"] == []
    stop = result["figures"]["worker-stop"]
    assert (stop["zombie_calls"], stop["zombie_refused"], stop["duplicated"], stop["explained"]) == (
        1,
        1,
        1,
        1,
    )
    assert (stop["session_jobs"], stop["session_returned"]) == (1, 1)


def test_a_stopped_session_workers_accepted_zombie_ack_fails(tmp_path: Path) -> None:
    result = verdict(stopped_session_run(200), tmp_path)
    assert findings(result) == {("zombie-accepted", G), ("duplicate", G)}
    assert any("zombie call ACCEPTED: ack of" in f for f in result["failures"])


def test_a_session_lease_refused_before_its_session_can_have_lapsed_fails(tmp_path: Path) -> None:
    """w2g0's heartbeat of G at 1200 is refused, though its session was live until 3800."""
    run = session_run()
    run["clients"]["events-w2g0.jsonl"][-1:-1] = [
        heartbeat(G, "lease-g1", 1200, None),
        abandon(G, "lease-g1", 1201),
    ]
    result = verdict(run, tmp_path)
    # G was no longer held at the kill, so no kill hit a job its session held
    assert findings(result) == {("valid-lease-refused", G), ("faults-short", "sessions")}
    assert any(
        "2600 ms before the lease's end (its session's earliest lapse)" in f for f in result["failures"]
    )


# -- schedules ---------------------------------------------------------------------------------

TICK = "tick0"
EVERY_MS = 1000


def run_id(run_ms: int) -> str:
    return f"{TICK}-r{T0_MS + run_ms}"


def scheduled_run(runs: dict[int, int] | None = None, pause_ms: int = 6500) -> dict[str, Any]:
    """clean_run, and a schedule every 1 s whose first run is at 1000: {run time: made at} (by
    default 1000..5000, each made 150 ms late), every run's job done by w2g0 300 ms after it was
    made; paused at pause_ms."""
    runs = {ms: ms + 150 for ms in range(1000, 6000, EVERY_MS)} if runs is None else runs
    run = clean_run()
    events, effects, stream = [start("w2g0", 0)], [], []
    states = run["history.json"]["final"]["states"]
    for fence, (run_ms, made_ms) in enumerate(sorted(runs.items()), start=100):
        job, lease_id = run_id(run_ms), f"lease-{run_ms}"
        events += [lease(job, lease_id, fence, 1, made_ms + 300), ack(job, lease_id, made_ms + 320)]
        effects.append(effect(job, lease_id, fence, made_ms + 310))
        stream += [
            event("enqueued", job, made_ms, state="waiting", schedule=TICK),
            leased(job, fence, 1, made_ms + 300, "w2g0"),
            done(job, made_ms + 319, "w2g0", 1),
        ]
        states[job] = ["completed", 1]
    run["clients"]["events-w2g0.jsonl"] = [*events, {"ev": "exit", "t": at(9000)}]
    run["clients"]["effects-w2g0.jsonl"] = effects
    run["stream.jsonl"] = numbered([*run["stream.jsonl"], *stream])
    run["history.json"]["final"]["counts"]["completed"] += len(runs)
    last = max(runs, default=None)
    run["schedules.json"] = {
        "every_ms": EVERY_MS,
        "schedules": {
            TICK: {
                "anchor": T0_MS + 1000,
                "put_t": at(0),
                "pause_t": at(pause_ms),
                "paused_t": at(pause_ms + 20),
            }
        },
        "views": {
            TICK: {"schedule": TICK, "runs": len(runs), "last_run_at": None if last is None else T0_MS + last}
        },
        "jobs": {
            run_id(run_ms): {"schedule": TICK, "created_at": T0_MS + made_ms, "state": "completed"}
            for run_ms, made_ms in runs.items()
        },
    }
    return run


def schedule_verdict(run: dict[str, Any], workdir: Path) -> dict[str, Any]:
    write(run, workdir)
    (workdir / "schedules.json").write_text(json.dumps(run["schedules.json"]))
    return Checker(History.load(workdir), aof_window_s=2.0).run()


def redis_down(run: dict[str, Any], from_ms: int, to_ms: int) -> None:
    run["history.json"]["planned"]["redis-kill"] = 1
    run["history.json"]["faults"].append(
        {"id": 2, "kind": "redis-kill", "target": "redis", "variant": "long", "t": at(from_ms),
         "t_end": at(to_ms), "skipped": "", "extra": {}}
    )  # fmt: skip


def test_a_schedule_that_made_each_run_once_passes(tmp_path: Path) -> None:
    result = schedule_verdict(scheduled_run(), tmp_path)
    assert result["failures"] == []
    figures = result["schedules"]
    assert (figures["runs"], figures["runs_agree"], figures["missed"]) == (5, 1, 0)
    assert figures["lateness_ms"] == [150] * 5
    assert (result["schedule_jobs"], result["completed"], result["unexpected"]) == (5, 8, [])


def test_a_run_missed_with_redis_and_the_replicas_up_fails(tmp_path: Path) -> None:
    runs = {ms: ms + 150 for ms in (1000, 2000, 4000, 5000)}
    result = schedule_verdict(scheduled_run(runs), tmp_path)
    assert findings(result) == {("schedule-missed", TICK)}


def test_runs_missed_across_a_redis_outage_behind_one_catch_up_run_pass(tmp_path: Path) -> None:
    """Redis down from 1.9 s to 4.2 s: the run of 2000 is made at 4300 (the catch-up), those of
    3000 and 4000 are not, the next one is on time."""
    run = scheduled_run({1000: 1150, 2000: 4300, 5000: 5150})
    redis_down(run, 1900, 4200)
    result = schedule_verdict(run, tmp_path)
    assert result["failures"] == []
    assert (result["schedules"]["missed"], result["schedules"]["catch_up_runs"]) == (2, 1)


def test_runs_missed_in_an_outage_with_no_catch_up_run_fail(tmp_path: Path) -> None:
    run = scheduled_run({1000: 1150, 4000: 4300, 5000: 5150})
    redis_down(run, 1900, 3000)
    assert findings(schedule_verdict(run, tmp_path)) == {("schedule-catch-up", TICK)}


def test_every_missed_run_made_late_after_an_outage_fails(tmp_path: Path) -> None:
    """One catch-up run for all the missed ones, not one each."""
    run = scheduled_run({1000: 1150, 2000: 4300, 3000: 4310, 4000: 4320, 5000: 5150})
    redis_down(run, 1900, 4200)
    assert findings(schedule_verdict(run, tmp_path)) == {("schedule-catch-up", TICK)}


@pytest.mark.parametrize(
    ("runs", "kinds"),
    [
        ({1000: 1150, 2000: 2150, 3000: 5300, 4000: 5310, 5000: 5150}, {"schedule-late"}),
        ({1000: 1150, 1500: 1650, 2000: 2150, 3000: 3150, 4000: 4150}, {"schedule-grid", "schedule-twice"}),
        ({1000: 1150, 2000: 1900, 3000: 3150, 4000: 4150, 5000: 5150}, {"schedule-early"}),
        ({1000: 1150, 2000: 2150, 3000: 3150, 4000: 4150, 7000: 7150}, {"schedule-after-pause"}),
    ],
    ids=["late", "off the grid", "early", "after its pause"],
)
def test_a_run_made_late_early_off_its_grid_or_paused_fails(
    tmp_path: Path, runs: dict[int, int], kinds: set[str]
) -> None:
    assert findings(schedule_verdict(scheduled_run(runs), tmp_path)) == {(kind, TICK) for kind in kinds}


def test_a_schedule_whose_runs_miscount_its_jobs_fails(tmp_path: Path) -> None:
    run = scheduled_run()
    run["schedules.json"]["views"][TICK]["runs"] = 6
    assert findings(schedule_verdict(run, tmp_path)) == {("schedule-runs", TICK)}


def test_a_job_a_schedule_made_and_a_worker_did_that_is_gone_is_lost(tmp_path: Path) -> None:
    run = scheduled_run()
    job = run_id(3000)
    run["history.json"]["final"]["states"][job] = ["absent", None]
    run["history.json"]["final"]["counts"]["completed"] -= 1
    del run["schedules.json"]["jobs"][job]
    result = schedule_verdict(run, tmp_path)
    assert ("lost", job) in findings(result)
    assert ("state", job) not in findings(result)


def test_a_failed_read_of_the_schedules_fails_the_run(tmp_path: Path) -> None:
    run = scheduled_run()
    run["schedules.json"]["views"] = None
    assert findings(schedule_verdict(run, tmp_path)) == {("final-read", "schedules")}


def test_runs_undone_by_a_redis_restart_after_a_worker_did_them_pass(tmp_path: Path) -> None:
    """The runs of 2000 and 3000 are made on time and done by w3g0; Redis is SIGKILLed at 3500
    and its AOF has neither (back at 4000): the run of 2000 is made again at 4100 (the catch-up,
    same id), 3000's job stays gone, 4000 is missed; all in the AOF everysec window."""
    run = scheduled_run({1000: 1150, 2000: 4100, 5000: 5150})
    redis_down(run, 3500, 4000)
    early, undone = run_id(2000), run_id(3000)
    run["clients"]["events-w3g0.jsonl"] = [
        start("w3g0", 0),
        lease(early, "lease-early", 90, 1, 2300),
        ack(early, "lease-early", 2320),
        lease(undone, "lease-undone", 91, 1, 3300),
        ack(undone, "lease-undone", 3320),
    ]
    run["clients"]["effects-w3g0.jsonl"] = [
        effect(early, "lease-early", 90, 2310),
        effect(undone, "lease-undone", 91, 3310),
    ]
    run["history.json"]["final"]["states"][undone] = ["absent", None]
    result = schedule_verdict(run, tmp_path)
    assert result["failures"] == []
    assert [lost["job"] for lost in result["lost_in_aof_window"]] == [undone]
    assert (result["schedules"]["missed"], result["schedules"]["runs"]) == (1, 3)


# -- a late reclaim: a fault of the service, or every live worker busy ---------------------------


def late_release_run(again_ms: int, idle_at_ms: int | None) -> dict[str, Any]:
    """clean_run with C leased again at again_ms instead of 2450 (the kill was at 500), and
    w1g0 told "nothing" by a lease answered at idle_at_ms (None: it never was)."""
    run = clean_run()
    w1g0 = run["clients"]["events-w1g0.jsonl"]
    w1g0[3:5] = [lease(C, "lease-c2", 4, 2, again_ms), ack(C, "lease-c2", again_ms + 20)]
    if idle_at_ms is not None:
        w1g0.insert(3, {"ev": "idle", "ts": at(idle_at_ms - 1000), "t": at(idle_at_ms)})
    run["clients"]["effects-w1g0.jsonl"][1] = effect(C, "lease-c2", 4, again_ms + 10)
    stream = [e for e in run["stream.jsonl"] if not (e["id"] == C and e["at"] >= T0_MS + 2400)]
    run["stream.jsonl"] = numbered(
        [
            *stream,
            event("reclaimed", C, again_ms - 50, worker="w0g0", attempt=1),
            leased(C, 4, 2, again_ms, "w1g0"),
            done(C, again_ms + 19, "w1g0", 2),
        ]
    )
    return run


def strict_verdict(run: dict[str, Any], workdir: Path) -> dict[str, Any]:
    return Checker(History.load(write(run, workdir)), aof_window_s=2.0, strict_timing=True).run()


def test_a_late_reclaim_while_a_live_worker_was_told_nothing_fails(tmp_path: Path) -> None:
    """Leased again 3.4 s after the kill; w1g0 was answered an empty lease 3.25 s after it."""
    result = strict_verdict(late_release_run(again_ms=3900, idle_at_ms=3750), tmp_path)
    assert findings(result) == {("slow-release", C)}


def test_a_late_reclaim_while_every_live_worker_was_busy_passes(tmp_path: Path) -> None:
    """Leased again 3.4 s after the kill, with no worker told "nothing" once C was back in line
    (w1g0's empty answer came before that): the first worker to ask took it."""
    checker = Checker(History.load(write(late_release_run(3900, idle_at_ms=3500), tmp_path)), 2.0, True)
    result = checker.run()
    assert result["failures"] == []
    assert checker.faults[0].extra["release_busy_ms"] == [3400]  # shown apart, not judged
    assert result["figures"]["worker-kill"]["max_release_ms"] is None


def test_a_reclaim_later_than_a_busy_fleet_explains_fails(tmp_path: Path) -> None:
    result = strict_verdict(late_release_run(again_ms=500 + 3200 + 2000 + 100, idle_at_ms=None), tmp_path)
    assert findings(result) == {("slow-release", C)}


def test_a_worker_takes_a_token_that_starts_with_a_dash() -> None:
    """token_urlsafe makes one in 64 tokens start with "-": the abuse run's workers once all
    exited at start ("--token: expected one argument"), and every job read as lost."""
    from bench.chaos.chaos import token_argv
    from bench.chaos.chaos_worker import arguments

    argv = ["worker", "--urls", "http://127.0.0.1:1", "--dir", ".", "--deadline", "1", *token_argv("-x_Yz")]
    assert arguments().parse_args(argv).token == "-x_Yz"
