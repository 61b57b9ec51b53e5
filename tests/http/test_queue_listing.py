"""Issue 27, bounded listing: with thousands of queues, GET /v1/queues answers a page, the
dashboard's overview answers a page without stalling other requests, /metrics gives series to a
bounded number of queues; and EMQ_MAX_QUEUES refuses a new queue beyond it (409, nothing stored)."""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from echomq_http.api.schemas.jobs import EnqueueRequest
from echomq_http.config import DEFAULT_METRICS_MAX_QUEUES, Settings
from echomq_http.core import limits
from echomq_http.store.keys import QUEUE_REGISTRY, queue_prefix
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.support import assert_problem, counts, enqueue
from tests.support.queues import job_queues
from tests.support.servers import RedisServer
from tests.support.service import running_service

MANY_QUEUES = 3000
FILL_AT_ONCE = 500  # queues started together while filling
# Loose bounds (the pages' sizes are what the tests check exactly): they catch a page that
# renders every queue again (3-6 s here before the paging) without failing on a loaded machine.
OVERVIEW_ANSWER_S = 1.0
OTHERS_ANSWER_S = 1.0  # the bound for everyone else's requests during a flood
PAGE_ANSWER_S = 1.0
METRICS_MAX_BYTES = 100_000  # ~60 KB for 200 queues' gauges; 3,000 queues' were 855 KB
PROBES = 20


def many_names() -> list[str]:
    return [f"q{n:05d}" for n in range(MANY_QUEUES)]


async def fill(redis_url: str) -> None:
    """One job in each of MANY_QUEUES queues, through the service's own operations (its scripts
    and registry): what as many enqueues over HTTP would leave, in a fraction of the time."""
    client = Redis.from_url(redis_url)
    queues = job_queues(client, max_concurrent_calls=64)
    job = EnqueueRequest(payload=b"1")
    names = many_names()
    try:
        for start in range(0, MANY_QUEUES, FILL_AT_ONCE):
            await asyncio.gather(
                *(queues.enqueue(name, [job]) for name in names[start : start + FILL_AT_ONCE])
            )
    finally:
        await queues.aclose()
        await client.aclose()


