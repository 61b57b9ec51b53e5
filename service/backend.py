"""The connection to Redis: the client factory and the start-up checks of the server."""

from __future__ import annotations

import logging

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, ResponseError

from service.config import Settings

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = (6, 2)  # LMOVE, ZRANGE ... LIMIT, script effects replication
REQUIRED_EVICTION_POLICY = "noeviction"
HEALTH_CHECK_INTERVAL_S = 30
RETRY_BASE_S = 0.01
RETRY_CAP_S = 0.1


class UnsuitableServer(RuntimeError):
    """The Redis server cannot keep the queue's promises; the message says why."""


def redis_client(settings: Settings) -> Redis:
    if settings.redis_url is None:
        raise ValueError("no Redis URL: the launcher starts the embedded server and sets one")
    # A blocking pool: a burst of requests waits for a connection instead of opening hundreds.
    pool = BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_pool_size,
        timeout=settings.redis_timeout_s,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        # One quick retry survives a pooled connection that died with a Redis restart; more
        # would only delay the 503 a client should get while Redis is down.
        retry=Retry(ExponentialBackoff(cap=RETRY_CAP_S, base=RETRY_BASE_S), 1),
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() closes its connections


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


async def check_server(client: Redis) -> None:
    """Refuse a server that is too old or may evict keys (an evicted lock would hand a job to a
    second worker); warn when it persists nothing. An unreachable server is not checked here:
    the service starts anyway and answers 503 until Redis is back."""
    try:
        info = await client.info("server")
        persistence = await client.info("persistence")
    except (RedisError, OSError) as error:
        log.warning("Redis is not reachable at start-up (%s); serving 503 until it is", error)
        return
    version = info.get("valkey_version") or info["redis_version"]
    if _version(str(version)) < MIN_SERVER_VERSION:
        raise UnsuitableServer(f"Redis {version} is too old: EchoMQ needs 6.2 or newer")
    try:
        policy = await _config(client, "maxmemory-policy")
        rdb_schedule = await _config(client, "save")
    except ResponseError:
        log.warning("CONFIG GET is not allowed; make sure maxmemory-policy is noeviction")
        return
    if policy != REQUIRED_EVICTION_POLICY:
        raise UnsuitableServer(
            f"Redis maxmemory-policy is {policy!r}: it must be 'noeviction', or Redis may evict a "
            "lease's lock and hand its job to a second worker"
        )
    if not persistence.get("aof_enabled") and not rdb_schedule.strip():
        log.warning("Redis persists nothing (no AOF, no RDB snapshots): a restart of Redis loses every job")


async def _config(client: Redis, name: str) -> str:
    reply = {
        (key.decode() if isinstance(key, bytes) else key): value
        for key, value in (await client.config_get(name)).items()
    }
    value = reply.get(name, "")
    return value.decode() if isinstance(value, bytes) else str(value)
