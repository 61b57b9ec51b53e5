"""A worker name belongs to one token (docs/security.md, "Worker names"): with tokens configured,
no other worker token can lease in its name, renew or end its session, replay its lease requests
or renew its leases while its leases or session last; an admin token may act for any worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from echomq_http.config import Settings
from tests.support import assert_problem
from tests.support.service import running_service

TOKENS = {"admin": "adm-secret", "a": "a-secret", "b": "b-secret"}
ENTRIES = ("admin:adm-secret", "worker:a-secret", "worker:b-secret")
VICTIM = "victim"
LEASE_MS = 60_000
SESSION_TTL_MS = 60_000


@pytest.fixture(scope="module")
def names_url(redis_url: str) -> Iterator[str]:
    with running_service(Settings(redis_url=redis_url, auth_entries=ENTRIES)) as url:
        yield url


@pytest.fixture
async def http(names_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=names_url, timeout=30) as client:
        yield client


def as_(who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[who]}"}


async def enqueue(http: httpx.AsyncClient, queue: str, count: int = 1) -> None:
    for n in range(count):
        created = await http.post(f"/v1/queues/{queue}/jobs", json={"payload": n}, headers=as_("admin"))
        assert created.status_code == 201, created.text


async def lease(
    http: httpx.AsyncClient, queue: str, who: str, worker: str = VICTIM, **extra: Any
) -> httpx.Response:
    body = {"worker": worker, "lease_ms": LEASE_MS, **extra}
    return await http.post(f"/v1/queues/{queue}/lease", json=body, headers=as_(who))


async def lease_one(http: httpx.AsyncClient, queue: str, who: str = "a", **extra: Any) -> dict[str, Any]:
    response = await lease(http, queue, who, **extra)
    assert response.status_code == 200, response.text
    (job,) = response.json()["jobs"]
    return job  # type: ignore[no-any-return]


async def session(http: httpx.AsyncClient, queue: str, who: str, worker: str = VICTIM) -> httpx.Response:
    return await http.post(
        f"/v1/queues/{queue}/workers/{worker}/heartbeat", json={"ttl_ms": SESSION_TTL_MS}, headers=as_(who)
    )


async def job_view(http: httpx.AsyncClient, queue: str, job_id: str) -> dict[str, Any]:
    response = await http.get(f"/v1/queues/{queue}/jobs/{job_id}", headers=as_("admin"))
    return response.json()  # type: ignore[no-any-return]


async def victim_session(http: httpx.AsyncClient, queue: str) -> dict[str, Any] | None:
    listing = (await http.get(f"/v1/queues/{queue}/workers", headers=as_("admin"))).json()["workers"]
    return next((entry["session"] for entry in listing if entry["worker"] == VICTIM), None)


async def test_another_token_cannot_end_the_session(http: httpx.AsyncClient, queue: str) -> None:
    await enqueue(http, queue)
    assert (await session(http, queue, "a")).status_code == 200
    job = await lease_one(http, queue)

    ended = await http.delete(f"/v1/queues/{queue}/workers/{VICTIM}", headers=as_("b"))

    assert_problem(ended, 403, "forbidden")
    view = await job_view(http, queue, job["id"])
    assert (view["state"], view["worker"]) == ("active", VICTIM)
    assert await victim_session(http, queue) is not None
    acked = await http.post(
        f"/v1/queues/{queue}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"]}, headers=as_("a")
    )
    assert acked.status_code == 200, acked.text


async def test_another_token_cannot_start_or_renew_the_session(http: httpx.AsyncClient, queue: str) -> None:
    assert (await session(http, queue, "a")).status_code == 200
    before = await victim_session(http, queue)

    assert_problem(await session(http, queue, "b"), 403, "forbidden")

    assert await victim_session(http, queue) == before


async def test_another_token_cannot_lease_in_the_name(http: httpx.AsyncClient, queue: str) -> None:
    await enqueue(http, queue, 2)
    await lease_one(http, queue)  # A holds a job (no session)

    assert_problem(await lease(http, queue, "b"), 403, "forbidden")

    counts = (await http.get(f"/v1/queues/{queue}", headers=as_("admin"))).json()["counts"]
    assert (counts["waiting"], counts["active"]) == (1, 1)


async def test_a_session_alone_keeps_the_name(http: httpx.AsyncClient, queue: str) -> None:
    await enqueue(http, queue)
    assert (await session(http, queue, "a")).status_code == 200

    assert_problem(await lease(http, queue, "b"), 403, "forbidden")

    counts = (await http.get(f"/v1/queues/{queue}", headers=as_("admin"))).json()["counts"]
    assert counts["waiting"] == 1


async def test_another_token_cannot_replay_a_lease_request(http: httpx.AsyncClient, queue: str) -> None:
    await enqueue(http, queue)
    job = await lease_one(http, queue, request_id="r-1")

    replayed = await lease(http, queue, "b", request_id="r-1")

    assert_problem(replayed, 403, "forbidden")
    assert job["lease_id"] not in replayed.text
    again = await lease(http, queue, "a", request_id="r-1")
    assert [j["lease_id"] for j in again.json()["jobs"]] == [job["lease_id"]]


async def test_another_token_cannot_renew_the_leases_even_with_their_ids(
    http: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(http, queue)
    job = await lease_one(http, queue)
    path = f"/v1/queues/{queue}/jobs/{job['id']}/heartbeat"

    one = await http.post(path, json={"lease_id": job["lease_id"], "lease_ms": 600_000}, headers=as_("b"))
    many = await http.post(
        f"/v1/queues/{queue}/heartbeat",
        json={"leases": [{"id": job["id"], "lease_id": job["lease_id"], "lease_ms": 600_000}]},
        headers=as_("b"),
    )

    assert_problem(one, 403, "forbidden")
    assert many.status_code == 200, many.text
    assert many.json()["results"] == [{"id": job["id"], "ok": False, "code": "forbidden"}]
    assert (await job_view(http, queue, job["id"]))["lease_expires_at"] == job["lease_expires_at"]
    renewed = await http.post(path, json={"lease_id": job["lease_id"]}, headers=as_("a"))
    assert renewed.status_code == 200, renewed.text


async def test_an_ack_with_lease_next_in_the_name_is_refused_whole(
    http: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(http, queue, 2)
    await lease_one(http, queue)  # A claims the name
    own = await lease_one(http, queue, "b", worker="b-worker")

    acked = await http.post(
        f"/v1/queues/{queue}/jobs/{own['id']}/ack",
        json={"lease_id": own["lease_id"], "lease_next": {"worker": VICTIM}},
        headers=as_("b"),
    )

    assert_problem(acked, 403, "forbidden")
    assert (await job_view(http, queue, own["id"]))["state"] == "active"  # the ack was not taken


async def test_an_admin_may_act_for_any_worker(http: httpx.AsyncClient, queue: str) -> None:
    await enqueue(http, queue, 2)
    assert (await session(http, queue, "a")).status_code == 200
    job = await lease_one(http, queue, request_id="r-1")

    assert (await session(http, queue, "admin")).status_code == 200
    replayed = await lease(http, queue, "admin", request_id="r-1")
    assert [j["lease_id"] for j in replayed.json()["jobs"]] == [job["lease_id"]]
    path = f"/v1/queues/{queue}/jobs/{job['id']}/heartbeat"
    beat = await http.post(path, json={"lease_id": job["lease_id"]}, headers=as_("admin"))
    assert beat.status_code == 200, beat.text
    assert len((await lease(http, queue, "admin")).json()["jobs"]) == 1
    ended = await http.delete(f"/v1/queues/{queue}/workers/{VICTIM}", headers=as_("admin"))
    assert ended.status_code == 200, ended.text
    assert len(ended.json()["released"]) == 2


async def test_the_name_is_free_once_the_session_ended_and_nothing_is_held(
    http: httpx.AsyncClient, queue: str
) -> None:
    await enqueue(http, queue)
    assert (await session(http, queue, "a")).status_code == 200
    job = await lease_one(http, queue)
    ended = await http.delete(f"/v1/queues/{queue}/workers/{VICTIM}", headers=as_("a"))
    assert ended.json()["released"] == [job["id"]]

    assert (await session(http, queue, "b")).status_code == 200
    assert [j["id"] for j in (await lease(http, queue, "b")).json()["jobs"]] == [job["id"]]
    assert_problem(await session(http, queue, "a"), 403, "forbidden")  # B's now