@pytest.fixture(scope="module")
def crowded_service() -> Iterator[str]:
    """A service of the module's own whose Redis holds MANY_QUEUES queues."""
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory)).start()
        try:
            asyncio.run(fill(server.url))
            settings = Settings(redis_url=server.url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
            with running_service(settings) as url:
                yield url
        finally:
            server.kill()


@pytest.fixture
async def crowded(crowded_service: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=crowded_service, timeout=30) as http:
        yield http


async def timed_get(http: httpx.AsyncClient, path: str) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = await http.get(path)
    return time.monotonic() - started, response


async def slowest_of_others(http: httpx.AsyncClient) -> float:
    """The slowest of PROBES GET /healthz, one after another (each on a connection of its own)."""
    slowest = 0.0
    for _ in range(PROBES):
        elapsed, response = await timed_get(http, "/healthz")
        assert response.status_code == 200
        slowest = max(slowest, elapsed)
    return slowest


async def test_get_queues_answers_a_page_and_its_cursors_list_each_queue_once(crowded) -> None:
    elapsed, first = await timed_get(crowded, "/v1/queues")

    assert first.status_code == 200, first.text
    page = first.json()
    assert [queue["name"] for queue in page["queues"]] == many_names()[: limits.DEFAULT_PAGE]
    assert page["queues"][0]["counts"]["waiting"] == 1
    assert page["next_cursor"] and elapsed < PAGE_ANSWER_S
    listed, cursor = [], None
    while True:
        query = {"limit": limits.MAX_PAGE} | ({"cursor": cursor} if cursor else {})
        response = await crowded.get("/v1/queues", params=query)
        assert response.status_code == 200, response.text
        listed += [queue["name"] for queue in response.json()["queues"]]
        cursor = response.json()["next_cursor"]
        if cursor is None:
            break
    assert listed == many_names()  # each once, by name


async def test_get_queues_filters_by_prefix_and_refuses_a_bad_cursor(crowded) -> None:
    response = await crowded.get("/v1/queues", params={"prefix": "q0012", "limit": 3})
    assert [queue["name"] for queue in response.json()["queues"]] == ["q00120", "q00121", "q00122"]
    rest = await crowded.get(
        "/v1/queues", params={"prefix": "q0012", "cursor": response.json()["next_cursor"]}
    )
    assert [queue["name"] for queue in rest.json()["queues"]] == [f"q0012{n}" for n in range(3, 10)]
    assert rest.json()["next_cursor"] is None
    for bad in ({"cursor": "not/a name"}, {"prefix": "-x"}, {"limit": limits.MAX_PAGE + 1}):
        assert_problem(await crowded.get("/v1/queues", params=bad), 400, "invalid_request")


async def test_the_overview_answers_a_page_quickly_and_others_are_not_stalled(crowded) -> None:
    (elapsed, overview), slowest = await asyncio.gather(timed_get(crowded, "/ui"), slowest_of_others(crowded))

    assert overview.status_code == 200
    assert elapsed < OVERVIEW_ANSWER_S and slowest < OTHERS_ANSWER_S, (elapsed, slowest)
    shown = re.findall(r'href="/ui/queues/(q\d+)"', overview.text)
    assert shown == many_names()[:50]
    assert 'rel="next"' in overview.text
    following = await crowded.get("/ui", params={"cursor": shown[-1], "prefix": "q00"})
    assert re.findall(r'href="/ui/queues/(q\d+)"', following.text) == many_names()[50:100]


async def test_metrics_give_series_to_a_bounded_number_of_queues(crowded) -> None:
    (elapsed, scrape), slowest = await asyncio.gather(
        timed_get(crowded, "/metrics"), slowest_of_others(crowded)
    )

    assert scrape.status_code == 200 and elapsed < OVERVIEW_ANSWER_S
    assert len(scrape.content) < METRICS_MAX_BYTES and slowest < OTHERS_ANSWER_S, (
        len(scrape.content),
        slowest,
    )
    labelled = set(re.findall(r'queue="(q\d+)"', scrape.text))
    assert labelled == set(many_names()[:DEFAULT_METRICS_MAX_QUEUES])
    assert f"emq_queues {MANY_QUEUES}\n" in scrape.text
    assert f"emq_queues_listed {DEFAULT_METRICS_MAX_QUEUES}\n" in scrape.text


# --- EMQ_MAX_QUEUES ---------------------------------------------------------------------------

MAX_QUEUES = 3


@pytest.fixture
async def capped(private_valkey: RedisServer) -> AsyncIterator[tuple[httpx.AsyncClient, Redis]]:
    settings = Settings(
        redis_url=private_valkey.url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS, max_queues=MAX_QUEUES
    )
    redis = Redis.from_url(private_valkey.url)
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield http, redis
    await redis.aclose()


async def keys_of(redis: Redis, queue: str) -> list[bytes]:
    return [key async for key in redis.scan_iter(match=queue_prefix(queue) + "*")]


async def test_a_new_queue_beyond_the_cap_is_refused_and_nothing_is_stored(capped) -> None:
    http, redis = capped
    for n in range(MAX_QUEUES):
        await enqueue(http, f"kept-{n}", n)

    calls = (
        ("POST", "/v1/queues/extra/jobs", {"payload": 1}),
        ("POST", "/v1/queues/extra/enqueue", {"jobs": [{"payload": 1}, {"payload": 2}]}),
        ("PUT", "/v1/queues/extra/settings", {"max_in_flight": 5}),
        ("POST", "/v1/queues/extra/pause", None),
        ("PUT", "/v1/queues/extra/schedules/s", {"every_ms": 60_000, "job": {"payload": 1}}),
    )
    for method, path, body in calls:
        response = await http.request(method, path, json=body)
        assert_problem(response, 409, "too_many_queues")
    assert await keys_of(redis, "extra") == []
    assert await redis.scard(QUEUE_REGISTRY) == MAX_QUEUES
    assert "extra" not in {queue["name"] for queue in (await http.get("/v1/queues")).json()["queues"]}
    # The queues there are take jobs as before, and a deleted one makes room for a new one.
    await enqueue(http, "kept-0", "more")
    assert (await counts(http, "kept-0"))["waiting"] == 2
    assert (await http.delete("/v1/queues/kept-1")).status_code == 204
    await enqueue(http, "extra", 1)
    assert (await counts(http, "extra"))["waiting"] == 1
    assert_problem(await http.post("/v1/queues/another/jobs", json={"payload": 1}), 409, "too_many_queues")


async def test_concurrent_new_queues_never_pass_the_cap(capped) -> None:
    http, redis = capped
    answers = await asyncio.gather(
        *(http.post(f"/v1/queues/race-{n}/jobs", json={"payload": n}) for n in range(4 * MAX_QUEUES))
    )

    assert sorted(answer.status_code for answer in answers) == [201] * MAX_QUEUES + [409] * (3 * MAX_QUEUES)
    assert await redis.scard(QUEUE_REGISTRY) == MAX_QUEUES
    stored = [n for n in range(4 * MAX_QUEUES) if await keys_of(redis, f"race-{n}")]
    assert len(stored) == MAX_QUEUES
