"""When a schedule runs: cron text in a timezone, or a fixed grid of `every_ms`.

Cron times come from cronsim (compared with croniter: cronsim runs a 02:30 daily job once on a
fall-back day where croniter runs it twice, it is seven times faster per next time, and it
has no dependencies); zoneinfo gives the timezone, DST included: on a spring-forward day a time
that does not exist runs at the first minute after the gap, once; on a fall-back day a daily
time that occurs twice runs at its first occurrence, once (hourly and finer ones run in each
hour that really passes). Every time is epoch milliseconds on the Redis clock; run times are
whole seconds for cron and `anchor + k * every_ms` for a grid, so none drifts.

A schedule's clock is stored in its hash as JSON (`Clock.text`) and read back by every firing
(`Clock.parse`, cached), so computing a next run costs one cronsim step, not a parse.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import msgspec
from cronsim import CronSim, CronSimError

# The usual macros; @reboot has no meaning for a service that is always up.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
CRON_FIELDS = 5  # minute hour day-of-month month day-of-week; cronsim would take a 6th (seconds)
_PROBE = datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC"))


def cron_expression(text: str) -> str:
    """The five-field expression of cron text (a macro expanded); ValueError says what is wrong."""
    stripped = text.strip()
    if stripped.startswith("@"):
        if stripped.lower() not in MACROS:
            raise ValueError(f"unknown cron macro {stripped!r}: one of {', '.join(MACROS)}")
        return MACROS[stripped.lower()]
    fields = stripped.split()
    if len(fields) != CRON_FIELDS:
        raise ValueError(
            f"cron {text!r} has {len(fields)} fields: it needs 5 (minute hour day-of-month month "
            "day-of-week) or a macro such as @hourly"
        )
    expression = " ".join(fields)
    try:
        CronSim(expression, _PROBE)
    except CronSimError as error:
        raise ValueError(f"invalid cron {text!r}: {str(error).lower()}") from None
    return expression


# Names the tz database lists that are not a place's zone: the host's own zone (it changes with
# the machine the service runs on) and the placeholder for "not set". The right/ (leap seconds
# counted, off by ~27 s from Redis's clock) and posix/ copies are not listed by
# available_timezones(), but a zone directory can still open them: refused by name too.
_NOT_PLACES = frozenset({"localtime", "Factory", "posixrules"})
_COPIES = ("right/", "posix/")


@lru_cache(maxsize=1)
def iana_names() -> frozenset[str]:
    """The IANA names schedules accept: Area/City, UTC and the tz database's links (US/Eastern)."""
    return frozenset(
        name for name in available_timezones() if name not in _NOT_PLACES and not name.startswith(_COPIES)
    )


def timezone(name: str) -> ZoneInfo:
    """The IANA timezone of that name; ValueError when there is none."""
    try:
        if name not in iana_names():
            raise ValueError(name)
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown timezone {name!r}: use an IANA name such as Europe/Berlin or UTC "
            "(not a file, localtime, or a right/ or posix/ copy)"
        ) from None


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    if not name or name.startswith("/") or ".." in name:
        raise ValueError(name)
    return ZoneInfo(name)


class Clock(msgspec.Struct, omit_defaults=True, frozen=True):
    """What a schedule's run times follow. cron (with timezone) or every_ms (with anchor, the
    grid's first point); start_at: no run before it; end_at: none after it."""

    cron: str | None = None
    timezone: str = "UTC"
    every_ms: int | None = None
    anchor: int | None = None
    start_at: int | None = None
    end_at: int | None = None

    def text(self) -> str:
        return _ENCODER.encode(self).decode()

    @staticmethod
    def parse(text: str | bytes) -> Clock:
        return _parse_clock(text if isinstance(text, bytes) else text.encode())

    def next_after(self, after_ms: int) -> int | None:
        """The first run time strictly after after_ms (and not before start_at), or None when
        there is none before end_at."""
        if self.start_at is not None:
            after_ms = max(after_ms, self.start_at - 1)
        if self.every_ms is not None:
            anchor = self.anchor if self.anchor is not None else 0
            if after_ms < anchor:
                at = anchor
            else:
                at = anchor + ((after_ms - anchor) // self.every_ms + 1) * self.every_ms
        else:
            assert self.cron is not None
            zone = _zone(self.timezone)
            start = datetime.fromtimestamp(after_ms // 1000, zone)
            try:
                at = int(next(CronSim(self.cron, start)).timestamp()) * 1000
            except StopIteration:  # a date that never comes (cronsim looks ahead 50 years)
                return None
        if self.end_at is not None and at > self.end_at:
            return None
        return at


_ENCODER = msgspec.json.Encoder()


@lru_cache(maxsize=16384)
def _parse_clock(text: bytes) -> Clock:
    return msgspec.json.decode(text, type=Clock)
