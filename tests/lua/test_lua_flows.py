"""The flow scripts called directly (lua/create_flow.lua, include/flows.lua, deliver.lua,
outbox_done.lua): a parent and its children in one queue (one slot on every backend), so each
transition is seen in the Redis keys it leaves. Across queues and slots: tests/http/test_flows.py."""

from __future__ import annotations

import json
from typing import Any

from tests.lua.conftest import LuaQueue, decoded, spec

TOKEN = "t0k3n"


def link(q: LuaQueue, parent_id: str, token: str = TOKEN) -> str:
    return f"{q.keys.prefix} {parent_id} {token}"


async def create(q: LuaQueue, *nodes: dict[str, Any], check: bool = False) -> list[Any]:
    payloads = [b'{"n":1}'] * len(nodes)
    return decoded(
        await q.call("create-flow", json.dumps(list(nodes)), *payloads, *(["check"] if check else []))
    )


def flow_node(
    job_id: str, *, parent: str | None = None, children: list[tuple[str, str]] | None = None, **fields: Any
) -> dict[str, Any]:
    node = spec(job_id)["options"] | fields
    if parent is not None:
        node["parent"] = parent
    if children:
        node["children"] = [list(child) for child in children]
        node["token"] = TOKEN
    return node


async def parent_and_children(q: LuaQueue, *child_ids: str, policy: str = "fail") -> None:
    refs = [(f"{q.name} {child}", policy) for child in child_ids]
    assert await create(q, flow_node("parent", children=refs)) == ["waiting_children", TOKEN, 1]
    made = await create(
        q, *(flow_node(child, parent=link(q, "parent"), on_failure=policy) for child in child_ids)
    )
    assert made == ["waiting", "", 1] * len(child_ids)


async def outcomes(q: LuaQueue) -> dict[str, str]:
    """The parent's KIDRES: child -> "<seq>|<status>|<policy>|<detail>"."""
    found = await q.redis.hgetall(q.keys.prefix + "parent:kidres")
    return {key.decode(): value.decode() for key, value in found.items()}


async def parent_fields(q: LuaQueue, *fields: str) -> list[str | None]:
    return decoded(await q.redis.hmget(q.keys.job("parent"), *fields))


async def test_a_parent_is_made_waiting_for_every_child_it_declares_before_they_exist(q: LuaQueue) -> None:
    await create(q, flow_node("parent", children=[(f"{q.name} a", "fail"), (f"{q.name} b", "ignore")]))
    assert await parent_fields(q, "state", "kids_total", "kids_pending", "kids_token") == [
        "waiting_children",
        "2",
        "2",
        TOKEN,
    ]
    assert decoded(await q.redis.zrange(q.keys.prefix + "parent:kids", 0, -1)) == [
        f"{q.name} a",
        f"{q.name} b",
    ]
    assert await outcomes(q) == {
        f"{q.name} a": "0|p|fail|",
        f"{q.name} b": "0|p|ignore|",
    }
    assert await q.redis.zscore(q.keys.prefix + "waiting_children", "parent") is not None
    assert await q.redis.sismember(q.keys.prefix + "parents", "parent")
    assert await q.lease(max_jobs=10) == []  # in no line


async def test_the_last_childs_ack_moves_the_parent_in_the_same_call_with_the_results(q: LuaQueue) -> None:
    await parent_and_children(q, "a", "b")
    jobs = {job.id: job for job in await q.lease(max_jobs=2)}
    assert await q.ack((jobs["a"].id, jobs["a"].lease_id, b'{"rows":1}')) == [1]
    assert await parent_fields(q, "state", "kids_pending", "kids_completed") == ["waiting_children", "1", "1"]
    assert await q.ack((jobs["b"].id, jobs["b"].lease_id)) == [1]
    assert await parent_fields(q, "state", "kids_pending", "kids_completed") == ["waiting", "0", "2"]
    assert await outcomes(q) == {f"{q.name} a": '1|c|fail|{"rows":1}', f"{q.name} b": "1|c|fail|null"}
    assert await q.redis.zscore(q.keys.prefix + "waiting_children", "parent") is None
    assert [job.id for job in await q.lease()] == ["parent"]


async def test_a_delivery_made_again_changes_nothing(q: LuaQueue) -> None:
    """The outbox's repeat after a crash between its delivery and its trim: deliver.lua applies
    an entry once (the child's outcome_seq), and outbox_done takes an entry out once."""
    await parent_and_children(q, "a", "b")
    entry = "\n".join([q.keys.prefix, "parent", TOKEN, f"{q.name} a", "1", "c", "fail", '{"ok":true}'])
    await q.redis.rpush(q.keys.outbox, entry)
    for _ in range(2):
        assert await q.call("deliver", entry) == 1
        assert await parent_fields(q, "kids_pending", "kids_completed") == ["1", "1"]
    assert await q.call("outbox-done", entry) == 1
    assert await q.call("outbox-done", entry) == 0
    assert await q.redis.llen(q.keys.outbox) == 0


async def test_a_failure_under_fail_fails_the_parent_and_under_ignore_counts_as_finished(q: LuaQueue) -> None:
    await parent_and_children(q, "a", "b", policy="ignore")
    jobs = {job.id: job for job in await q.lease(max_jobs=2)}
    assert (await q.fail(jobs["a"].id, jobs["a"].lease_id, error="no disk", retry=False))[1] == "failed"
    assert await parent_fields(q, "state", "kids_ignored", "kids_pending") == ["waiting_children", "1", "1"]
    assert await q.ack((jobs["b"].id, jobs["b"].lease_id)) == [1]
    assert await parent_fields(q, "state") == ["waiting"]


async def test_a_later_job_with_the_parents_id_never_hears_of_the_earlier_ones_children(q: LuaQueue) -> None:
    await parent_and_children(q, "a")
    assert await q.call("cancel", "parent", "") == [b"cancelled", 1]
    assert await q.delete("parent") == 1
    assert not await q.redis.exists(q.keys.prefix + "parent:kids", q.keys.prefix + "parent:kidres")
    assert not await q.redis.sismember(q.keys.prefix + "parents", "parent")
    await create(q, flow_node("parent", children=[(f"{q.name} other", "fail")]))  # another token
    await q.redis.hset(q.keys.job("parent"), "kids_token", "another")
    [child] = await q.lease()
    assert child.id == "a"
    assert await q.ack((child.id, child.lease_id)) == [1]
    assert await parent_fields(q, "state", "kids_pending") == ["waiting_children", "1"]


async def test_a_node_whose_id_is_another_job_refuses_the_call_and_writes_nothing(q: LuaQueue) -> None:
    await q.add("taken")
    reply = await create(q, flow_node("fresh", parent=link(q, "p")), flow_node("taken", parent=link(q, "p")))
    assert reply == [-11, 2]
    assert not await q.redis.exists(q.keys.job("fresh"))
    assert await create(q, flow_node("fresh", parent=link(q, "p")), check=True) == ["", "", 0]
    assert not await q.redis.exists(q.keys.job("fresh"))
