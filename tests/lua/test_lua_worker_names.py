"""Worker names' owner records (include/workers.lua claim_worker): how lease, ack-lease, session,
heartbeat, release-worker and delete-queue check, claim, keep and free them, and every reply of
a refusal. Owners are token ids ("" = no tokens, or an admin: nothing checked or claimed)."""

from __future__ import annotations

import asyncio
import json

from echomq_http.core.errors import ScriptCode
from echomq_http.core.limits import WORKER_OWNER_GRACE_MS
from tests.lua.conftest import LEASE_MS, ack_lease_args, decoded, lease_args

WORKER_OWNED = ScriptCode.WORKER_OWNED.value
A, B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
W = "w1"
TTL_MS = 10_000


async def lease_as(q, owner: str, *, lease_ms: int = LEASE_MS, request_id: str = "r1") -> list:
    """The raw lease reply of one job leased to W by the token owner."""
    return decoded(
        await q.call("lease", *lease_args(W, lease_ms=lease_ms, request_id=request_id, owner=owner))
    )


async def session_as(q, owner: str, ttl_ms: int = TTL_MS) -> list:
    return decoded(await q.call("session", W, ttl_ms, "", owner))


async def heartbeat_as(q, owner: str, job_id: str, lease_id: str, lease_ms: int = 0) -> list[int]:
    return await q.call("heartbeat", json.dumps([[job_id, lease_id, lease_ms, ""]]), owner)


async def release_worker_as(q, owner: str, end_session: str = "1") -> list:
    return decoded(await q.call("release-worker", W, "", 1000, 0, end_session, owner))


async def owner_of(q) -> tuple[str | None, int]:
    """The owner record of W: (token id or None, its TTL in ms; -2 when there is none)."""
    value = await q.redis.get(q.keys.owner(W))
    return (None if value is None else value.decode()), await q.redis.pttl(q.keys.owner(W))


async def test_a_lease_claims_the_name_for_its_length_and_the_grace(q):
    await q.add("a")
    reply = await lease_as(q, A)
    assert reply[2] == "a"
    owner, ttl_ms = await owner_of(q)
    assert owner == A
    assert LEASE_MS < ttl_ms <= LEASE_MS + WORKER_OWNER_GRACE_MS


async def test_another_token_cannot_lease_nor_replay_a_request_in_the_name(q):
    await q.add("a")
    await q.add("b")
    first = await lease_as(q, A, request_id="r1")

    assert await lease_as(q, B, request_id="r1") == [WORKER_OWNED]
    assert await lease_as(q, B, request_id="r2") == [WORKER_OWNED]

    assert await q.redis.llen(q.keys.wait) == 1  # b still waits
    assert (await owner_of(q))[0] == A
    assert (await lease_as(q, A, request_id="r1"))[7] == first[7]  # A's own replay: same lease id


async def test_without_an_owner_nothing_is_checked_or_claimed(q):
    for job_id in ("a", "b", "c"):
        await q.add(job_id)
    assert (await lease_as(q, ""))[2] == "a"
    assert await owner_of(q) == (None, -2)
    await lease_as(q, A, request_id="r2")
    assert (await lease_as(q, "", request_id="r3"))[2] == "c"  # an admin: A's name, no refusal
    assert (await owner_of(q))[0] == A


async def test_a_shorter_claim_never_shortens_a_longer_one(q):
    await q.add("a")
    await lease_as(q, A, lease_ms=600_000)
    await session_as(q, A, ttl_ms=1_000)
    assert (await owner_of(q))[1] > 600_000
    await session_as(q, A, ttl_ms=900_000)
    assert (await owner_of(q))[1] > 900_000


async def test_another_token_cannot_start_or_renew_the_session(q):
    await session_as(q, A)
    stored = await q.redis.hgetall(q.keys.session(W))

    assert await session_as(q, B, ttl_ms=1) == [WORKER_OWNED]

    assert await q.redis.hgetall(q.keys.session(W)) == stored


async def test_a_heartbeat_of_another_tokens_worker_renews_nothing(q):
    await q.add("a")
    job = (await lease_as(q, A))[2:12]
    lease_id = job[5]
    lock_ttl_ms = await q.redis.pttl(q.keys.lock("a"))

    assert await heartbeat_as(q, B, "a", lease_id, 600_000) == [WORKER_OWNED, 0, 0]

    assert await q.redis.pttl(q.keys.lock("a")) <= lock_ttl_ms
    code, _, _ = await heartbeat_as(q, A, "a", lease_id, 600_000)
    assert code == 1
    assert (await owner_of(q))[1] > 600_000  # the claim lasts as long as the renewed lease


async def test_a_heartbeat_claims_a_name_no_token_holds(q):
    await q.add("a")
    lease_id = (await lease_as(q, ""))[7]
    assert (await heartbeat_as(q, B, "a", lease_id))[0] == 1
    assert (await owner_of(q))[0] == B


async def test_an_ack_with_lease_next_in_another_tokens_name_acks_nothing(q):
    await q.add("a")
    await q.add("b")
    await lease_as(q, A)
    own = await q.lease_one("w2")
    reply = await q.call(
        "ack-lease", *ack_lease_args([(own.id, own.lease_id)], W, request_id="r-next", owner=B)
    )

    assert reply == [WORKER_OWNED]
    assert await q.redis.hget(q.keys.job(own.id), "state") == b"active"


async def test_another_token_cannot_end_the_session(q):
    await q.add("a")
    await session_as(q, A)
    await lease_as(q, A)

    assert await release_worker_as(q, B) == [WORKER_OWNED]

    assert await q.redis.exists(q.keys.session(W)) == 1
    assert await q.redis.hget(q.keys.job("a"), "state") == b"active"


async def test_ending_the_session_frees_the_name_once_nothing_is_held(q):
    await q.add("a")
    await session_as(q, A)
    await lease_as(q, A)

    assert (await release_worker_as(q, A))[4:] == ["a"]

    assert await owner_of(q) == (None, -2)
    assert (await session_as(q, B))[1] == "running"
    assert (await owner_of(q))[0] == B


async def test_an_operator_release_keeps_the_name_of_a_worker_with_a_session(q):
    await q.add("a")
    await session_as(q, A)
    await lease_as(q, A)

    assert (await release_worker_as(q, "", end_session="0"))[4:] == ["a"]

    assert (await owner_of(q))[0] == A
    assert (await release_worker_as(q, "", end_session="1"))[4:] == []
    assert await owner_of(q) == (None, -2)  # no session, nothing held: freed


async def test_the_name_is_free_once_its_record_expired(q):
    await session_as(q, A)
    await q.redis.pexpire(q.keys.owner(W), 1)
    while await q.redis.exists(q.keys.owner(W)):
        await asyncio.sleep(0.005)

    assert (await session_as(q, B))[1] == "running"
    assert (await owner_of(q))[0] == B


async def test_deleting_the_queue_deletes_the_owner_records(q):
    await q.add("a")
    await session_as(q, A)
    await lease_as(q, A)
    while await q.call("delete-queue", "1", "1", 100) != 1:
        pass
    assert await owner_of(q) == (None, -2)
