"""The dashboard's forms, read and checked: bad input is an InvalidRequest (400), never a 500."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request
from litestar.datastructures import State
from litestar.exceptions import HTTPException

from echomq_http.api.schemas.common import is_name
from echomq_http.api.schemas.operations import QueueSettings
from echomq_http.core import limits
from echomq_http.core.errors import BodyTimeout, InvalidRequest
from echomq_http.ui.csrf import CSRF_FIELD, check_csrf

_DIGITS = re.compile(r"[0-9]{1,16}")
_UI_PATH = re.compile(r"/ui(/[A-Za-z0-9._~/-]*)?(\?[A-Za-z0-9._~=&%+-]*)?")
NUMBER_FIELDS = (
    "max_in_flight",
    "group_max_in_flight",
    "max_stalls",
    "completed_retention_s",
    "failed_retention_s",
)


class Form:
    """A posted form's fields (application/x-www-form-urlencoded or multipart)."""

    def __init__(self, fields: Any) -> None:
        self._fields = fields

    def text(self, name: str) -> str:
        value = self._fields.get(name)
        return value.strip() if isinstance(value, str) else ""

    def all(self, name: str) -> list[str]:
        return [value for value in self._fields.getall(name, []) if isinstance(value, str)]

    def number(self, name: str, low: int = 0, high: int = limits.MAX_OFFSET) -> int | None:
        """A whole number field; None when left empty."""
        raw = self.text(name)
        if not raw:
            return None
        if _DIGITS.fullmatch(raw) is None or not low <= int(raw) <= high:
            raise InvalidRequest(
                f"{name.replace('_', ' ')} must be a whole number in {low}..{high}, got {raw!r}"
            )
        return int(raw)


async def checked_form(request: Request[Any, Any, State]) -> Form:
    """The form, read within EMQ_BODY_TIMEOUT_S as an API body is (408 after), then the CSRF
    checks (echomq_http.ui.csrf)."""
    try:
        # A client that trickles its form would otherwise hold a connection for ever.
        with request.app.state.body_timeouts.watch():
            fields = await request.form()
    except TimeoutError:
        raise BodyTimeout(f"the form did not arrive within {request.app.state.body_timeout_s} s") from None
    except HTTPException:
        raise
    except Exception as error:  # a body that is no form: the parser's own errors vary
        raise InvalidRequest(f"the request body is not a form: {error}") from None
    form = Form(fields)
    check_csrf(request, form.text(CSRF_FIELD))
    return form


def back_to(form: Form, default: str) -> str:
    """Where the action's redirect goes: the page the form came from, only ever a dashboard path."""
    back = form.text("back")
    return back if back and _UI_PATH.fullmatch(back) and "//" not in back else default


def job_ids(form: Form) -> list[str]:
    ids = form.all("id")
    if len(ids) > limits.MAX_BATCH:
        raise InvalidRequest(f"at most {limits.MAX_BATCH} jobs at once, got {len(ids)}")
    for job_id in ids:
        if not is_name(job_id):
            raise InvalidRequest(f"invalid job id {job_id!r}")
    return ids


def queue_settings(form: Form) -> QueueSettings:
    """The settings form as the settings API's body, checked by the same Struct."""
    fields: dict[str, Any] = {name: form.number(name) for name in NUMBER_FIELDS}
    rate_max, rate_per_ms = form.number("rate_max"), form.number("rate_per_ms")
    if (rate_max is None) != (rate_per_ms is None):
        raise InvalidRequest("a rate limit needs both its jobs and its period (or neither)")
    if rate_max is not None:
        fields["rate_limit"] = {"max": rate_max, "per_ms": rate_per_ms}
    fields["events"] = form.text("events") == "on"
    try:
        return msgspec.convert({k: v for k, v in fields.items() if v is not None}, QueueSettings)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"settings: {error}") from None
