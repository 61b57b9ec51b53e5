"""Reading many job hashes without one huge reply: chunks bounded in bytes, on pooled connections.

A page of 1000 jobs of 300 KB read in one reply holds Redis while it builds 300 MB, then the
shared multiplexed connection (echomq_http.store.multiplex) while the reply crosses it, then the event
loop while it is decoded: every other call of the process waits behind it (issue 11). Read in
chunks of about a MB instead, each a pipeline of HGETALLs on a connection of the client's own pool,
every step is short and other calls go between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

# Payload bytes per chunk: each chunk is one step of the event loop (decode, encode, send). With
# 300 KB jobs, 1 MiB kept small calls' p99 at a third of 4 MiB's, pages as fast (PERFORMANCE.md).
CHUNK_BYTES = 1024 * 1024
CHUNK_JOBS = 100  # jobs per chunk whatever their payloads (their other fields weigh too)


def chunked(
    sized_ids: Iterable[tuple[str, int]], max_bytes: int = CHUNK_BYTES, max_jobs: int = CHUNK_JOBS
) -> Iterator[list[str]]:
    """The ids, in order, in groups of at most max_jobs whose sizes add up to at most max_bytes;
    a job larger than max_bytes on its own is a group by itself."""
    chunk: list[str] = []
    size = 0
    for job_id, job_bytes in sized_ids:
        if chunk and (size + job_bytes > max_bytes or len(chunk) == max_jobs):
            yield chunk
            chunk, size = [], 0
        chunk.append(job_id)
        size += job_bytes
    if chunk:
        yield chunk


async def read_hashes(client: Redis | RedisCluster, keys: Sequence[str]) -> list[dict[bytes, bytes]]:
    """HGETALL of each key, sent together on one connection of the client's pool (on a Cluster,
    of the keys' node: a queue's keys share a slot); {} for a key that is gone. Redis runs each
    HGETALL on its own, so other clients' commands go between them."""
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hgetall(key)
        return await pipe.execute()  # type: ignore[no-any-return]
