"""GET /v1/queues/{queue}/jobs: the job listing through HTTP. Each state's order, paging to the end,
paging while jobs move (every job that stays in the state is listed exactly once), ties of equal
finish times, and bad cursors. (Cancelled jobs cannot be made through the API yet: their listing
is tested at the script level, tests/lua/test_lua_list.py.)"""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.http.test_bad_input import assert_problem


def base(queue: str) -> str:
    return f"/v1/queues/{queue}"


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, f"{response.request.url}: {response.status_code} {response.text}"
    return response.json()


async def page(
    client: httpx.AsyncClient, queue: str, state: str, limit: int | None = None, cursor: str | None = None
) -> tuple[list[str], str | None]:
    params: dict[str, Any] = {"state": state}
    if limit is not None:
        params["limit"] = limit
    if cursor is not None:
        params["cursor"] = cursor
    body = ok(await client.get(f"{base(queue)}/jobs", params=params))
    assert all(job["state"] == state and job["queue"] == queue for job in body["jobs"])
    return [job["id"] for job in body["jobs"]], body["next_cursor"]


async def list_all(client: httpx.AsyncClient, queue: str, state: str, limit: int) -> list[str]:
    ids, cursor = await page(client, queue, state, limit)
    while cursor is not None:
        more, cursor = await page(client, queue, state, limit, cursor)
        ids += more
    return ids


async def enqueue(client: httpx.AsyncClient, queue: str, ids: list[str], **options: Any) -> None:
    jobs = [{"id": job_id, "payload": {"n": job_id}, **options} for job_id in ids]
    ok(await client.post(f"{base(queue)}/enqueue", json={"jobs": jobs}))


async def lease(client: httpx.AsyncClient, queue: str, max_jobs: int) -> list[dict[str, Any]]:
    body = ok(await client.post(f"{base(queue)}/lease", json={"worker": "w1", "max_jobs": max_jobs}))
    return body["jobs"]  # type: ignore[no-any-return]


async def lease_all(client: httpx.AsyncClient, queue: str, count: int) -> list[dict[str, Any]]:
    """count jobs leased one per call: each lease its own fence, in order."""
    return [job for _ in range(count) for job in await lease(client, queue, 1)]


async def ack_many(client: httpx.AsyncClient, queue: str, jobs: list[dict[str, Any]]) -> None:
    acks = [{"id": job["id"], "lease_id": job["lease_id"]} for job in jobs]
    body = ok(await client.post(f"{base(queue)}/ack", json={"acks": acks}))
    assert all(result["ok"] for result in body["results"])


def numbered(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(count)]


# --- orders and paging to the end ---------------------------------------------------------------


async def test_each_state_in_its_order_paged_to_the_end(client: httpx.AsyncClient, queue: str) -> None:
    plain, urgent = numbered("p", 9), numbered("u", 4)
    await enqueue(client, queue, plain)
    await enqueue(client, queue, urgent, priority=7)
    later = numbered("d", 5)
    for i, job_id in enumerate(later):  # due in the reverse of their ids' order
        await enqueue(client, queue, [job_id], delay_ms=3_600_000 - i * 1000)
    line = urgent + plain
    for limit in (1, 4, 7, 100):
        assert await list_all(client, queue, "waiting", limit) == line
        assert await list_all(client, queue, "delayed", limit) == later[::-1]

    leased = await lease_all(client, queue, 8)
    assert [job["id"] for job in leased] == line[:8]
    assert await list_all(client, queue, "active", 3) == line[:8]
    assert await list_all(client, queue, "waiting", 2) == line[8:]

    for job in leased[:3]:  # completed one per call: the latest first
        await ack_many(client, queue, [job])
    for job in leased[3:5]:
        failure = {"lease_id": job["lease_id"], "error": "boom", "retry": False}
        ok(await client.post(f"{base(queue)}/jobs/{job['id']}/fail", json=failure))
    completed = await list_all(client, queue, "completed", 2)
    assert sorted(completed) == sorted(line[:3])
    finished = {
        job_id: ok(await client.get(f"{base(queue)}/jobs/{job_id}"))["updated_at"] for job_id in completed
    }
    assert [finished[job_id] for job_id in completed] == sorted(finished.values(), reverse=True)
    assert sorted(await list_all(client, queue, "failed", 1)) == sorted(line[3:5])
    assert await page(client, queue, "cancelled") == ([], None)


async def test_the_default_limit_and_the_last_page(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, numbered("j", 101))
    first, cursor = await page(client, queue, "waiting")
    assert len(first) == 100 and cursor is not None
    rest, cursor = await page(client, queue, "waiting", cursor=cursor)
    assert rest == ["j100"] and cursor is None
    full, cursor = await page(client, queue, "waiting", limit=101)
    assert len(full) == 101 and cursor is None


async def test_an_unknown_queue_lists_nothing(client: httpx.AsyncClient, queue: str) -> None:
    for state in ("waiting", "delayed", "active", "completed", "failed", "cancelled"):
        assert await page(client, queue, state, 5) == ([], None)


async def test_the_view_is_the_job_view(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, ["one"], priority=3)
    body = ok(await client.get(f"{base(queue)}/jobs", params={"state": "waiting"}))
    assert body == {"jobs": [ok(await client.get(f"{base(queue)}/jobs/one"))], "next_cursor": None}


