"""The connection to Redis: the client factory and the start-up checks of the server."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, ResponseError

from echomq_http.config import Settings
from echomq_http.store.backends import Backend

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = (6, 2)  # LMOVE, ZRANGE ... LIMIT, script effects replication
REQUIRED_EVICTION_POLICY = "noeviction"
HEALTH_CHECK_INTERVAL_S = 30
RETRY_BASE_S = 0.01
RETRY_CAP_S = 0.1
SPARE_CONNECTIONS = 4
DEFAULT_SENTINEL_PORT = 26379


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


SENTINEL_SCHEME = "redis+sentinel://"
_SENTINELS: dict[int, Sentinel] = {}  # client id -> the Sentinel it came from, closed with it


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    sentinels: list[tuple[str, int]]
    service_name: str
    password: str | None
    db: int


def parse_sentinel_url(url: str) -> SentinelTarget:
    """``redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE_NAME[/DB]``; the password
    is the primary's (sentinels are asked without one)."""
    rest = url.removeprefix(SENTINEL_SCHEME)
    userinfo, _, rest = rest.rpartition("@")
    hosts, _, path = rest.partition("/")
    service_name, _, db = path.partition("/")
    sentinels = []
    for host_port in filter(None, hosts.split(",")):
        host, _, port = host_port.rpartition(":")
        sentinels.append((host or "127.0.0.1", int(port or DEFAULT_SENTINEL_PORT)))
    if not sentinels or not service_name:
        raise ValueError(f"a Sentinel URL names hosts and a service: {SENTINEL_SCHEME}HOST:PORT/NAME")
    password = unquote(userinfo.partition(":")[2]) or None
    return SentinelTarget(sentinels, unquote(service_name), password, int(db or 0))


def sentinel_client(settings: Settings) -> Redis:
    """The current primary of a Sentinel-managed set; after a failover the connection pool asks
    the sentinels again, so the service follows the new primary by itself."""
    target = parse_sentinel_url(settings.redis_url or "")
    timeouts = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
    }
    sentinel = Sentinel(target.sentinels, sentinel_kwargs=timeouts, **timeouts)
    client = sentinel.master_for(
        target.service_name,
        password=target.password,
        db=target.db,
        max_connections=settings.redis_pool_size + SPARE_CONNECTIONS,
        retry=Retry(ExponentialBackoff(cap=RETRY_CAP_S, base=RETRY_BASE_S), 1),
    )
    _SENTINELS[id(client)] = sentinel
    return client


async def close(client: Redis | RedisCluster) -> None:
    """Close a client from connect(), with the sentinel connections behind it if any."""
    await client.aclose()
    sentinel = _SENTINELS.pop(id(client), None)
    if sentinel is not None:
        for sentinel_client in sentinel.sentinels:
            await sentinel_client.aclose()


async def connect(settings: Settings) -> Redis | RedisCluster:
    """A client for EMQ_REDIS_URL: the primary behind Sentinel for a ``redis+sentinel://`` URL;
    a Redis Cluster when the named node says it is in one (any node will do: the rest are
    discovered); else a single server."""
    if (settings.redis_url or "").startswith(SENTINEL_SCHEME):
        return sentinel_client(settings)
    client = redis_client(settings)
    try:
        cluster_enabled = (await client.info("cluster")).get("cluster_enabled") == 1
    except (RedisError, OSError) as error:
        log.warning(
            "cannot ask %s whether it is a cluster (%s); assuming a single server", _where(settings), error
        )
        return client
    if not cluster_enabled:
        return client
    await client.aclose()
    log.info("Redis Cluster detected: connecting to all its nodes")
    cluster = RedisCluster.from_url(
        settings.redis_url,  # type: ignore[arg-type]
        # Per node; the calls are gated at redis_pool_size (echomq_http.core.queue), the rest is room for
        # the pub/sub connection and /readyz.
        max_connections=settings.redis_pool_size + SPARE_CONNECTIONS,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        retry=Retry(ExponentialBackoff(cap=RETRY_CAP_S, base=RETRY_BASE_S), 1),
    )
    await cluster.initialize()  # the slot map, before the pub/sub listener asks for a node
    return cluster


def _where(settings: Settings) -> str:
    """The URL without its password, for log lines."""
    url = settings.redis_url or ""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


CONFIG_DENIED = (
    "CONFIG GET is not allowed and Redis has no AOF: cannot tell whether it takes RDB snapshots "
    "(without either, a restart of Redis loses every job)"
)


async def check_server(backend: Backend) -> None:
    """Check every server that holds queue data (each primary of a cluster)."""
    for node in backend.primaries():
        try:
            await _check_one(node)
        except UnsuitableServer as refusal:
            # One plain line saying why, above the start-up failure's traceback.
            log.error("refusing to start: %s", refusal)
            raise


async def _check_one(client: Any) -> None:
    """Refuse a server that is too old or may evict keys (an evicted lock would hand a job to a
    second worker); warn when it persists nothing. An unreachable server is not checked here:
    the service starts anyway and answers 503 until Redis is back."""
    try:
        info = _info(await client.execute_command("INFO", "server"))
        memory = _info(await client.execute_command("INFO", "memory"))
        persistence = _info(await client.execute_command("INFO", "persistence"))
    except (RedisError, OSError) as error:
        log.warning("Redis is not reachable at start-up (%s); serving 503 until it is", error)
        return
    version = info.get("valkey_version") or info["redis_version"]
    if _version(str(version)) < MIN_SERVER_VERSION:
        raise UnsuitableServer(f"Redis {version} is too old: EchoMQ needs 6.2 or newer")
    # INFO tells the eviction policy to any user; only the snapshot schedule needs CONFIG.
    policy = str(memory.get("maxmemory_policy", ""))
    if policy != REQUIRED_EVICTION_POLICY:
        raise UnsuitableServer(
            f"Redis maxmemory-policy is {policy!r}: it must be 'noeviction', or Redis may evict a "
            "lease's lock and hand its job to a second worker"
        )
    if persistence.get("aof_enabled"):
        return
    try:
        rdb_schedule = await _config(client, "save")
    except ResponseError:
        log.warning(CONFIG_DENIED)
        return
    if not rdb_schedule.strip():
        log.warning("Redis persists nothing (no AOF, no RDB snapshots): a restart of Redis loses every job")


def _info(reply: Any) -> dict[str, Any]:
    """INFO as a dict, whether the client parsed it already or not."""
    if isinstance(reply, dict):
        return reply
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))
    return {key: int(value) if value.isdigit() else value for key, value in pairs}


async def _config(client: Any, name: str) -> str:
    raw = await client.execute_command("CONFIG", "GET", name)
    if isinstance(raw, list):  # [name, value]
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    reply = {(key.decode() if isinstance(key, bytes) else key): value for key, value in raw.items()}
    value = reply.get(name, "")
    return value.decode() if isinstance(value, bytes) else str(value)
