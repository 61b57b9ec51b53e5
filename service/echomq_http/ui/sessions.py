"""Dashboard sign-in sessions, and the brake on guessing tokens: both in Redis, so that every
process of every replica sees the same ones.

A session is a random id in the browser's cookie. Redis keeps, under the id's SHA-256 (a read of
Redis gives no cookie that works), the digest of the token it signed in with (never the token)
for SESSION_TTL_S, not extended by use. Each request looks that digest up among the configured
tokens, so taking a token out of the configuration ends its sessions, and signing out deletes
the session's key: the old cookie no longer works anywhere.

Failed sign-ins are counted per client address in fixed windows of FAILURE_WINDOW_S; from
MAX_FAILURES in a window on, every sign-in from the address is refused (429 with Retry-After)
until the window ends, a right token's too (else the brake would not slow guessing). Behind a
proxy on another machine every client has the proxy's address, unless FORWARDED_ALLOW_IPS names
it (uvicorn then takes the client's from X-Forwarded-For, as it does for a proxy on loopback).
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from echomq_http.store.keys import sign_in_failures_key, ui_session_key

SESSION_TTL_S = 12 * 3600
SESSION_ID_BYTES = 32
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(SESSION_ID_BYTES)
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60
# A window's counter outlives the window, so a late increment never leaves a key without a TTL
# that is read again (each window has its own key).
FAILURE_KEY_TTL_S = 2 * FAILURE_WINDOW_S
MAX_ADDRESS_CHARS = 64

Client = Redis | RedisCluster


class TooManySignIns(Exception):
    """Too many failed sign-ins from one client address in this window (the sign-in page says
    so, with a 429 and Retry-After)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _key(session_id: str) -> str:
    return ui_session_key(hashlib.sha256(session_id.encode()).hexdigest())


async def start_session(client: Client, token_digest: bytes) -> str:
    """A new session of the token (by its digest); its id, for the cookie."""
    session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
    await client.set(_key(session_id), token_digest.hex(), ex=SESSION_TTL_S)
    return session_id


async def session_token_digest(client: Client, session_id: str) -> bytes | None:
    """The digest of the token the session signed in with; None for no live session."""
    if _SESSION_ID.fullmatch(session_id) is None:
        return None  # not one we made: spare Redis the look-up
    stored = await client.get(_key(session_id))
    return None if stored is None else bytes.fromhex(stored.decode())


async def end_session(client: Client, session_id: str) -> None:
    await client.delete(_key(session_id))


def _window(now_s: float) -> tuple[int, int]:
    """The failure window of the instant, and the whole seconds until it ends (at least 1)."""
    window = int(now_s // FAILURE_WINDOW_S)
    return window, max(1, math.ceil((window + 1) * FAILURE_WINDOW_S - now_s))


def _failures_key(address: str, window: int) -> str:
    return sign_in_failures_key(address[:MAX_ADDRESS_CHARS], window)


async def check_sign_in_allowed(client: Client, address: str, now_s: float) -> None:
    """TooManySignIns when the address has failed MAX_FAILURES times in this window."""
    window, left_s = _window(now_s)
    failures = await client.get(_failures_key(address, window))
    if failures is not None and int(failures) >= MAX_FAILURES:
        raise TooManySignIns(
            f"{MAX_FAILURES} failed sign-ins from this address within {FAILURE_WINDOW_S} s: "
            f"try again in {left_s} s",
            retry_after_s=left_s,
        )


async def note_failed_sign_in(client: Client, address: str, now_s: float) -> None:
    key = _failures_key(address, _window(now_s)[0])
    async with client.pipeline(transaction=False) as pipe:
        pipe.incr(key)
        pipe.expire(key, FAILURE_KEY_TTL_S)
        await pipe.execute()
