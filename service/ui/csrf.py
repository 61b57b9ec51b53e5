"""Cross-site request forgery: every state-changing dashboard request must come from a page of
the dashboard itself.

Two checks, each enough on its own against a browser that follows the rules, both required: the
request's origin (Sec-Fetch-Site, then Origin, else Referer) is this host; and it carries the
CSRF token (a form field or the X-CSRF-Token header) equal to the token in its own HttpOnly,
SameSite=Strict cookie ("double submit": no secret shared between the service's processes).
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any
from urllib.parse import urlsplit

from litestar import Request
from litestar.datastructures import State

from echomq_http.auth import Forbidden

CSRF_COOKIE = "emq_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
TOKEN_BYTES = 32


def csrf_token_of(request: Request[Any, Any, State]) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (then the response must set its cookie)."""
    token = request.cookies.get(CSRF_COOKIE)
    if token and len(token) == 2 * TOKEN_BYTES:
        return token, False
    return secrets.token_hex(TOKEN_BYTES), True


def _same_host(url: str, host: str) -> bool:
    return bool(host) and urlsplit(url).netloc.lower() == host.lower()


def check_origin(request: Request[Any, Any, State]) -> None:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        raise Forbidden(f"a {site} request may not change anything here")
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        if not _same_host(origin, host):
            raise Forbidden("the request's Origin is not this host")
        return
    referer = request.headers.get("referer")
    if referer is None or not _same_host(referer, host):
        raise Forbidden("the request names no Origin (or Referer) of this host")


def check_csrf(request: Request[Any, Any, State], sent: str | None) -> None:
    """Forbidden unless the request comes from this host with its cookie's CSRF token."""
    check_origin(request)
    expected = request.cookies.get(CSRF_COOKIE, "")
    sent = sent or request.headers.get(CSRF_HEADER, "")
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        raise Forbidden("the form's CSRF token is missing or stale: reload the page and try again")
