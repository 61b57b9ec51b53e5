"""What the service refuses from any web page, with tokens or without (docs/security.md).

A browser lets any site send the service two kinds of request without asking it first (no CORS
preflight): a "simple" POST, whose body is a form, text/plain, or bytes of no declared type (an
HTML form; ``fetch()`` in no-cors mode with a Blob or an ArrayBuffer); and, after DNS rebinding
(a name of the attacker's made to resolve to the service), any request at all, which then names
the attacker's host. So, whatever the tokens:

- An API call that may change something (POST, PUT, PATCH, DELETE under /v1/) with a body
  declares it JSON: ``application/json`` or a ``+json`` type (parameters such as charset
  allowed). A call without a body (pause, promote, trigger) may come without a Content-Type, or
  with any but the three a page may send without a preflight (a form's two and text/plain): some
  HTTP clients add ``application/octet-stream`` to every POST (aiohttp, the Python SDK's async
  transport). 415 ``unsupported_media_type`` otherwise.
- The Host header names the service: a loopback name, an IP literal (rebinding gives a page a
  name, never an address), the HOST it binds to, or a name in EMQ_ALLOWED_HOSTS (``*``: any).
  421 ``misdirected_request`` otherwise. /healthz and /readyz answer whatever the Host: probes
  often name the pod by its address or not at all, and they change and tell nothing. A request
  without a Host header (HTTP/1.0) cannot come from a browser and is served.

The dashboard's form posts (under /ui) are forms by design; its CSRF checks guard them
(echomq_http.ui.csrf).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from litestar.types import Scope

from echomq_http.core.errors import HostNotAllowed, QueueError, UnsupportedMediaType

API_PREFIX = "/v1/"
CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
LOOPBACK_NAMES = frozenset({"localhost"})
CROSS_SITE_TYPES = frozenset({b"application/x-www-form-urlencoded", b"multipart/form-data", b"text/plain"})
ANY_HOST = "*"
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})  # every address: no name to add
MAX_REMEMBERED_HOSTS = 256  # Host values whose verdict is kept; beyond, each is judged anew


def host_name(header: str) -> str:
    """The name a Host header gives, lower case, without port or final dot ("[::1]:80" -> "::1")."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    return value.partition(":")[0].rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class AllowedHosts:
    """The names the service answers to (see the module)."""

    def __init__(self, names: Iterable[str], bind_host: str) -> None:
        given = {name.lower().rstrip(".") for name in names}
        self.any = ANY_HOST in given
        bind = host_name(bind_host)
        self.names = frozenset(given - {ANY_HOST}) | LOOPBACK_NAMES | ({bind} - WILDCARD_BINDS)
        self._verdicts: dict[bytes, bool] = {}  # per Host value: a client sends the same each time

    def allows(self, host: bytes) -> bool:
        verdict = self._verdicts.get(host)
        if verdict is None:
            name = host_name(host.decode("latin-1"))
            verdict = self.any or name in self.names or is_ip_literal(name)
            if len(self._verdicts) < MAX_REMEMBERED_HOSTS:
                self._verdicts[host] = verdict
        return verdict


def _media(content_type: bytes) -> bytes:
    return content_type.partition(b";")[0].strip().lower()


def is_json(content_type: bytes) -> bool:
    """application/json or application/<anything>+json, whatever its parameters."""
    media = _media(content_type)
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def is_cross_site_type(content_type: bytes) -> bool:
    """A type any page may send to another site without asking it first (CORS "simple")."""
    return _media(content_type) in CROSS_SITE_TYPES


class WebGuard:
    def __init__(self, hosts: AllowedHosts) -> None:
        self.hosts = hosts

    def refusal(self, scope: Scope) -> QueueError | None:
        """Why the request is refused (the error to answer), or None to serve it."""
        host: bytes | None = None
        content_types: list[bytes] = []
        has_body = False
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"content-type":
                content_types.append(value)
            elif name == b"content-length":
                has_body = bool(value.strip().lstrip(b"0"))
            elif name == b"transfer-encoding":
                has_body = True
        path: str = scope["path"]
        if host is not None and not self.hosts.allows(host) and path not in PROBE_PATHS:
            return HostNotAllowed(
                f"this service does not answer to the host {host_name(host.decode('latin-1'))!r}; "
                "an operator lists its names in EMQ_ALLOWED_HOSTS"
            )
        if scope["method"] in CHANGING_METHODS and path.startswith(API_PREFIX):
            for content_type in content_types:
                if not is_json(content_type) if has_body else is_cross_site_type(content_type):
                    return UnsupportedMediaType(
                        f"the request body must be JSON (Content-Type: application/json), "
                        f"not {content_type.decode('latin-1')[:100]!r}"
                    )
            if has_body and not content_types:
                return UnsupportedMediaType("a request body needs Content-Type: application/json")
        return None
