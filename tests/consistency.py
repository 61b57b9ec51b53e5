"""A read-only check that a queue's Redis state is whole: every job in exactly one structure that
matches its state, and the ledger, deadlines, locks and holdings in agreement. Used after
killing processes at random instants, to show that no transition is ever half-done."""

from __future__ import annotations

from collections import Counter

import redis

from echomq_http.store.keys import HELD_SUFFIX, JOB_SUFFIX, QueueKeys


def violations(client: redis.Redis, queue: str) -> list[str]:
    keys = QueueKeys.for_queue(queue)
    text = lambda values: [v.decode() for v in values]  # noqa: E731
    entries = text(client.lrange(keys.wait, 0, -1))
    wait = [entry for entry in entries if not entry.startswith(":")]  # tombstones: deleted or cancelled
    tombstones = len(entries) - len(wait)
    active = text(client.lrange(keys.active, 0, -1))
    members = {
        "waiting": wait + text(client.zrange(keys.prio, 0, -1)),
        "delayed": text(client.zrange(keys.delayed, 0, -1)),
        "active": active,
        "completed": text(client.zrange(keys.completed, 0, -1)),
        "failed": text(client.zrange(keys.failed, 0, -1)),
        "cancelled": text(client.zrange(keys.cancelled, 0, -1)),
    }
    deadlines = set(text(client.zrange(keys.deadlines, 0, -1)))
    workers = set(text(client.smembers(keys.workers)))
    job_ids = {
        key.decode()[len(keys.prefix) : -len(JOB_SUFFIX)]
        for key in client.scan_iter(match=keys.prefix + "*" + JOB_SUFFIX, count=1000)
    }
    holds = {
        key.decode()[len(keys.prefix) : -len(HELD_SUFFIX)]: set(text(client.zrange(key, 0, -1)))
        for key in client.scan_iter(match=keys.prefix + "*" + HELD_SUFFIX, count=1000)
    }
    problems: list[str] = []
    counted = int(client.hget(keys.meta, "wait_tombstones") or 0)
    if counted != tombstones:
        problems.append(f"{tombstones} tombstones in wait, {counted} counted")
    for name, ids in (("wait", wait), ("active", active)):
        problems += [f"{job} twice in {name}" for job, n in Counter(ids).items() if n > 1]
    where: dict[str, list[str]] = {}
    for state, ids in members.items():
        for job in ids:
            where.setdefault(job, []).append(state)
    problems += [f"{job} in {states} but has no hash" for job, states in where.items() if job not in job_ids]
    for job in job_ids:
        fields = {k.decode(): v.decode() for k, v in client.hgetall(keys.job(job)).items() if k != b"payload"}
        state = fields.get("state")
        if where.get(job) != [state]:
            problems.append(f"{job}: state {state} but found in {where.get(job, [])}")
        lock = client.get(keys.lock(job))
        if state == "active":
            worker = fields.get("worker")
            if job not in deadlines:
                problems.append(f"{job}: active without a deadline")
            if worker is None or job not in holds.get(worker, set()) or worker not in workers:
                problems.append(f"{job}: active but not attributed to its worker {worker}")
            if lock is not None and lock.decode() != f"{fields.get('lease_id')}:{worker}":
                problems.append(f"{job}: lock {lock!r} does not name its lease")
        else:
            if job in deadlines or lock is not None:
                problems.append(f"{job}: {state} but still has a deadline or lock")
            if any(job in held for held in holds.values()):
                problems.append(f"{job}: {state} but still held by a worker")
    problems += [f"worker {w} in the workers set holds nothing" for w in workers if not holds.get(w)]
    problems += [f"deadline for {job}, which is not in the ledger" for job in deadlines - set(active)]
    return problems