# --- paging while jobs move -----------------------------------------------------------------


async def test_waiting_paged_while_jobs_are_leased_and_enqueued(
    client: httpx.AsyncClient, queue: str
) -> None:
    first_ids = numbered("a", 60)
    await enqueue(client, queue, first_ids)
    await enqueue(client, queue, numbered("u", 5), priority=2)
    seen: list[str] = []
    left: set[str] = set()
    ids, cursor = await page(client, queue, "waiting", 7)
    seen += ids
    batch = 0
    while cursor is not None:
        left |= {job["id"] for job in await lease(client, queue, 4)}  # from the front of the line
        await enqueue(client, queue, numbered(f"n{batch}-", 3))
        batch += 1
        ids, cursor = await page(client, queue, "waiting", 7, cursor)
        seen += ids
    assert all(count == 1 for count in Counter(seen).values()), "a job listed twice"
    stayed = [job_id for job_id in [*numbered("u", 5), *first_ids] if job_id not in left]
    assert [job_id for job_id in seen if job_id in stayed] == stayed, "a job that stayed was skipped"


async def test_active_paged_while_jobs_are_acked_and_leased(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, numbered("j", 60))
    held = await lease_all(client, queue, 40)
    order = [job["id"] for job in held]
    acked: set[str] = set()
    seen, cursor = await page(client, queue, "active", 5)
    step = 0
    while cursor is not None:
        done = held[step * 3 : step * 3 + 3] + held[-(step + 1) : len(held) - step]
        todo = [job for job in done if job["id"] not in acked]
        if todo:
            await ack_many(client, queue, todo)
        acked |= {job["id"] for job in done}
        await lease(client, queue, 2)
        step += 1
        ids, cursor = await page(client, queue, "active", 5, cursor)
        seen += ids
    assert len(seen) == len(set(seen)), "a job listed twice"
    stayed = [job_id for job_id in order if job_id not in acked]
    assert [job_id for job_id in seen if job_id in stayed] == stayed


async def test_completed_paged_while_jobs_are_deleted_and_completed(
    client: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(client, queue, numbered("j", 80))
    held = await lease_all(client, queue, 80)
    for start in range(0, 60, 10):  # six acks, ten jobs each (likely ties within each)
        await ack_many(client, queue, held[start : start + 10])
    before = await list_all(client, queue, "completed", 1000)
    deleted: set[str] = set()
    seen, cursor = await page(client, queue, "completed", 4)
    step = 0
    while cursor is not None:
        for job_id in (before[step], before[-(step + 1)]):  # listed ones and ones not yet listed
            if job_id not in deleted:
                response = await client.delete(f"{base(queue)}/jobs/{job_id}")
                assert response.status_code == 204
                deleted.add(job_id)
        if step < 2:
            await ack_many(client, queue, held[60 + step * 10 : 70 + step * 10])  # newer: listed first
        step += 1
        ids, cursor = await page(client, queue, "completed", 4, cursor)
        seen += ids
    assert len(seen) == len(set(seen)), "a job listed twice"
    stayed = [job_id for job_id in before if job_id not in deleted]
    assert [job_id for job_id in seen if job_id in stayed] == stayed


async def test_equal_finish_times_page_exactly(client: httpx.AsyncClient, queue: str) -> None:
    ids = numbered("t", 50)
    await enqueue(client, queue, ids)
    await ack_many(client, queue, await lease(client, queue, 50))  # completed in the same ms
    listed = await list_all(client, queue, "completed", 1)
    assert sorted(listed) == ids
    for limit in (3, 7, 49, 50):
        assert await list_all(client, queue, "completed", limit) == listed


# --- bad cursors ----------------------------------------------------------------------------------


async def test_a_cursor_of_another_state_or_garbage_is_400(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, numbered("j", 3))
    await enqueue(client, queue, numbered("d", 3), delay_ms=60_000)
    _, waiting_cursor = await page(client, queue, "waiting", 1)
    _, delayed_cursor = await page(client, queue, "delayed", 1)
    assert waiting_cursor is not None and delayed_cursor is not None
    forged = base64.urlsafe_b64encode(b'["waiting","z","(1","j000"]').decode().rstrip("=")
    for state, cursor in (
        ("delayed", waiting_cursor),
        ("waiting", delayed_cursor),
        ("completed", delayed_cursor),
        ("waiting", "garbage!"),
        ("waiting", waiting_cursor[:-2]),
        ("waiting", forged),
        ("waiting", "x" * 2000),
    ):
        response = await client.get(f"{base(queue)}/jobs", params={"state": state, "cursor": cursor})
        assert_problem(response, 400, "invalid_request", "cursor")


@pytest.mark.parametrize("state", [None, "", "Waiting", "dead", "waiting,active"])
async def test_a_missing_or_unknown_state_is_400(
    client: httpx.AsyncClient, queue: str, state: str | None
) -> None:
    params = {} if state is None else {"state": state}
    response = await client.get(f"{base(queue)}/jobs", params=params)
    assert_problem(response, 400, "invalid_request", "state")
