"""Who is looking at the dashboard: the sign-in session, and what its token may see and do.

With tokens configured (echomq_http.api.auth), the sign-in form takes a token and starts a session
(echomq_http.ui.sessions): the browser keeps only the session's random id, in an HttpOnly,
SameSite=Strict cookie (Secure over https); every request is then checked as the API checks a
bearer token, with the grant of the session's token and the Action each API operation needs.
Without tokens the service serves loopback only (echomq_http.__main__), and so is the dashboard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response
from litestar.datastructures import Cookie, State

from echomq_http.api.auth import ALLOWED, Action, Authenticator, Forbidden, Grant, Unauthorized
from echomq_http.ui import sessions

SESSION_COOKIE = "emq_session"
COOKIE_PATH = "/ui"
SIGN_IN_PATH = "/ui/sign-in"


class SignInNeeded(Exception):
    """Tokens are configured and the request brings none that is valid: the sign-in page."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """The grant of the token the request signed in with; None when tokens are off."""

    grant: Grant | None

    @property
    def role(self) -> str | None:
        return None if self.grant is None else str(self.grant.role)

    def sees(self, queue: str) -> bool:
        return self.grant is None or self.grant.covers(queue)

    def may(self, action: Action, queue: str | None = None) -> bool:
        if self.grant is None:
            return True
        return action in ALLOWED[self.grant.role] and (queue is None or self.grant.covers(queue))

    def require(self, action: Action, queue: str | None = None) -> None:
        """Forbidden unless the token may do this (the API's check, word for word)."""
        if self.grant is not None:
            Authenticator.authorize(self.grant, action, queue)


def authenticator_of(request: Request[Any, Any, State]) -> Authenticator:
    return request.app.state.auth  # type: ignore[no-any-return]


async def viewer_of(request: Request[Any, Any, State]) -> Viewer:
    """The request's viewer; SignInNeeded when tokens are on and its cookie names no live session
    of a configured token."""
    auth = authenticator_of(request)
    if not auth.enabled:
        return Viewer(None)
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        raise SignInNeeded
    digest = await sessions.session_token_digest(request.app.state.client, session_id)
    grant = None if digest is None else auth.grant_of_digest(digest)
    if grant is None:
        raise SignInNeeded
    return Viewer(grant)


async def reader_of(request: Request[Any, Any, State], queue: str) -> Viewer:
    """A viewer that may look at the queue (any role may, on a queue its token covers)."""
    viewer = await viewer_of(request)
    if not viewer.sees(queue):
        raise Forbidden(f"this token is not allowed on queue {queue!r}")
    return viewer


def is_https(request: Request[Any, Any, State]) -> bool:
    return request.url.scheme == "https"


def private_cookie(
    request: Request[Any, Any, State], key: str, value: str, max_age: int | None = None
) -> Cookie:
    """A cookie scripts cannot read and other sites' requests do not carry."""
    return Cookie(
        key=key,
        value=value,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=is_https(request),
        max_age=max_age,
    )


def client_address(request: Request[Any, Any, State]) -> str:
    return request.client.host if request.client is not None else "unknown"


async def sign_in(request: Request[Any, Any, State], response: Response[Any], token: str) -> None:
    """Check the token and start a session in the response's cookie: TooManySignIns when the
    client address failed too often lately, Unauthorized (counted as a failure) if unknown."""
    client, address, now_s = request.app.state.client, client_address(request), time.time()
    await sessions.check_sign_in_allowed(client, address, now_s)
    try:
        grant = authenticator_of(request).identify(f"Bearer {token}")
    except Unauthorized:
        await sessions.note_failed_sign_in(client, address, now_s)
        raise
    session_id = await sessions.start_session(client, grant.digest)
    response.set_cookie(private_cookie(request, SESSION_COOKIE, session_id, sessions.SESSION_TTL_S))


async def sign_out(request: Request[Any, Any, State], response: Response[Any]) -> None:
    """End the session (its cookie no longer works, wherever it was copied) and clear the cookie."""
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        await sessions.end_session(request.app.state.client, session_id)
    response.set_cookie(private_cookie(request, SESSION_COOKIE, "", max_age=0))
