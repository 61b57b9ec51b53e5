"""Settings read from the environment (EMQ_*, HOST, PORT); every default a named constant."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_DATA_DIR = "./.emq-data"
DEFAULT_SWEEP_INTERVAL_MS = 1000
DEFAULT_SWEEP_BATCH = 250  # a step stays a few ms, so small requests get through between steps
MAX_SWEEP_BATCH = 5000  # one sweep step stays short, and its id lists far from Lua's unpack limit
DEFAULT_COMPLETED_RETENTION_S = 3600
DEFAULT_FAILED_RETENTION_S = 7 * 24 * 3600
DEFAULT_COMPLETED_MAX = 10_000  # completed jobs kept per queue, at most
DEFAULT_EVENTS_MAXLEN = 10_000  # events kept per queue, at least; 0 = no events
DEFAULT_EVENTS_BUFFER = 10_000  # events a subscriber may fall behind before it is dropped
DEFAULT_EVENTS_KEEPALIVE_MS = 15_000  # a comment on an idle event stream at least this often
DEFAULT_EVENTS_BUFFER_BYTES = 1024 * 1024  # bytes of events a subscriber may fall behind
DEFAULT_MAX_FOLLOWED_QUEUES = 1000  # distinct queues whose events one process follows at once
DEFAULT_EVENT_READERS = 2  # Redis connections (per Cluster node) reading every followed queue
DEFAULT_FAILED_MAX = 100_000  # dead-lettered jobs kept per queue, at most
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_WAITERS = 2000
DEFAULT_REDIS_POOL_SIZE = 64
DEFAULT_REDIS_TIMEOUT_S = 5.0
DEFAULT_BODY_TIMEOUT_S = 30
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_HEADER_TIMEOUT_S = 10  # a request line and headers must arrive within this
DEFAULT_KEEPALIVE_TIMEOUT_S = 60  # longer than clients keep idle connections, so they close first
DEFAULT_MAX_HEADER_BYTES = 16 * 1024  # a request line and headers, as received
DEFAULT_MAX_HEADERS = 100
DEFAULT_WAIT_TIMEOUT_MS = 1000
# Queues the service holds at most: every listing reads each queue's counts, so a producer that
# names queues at will must not make every page of the dashboard and every scrape pay without end.
DEFAULT_MAX_QUEUES = 10_000
# Queues /metrics gives series of their own, the first by name: some 35 lines (~1.3 KB) each.
DEFAULT_METRICS_MAX_QUEUES = 200
# Not a setting: the launcher names a directory of its own to its worker processes with it.
METRICS_DIR_VARIABLE = "EMQ_METRICS_DIR"
# A DNS name or an IPv4 literal, as a Host header names it (IP literals are served anyway).
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,62}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,62}[a-z0-9_])?)*")
CGROUP_MOUNT = "sys/fs/cgroup"  # below the root: /sys/fs/cgroup
# Where cgroup v1 mounts the cpu controller (alone, or with cpuacct under either name).
CGROUP_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _cgroup_paths(root: Path) -> tuple[str, str]:
    """This process's cgroup: its path in the v2 hierarchy and in v1's cpu hierarchy ("/" when
    /proc/self/cgroup does not say, as in a container with its own cgroup namespace)."""
    v2 = v1 = "/"
    for line in _read(root / "proc/self/cgroup").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _up_to_the_top(mount: Path, path: str) -> Iterator[Path]:
    """A cgroup's directory and then each ancestor's: a quota anywhere above limits it too. A
    path that is not there (a container that sees only its own cgroup at the mount) ends at
    the mount itself."""
    parts = [part for part in path.split("/") if part and part != ".."]
    for depth in range(len(parts), -1, -1):
        yield mount.joinpath(*parts[:depth])


def _ratio(quota: str, period: str) -> float | None:
    try:
        cpus = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None  # "max", "-1" (no quota) or something unreadable
    return cpus if cpus > 0 else None


def cgroup_cpu_limit(root: Path = Path("/")) -> float | None:
    """The CPUs this process's cgroup quota allows (quota / period, the smallest along its
    cgroup and its ancestors, v2 cpu.max or v1 cpu.cfs_quota_us), or None without a quota."""
    v2_path, v1_path = _cgroup_paths(root)
    mount = root / CGROUP_MOUNT
    limits = []
    for directory in _up_to_the_top(mount, v2_path):
        quota, _, period = _read(directory / "cpu.max").partition(" ")  # "max 100000", "200000 100000"
        limits.append(_ratio(quota, period))
    for name in CGROUP_V1_CPU_MOUNTS:
        for directory in _up_to_the_top(mount / name, v1_path):
            quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
            limits.append(_ratio(quota, period))
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def usable_cpus(root: Path = Path("/"), affinity: int | None = None) -> int:
    """How many CPUs this process may use: those it may run on (sched_getaffinity, ``affinity``
    to say it instead), capped by its cgroup's CPU quota rounded up; at least 1. ``root`` is
    where /proc and /sys are found (tests build a fake tree)."""
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    cpus = affinity if limit is None else min(affinity, math.ceil(limit))
    return max(1, cpus)


# A container limited to 2 CPUs on a 64-core host runs 2 processes, not 64.
DEFAULT_WORKERS = usable_cpus()


class ConfigError(ValueError):
    """A setting in the environment is malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class Settings:
    redis_url: str | None = None  # None: start the embedded Valkey server
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    sweep_interval_ms: int = DEFAULT_SWEEP_INTERVAL_MS
    sweep_batch: int = DEFAULT_SWEEP_BATCH
    completed_retention_s: int = DEFAULT_COMPLETED_RETENTION_S
    failed_retention_s: int = DEFAULT_FAILED_RETENTION_S
    completed_max: int = DEFAULT_COMPLETED_MAX
    failed_max: int = DEFAULT_FAILED_MAX
    events_maxlen: int = DEFAULT_EVENTS_MAXLEN
    events_buffer: int = DEFAULT_EVENTS_BUFFER
    events_keepalive_ms: int = DEFAULT_EVENTS_KEEPALIVE_MS
    events_buffer_bytes: int = DEFAULT_EVENTS_BUFFER_BYTES
    max_followed_queues: int = DEFAULT_MAX_FOLLOWED_QUEUES
    event_readers: int = DEFAULT_EVENT_READERS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_waiters: int = DEFAULT_MAX_WAITERS  # long-poll requests waiting at once, per process
    redis_pool_size: int = DEFAULT_REDIS_POOL_SIZE
    redis_timeout_s: float = DEFAULT_REDIS_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S  # a request body must arrive within this
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # HTTP connections per process (idle ones reclaimed)
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  # a request's head must arrive within this
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S  # an idle connection is closed after this
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES  # a request's head, at most (431 above)
    max_headers: int = DEFAULT_MAX_HEADERS  # header fields in a request, at most (431 above)
    auth_entries: tuple[str, ...] = ()  # "ROLE:TOKEN[:PATTERN|...]"; none = auth off
    allow_insecure: bool = False  # serve without tokens on a non-loopback address
    log_format: str = "text"  # "json": one JSON object per line, with trace ids
    workers: int = DEFAULT_WORKERS  # uvicorn worker processes
    access_log: bool = False  # uvicorn's line per request (EMQ_ACCESS_LOG=1)
    merge_calls: bool = True  # concurrent single calls of a queue merged into one script call
    wait_replicas: int = 0  # durable mode: each write confirmed by this many replicas (WAIT)
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS
    max_queues: int = DEFAULT_MAX_QUEUES  # queues the registry holds at most; a new one beyond: 409
    metrics_max_queues: int = DEFAULT_METRICS_MAX_QUEUES  # per-queue series of /metrics
    metrics_dir: Path | None = None  # where the processes of a replica share their metrics' totals
    # Host names served besides loopback names, IP literals and HOST ("*": any); see webguard.
    allowed_hosts: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        def integer(name: str, default: int, minimum: int, maximum: int | None = None) -> int:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = int(raw)
            except ValueError:
                raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
            if value < minimum:
                raise ConfigError(f"{name} must be >= {minimum}, got {value}")
            if maximum is not None and value > maximum:
                raise ConfigError(f"{name} must be <= {maximum}, got {value}")
            return value

        return cls(
            auth_entries=_auth_entries(env),
            allow_insecure=env.get("EMQ_ALLOW_INSECURE", "").strip().lower() in ("1", "true", "yes"),
            log_format=_choice(env, "EMQ_LOG_FORMAT", ("text", "json")),
            redis_url=env.get("EMQ_REDIS_URL") or None,
            data_dir=Path(env.get("EMQ_DATA_DIR") or DEFAULT_DATA_DIR),
            host=env.get("HOST") or DEFAULT_HOST,
            port=integer("PORT", DEFAULT_PORT, 0),
            sweep_interval_ms=integer("EMQ_SWEEP_INTERVAL_MS", DEFAULT_SWEEP_INTERVAL_MS, 10),
            sweep_batch=integer("EMQ_SWEEP_BATCH", DEFAULT_SWEEP_BATCH, 1, MAX_SWEEP_BATCH),
            completed_retention_s=integer("EMQ_COMPLETED_RETENTION_S", DEFAULT_COMPLETED_RETENTION_S, 0),
            failed_retention_s=integer("EMQ_FAILED_RETENTION_S", DEFAULT_FAILED_RETENTION_S, 0),
            completed_max=integer("EMQ_COMPLETED_MAX", DEFAULT_COMPLETED_MAX, 0),
            failed_max=integer("EMQ_FAILED_MAX", DEFAULT_FAILED_MAX, 0),
            events_maxlen=integer("EMQ_EVENTS_MAXLEN", DEFAULT_EVENTS_MAXLEN, 0, 10_000_000),
            events_buffer=integer("EMQ_EVENTS_BUFFER", DEFAULT_EVENTS_BUFFER, 10),
            events_keepalive_ms=integer("EMQ_EVENTS_KEEPALIVE_MS", DEFAULT_EVENTS_KEEPALIVE_MS, 100, 15_000),
            events_buffer_bytes=integer("EMQ_EVENTS_BUFFER_BYTES", DEFAULT_EVENTS_BUFFER_BYTES, 64 * 1024),
            max_followed_queues=integer("EMQ_MAX_FOLLOWED_QUEUES", DEFAULT_MAX_FOLLOWED_QUEUES, 1),
            event_readers=integer("EMQ_EVENT_READERS", DEFAULT_EVENT_READERS, 1, 64),
            max_body_bytes=integer("EMQ_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024),
            max_waiters=integer("EMQ_MAX_WAITERS", DEFAULT_MAX_WAITERS, 1),
            redis_pool_size=integer("EMQ_REDIS_POOL_SIZE", DEFAULT_REDIS_POOL_SIZE, 2),
            body_timeout_s=integer("EMQ_BODY_TIMEOUT_S", DEFAULT_BODY_TIMEOUT_S, 1),
            max_connections=integer("EMQ_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, 16),
            header_timeout_s=integer("EMQ_HEADER_TIMEOUT_S", DEFAULT_HEADER_TIMEOUT_S, 1),
            keepalive_timeout_s=integer("EMQ_KEEPALIVE_TIMEOUT_S", DEFAULT_KEEPALIVE_TIMEOUT_S, 1),
            max_header_bytes=integer("EMQ_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES, 1024),
            max_headers=integer("EMQ_MAX_HEADERS", DEFAULT_MAX_HEADERS, 16),
            workers=integer("EMQ_WORKERS", DEFAULT_WORKERS, 1),
            access_log=env.get("EMQ_ACCESS_LOG", "").strip().lower() in ("1", "true", "yes"),
            merge_calls=env.get("EMQ_MERGE_CALLS", "1").strip().lower() not in ("0", "false", "no"),
            wait_replicas=integer("EMQ_WAIT_REPLICAS", 0, 0),
            wait_timeout_ms=integer("EMQ_WAIT_TIMEOUT_MS", DEFAULT_WAIT_TIMEOUT_MS, 1),
            max_queues=integer("EMQ_MAX_QUEUES", DEFAULT_MAX_QUEUES, 1),
            metrics_max_queues=integer("EMQ_METRICS_MAX_QUEUES", DEFAULT_METRICS_MAX_QUEUES, 0),
            metrics_dir=Path(env[METRICS_DIR_VARIABLE]) if env.get(METRICS_DIR_VARIABLE) else None,
            allowed_hosts=_allowed_hosts(env.get("EMQ_ALLOWED_HOSTS", "")),
        )


def _allowed_hosts(raw: str) -> tuple[str, ...]:
    """EMQ_ALLOWED_HOSTS: comma-separated host names without scheme or port, or "*"."""
    names = []
    for entry in raw.split(","):
        name = entry.strip().lower().rstrip(".")
        if not name:
            continue
        if name != "*" and _HOST_NAME.fullmatch(name) is None:
            raise ConfigError(
                f"EMQ_ALLOWED_HOSTS: {entry.strip()!r} is not a host name (no scheme, port or path; "
                "* allows any)"
            )
        names.append(name)
    return tuple(names)


def _auth_entries(env: Mapping[str, str]) -> tuple[str, ...]:
    """Entries from EMQ_AUTH_TOKENS (comma-separated) and EMQ_AUTH_TOKENS_FILE (one or more per
    line, comma-separated; blank lines and # comments ignored)."""
    entries = [entry for entry in env.get("EMQ_AUTH_TOKENS", "").split(",") if entry.strip()]
    path = env.get("EMQ_AUTH_TOKENS_FILE", "").strip()
    if path:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as error:
            raise ConfigError(f"EMQ_AUTH_TOKENS_FILE {path!r} cannot be read: {error}") from None
        for line in lines:
            if line.strip() and not line.lstrip().startswith("#"):
                entries += [entry for entry in line.split(",") if entry.strip()]
    return tuple(entry.strip() for entry in entries)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = (env.get(name) or choices[0]).strip().lower()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value
