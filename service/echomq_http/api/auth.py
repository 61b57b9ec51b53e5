"""Bearer tokens: who may do what to which queues (docs/security.md).

Entries are ``ROLE:TOKEN`` or ``ROLE:TOKEN:PATTERN|PATTERN...`` (shell-style globs of queue
names). Tokens are kept only as SHA-256 digests and compared in constant time against every
configured token, so neither timing nor a memory dump of the settings gives one away. No token
is ever logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase

from echomq_http.config import ConfigError
from echomq_http.core.limits import TOKEN_ID_CHARS


class Action(StrEnum):
    READ = "read"  # inspect jobs, queues, the ledger
    ENQUEUE = "enqueue"
    WORK = "work"  # lease, heartbeat, ack, fail, release
    CANCEL = "cancel"  # cancel a job
    ADMIN = "admin"  # pause/resume, redrive, delete, operator release
    METRICS = "metrics"  # any valid token


class Role(StrEnum):
    PRODUCER = "producer"
    WORKER = "worker"
    ADMIN = "admin"


ALLOWED: dict[Role, frozenset[Action]] = {
    Role.PRODUCER: frozenset({Action.READ, Action.ENQUEUE, Action.CANCEL, Action.METRICS}),
    Role.WORKER: frozenset({Action.READ, Action.WORK, Action.METRICS}),
    Role.ADMIN: frozenset(Action),
}


class Unauthorized(Exception):
    """No token, or one that is not configured."""


class Forbidden(Exception):
    """A valid token without the role or the queue for this request."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True, slots=True)
class Grant:
    role: Role
    digest: bytes
    patterns: tuple[str, ...] | None  # None: every queue

    def covers(self, queue: str) -> bool:
        return self.patterns is None or any(fnmatchcase(queue, pattern) for pattern in self.patterns)

    @property
    def token_id(self) -> str:
        """A short, stable id of the token, for the records that say which token owns what
        (a worker name: lua/include/workers.lua claim_worker); never the token itself."""
        return self.digest.hex()[:TOKEN_ID_CHARS]

    @property
    def worker_owner(self) -> str:
        """Who the token acts as for a worker name: its id, or "" for an admin, who may act for
        any worker and claims none."""
        return "" if self.role is Role.ADMIN else self.token_id


def parse_entry(entry: str) -> Grant:
    role_text, _, rest = entry.strip().partition(":")
    token, _, patterns_text = rest.partition(":")
    try:
        role = Role(role_text.strip())
    except ValueError:
        raise ConfigError(
            f"auth entry with unknown role {role_text!r}: use producer, worker or admin"
        ) from None
    if not token:
        raise ConfigError(f"auth entry for role {role} has an empty token")
    patterns = tuple(p.strip() for p in patterns_text.split("|") if p.strip()) if patterns_text else None
    return Grant(role=role, digest=_digest(token), patterns=patterns)


class Authenticator:
    def __init__(self, grants: Iterable[Grant]) -> None:
        self._grants = tuple(grants)

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> Authenticator:
        return cls(parse_entry(entry) for entry in entries if entry.strip())

    @property
    def enabled(self) -> bool:
        return bool(self._grants)

    def identify(self, authorization: str | None) -> Grant:
        """The grant of a ``Bearer`` token; compares against every grant, never stopping early."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("send Authorization: Bearer <token>")
        found = self.grant_of_digest(_digest(token.strip()))
        if found is None:
            raise Unauthorized("unknown token")
        return found

    def grant_of_digest(self, digest: bytes) -> Grant | None:
        """The grant of the token with this SHA-256 digest (a dashboard session keeps only the
        digest), or None; compares against every grant, never stopping early."""
        found: Grant | None = None
        for grant in self._grants:
            if hmac.compare_digest(digest, grant.digest) and found is None:
                found = grant
        return found

    @staticmethod
    def authorize(grant: Grant, action: Action, queue: str | None) -> None:
        if action not in ALLOWED[grant.role]:
            raise Forbidden(f"the {grant.role} role may not {action}")
        if queue is not None and not grant.covers(queue):
            raise Forbidden(f"this token is not allowed on queue {queue!r}")
