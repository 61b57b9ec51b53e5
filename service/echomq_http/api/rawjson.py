"""Checks on the JSON values kept verbatim (payloads, results, progress, session info): how deep
they nest and whether every number fits a double, done at C speed on text msgspec already found
valid.

Every step is one call into C (bytes.count, replace, split, translate, one regular expression),
so a large body costs a few milliseconds of the event loop, not tens: on a 1 MB flat
``[[],[],...]`` the depth check went from 28 ms (a Python loop over the bytes) to 3 ms, a 64-level
value takes microseconds (bench figures in CHANGELOG.md, issue 27).
"""

from __future__ import annotations

import math
import re

from echomq_http.core import limits

_OPENERS = b"[{"
_BRACKETS = b"[]{}"
# Brackets as parentheses, everything else dropped: what is left is the value's nesting alone.
_AS_PARENTHESES = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in _BRACKETS)


def _nesting_at_most(levels: int) -> re.Pattern[bytes]:
    """Balanced parentheses nested at most `levels` deep. Possessive repeats never backtrack, so a
    match is one pass over the text however it is shaped (deeper input fails where it gets too
    deep)."""
    group = rb"\(\)"
    for _ in range(levels - 1):
        group = rb"\((?:" + group + rb")*+\)"
    return re.compile(rb"(?:" + group + rb")*+")


_SHALLOW = _nesting_at_most(limits.MAX_JSON_DEPTH)

# A double overflows from about 1.8e308: a number needs 100 integer digits or an exponent of
# 100 or more to get there (99 digits and e99 are at most 1e198). The hint is looked for in the whole text,
# strings included, with every digit written 0, every sign + and every e lowercase (one
# translate and a few substring searches, not a regular expression tried at every byte); the
# candidates are then whole number tokens outside strings, read by float().
_NUMBER_SHAPES = bytes.maketrans(b"0123456789-E", b"0000000000+e")
_BIG_NUMBER_HINTS = (b"e000", b"e+000", b"0" * 100)
_BIG_NUMBER = re.compile(
    rb"(?<![0-9.eE+-])-?(?:[0-9]{100,}(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|[0-9]+(?:\.[0-9]+)?[eE]\+?0*[1-9][0-9]{2,})"
)


def _outside_strings(text: bytes) -> bytes:
    """The JSON text without its strings. Escaped backslashes go first, then escaped quotes:
    paired from the left like a parser pairs them, so every quote left delimits a string."""
    if b'"' not in text:
        return text
    unescaped = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(unescaped.split(b'"')[::2])


def nests_deeper_than(text: bytes, max_depth: int = limits.MAX_JSON_DEPTH) -> bool:
    """Whether valid JSON text nests arrays and objects deeper than max_depth."""
    if text.count(b"[") + text.count(b"{") <= max_depth:
        return False  # too few brackets to nest that deep: the common case costs two scans
    pattern = _SHALLOW if max_depth == limits.MAX_JSON_DEPTH else _nesting_at_most(max_depth)
    nesting = _outside_strings(text).translate(_AS_PARENTHESES, _NOT_BRACKETS)
    return pattern.fullmatch(nesting) is None


def has_number_beyond_double(text: bytes) -> bool:
    """Whether valid JSON text holds a number a double cannot hold (1e999, 400 digits): most
    parsers read it as Infinity, which JSON cannot write back."""
    shapes = text.translate(_NUMBER_SHAPES)
    if not any(hint in shapes for hint in _BIG_NUMBER_HINTS):
        return False
    candidates = _BIG_NUMBER.findall(_outside_strings(text))
    return bool(candidates) and max(map(abs, map(float, candidates))) == math.inf


def json_value_problem(text: bytes) -> str | None:
    """Why a JSON value cannot be kept as it is (to follow the field's name), or None."""
    if nests_deeper_than(text):
        return f"is nested deeper than {limits.MAX_JSON_DEPTH} levels"
    if has_number_beyond_double(text):
        return "holds a number out of range: every number must fit a double (at most about 1.8e308)"
    return None
