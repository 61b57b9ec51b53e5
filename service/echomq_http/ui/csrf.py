"""Cross-site request forgery: every state-changing dashboard request must come from a page of
the dashboard itself.

Two checks, each enough on its own against a browser that follows the rules, both required: the
request's origin (Sec-Fetch-Site, then Origin, else Referer) is this host, and a host the service
answers to (echomq_http.api.webguard's allow-list: a DNS-rebound page's Origin and Host name the
attacker's host alike, so agreeing with Host proves nothing on its own); and it carries the
CSRF token (a form field or the X-CSRF-Token header) equal to the token in its own HttpOnly,
SameSite=Strict cookie ("double submit": no secret shared between the service's processes).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from litestar import Request
from litestar.datastructures import State

from echomq_http.api.auth import Forbidden
from echomq_http.api.webguard import AllowedHosts

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


def _ours(url: str, host: str, hosts: AllowedHosts) -> bool:
    """The URL's host and port are the request's Host, and a name the service answers to."""
    netloc = urlsplit(url).netloc.lower()
    return bool(host) and netloc == host.lower() and hosts.allows(netloc.encode("latin-1"))


def origin_refusal(headers: Mapping[str, str], hosts: AllowedHosts) -> str | None:
    """Why a state-changing request is not from the dashboard's own pages, or None when it is."""
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"a {site} request may not change anything here"
    host = headers.get("host", "")
    origin = headers.get("origin")
    if origin is not None and origin != "null":
        return None if _ours(origin, host, hosts) else "the request's Origin is not this service's host"
    referer = headers.get("referer")
    if referer is None or not _ours(referer, host, hosts):
        return "the request names no Origin (or Referer) of this service's host"
    return None


def check_csrf(request: Request[Any, Any, State], sent: str | None) -> None:
    """Forbidden unless the request comes from this host with its cookie's CSRF token."""
    refusal = origin_refusal(request.headers, request.app.state.allowed_hosts)
    if refusal is not None:
        raise Forbidden(refusal)
    expected = request.cookies.get(CSRF_COOKIE, "")
    sent = sent or request.headers.get(CSRF_HEADER, "")
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        raise Forbidden("the form's CSRF token is missing or stale: reload the page and try again")
