"""The sweep, the operator scripts (delete, set-paused, redrive), the read scripts (counts, ledger,
workers, failed-page) and the loader."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from echomq_http.core.errors import ScriptCode
from echomq_http.store.backends import backend_for
from echomq_http.store.scripts import Scripts, lua_dir, render

NOT_FOUND, JOB_ACTIVE = ScriptCode.JOB_NOT_FOUND.value, ScriptCode.JOB_ACTIVE.value
OPERATIONS = [
    "ack",
    "ack-lease",
    "admit-queue",
    "cancel",
    "children",
    "counts",
    "create-flow",
    "delete",
    "delete-queue",
    "delete-schedule",
    "deliver",
    "due-schedules",
    "enqueue",
    "fail",
    "failed-page",
    "fire-schedules",
    "flow-record",
    "groups",
    "heartbeat",
    "job",
    "lease",
    "lease-merged",
    "ledger",
    "list-jobs",
    "outbox-done",
    "promote",
    "put-schedule",
    "quiet",
    "redrive",
    "release",
    "release-worker",
    "schedule",
    "schedules",
    "search-jobs",
    "session",
    "set-group",
    "set-paused",
    "settings",
    "sweep",
    "trigger-schedule",
    "workers",
]
HOUR_MS = 3600 * 1000


async def leased(q, *job_ids: str, worker: str = "w1", **options):
    """Enqueue the jobs and lease them one by one, in distinct milliseconds; answer the leases."""
    for job_id in job_ids:
        await q.add(job_id, **options)
    jobs = []
    for job_id in job_ids:
        await q.next_ms()
        jobs.append(await q.lease_one(worker))
        assert jobs[-1].id == job_id, "another job was waiting"
    return jobs


async def failed(q, *job_ids: str, **options) -> None:
    """Dead-letter the jobs, one per millisecond, in the order given."""
    for job_id in job_ids:
        [job] = await leased(q, job_id, **options)
        assert await q.fail(job_id, job.lease_id, retry=False, error=f"{job_id} failed") == [1, "failed", 1]


# --- sweep ---------------------------------------------------------------------------------


async def test_sweep_of_an_empty_queue_does_nothing(q):
    async with q.wake() as wake:
        assert await q.sweep() == [0, 0, 0, 0, 0]
        assert await wake.messages() == []


async def test_sweep_reclaims_only_jobs_whose_lock_is_gone(q):
    *_, c = await leased(q, "a", "b", "c")
    await q.add("w")
    await q.expire_lease("b", deadline_ms=20)
    await q.expire_lease("a", deadline_ms=10)

    async with q.wake() as wake:
        assert await q.sweep() == [2, 0, 0, 0, 0]
        assert await wake.messages() == ["2"]

    for job_id in ("a", "b"):
        stored = await q.job(job_id)
        assert (stored["state"], stored["attempt"]) == ("waiting", "1")
        assert stored["error"] == "lease expired: worker w1 stopped heartbeating"
        assert not {"worker", "lease_id", "leased_at", "lease_expires_at", "lease_ms"} & set(stored)
    assert await q.active() == ["c"]
    assert await q.zset(q.keys.deadlines) == {"c": c.lease_expires_at}
    assert await q.members(q.keys.held("w1")) == {"c"}
    assert await q.members(q.keys.workers) == {"w1"}
    assert await q.lock("c") == f"{c.lease_id}:w1"
    assert await q.line() == ["a", "b", "w"]  # the first lease to expire is first in line
    assert [(job.id, job.attempt) for job in await q.lease(max_jobs=3)] == [("a", 2), ("b", 2), ("w", 1)]


async def test_sweep_reclaims_a_lease_that_really_expired(q):
    await q.add("a")
    job = await q.lease_one(lease_ms=200)  # below the API minimum: the script does not care
    assert await q.sweep() == [0, 0, 0, 0, 0]  # not expired yet
    await q.wait_for_expiry(job)
    assert await q.sweep() == [1, 0, 0, 0, 0]
    assert (await q.job("a"))["state"] == "waiting"
    assert await q.line() == ["a"]


async def test_sweep_reclaims_to_the_front_of_the_job_priority(q):
    await leased(q, "p", priority=4)
    await q.enqueue(q.spec("same", priority=4), q.spec("top", priority=9))
    await q.expire_lease("p")
    assert await q.sweep() == [1, 0, 0, 0, 0]
    assert await q.line() == ["top", "p", "same"]


async def test_sweep_reindexes_a_job_whose_lock_still_exists(q):
    [job] = await leased(q, "a")
    await q.redis.zadd(q.keys.deadlines, {"a": 1})

    assert await q.sweep() == [0, 0, 0, 0, 0]

    # back to the lock's own expiry (now + PTTL, so within a millisecond or two of rounding)
    assert abs((await q.zset(q.keys.deadlines))["a"] - job.lease_expires_at) <= 2
    assert await q.active() == ["a"]
    assert (await q.job("a"))["state"] == "active"
    assert await q.lock("a") == f"{job.lease_id}:w1"


async def test_sweep_dead_letters_on_the_last_attempt(q):
    await leased(q, "a", max_attempts=1)
    await q.expire_lease("a")

    async with q.wake() as wake:
        assert await q.sweep() == [0, 1, 0, 0, 0]
        assert await wake.messages() == []

    stored = await q.job("a")
    assert stored["state"] == "failed"
    assert stored["error"] == "lease expired: worker w1 stopped heartbeating"
    assert await q.zset(q.keys.failed) == {"a": int(stored["finished_at"])}
    assert await q.active() == []
    assert await q.redis.exists(q.keys.deadlines, q.keys.workers, q.keys.held("w1")) == 0
    assert await q.line() == []


async def test_sweep_promotes_due_delayed_jobs(q):
    await q.enqueue(
        q.spec("due", delay_ms=60_000),
        q.spec("prio", delay_ms=60_000, priority=2),
        q.spec("later", delay_ms=60_000),
    )
    await q.make_due("due")
    await q.make_due("prio")

    async with q.wake() as wake:
        assert await q.sweep() == [0, 0, 2, 0, 0]
        assert await wake.messages() == ["2"]

    assert (await q.job("due"))["state"] == "waiting"
    assert await q.wait_list() == ["due"]
    assert await q.prio() == ["prio"]
    assert set(await q.zset(q.keys.delayed)) == {"later"}


async def test_sweep_deletes_finished_jobs_past_retention_with_their_hash(q):
    old_done, new_done = await leased(q, "old-done", "new-done")
    assert await q.ack(("old-done", old_done.lease_id), ("new-done", new_done.lease_id)) == [1, 1]
    await failed(q, "old-failed", "new-failed")
    await q.redis.zadd(q.keys.completed, {"old-done": 1000})  # finished long ago
    await q.redis.zadd(q.keys.failed, {"old-failed": 1000})

    assert await q.sweep(completed_retention_ms=HOUR_MS, failed_retention_ms=HOUR_MS) == [0, 0, 0, 2, 0]

    assert await q.job("old-done") == {}
    assert await q.job("old-failed") == {}
    assert set(await q.zset(q.keys.completed)) == {"new-done"}
    assert set(await q.zset(q.keys.failed)) == {"new-failed"}
    assert (await q.job("new-done"))["state"] == "completed"

    assert await q.sweep(completed_retention_ms=0, failed_retention_ms=HOUR_MS) == [0, 0, 0, 1, 0]
    assert await q.sweep(completed_retention_ms=HOUR_MS, failed_retention_ms=0) == [0, 0, 0, 1, 0]
    assert await q.redis.exists(q.keys.completed, q.keys.failed) == 0
    assert await q.job("new-failed") == {}


async def test_sweep_says_more_when_a_batch_is_full(q):
    await leased(q, "a", "b", "c")
    for job_id in "abc":
        await q.expire_lease(job_id)
    assert await q.sweep(batch=2) == [2, 0, 0, 0, 1]
    assert await q.sweep(batch=2) == [1, 0, 0, 0, 0]

    for job_id in ("d1", "d2"):
        await q.add(job_id, delay_ms=60_000)
        await q.make_due(job_id)
    assert await q.sweep(batch=2) == [0, 0, 2, 0, 1]

    jobs = await q.lease(max_jobs=2)
    assert await q.ack(*[(job.id, job.lease_id) for job in jobs]) == [1, 1]
    assert await q.sweep(batch=2, completed_retention_ms=0) == [0, 0, 0, 2, 1]
    assert await q.sweep(batch=2, completed_retention_ms=0) == [0, 0, 0, 0, 0]


async def test_two_concurrent_sweeps_reclaim_each_job_once(q):
    jobs = await leased(q, *[f"j{i}" for i in range(20)])
    for job in jobs:
        await q.expire_lease(job.id, deadline_ms=job.lease_expires_at - 60_000)

    replies = await asyncio.gather(q.sweep(batch=15), q.sweep(batch=15))

    # Scripts run one at a time: one sweep takes a full batch (and says more), the other the rest.
    assert sorted(replies) == [[5, 0, 0, 0, 0], [15, 0, 0, 0, 1]]
    assert await q.active() == []
    assert await q.redis.exists(q.keys.deadlines, q.keys.workers, q.keys.held("w1")) == 0
    line = await q.line()
    assert sorted(line) == sorted(job.id for job in jobs)  # each job exactly once
    assert {(await q.job(job.id))["state"] for job in jobs} == {"waiting"}
    assert {(await q.job(job.id))["attempt"] for job in jobs} == {"1"}


# --- delete --------------------------------------------------------------------------------


async def test_delete_removes_a_job_from_whichever_structure_holds_it(q):
    [done] = await leased(q, "done")
    await q.ack(("done", done.lease_id))
    await failed(q, "failed")
    await q.enqueue(
        q.spec("waiting"), q.spec("prio", priority=3), q.spec("delayed", delay_ms=60_000), q.spec("keep")
    )
    structures = {
        "waiting": q.keys.wait,
        "prio": q.keys.prio,
        "delayed": q.keys.delayed,
        "done": q.keys.completed,
        "failed": q.keys.failed,
    }

    for job_id in structures:
        assert await q.delete(job_id) == 1
        assert await q.job(job_id) == {}
    assert await q.redis.exists(*(key for key in structures.values() if key != q.keys.wait)) == 0
    assert await q.wait_list() == ["keep"]


async def test_delete_of_an_active_job_is_refused(q):
    [job] = await leased(q, "a")
    assert await q.delete("a") == JOB_ACTIVE
    assert (await q.job("a"))["state"] == "active"
    assert await q.active() == ["a"]
    assert await q.lock("a") == f"{job.lease_id}:w1"


async def test_delete_of_a_missing_job(q):
    assert await q.delete("nope") == NOT_FOUND


# --- set-paused ----------------------------------------------------------------------------


async def test_pause_and_resume(q):
    await q.enqueue(q.spec("a"), q.spec("b", priority=1), q.spec("d", delay_ms=60_000))
    async with q.wake() as wake:
        assert await q.set_paused(True) == 1
        assert await q.set_paused(True) == 1
        assert (await q.meta())["paused"] == "1"
        assert (await q.counts())[0] == 1
        assert await wake.messages() == []

        assert await q.set_paused(False) == 0
        assert "paused" not in await q.meta()
        assert await wake.messages() == ["2"]  # resuming wakes the waiters of the leasable jobs

        assert await q.set_paused(False) == 0
        assert await wake.messages() == []


async def test_resume_of_an_empty_queue_publishes_nothing(q):
    async with q.wake() as wake:
        await q.set_paused(True)
        assert await q.set_paused(False) == 0
        assert await wake.messages() == []


# --- redrive -------------------------------------------------------------------------------


async def test_redrive_all_sends_the_oldest_dead_letters_to_the_back_of_the_line(q):
    await failed(q, "f1", "f2", "f3")
    await q.add("w")

    async with q.wake() as wake:
        assert await q.redrive() == ["f1", "f2", "f3"]
        assert await wake.messages() == ["3"]

    for fence, job_id in enumerate(("f1", "f2", "f3"), start=1):
        stored = await q.job(job_id)
        assert (stored["state"], stored["attempt"], stored["fence"]) == ("waiting", "0", str(fence))
        assert not {"error", "finished_at", "redeliver"} & set(stored)
    assert await q.redis.exists(q.keys.failed) == 0
    assert await q.line() == ["w", "f1", "f2", "f3"]
    job = await q.lease_one()
    job = await q.lease_one()
    assert (job.id, job.attempt, job.fence) == ("f1", 1, 5)  # attempts reset, fence never goes back


async def test_redrive_all_takes_at_most_the_limit(q):
    await failed(q, "f1", "f2", "f3")
    assert await q.redrive(limit=2) == ["f1", "f2"]
    assert set(await q.zset(q.keys.failed)) == {"f3"}


async def test_redrive_listed_ids_skips_jobs_that_are_not_dead_letters(q):
    await failed(q, "f1", "f2")
    await q.add("w", priority=2)
    waiting = await q.job("w")

    async with q.wake() as wake:
        assert await q.redrive(["f2", "w", "nope"]) == ["f2"]
        assert await wake.messages() == ["1"]

    assert await q.job("w") == waiting
    assert await q.job("nope") == {}
    assert set(await q.zset(q.keys.failed)) == {"f1"}
    assert await q.line() == ["w", "f2"]


async def test_redrive_keeps_the_job_priority(q):
    await failed(q, "f")
    await q.redis.hset(q.keys.job("f"), "priority", 7)
    await q.add("w", priority=7)
    assert await q.redrive() == ["f"]
    assert await q.prio() == ["w", "f"]


async def test_redrive_of_nothing_publishes_nothing(q):
    async with q.wake() as wake:
        assert await q.redrive() == []
        assert await q.redrive(["nope"]) == []
        assert await wake.messages() == []


# --- read scripts --------------------------------------------------------------------------


async def test_counts(q):
    assert await q.counts() == [0, 0, 0, 0, 0, 0]
    done, _ = await leased(q, "done", "active")
    await q.ack(("done", done.lease_id))
    await failed(q, "f")
    await q.enqueue(q.spec("w"), q.spec("p", priority=1), q.spec("d", delay_ms=60_000))
    await q.set_paused(True)
    assert await q.counts() == [1, 2, 1, 1, 1, 1]


async def test_ledger_pages_oldest_first(q):
    jobs = [
        *await leased(q, "a", worker="w1"),
        *await leased(q, "b", worker="w2"),
        *await leased(q, "c", "e", worker="w1"),
        *await leased(q, "d", worker="w2"),
    ]
    entries = {
        job.id: [job.id, worker, "1", str(job.lease_expires_at - 30_000), str(job.lease_expires_at)]
        for job, worker in zip(jobs, ["w1", "w2", "w1", "w1", "w2"], strict=True)
    }
    order = ["a", "b", "c", "e", "d"]

    assert await q.ledger() == [entries[job_id] for job_id in order]
    assert await q.ledger(offset=1, limit=2) == [entries["b"], entries["c"]]
    assert await q.ledger(offset=4, limit=10) == [entries["d"]]
    assert await q.ledger(offset=5, limit=10) == []
    assert await q.ledger(worker="w1") == [entries["a"], entries["c"], entries["e"]]
    assert await q.ledger(worker="w1", offset=1, limit=1) == [entries["c"]]
    assert await q.ledger(worker="w2", offset=2) == []
    assert await q.ledger(worker="nobody") == []


async def test_ledger_of_an_empty_queue(q):
    assert await q.ledger() == []


async def test_workers_lists_who_holds_what_sorted(q):
    assert await q.workers() == []
    await leased(q, "j3", "j1", worker="w-b")
    await leased(q, "j2", worker="w-a")
    assert await q.workers() == [["w-a", ["j2"], []], ["w-b", ["j1", "j3"], []]]  # [] = no session


async def test_failed_page_most_recent_first_with_total_and_payload_sizes(q):
    assert await q.failed_page() == (0, [])
    await failed(q, "f1", payload=b"[1]")
    await failed(q, "f2", payload=b'"\xc3\xa9t\xc3\xa9"')  # sizes in bytes, not characters
    await failed(q, "f3")

    assert await q.failed_page() == (3, [("f3", 2), ("f2", 7), ("f1", 3)])
    assert await q.failed_page(offset=1, limit=1) == (3, [("f2", 7)])
    assert await q.failed_page(offset=3, limit=5) == (3, [])


async def test_failed_page_lists_a_dead_letter_whose_hash_is_gone_with_size_0(q):
    await failed(q, "f1", "f2")
    await q.redis.delete(q.keys.job("f1"))
    # The caller reads the hashes later anyway, and leaves out those that are no longer failed.
    assert await q.failed_page() == (2, [("f2", 2), ("f1", 0)])


# --- the loader ----------------------------------------------------------------------------


def test_loader_registers_every_script(redis_client):
    assert Scripts(backend_for(redis_client)).operations == OPERATIONS


@pytest.mark.parametrize(
    "name", ["lease-11.lua", "ack-lease.lua", "Lease.lua", "lease.txt.lua", "lease2.lua"]
)
def test_loader_rejects_a_file_name_that_is_not_an_operation(redis_client, tmp_path: Path, name: str):
    (tmp_path / name).write_text("return 1\n")
    with pytest.raises(ValueError, match=r"<operation>\.lua"):
        Scripts(backend_for(redis_client), tmp_path)


async def test_loader_checks_the_key_count_on_every_call(q, redis_client):
    await q.add("a")
    keys = q.keys.script_keys
    for wrong in (keys[:-1], (*keys, q.keys.prefix + "extra")):
        with pytest.raises(ValueError, match="enqueue takes 11 keys, got"):
            await q.scripts.call("enqueue", wrong, (q.keys.prefix, "[]"))
    assert await q.counts() == [0, 1, 0, 0, 0, 0]


async def test_loader_gives_a_script_the_queue_keys_and_the_registry_script_its_one(
    redis_client, tmp_path: Path
):
    (tmp_path / "pair.lua").write_text("return {KEYS[1], KEYS[11], ARGV[1]}\n")
    (tmp_path / "admit_queue.lua").write_text("return KEYS[1]\n")
    scripts = Scripts(backend_for(redis_client), tmp_path)
    assert scripts.operations == ["admit-queue", "pair"]
    keys = [f"{{t}}k{i}" for i in range(1, 12)]  # one slot
    try:
        assert await scripts.call("pair", keys, ["v"]) == [b"{t}k1", b"{t}k11", b"v"]
        assert await scripts.call("admit-queue", ["{t}registry"], []) == b"{t}registry"
        with pytest.raises(ValueError, match="pair takes 11 keys, got 1"):
            await scripts.call("pair", ["k1"], [])
        with pytest.raises(ValueError, match="admit-queue takes 1 keys, got 11"):
            await scripts.call("admit-queue", keys, [])
    finally:
        await scripts.aclose()


def test_loader_refuses_queue_keys_that_differ_from_the_key_set(redis_client, tmp_path: Path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "base.lua").write_text("local META, WAIT = KEYS[1], KEYS[2]\n")
    with pytest.raises(ValueError, match="not the queue's 11 keys"):
        Scripts(backend_for(redis_client), tmp_path)


def test_loader_hands_every_result_code_to_the_lua():
    defined: dict[str, str] = {}
    for path in lua_dir().glob("*.lua"):
        defined.update(re.findall(r"^local ([A-Z_]+) = (-?\d+)\b", render(path), re.MULTILINE))
    assert {name: int(defined[name]) for name in ScriptCode.__members__} == {
        code.name: code.value for code in ScriptCode
    }


def test_every_shipped_script_is_named_for_its_operation():
    assert sorted(path.name for path in lua_dir().glob("*.lua")) == sorted(
        f"{op.replace('-', '_')}.lua" for op in OPERATIONS
    )
