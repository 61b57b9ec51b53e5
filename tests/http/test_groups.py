"""Groups through HTTP (contract v1.1, "Groups (fairness)"): enqueue with a group, round-robin
leasing across groups, group caps under concurrent workers, every way a job leaves the ledger
freeing its group's slot, the per-group cap endpoint, the group listing, and waiting listings."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest

from echomq_http.store.keys import keys_of
from tests.support import (
    counts,
    enqueue,
    eventually,
    get_job,
    job_call,
    lease,
    lease_one,
    long_poll,
    wait_for_long_polls,
    woken,
)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def set_queue_cap(client: httpx.AsyncClient, queue: str, cap: int) -> None:
    ok(await client.put(f"/v1/queues/{queue}/settings", json={"group_max_in_flight": cap}))


async def enqueue_group(
    client: httpx.AsyncClient, queue: str, group: str | None, count: int, **fields: Any
) -> list[str]:
    prefix = group or "none"
    body = {"jobs": [{"payload": i, "id": f"{prefix}-{i}", "group": group, **fields} for i in range(count)]}
    if group is None:
        for job in body["jobs"]:
            del job["group"]
    answer = ok(await client.post(f"/v1/queues/{queue}/enqueue", json=body))
    return [job["id"] for job in answer["jobs"]]


async def group_of(client: httpx.AsyncClient, queue: str, job_id: str) -> str | None:
    return (await get_job(client, queue, job_id))["group"]


async def set_group(client: httpx.AsyncClient, queue: str, group: str, cap: int | None) -> httpx.Response:
    return await client.put(f"/v1/queues/{queue}/groups/{group}", json={"max_in_flight": cap})


async def groups(client: httpx.AsyncClient, queue: str, **query: Any) -> dict[str, Any]:
    return ok(await client.get(f"/v1/queues/{queue}/groups", params=query))


async def test_enqueue_keeps_the_group_and_the_job_view_shows_it(
    client: httpx.AsyncClient, queue: str
) -> None:
    created = await enqueue(client, queue, 1, id="j1", group="tenant-7")
    assert created["created"] is True
    assert await group_of(client, queue, "j1") == "tenant-7"
    again = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": 2, "id": "j1", "group": "other"})
    assert again.status_code == 200 and again.json()["created"] is False
    assert await group_of(client, queue, "j1") == "tenant-7"  # the stored job is unchanged
    await enqueue(client, queue, 3, id="j2")
    assert await group_of(client, queue, "j2") is None
    assert (await counts(client, queue))["waiting"] == 2


async def test_a_big_group_cannot_hold_the_others_back(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue_group(client, queue, "big", 50)
    await enqueue_group(client, queue, "small", 2)
    await enqueue_group(client, queue, None, 2)
    leased = [job["id"] for job in await lease(client, queue, max_jobs=6)]
    owners = [await group_of(client, queue, job_id) for job_id in leased]
    assert Counter(owners) == {"big": 2, "small": 2, None: 2}
    assert len(set(owners[:3])) == 3 and len(set(owners[3:])) == 3
    one_by_one = [(await lease_one(client, queue))["id"] for _ in range(3)]
    assert all(job_id.startswith("big-") for job_id in one_by_one)


async def test_within_a_group_priority_then_first_in_first_out(client: httpx.AsyncClient, queue: str) -> None:
    for job_id, priority in (("a", 0), ("b", 5), ("c", 0)):
        await enqueue(client, queue, job_id, id=job_id, group="g", priority=priority)
    assert [job["id"] for job in await lease(client, queue, max_jobs=3)] == ["b", "a", "c"]


async def test_group_cap_holds_under_concurrent_workers(
    client: httpx.AsyncClient, queue: str, redis_client: Any
) -> None:
    cap = 2
    await set_queue_cap(client, queue, cap)
    for group in ("a", "b", "c"):
        await enqueue_group(client, queue, group, 12)
    in_flight: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    done: list[str] = []

    async def worker(name: str) -> None:
        while len(done) < 36:
            jobs = await lease(client, queue, name, max_jobs=3)
            for job in jobs:
                group = job["id"].split("-")[0]
                in_flight[group] += 1
                peak[group] = max(peak[group], in_flight[group])
                assert in_flight[group] <= cap, f"group {group} has {in_flight[group]} in flight"
            await asyncio.sleep(0.005)
            for job in jobs:
                in_flight[job["id"].split("-")[0]] -= 1  # before the ack: the service frees it later
                assert (
                    await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"])
                ).status_code == 200
                done.append(job["id"])
            if not jobs:
                await asyncio.sleep(0.002)

    await asyncio.wait_for(asyncio.gather(*(worker(f"w{i}") for i in range(8))), 60)
    assert sorted(done) == sorted(f"{g}-{i}" for g in "abc" for i in range(12))
    assert peak == {"a": cap, "b": cap, "c": cap}
    assert (await groups(client, queue))["groups"] == []  # idle groups are forgotten


# --- every way out of the ledger frees the group's slot ---


async def ack_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"]))


async def ack_many_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    answer = ok(
        await client.post(
            f"/v1/queues/{queue}/ack", json={"acks": [{"id": job["id"], "lease_id": job["lease_id"]}]}
        )
    )
    assert answer["results"][0]["ok"] is True


async def ack_lease_next_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    answer = ok(
        await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"], lease_next={"worker": "w9"})
    )
    assert [leased["id"] for leased in answer["jobs"]] == ["g-1"]  # the freed slot, at once
    ok(await job_call(client, queue, "g-1", "ack", lease_id=answer["jobs"][0]["lease_id"]))


async def fail_retry_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    answer = ok(
        await job_call(
            client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e", retry_after_ms=0
        )
    )
    assert answer["state"] == "waiting"


async def fail_dead_letter_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    answer = ok(
        await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e", retry=False)
    )
    assert answer["state"] == "failed"


async def release_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    assert (
        ok(await job_call(client, queue, job["id"], "release", lease_id=job["lease_id"]))["state"]
        == "waiting"
    )


async def release_worker_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    assert ok(await client.post(f"/v1/queues/{queue}/workers/w1/release"))["released"] == [job["id"]]


async def lease_expiry_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    async def reclaimed() -> bool:
        return (await get_job(client, queue, job["id"]))["state"] != "active"

    await eventually(reclaimed, "the sweep to reclaim the expired lease", 30)


async def cancel_then_release_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await client.post(f"/v1/queues/{queue}/jobs/{job['id']}/cancel", json={}))
    assert (
        ok(await job_call(client, queue, job["id"], "release", lease_id=job["lease_id"]))["state"]
        == "cancelled"
    )


async def cancel_then_expiry_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await client.post(f"/v1/queues/{queue}/jobs/{job['id']}/cancel", json={}))
    await lease_expiry_path(client, queue, job)
    assert (await get_job(client, queue, job["id"]))["state"] == "cancelled"


async def fail_delayed_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    answer = ok(
        await job_call(
            client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e", retry_after_ms=60_000
        )
    )
    assert answer["state"] == "delayed"  # out of the ledger, not yet back in its group's line


async def cancel_then_fail_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await client.post(f"/v1/queues/{queue}/jobs/{job['id']}/cancel", json={}))
    answer = ok(await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e"))
    assert answer["state"] == "cancelled"  # never retried, attempts left or not


async def lease_expiry_dead_letter_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    await lease_expiry_path(client, queue, job)  # its only attempt (JOB_FIELDS): the sweep dead-letters it
    assert (await get_job(client, queue, job["id"]))["state"] == "failed"


async def max_stalls_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    # The whole settings object: the cap stays, and no stall is allowed from now on.
    ok(await client.put(f"/v1/queues/{queue}/settings", json={"group_max_in_flight": 1, "max_stalls": 0}))
    await lease_expiry_path(client, queue, job)
    view = await get_job(client, queue, job["id"])
    assert (view["state"], view["stalls"], view["attempt"]) == ("failed", 1, 1)  # attempts were left


async def cancel_then_release_worker_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await client.post(f"/v1/queues/{queue}/jobs/{job['id']}/cancel", json={}))
    # A cancelled job is not given back to waiting, so not among the released.
    assert ok(await client.post(f"/v1/queues/{queue}/workers/w1/release"))["released"] == []
    assert (await get_job(client, queue, job["id"]))["state"] == "cancelled"


PATHS = [
    ack_path,
    ack_many_path,
    ack_lease_next_path,
    fail_retry_path,
    fail_delayed_path,
    fail_dead_letter_path,
    cancel_then_fail_path,
    release_path,
    release_worker_path,
    cancel_then_release_worker_path,
    lease_expiry_path,
    lease_expiry_dead_letter_path,
    max_stalls_path,
    cancel_then_release_path,
    cancel_then_expiry_path,
]
# The paths whose jobs are made their own way (the others take the defaults: 3 attempts).
JOB_FIELDS: dict[Any, dict[str, Any]] = {lease_expiry_dead_letter_path: {"max_attempts": 1}}


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
async def test_every_way_out_of_the_ledger_frees_the_group_slot(
    client: httpx.AsyncClient, queue: str, redis_client: Any, path: Any
) -> None:
    await set_queue_cap(client, queue, 1)
    await enqueue_group(client, queue, "g", 2, **JOB_FIELDS.get(path, {}))
    job = await lease_one(client, queue, lease_ms=1000)
    assert await lease(client, queue) == []  # the group is at its cap
    await path(client, queue, job)
    listed = {row["group"]: row for row in (await groups(client, queue))["groups"]}
    expected_active = 0
    assert listed.get("g", {"active": 0})["active"] == expected_active
    if path is not ack_lease_next_path:
        again = await lease(client, queue)
        assert len(again) == 1 and again[0]["id"].startswith("g-")


async def cancel_waiting(client: httpx.AsyncClient, queue: str, job_id: str) -> None:
    assert ok(await client.post(f"/v1/queues/{queue}/jobs/{job_id}/cancel", json={}))["state"] == "cancelled"


async def delete_waiting(client: httpx.AsyncClient, queue: str, job_id: str) -> None:
    response = await client.delete(f"/v1/queues/{queue}/jobs/{job_id}")
    assert response.status_code == 204, response.text


async def group_row(client: httpx.AsyncClient, queue: str, group: str) -> tuple[int, int]:
    [row] = [row for row in (await groups(client, queue))["groups"] if row["group"] == group]
    return row["waiting"], row["active"]


@pytest.mark.parametrize("remove", [cancel_waiting, delete_waiting], ids=lambda remove: remove.__name__)
async def test_a_waiting_grouped_job_taken_out_leaves_its_group_whole(
    client: httpx.AsyncClient, queue: str, remove: Any
) -> None:
    """A waiting job never held a slot: taking it out frees none and costs none."""
    await set_queue_cap(client, queue, 1)
    await enqueue_group(client, queue, "g", 3)
    held = await lease_one(client, queue)  # g-0: the group at its cap, g-1 and g-2 waiting
    await remove(client, queue, "g-1")
    assert await group_row(client, queue, "g") == (1, 1)
    assert (await counts(client, queue))["waiting"] == 1
    assert await lease(client, queue, max_jobs=3) == []  # still at its cap: no slot was freed
    ok(await job_call(client, queue, "g-0", "ack", lease_id=held["lease_id"]))
    [second] = await lease(client, queue, max_jobs=3)
    assert second["id"] == "g-2"  # the slot is there, and the removed job is not leased

    # The group's last waiting job, taken out while the group is at its cap: nothing stale is
    # left of the group, and a new job of it leases as the slot frees.
    await enqueue(client, queue, 3, id="g-3", group="g")
    await remove(client, queue, "g-3")
    assert await group_row(client, queue, "g") == (0, 1)
    ok(await job_call(client, queue, "g-2", "ack", lease_id=second["lease_id"]))
    assert (await groups(client, queue))["groups"] == []  # idle groups are forgotten
    await enqueue(client, queue, 4, id="g-4", group="g")
    assert [job["id"] for job in await lease(client, queue, max_jobs=3)] == ["g-4"]


async def test_a_long_poll_wakes_when_a_capped_group_gets_room(
    client: httpx.AsyncClient, queue: str, redis_client: Any, wake_ups_only: None
) -> None:
    await set_queue_cap(client, queue, 1)
    await enqueue_group(client, queue, "g", 2)
    job = await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    ok(await job_call(client, queue, job["id"], "ack", lease_id=job["lease_id"]))
    assert [leased["id"] for leased in await woken(poll)] == ["g-1"]


async def test_deleting_the_queue_leaves_no_group_key(
    client: httpx.AsyncClient, queue: str, redis_client: Any
) -> None:
    await set_queue_cap(client, queue, 1)
    await enqueue_group(client, queue, "a", 3)
    await enqueue_group(client, queue, "b", 2)
    await set_group(client, queue, "c", 4)
    await lease(client, queue, max_jobs=5)
    assert (await client.delete(f"/v1/queues/{queue}", params={"force": "true"})).status_code == 204
    assert [key async for key in redis_client.scan_iter(match=keys_of(queue).prefix + "*")] == []
    assert (await groups(client, queue))["groups"] == []


# --- the per-group cap and the listing ---


async def test_a_group_cap_of_its_own(client: httpx.AsyncClient, queue: str, redis_client: Any) -> None:
    await set_queue_cap(client, queue, 1)
    answer = await set_group(client, queue, "vip", 3)
    assert answer.status_code == 200 and answer.json() == {"group": "vip", "max_in_flight": 3}
    await enqueue_group(client, queue, "vip", 5)
    await enqueue_group(client, queue, "std", 5)
    leased = await lease(client, queue, max_jobs=10)
    assert Counter(job["id"].split("-")[0] for job in leased) == {"vip": 3, "std": 1}
    page = await groups(client, queue)
    assert page == {
        "groups": [
            {"group": "std", "waiting": 4, "active": 1, "max_in_flight": None, "effective_max_in_flight": 1},
            {"group": "vip", "waiting": 2, "active": 3, "max_in_flight": 3, "effective_max_in_flight": 3},
        ],
        "next_cursor": None,
    }
    assert ok(await set_group(client, queue, "vip", None)) == {"group": "vip", "max_in_flight": None}
    assert ok(await set_group(client, queue, "vip", None)) == {"group": "vip", "max_in_flight": None}
    assert (await groups(client, queue))["groups"][1]["effective_max_in_flight"] == 1


async def test_the_group_listing_pages_by_name(client: httpx.AsyncClient, queue: str) -> None:
    for group in ("d", "b", "a", "c", "e"):
        await enqueue_group(client, queue, group, 1)
    names: list[str] = []
    page = await groups(client, queue, limit=2)
    while True:
        names += [row["group"] for row in page["groups"]]
        if page["next_cursor"] is None:
            break
        page = await groups(client, queue, limit=2, cursor=page["next_cursor"])
    assert names == ["a", "b", "c", "d", "e"]


async def test_waiting_listing_pages_through_the_groups(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 0, id="top", priority=9)
    await enqueue(client, queue, 0, id="plain")
    await enqueue_group(client, queue, "b", 2)
    await enqueue_group(client, queue, "a", 3)
    expected = ["top", "plain", "a-0", "a-1", "a-2", "b-0", "b-1"]
    for limit in (1, 2, 3, 100):
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"state": "waiting", "limit": limit}
            if cursor:
                params["cursor"] = cursor
            page = ok(await client.get(f"/v1/queues/{queue}/jobs", params=params))
            seen += [job["id"] for job in page["jobs"]]
            assert all(
                job["group"] == (job["id"].split("-")[0] if "-" in job["id"] else None)
                for job in page["jobs"]
            )
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == expected, limit
    assert (await counts(client, queue))["waiting"] == 7


async def session_lapse_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await client.post(f"/v1/queues/{queue}/workers/w1/heartbeat", json={"ttl_ms": 1000}))

    async def reclaimed() -> bool:
        return (await get_job(client, queue, job["id"]))["state"] != "active"

    await eventually(reclaimed, "the sweep to take the lapsed session's job", 30)


async def session_end_path(client: httpx.AsyncClient, queue: str, job: dict[str, Any]) -> None:
    ok(await client.post(f"/v1/queues/{queue}/workers/w1/heartbeat", json={}))
    assert ok(await client.delete(f"/v1/queues/{queue}/workers/w1"))["released"] == [job["id"]]


@pytest.mark.parametrize("path", [session_lapse_path, session_end_path], ids=lambda path: path.__name__)
async def test_a_session_ending_frees_the_group_slot(
    client: httpx.AsyncClient, queue: str, path: Any
) -> None:
    """The lease is long: only the session's lapse or end can take the job out of the ledger."""
    await set_queue_cap(client, queue, 1)
    await enqueue_group(client, queue, "g", 2)
    job = await lease_one(client, queue, lease_ms=60_000)
    assert await lease(client, queue, "w2") == []  # the group is at its cap
    await path(client, queue, job)
    listed = {row["group"]: row for row in (await groups(client, queue))["groups"]}
    assert listed["g"]["active"] == 0
    again = await lease(client, queue, "w2", max_jobs=2)
    assert len(again) == 1


async def test_a_resume_wakes_long_polls_when_only_grouped_jobs_wait(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None
) -> None:
    await enqueue_group(client, queue, "g", 1)
    ok(await client.post(f"/v1/queues/{queue}/pause"))
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    ok(await client.post(f"/v1/queues/{queue}/resume"))
    assert [leased["id"] for leased in await woken(poll)] == ["g-0"]


async def test_a_raised_queue_cap_wakes_long_polls_when_only_grouped_jobs_wait(
    client: httpx.AsyncClient, queue: str, wake_ups_only: None
) -> None:
    await set_queue_cap(client, queue, 1)
    await enqueue_group(client, queue, "g", 2)
    await lease_one(client, queue)
    poll = long_poll(client, queue, "w2")
    await wait_for_long_polls(client, 1)
    await set_queue_cap(client, queue, 2)
    assert [leased["id"] for leased in await woken(poll)] == ["g-1"]
