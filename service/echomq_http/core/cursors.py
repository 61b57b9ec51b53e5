"""The job listing's cursors: where lua/list_jobs.lua stopped, as opaque URL-safe text.

A cursor is the script's own cursor (a kind and its fields, see the script's header) with the
state it lists in front, as a JSON array of strings in unpadded base64url. Clients must treat it
as opaque; the service checks every field of one it gets back (anything else is a 400), since it
goes into a script's arguments.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgspec

from echomq_http.api.schemas.common import is_name
from echomq_http.core import limits
from echomq_http.core.errors import InvalidRequest

_SCORE = re.compile(r"-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?")  # as Redis writes a finite score
_COUNT = re.compile(r"[0-9]{1,15}")  # indexes, fences, times: integers well below 2^53
_ZSET_STATES = frozenset({"waiting", "delayed", "completed", "failed", "cancelled"})  # PRIO for waiting
_decoder = msgspec.json.Decoder(list[str])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def encode(state: str, script_cursor: list[Any]) -> str | None:
    """The cursor of the script's reply (None: it was the last page)."""
    if not script_cursor:
        return None
    fields = [state, *(_text(value) for value in script_cursor)]
    return base64.urlsafe_b64encode(msgspec.json.encode(fields)).rstrip(b"=").decode()


def _fields(cursor: str) -> list[str]:
    if len(cursor) > limits.MAX_CURSOR_CHARS:
        raise InvalidRequest(f"query parameter cursor: longer than {limits.MAX_CURSOR_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return _decoder.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise InvalidRequest("query parameter cursor: not a cursor this service gave") from None


def _anchor(entry: str) -> bool:
    """A WAIT entry: a job id, or the tombstone ":<id>" a deleted or cancelled job left."""
    return is_name(entry[1:] if entry.startswith(":") else entry)


def _valid(state: str, kind: str, fields: list[str]) -> bool:
    if kind == "z":
        score, job_id = fields if len(fields) == 2 else ("", "")
        return state in _ZSET_STATES and _SCORE.fullmatch(score) is not None and is_name(job_id)
    if kind == "w":
        if state != "waiting" or len(fields) != 6:
            return False
        last, following, *numbers = fields
        return (last == "" or _anchor(last)) and _anchor(following) and all(map(_COUNT.fullmatch, numbers))
    if kind == "g":
        group, score, job_id = fields if len(fields) == 3 else ("", "x", "")
        start = score == job_id == ""
        after = _SCORE.fullmatch(score) is not None and is_name(job_id)
        return state == "waiting" and is_name(group) and (start or after)
    return kind == "a" and state == "active" and len(fields) == 1 and _COUNT.fullmatch(fields[0]) is not None


def decode(cursor: str, state: str) -> list[str]:
    """The script's arguments for a cursor (its kind, then its fields); 400 for anything that is
    not a cursor of a listing of this state."""
    fields = _fields(cursor)
    if len(fields) < 2 or fields[0] != state:
        raise InvalidRequest(f"query parameter cursor: not a cursor of the {state} listing")
    if not _valid(state, fields[1], fields[2:]):
        raise InvalidRequest("query parameter cursor: not a cursor this service gave")
    return fields[1:]
