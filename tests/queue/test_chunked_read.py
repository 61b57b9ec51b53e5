"""The failed page read in chunks (echomq_http.store.chunked_read): how ids are grouped, and what a page
answers for jobs that changed between the read of its ids and the read of their hashes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from msgspec import Raw
from redis.asyncio import Redis

from echomq_http.api.schemas.jobs import EnqueueRequest
from echomq_http.core.queue import JobQueues
from echomq_http.store.chunked_read import CHUNK_BYTES, CHUNK_JOBS, chunked, read_hashes
from echomq_http.store.keys import keys_of
from tests.support.queues import job_queues

CALLS_AT_ONCE = 8


def test_chunks_keep_the_order_and_stay_within_both_bounds() -> None:
    sized = [("a", 4), ("b", 4), ("c", 2), ("d", 9), ("e", 1), ("f", 1), ("g", 1)]
    assert list(chunked(sized, max_bytes=10, max_jobs=3)) == [["a", "b", "c"], ["d", "e"], ["f", "g"]]


def test_a_job_larger_than_a_chunk_is_a_chunk_of_its_own() -> None:
    sized = [("a", 1), ("huge", 50), ("b", 1)]
    assert list(chunked(sized, max_bytes=10, max_jobs=3)) == [["a"], ["huge"], ["b"]]
    assert list(chunked([])) == []


def test_the_default_bounds_split_a_page_of_large_jobs_into_many_chunks() -> None:
    page = [(f"j{i}", 300 * 1024) for i in range(1000)]
    chunks = list(chunked(page))
    assert sum(map(len, chunks)) == 1000 and len(chunks) > 1000 * 300 * 1024 // CHUNK_BYTES
    assert all(len(chunk) * 300 * 1024 <= CHUNK_BYTES for chunk in chunks)
    assert all(len(chunk) == CHUNK_JOBS for chunk in chunked([(f"j{i}", 10) for i in range(300)]))


@pytest.fixture
async def queues(redis_client: Redis) -> AsyncIterator[JobQueues]:
    """The service's queue operations on the test server's client (a Cluster's, on a Cluster)."""
    queues = job_queues(redis_client, max_concurrent_calls=CALLS_AT_ONCE)
    yield queues
    await queues.aclose()


async def dead_letters(queues: JobQueues, queue: str, ids: list[str]) -> None:
    jobs = [EnqueueRequest(id=job_id, payload=Raw(b"%d" % i), max_attempts=1) for i, job_id in enumerate(ids)]
    await queues.enqueue(queue, jobs)
    for job in await queues.lease(queue, "w1", 60_000, len(ids)):
        assert (await queues.fail(queue, job.id, job.lease_id, "e", False, None)).state == "failed"


async def test_a_page_leaves_out_jobs_redriven_or_deleted_after_its_ids_were_read(
    queues: JobQueues, queue: str
) -> None:
    await dead_letters(queues, queue, ["a", "b", "c", "d"])
    chunks, total = await queues.failed_page(queue, 0, 10)  # the ids are read; no hash yet
    assert await queues.redrive(queue, ["b"]) == ["b"]
    await queues.delete(queue, "c")
    jobs = [job async for chunk in chunks for job in chunk]
    assert total == 4
    assert sorted(job.id for job in jobs) == ["a", "d"]
    assert all(job.state == "failed" and job.queue == queue for job in jobs)


async def test_read_hashes_answers_an_empty_hash_for_a_job_that_is_gone(
    queues: JobQueues, queue: str, redis_client: Redis
) -> None:
    await dead_letters(queues, queue, ["a"])
    hashes = await read_hashes(redis_client, [keys_of(queue).job("a"), keys_of(queue).job("gone")])
    assert hashes[0][b"state"] == b"failed" and hashes[0][b"payload"] == b"0"
    assert hashes[1] == {}
