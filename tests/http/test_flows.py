"""Flows through HTTP (POST /v1/flows): a parent waits in waiting_children until its children, in
other queues, have finished, and moves in the call that finishes the last one (on a Cluster,
where they live in other slots, through the child queue's outbox within the sweep interval and
a second); the failure policies, idempotent repeats, job_exists with nothing made, the tree's
limits, and a parent's cancel and a child's deletion. Who may make a flow:
tests/http/test_auth.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
from redis.asyncio import Redis as AsyncRedis

from echomq_http.core import limits
from echomq_http.store.keys import keys_of
from tests.conftest import CLUSTER, TEST_SWEEP_INTERVAL_MS
from tests.support import assert_problem, counts, enqueue, get_job, job_call, lease, lease_one
from tests.support.waiting import eventually

# On a Cluster a parent in another slot hears of its child through the sweep (the contract's
# "within sweep interval + 1 s"); on one server in the child's own call.
DELIVERY_S = TEST_SWEEP_INTERVAL_MS / 1000 + 1


def node(queue: str, job_id: str | None, *children: dict[str, Any], **fields: Any) -> dict[str, Any]:
    made: dict[str, Any] = {"queue": queue, "payload": {"job": job_id}, **fields}
    if job_id is not None:
        made["id"] = job_id
    if children:
        made["children"] = list(children)
    return made


async def create(client: httpx.AsyncClient, root: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/flows", json={"job": root})


async def made(client: httpx.AsyncClient, root: dict[str, Any], status: int = 201) -> list[dict[str, Any]]:
    response = await create(client, root)
    assert response.status_code == status, response.text
    return response.json()["jobs"]


async def parent_becomes(client: httpx.AsyncClient, queue: str, job_id: str, state: str) -> dict[str, Any]:
    """The parent's view once it is in this state: at once on one server (the child's call moved
    it), within DELIVERY_S on a Cluster."""
    if CLUSTER:

        async def reached() -> bool:
            return (await get_job(client, queue, job_id))["state"] == state

        await eventually(reached, f"{queue}/{job_id} {state}", timeout_s=DELIVERY_S)
    view = await get_job(client, queue, job_id)
    assert view["state"] == state, view
    return view


async def ack(client: httpx.AsyncClient, queue: str, job: dict[str, Any], result: Any = None) -> None:
    body: dict[str, Any] = {"lease_id": job["lease_id"]}
    if result is not None:
        body["result"] = result
    response = await job_call(client, queue, job["id"], "ack", **body)
    assert response.status_code == 200, response.text


async def fail_for_good(client: httpx.AsyncClient, queue: str, job: dict[str, Any], error: str) -> None:
    response = await job_call(
        client, queue, job["id"], "fail", lease_id=job["lease_id"], error=error, retry=False
    )
    assert response.status_code == 200 and response.json()["state"] == "failed", response.text


async def test_a_parent_waits_for_children_in_another_queue_and_runs_after_the_last(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    jobs = await made(client, node(queue, "report", node(other, "q1"), node(other, "q2")))
    assert jobs == [
        {"queue": queue, "id": "report", "state": "waiting_children"},
        {"queue": other, "id": "q1", "state": "waiting"},
        {"queue": other, "id": "q2", "state": "waiting"},
    ]
    parent = await get_job(client, queue, "report")
    assert parent["children"] == {"total": 2, "pending": 2, "completed": 0, "failed": 0, "ignored": 0}
    assert parent["parent"] is None
    assert (await get_job(client, other, "q1"))["parent"] == {"queue": queue, "id": "report"}
    assert await lease(client, queue) == []  # not before its children
    assert (await counts(client, queue))["waiting_children"] == 1
    listed = await client.get(f"/v1/queues/{queue}/jobs", params={"state": "waiting_children"})
    assert [job["id"] for job in listed.json()["jobs"]] == ["report"]

    first = await lease_one(client, other)
    await ack(client, other, first, {"rows": 1})
    assert (await get_job(client, queue, "report"))["state"] == "waiting_children"
    assert await lease(client, queue) == []
    second = await lease_one(client, other)
    await ack(client, other, second, {"rows": 2})
    # On one server the parent moved in the ack's own call: leasable as the ack answers.
    parent = await parent_becomes(client, queue, "report", "waiting")
    assert parent["children"] == {"total": 2, "pending": 0, "completed": 2, "failed": 0, "ignored": 0}
    assert (await counts(client, queue))["waiting_children"] == 0
    leased = await lease_one(client, queue)
    assert leased["id"] == "report"


async def test_the_same_tree_again_answers_200_and_makes_nothing_twice(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    tree = node(queue, "root", node(other, "a", node(other, "a1")), node(queue, "b"))
    first = await made(client, tree)
    assert [job["state"] for job in first] == ["waiting_children", "waiting_children", "waiting", "waiting"]
    again = await made(client, tree, status=200)
    assert again == first
    assert (await counts(client, other))["waiting"] == 1
    assert (await counts(client, queue))["waiting"] == 1
    # The middle parent runs after its own child, and the root after both of its.
    await ack(client, other, await lease_one(client, other))  # a1
    await parent_becomes(client, other, "a", "waiting")  # same queue: in the ack's call anywhere
    await ack(client, other, await lease_one(client, other))  # a
    assert (await get_job(client, queue, "root"))["state"] == "waiting_children"
    await ack(client, queue, await lease_one(client, queue))  # b
    await parent_becomes(client, queue, "root", "waiting")
    assert (await lease_one(client, queue))["id"] == "root"


async def test_a_child_dead_lettered_fails_its_parent_unless_it_is_ignored(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    await made(client, node(queue, "strict", node(other, "breaks")))
    await fail_for_good(client, other, await lease_one(client, other), "disk full")
    parent = await parent_becomes(client, queue, "strict", "failed")
    assert parent["error"] == f"child_failed: {other}/breaks: disk full"
    assert parent["children"]["failed"] == 1

    await made(
        client, node(queue, "lenient", node(other, "may-break", on_failure="ignore"), node(other, "fine"))
    )
    jobs = {job["payload"]["job"]: job for job in await lease(client, other, max_jobs=2)}
    await fail_for_good(client, other, jobs["may-break"], "timeout")
    assert (await get_job(client, queue, "lenient"))["state"] == "waiting_children"
    await ack(client, other, jobs["fine"])
    parent = await parent_becomes(client, queue, "lenient", "waiting")
    assert parent["children"] == {"total": 2, "pending": 0, "completed": 1, "failed": 0, "ignored": 1}


async def test_a_node_whose_id_is_another_job_refuses_the_flow_and_makes_nothing(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    await enqueue(client, other, id="taken")
    response = await create(client, node(queue, "parent", node(other, "fresh"), node(other, "taken")))
    assert_problem(response, 409, "job_exists")
    assert (await client.get(f"/v1/queues/{queue}/jobs/parent")).status_code == 404
    assert (await client.get(f"/v1/queues/{other}/jobs/fresh")).status_code == 404
    # A different tree under an existing root id is another job too.
    await made(client, node(queue, "root", node(other, "one")))
    assert_problem(await create(client, node(queue, "root", node(other, "two"))), 409, "job_exists")


async def test_a_tree_over_the_limits_or_naming_a_job_twice_is_400(
    client: httpx.AsyncClient, queue: str
) -> None:
    twice = node(queue, "p", node(queue, "same"), node(queue, "same"))
    assert_problem(await create(client, twice), 400, "invalid_request")
    deep: dict[str, Any] = node(queue, "leaf")
    for level in range(limits.MAX_FLOW_DEPTH):
        deep = node(queue, f"level-{level}", deep)
    assert_problem(await create(client, deep), 400, "invalid_request")  # 11 levels
    wide = node(queue, "wide", *(node(queue, None) for _ in range(limits.MAX_FLOW_NODES)))
    assert_problem(await create(client, wide), 400, "invalid_request")  # 1001 nodes
    with_parent = node(queue, "p", node(queue, "c", parent={"queue": queue, "id": "p"}))
    assert_problem(await create(client, with_parent), 400, "invalid_request")
    assert_problem(
        await create(client, node(queue, "p", node(queue, "c", on_failure="maybe"))), 400, "invalid_request"
    )
    assert (await client.get(f"/v1/queues/{queue}/jobs/p")).status_code == 404


async def test_a_parent_cancelled_while_waiting_is_cancelled_at_once_and_its_children_go_on(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    await made(client, node(queue, "parent", node(other, "child")))
    response = await job_call(client, queue, "parent", "cancel")
    assert response.status_code == 200 and response.json()["state"] == "cancelled", response.text
    await ack(client, other, await lease_one(client, other))
    assert (await get_job(client, queue, "parent"))["state"] == "cancelled"
    assert await lease(client, queue) == []


async def test_a_child_deleted_before_it_finished_counts_as_a_failure_for_its_policy(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    await made(client, node(queue, "parent", node(other, "gone", on_failure="ignore"), node(other, "stays")))
    assert (await client.delete(f"/v1/queues/{other}/jobs/gone")).status_code == 204

    async def counted() -> bool:
        return (await get_job(client, queue, "parent"))["children"]["ignored"] == 1

    await eventually(counted, "the deletion counted", timeout_s=DELIVERY_S)
    assert (await get_job(client, queue, "parent"))["state"] == "waiting_children"
    await ack(client, other, await lease_one(client, other))
    await parent_becomes(client, queue, "parent", "waiting")


async def children_of(client: httpx.AsyncClient, queue: str, job_id: str, **params: Any) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue}/jobs/{job_id}/children", params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_children_list_page_by_page_with_what_each_handed_the_parent(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    await made(
        client,
        node(queue, "sum", node(other, "c1"), node(other, "c2", on_failure="ignore"), node(queue, "c3")),
    )
    jobs = {job["id"]: job for job in await lease(client, other, max_jobs=2)}
    await ack(client, other, jobs["c1"], {"n": 1})
    await fail_for_good(client, other, jobs["c2"], "bad row")

    async def both_told() -> bool:
        return (await get_job(client, queue, "sum"))["children"]["pending"] == 1

    await eventually(both_told, "the parent told of c1 and c2", timeout_s=DELIVERY_S)
    first = await children_of(client, queue, "sum", limit=2)
    assert first["children"] == [
        {"queue": other, "id": "c1", "state": "completed", "result": {"n": 1}},
        {"queue": other, "id": "c2", "state": "failed", "error": "bad row"},
    ]
    second = await children_of(client, queue, "sum", cursor=first["next_cursor"])
    assert second == {"children": [{"queue": queue, "id": "c3", "state": "waiting"}], "next_cursor": None}
    # The results are the parent's: a child gone (deleted after it finished) still lists with them.
    assert (await client.delete(f"/v1/queues/{other}/jobs/c1")).status_code == 204
    listed = await children_of(client, queue, "sum")
    assert listed["children"][0] == {"queue": other, "id": "c1", "state": "completed", "result": {"n": 1}}
    assert (await children_of(client, queue, "c3")) == {"children": [], "next_cursor": None}  # a leaf
    assert_problem(await client.get(f"/v1/queues/{queue}/jobs/nope/children"), 404, "job_not_found")
    bad = await client.get(f"/v1/queues/{queue}/jobs/sum/children", params={"cursor": "x1"})
    assert_problem(bad, 400, "invalid_request")


async def test_deleting_a_childs_queue_tells_the_parent_of_each_unfinished_child(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    other = other_queue
    await made(client, node(queue, "strict", node(other, "s1")))
    await made(client, node(queue, "lenient", node(other, "l1", on_failure="ignore"), node(queue, "l2")))
    await lease_one(client, other)  # one of them in flight: deleted too (force)
    assert (await client.delete(f"/v1/queues/{other}", params={"force": "true"})).status_code == 204
    strict = await parent_becomes(client, queue, "strict", "failed")
    assert strict["error"] == f"child_failed: {other}/s1: deleted"

    async def told() -> bool:
        return (await get_job(client, queue, "lenient"))["children"]["ignored"] == 1

    await eventually(told, "the lenient parent told", timeout_s=DELIVERY_S)
    await ack(client, queue, await lease_one(client, queue))  # l2
    await parent_becomes(client, queue, "lenient", "waiting")
    assert (await children_of(client, queue, "lenient"))["children"][0]["state"] == "deleted"


async def test_a_creation_cut_short_is_finished_by_the_service_itself(
    client: httpx.AsyncClient, redis_client: AsyncRedis, queue: str, other_queue: str
) -> None:
    """A creation that died after writing its record (and maybe some jobs): the sweep makes the
    flow from the record once it is FLOW_REPLAY_AFTER_MS old (here: aged by hand)."""
    other = other_queue
    tree = node(queue, "report", node(other, "part-1"), node(other, "part-2"))
    keys = keys_of(queue, CLUSTER)
    seconds, _ = await redis_client.time()
    old_ms = seconds * 1000 - limits.FLOW_REPLAY_AFTER_MS - 1000
    await redis_client.set(keys.flow_record("report"), json.dumps(tree))
    await redis_client.zadd(keys.flows, {"report": old_ms})
    await redis_client.zadd(keys.due, {queue: old_ms})
    await counts(client, queue)  # a call on the queue: on a Cluster the service learns its slot's due index

    async def made_by_the_sweep() -> bool:
        return (await client.get(f"/v1/queues/{queue}/jobs/report")).status_code == 200

    await eventually(made_by_the_sweep, "the flow made by the sweep", timeout_s=DELIVERY_S + 5)
    assert (await get_job(client, queue, "report"))["children"]["pending"] == 2
    assert {job["id"] for job in await lease(client, other, max_jobs=5)} == {"part-1", "part-2"}

    async def record_dropped() -> bool:
        return not await redis_client.exists(keys.flow_record("report"), keys.flows)

    await eventually(record_dropped, "the record dropped", timeout_s=DELIVERY_S + 5)
    assert await made(client, tree, status=200) == [  # the request's own repeat finds it whole
        {"queue": queue, "id": "report", "state": "waiting_children"},
        {"queue": other, "id": "part-1", "state": "active"},
        {"queue": other, "id": "part-2", "state": "active"},
    ]


async def test_a_parent_failed_by_a_child_is_not_redriven_to_run_before_its_children(
    client: httpx.AsyncClient, queue: str, other_queue: str
) -> None:
    """Its redrive (back to waiting for its children) is not built yet: until it is, a redrive
    leaves such a parent failed rather than let it run early; other dead letters go on."""
    other = other_queue
    await made(client, node(queue, "parent", node(other, "breaks"), node(other, "still-running")))
    await fail_for_good(client, other, await lease_one(client, other), "boom")
    await parent_becomes(client, queue, "parent", "failed")
    await enqueue(client, queue, id="plain", max_attempts=1)
    await fail_for_good(client, queue, await lease_one(client, queue), "plain error")
    for body in ({"ids": ["parent", "plain"]}, {}):
        response = await client.post(f"/v1/queues/{queue}/failed/retry", json=body)
        assert response.status_code == 200, response.text
        assert "parent" not in response.json()["retried"]
        assert (await get_job(client, queue, "parent"))["state"] == "failed"
    assert (await get_job(client, queue, "plain"))["state"] in ("waiting", "active")
