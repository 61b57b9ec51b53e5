"""Who is looking at the dashboard: the sign-in cookie, and what its token may see and do.

With tokens configured (echomq_http.auth), the sign-in form takes a token and the browser keeps it
in an HttpOnly, SameSite=Strict cookie (Secure over https); every request is then checked as the
API checks a bearer token, with the same Authenticator and the Action each API operation needs.
Without tokens the service serves loopback only (echomq_http.__main__), and so is the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Request, Response
from litestar.datastructures import Cookie, State

from echomq_http.auth import ALLOWED, Action, Authenticator, Forbidden, Grant, Unauthorized

TOKEN_COOKIE = "emq_token"
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


def viewer_of(request: Request[Any, Any, State]) -> Viewer:
    """The request's viewer; SignInNeeded when tokens are on and its cookie holds no valid one."""
    auth = authenticator_of(request)
    if not auth.enabled:
        return Viewer(None)
    token = request.cookies.get(TOKEN_COOKIE)
    if not token:
        raise SignInNeeded
    try:
        return Viewer(auth.identify(f"Bearer {token}"))
    except Unauthorized:
        raise SignInNeeded from None


def reader_of(request: Request[Any, Any, State], queue: str) -> Viewer:
    """A viewer that may look at the queue (any role may, on a queue its token covers)."""
    viewer = viewer_of(request)
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


def sign_in(request: Request[Any, Any, State], response: Response[Any], token: str) -> None:
    """Check the token (Unauthorized if unknown) and keep it in the response's cookie."""
    authenticator_of(request).identify(f"Bearer {token}")
    response.set_cookie(private_cookie(request, TOKEN_COOKIE, token))


def sign_out(request: Request[Any, Any, State], response: Response[Any]) -> None:
    response.set_cookie(private_cookie(request, TOKEN_COOKIE, "", max_age=0))
