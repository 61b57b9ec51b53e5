"""The dashboard's HTML: the template engine (litestar's Jinja integration), the filters the
templates use, one function that answers a page or one of its live regions, and error pages."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from typing import Any

import msgspec
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from litestar import Request, Response
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.template import TemplateConfig
from redis.exceptions import RedisError

from echomq_http.api.auth import Forbidden, Unauthorized
from echomq_http.core.errors import PROBLEMS, InvalidRequest, QueueError
from echomq_http.runtime.wakeups import TooManyWaiters
from echomq_http.ui.access import SIGN_IN_PATH, SignInNeeded, private_cookie
from echomq_http.ui.csrf import CSRF_COOKIE, csrf_token_of

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
# Scripts and styles from our own files only: no inline script, so no nonce is needed either.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MS_PER_S, S_PER_MIN, MIN_PER_H, H_PER_DAY = 1000, 60, 60, 24


def duration(ms: int | float | None) -> str:
    """A span of time as people read it: 350 ms, 12 s, 4 min 5 s, 2 h 10 min, 3 d 4 h."""
    if ms is None:
        return "—"
    ms = max(0, int(ms))
    if ms < MS_PER_S:
        return f"{ms} ms"
    seconds = ms // MS_PER_S
    if seconds < S_PER_MIN:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, S_PER_MIN)
    if minutes < MIN_PER_H:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, MIN_PER_H)
    if hours < H_PER_DAY:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, H_PER_DAY)
    return f"{days} d {hours} h" if hours else f"{days} d"


def timestamp(ms: int | None) -> str:
    if ms is None:
        return "—"
    moment = datetime.datetime.fromtimestamp(ms / MS_PER_S, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / MS_PER_S, tz=datetime.UTC).isoformat(timespec="milliseconds")


def pretty_json(raw: Any) -> str:
    """A payload, result or progress (raw JSON bytes) laid out for reading."""
    if raw is None:
        return "null"
    return msgspec.json.format(bytes(raw), indent=2).decode()


def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined, trim_blocks=True
    )
    environment.filters.update(duration=duration, timestamp=timestamp, iso=iso, pretty_json=pretty_json)
    return environment


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(_environment()))


def page(
    request: Request[Any, Any, State],
    template: str,
    context: dict[str, Any],
    regions: tuple[str, ...] = (),
    status: int = 200,
) -> Template:
    """The page, or with ?fragment=<region> only that live region (its partial "_<region>.html",
    rendered from the same context), which the page's script fetches when the feed says so."""
    token, new = csrf_token_of(request)
    fragment = request.query_params.get("fragment")
    name = template
    if fragment is not None and regions:  # an error page has none: it always answers whole
        if fragment not in regions:
            raise InvalidRequest(f"this page has no region {fragment!r}")
        name = f"_{fragment}.html"
    full = {"csrf_token": token, "path": request.url.path, "notice": notice_of(request), **context}
    response = Template(template_name=name, context=full, status_code=status, headers=dict(SECURITY_HEADERS))
    if new:
        response.set_cookie(private_cookie(request, CSRF_COOKIE, token))
    return response


# What an action reports after its redirect (?notice=<key>&n=<count>): fixed texts, never echoed input.
NOTICES = {
    "paused": "The queue is paused.",
    "resumed": "The queue is resumed.",
    "released": "Released {n} job(s) back to waiting.",
    "quiet": "The worker is quiet: it leases nothing more.",
    "settings": "Settings saved.",
    "retried": "Retried {n} job(s).",
    "deleted": "Job deleted.",
    "cancelled": "Cancellation requested.",
    "promoted": "The job is waiting now.",
    "signed-out": "Signed out.",
    "triggered": "Schedule triggered: one job enqueued.",
    "schedule-paused": "Schedule paused.",
    "schedule-resumed": "Schedule resumed.",
    "schedule-deleted": "Schedule deleted.",
}


def notice_of(request: Request[Any, Any, State]) -> str | None:
    text = NOTICES.get(request.query_params.get("notice", ""))
    if text is None:
        return None
    count = request.query_params.get("n", "")
    return text.format(n=count if count.isdigit() else "some")


def error_page(request: Request[Any, Any, State], status: int, title: str, detail: str) -> Template:
    context = {"title": title, "status": status, "detail": detail, "viewer": None, "feed": None}
    return page(request, "error.html", context, status=status)


def on_sign_in_needed(request: Request[Any, Any, State], _: SignInNeeded) -> Response[Any]:
    if request.method == "GET":
        return Redirect(f"{SIGN_IN_PATH}?next={request.url.path}", status_code=303)
    return error_page(request, 401, "Sign in first", "Your session has no valid token: sign in again.")


def on_queue_error(request: Request[Any, Any, State], error: QueueError) -> Response[Any]:
    status, _, title = PROBLEMS[type(error)]
    return error_page(request, status, title, str(error))


def on_forbidden(request: Request[Any, Any, State], error: Forbidden) -> Response[Any]:
    return error_page(request, 403, "Not allowed", str(error))


def on_unauthorized(request: Request[Any, Any, State], error: Unauthorized) -> Response[Any]:
    return error_page(request, 401, "Unknown token", str(error))


def on_too_many(request: Request[Any, Any, State], error: TooManyWaiters) -> Response[Any]:
    return error_page(request, 429, "Too many open streams", str(error))


def on_http_error(request: Request[Any, Any, State], error: HTTPException) -> Response[Any]:
    return error_page(request, error.status_code, "Request refused", str(error.detail))


def on_redis_error(request: Request[Any, Any, State], error: RedisError) -> Response[Any]:
    log.warning("dashboard: Redis error: %s", error)
    return error_page(request, 503, "Backend unavailable", "Redis does not answer now; try again shortly.")


ERROR_PAGES: dict[type[Exception], Any] = {
    SignInNeeded: on_sign_in_needed,
    QueueError: on_queue_error,
    Forbidden: on_forbidden,
    Unauthorized: on_unauthorized,
    TooManyWaiters: on_too_many,
    HTTPException: on_http_error,
    RedisError: on_redis_error,
}
