"""Settings read from the environment (EMQ_*, HOST, PORT); every default a named constant."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_DATA_DIR = "./.emq-data"
DEFAULT_SWEEP_INTERVAL_MS = 1000
DEFAULT_SWEEP_BATCH = 1000
MAX_SWEEP_BATCH = 5000  # one sweep step stays short, and its id lists far from Lua's unpack limit
DEFAULT_COMPLETED_RETENTION_S = 3600
DEFAULT_FAILED_RETENTION_S = 7 * 24 * 3600
DEFAULT_COMPLETED_MAX = 10_000  # completed jobs kept per queue, at most
DEFAULT_FAILED_MAX = 100_000  # dead-lettered jobs kept per queue, at most
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_WAITERS = 2000
DEFAULT_REDIS_POOL_SIZE = 64
DEFAULT_REDIS_TIMEOUT_S = 5.0
DEFAULT_BODY_TIMEOUT_S = 30
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_WORKERS = os.cpu_count() or 1
DEFAULT_WAIT_TIMEOUT_MS = 1000


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
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_waiters: int = DEFAULT_MAX_WAITERS  # long-poll requests waiting at once, per replica
    redis_pool_size: int = DEFAULT_REDIS_POOL_SIZE
    redis_timeout_s: float = DEFAULT_REDIS_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S  # a request body must arrive within this
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # HTTP connections per replica; beyond: 503
    auth_entries: tuple[str, ...] = ()  # "ROLE:TOKEN[:PATTERN|...]"; none = auth off
    allow_insecure: bool = False  # serve without tokens on a non-loopback address
    log_format: str = "text"  # "json": one JSON object per line, with trace ids
    workers: int = DEFAULT_WORKERS  # uvicorn worker processes
    access_log: bool = False  # uvicorn's line per request (EMQ_ACCESS_LOG=1)
    wait_replicas: int = 0  # durable mode: each write confirmed by this many replicas (WAIT)
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS

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
            max_body_bytes=integer("EMQ_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024),
            max_waiters=integer("EMQ_MAX_WAITERS", DEFAULT_MAX_WAITERS, 1),
            redis_pool_size=integer("EMQ_REDIS_POOL_SIZE", DEFAULT_REDIS_POOL_SIZE, 2),
            body_timeout_s=integer("EMQ_BODY_TIMEOUT_S", DEFAULT_BODY_TIMEOUT_S, 1),
            max_connections=integer("EMQ_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, 16),
            workers=integer("EMQ_WORKERS", DEFAULT_WORKERS, 1),
            access_log=env.get("EMQ_ACCESS_LOG", "").strip().lower() in ("1", "true", "yes"),
            wait_replicas=integer("EMQ_WAIT_REPLICAS", 0, 0),
            wait_timeout_ms=integer("EMQ_WAIT_TIMEOUT_MS", DEFAULT_WAIT_TIMEOUT_MS, 1),
        )


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
