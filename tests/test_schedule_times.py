"""Run times of schedules (echomq_http.core.schedule_times): cron in a timezone across DST changes in
two timezones, macros and names, fixed grids, start/end bounds, and the validation messages."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from echomq_http.core.schedule_times import Clock, cron_expression, timezone

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"
HALF_DAY_MS = 12 * 3600 * 1000


def ms(zone: str, *parts: int, fold: int = 0) -> int:
    return int(datetime(*parts, tzinfo=ZoneInfo(zone), fold=fold).timestamp() * 1000)  # type: ignore[misc]


def runs(clock: Clock, after_ms: int, count: int) -> list[int]:
    """The next `count` run times, each computed from the one before, as the firing does."""
    times = []
    for _ in range(count):
        after_ms = clock.next_after(after_ms)  # type: ignore[assignment]
        times.append(after_ms)
    return times


def local(zone: str, at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, ZoneInfo(zone)).strftime("%m-%d %H:%M%z")


@pytest.mark.parametrize(
    ("zone", "spring_day", "fall_day"),
    [(BERLIN, (2026, 3, 29), (2026, 10, 25)), (NEW_YORK, (2026, 3, 8), (2026, 11, 1))],
)
def test_a_daily_run_in_the_changed_hour_runs_once_on_both_dst_days(
    zone: str, spring_day: tuple[int, int, int], fall_day: tuple[int, int, int]
) -> None:
    clock = Clock(cron="30 2 * * *", timezone=zone)
    # Spring forward: 02:30 does not exist that day; the run comes at the first minute after the
    # gap, once, and the next day at 02:30 again.
    spring = runs(clock, ms(zone, *spring_day) - HALF_DAY_MS, 3)  # from noon the day before
    assert [local(zone, at)[:11] for at in spring] == [
        f"{spring_day[1]:02}-{spring_day[2]:02} 03:00",
        f"{spring_day[1]:02}-{spring_day[2] + 1:02} 02:30",
        f"{spring_day[1]:02}-{spring_day[2] + 2:02} 02:30",
    ]
    # Fall back: one run on the day whatever happens to the hour, 24-25 h apart.
    fall = runs(clock, ms(zone, *fall_day) - HALF_DAY_MS, 3)
    days = [local(zone, at)[:5] for at in fall]
    assert len(set(days)) == 3
    assert all(local(zone, at)[6:11] == "02:30" for at in fall)


def test_a_daily_run_in_the_repeated_hour_runs_once_on_the_fall_back_day() -> None:
    # New York falls back at 02:00 EDT to 01:00 EST: 01:30 happens twice that night.
    clock = Clock(cron="30 1 * * *", timezone=NEW_YORK)
    fall = runs(clock, ms(NEW_YORK, 2026, 10, 31, 12), 3)
    assert [local(NEW_YORK, at) for at in fall] == [
        "11-01 01:30-0400",
        "11-02 01:30-0500",
        "11-03 01:30-0500",
    ]


def test_an_hourly_run_runs_in_every_hour_that_passes_across_fall_back() -> None:
    clock = Clock(cron="30 * * * *", timezone=BERLIN)
    times = runs(clock, ms(BERLIN, 2026, 10, 25, 0, 0), 5)
    assert [b - a for a, b in itertools.pairwise(times)] == [3_600_000] * 4  # the repeated hour too
    assert local(BERLIN, times[2]) == "10-25 02:30+0200"
    assert local(BERLIN, times[3]) == "10-25 02:30+0100"


def test_macros_names_and_lists() -> None:
    assert cron_expression("@hourly") == "0 * * * *"
    assert cron_expression("@DAILY") == cron_expression("@midnight") == "0 0 * * *"
    assert cron_expression(" 0  9 * JAN MON-FRI ") == "0 9 * JAN MON-FRI"
    clock = Clock(cron=cron_expression("0 9 * JAN MON-FRI"), timezone=BERLIN)
    first = runs(clock, ms(BERLIN, 2026, 1, 2, 10), 2)  # Friday after 09:00
    assert [local(BERLIN, at) for at in first] == ["01-05 09:00+0100", "01-06 09:00+0100"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("* * *", "has 3 fields"),
        ("* * * * * *", "has 6 fields"),
        ("61 * * * *", "bad minute"),
        ("* * 31 2 *", "bad day-of-month"),
        ("* * * * 8", "bad day-of-week"),
        ("@reboot", "unknown cron macro"),
        ("", "has 0 fields"),
    ],
)
def test_bad_cron_text_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        cron_expression(text)


@pytest.mark.parametrize(
    "name",
    [
        "Mars/Olympus",
        "../etc/passwd",
        "/etc/localtime",
        "Europe/",
        # Files a zone directory holds that are not a place's zone: the host's own zone, the
        # placeholder, and the leap-second and POSIX copies of real zones.
        "localtime",
        "Factory",
        "posixrules",
        "right/UTC",
        "right/Europe/Berlin",
        "posix/Europe/Berlin",
        "europe/berlin",
    ],
)
def test_unknown_timezones_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="unknown timezone"):
        timezone(name)


@pytest.mark.parametrize(
    "name", ["UTC", "Etc/UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "US/Eastern"]
)
def test_iana_names_and_their_links_are_accepted(name: str) -> None:
    assert timezone(name).key == name


def test_a_grid_has_no_drift_and_catches_up_to_the_present() -> None:
    clock = Clock(every_ms=1000, anchor=10_500)
    assert clock.next_after(0) == 10_500  # before the anchor: the anchor is the first run
    assert clock.next_after(10_500) == 11_500
    assert clock.next_after(10_499) == 10_500
    # Long after (a downtime): the next grid point after the present, on the same grid.
    assert clock.next_after(1_000_000_123) == 1_000_000_500


def test_start_and_end_bound_the_runs() -> None:
    clock = Clock(cron="0 * * * *", start_at=ms("UTC", 2026, 1, 1, 5, 0), end_at=ms("UTC", 2026, 1, 1, 7, 0))
    assert clock.next_after(ms("UTC", 2026, 1, 1, 0, 0)) == ms("UTC", 2026, 1, 1, 5, 0)  # at start_at
    assert clock.next_after(ms("UTC", 2026, 1, 1, 6, 0)) == ms("UTC", 2026, 1, 1, 7, 0)  # end_at included
    assert clock.next_after(ms("UTC", 2026, 1, 1, 7, 0)) is None
    grid = Clock(every_ms=60_000, anchor=0, end_at=120_000)
    assert runs(grid, -1, 3)[:3] == [0, 60_000, 120_000]
    assert grid.next_after(120_000) is None


def test_a_clock_round_trips_through_its_stored_text() -> None:
    clock = Clock(cron="*/5 * * * *", timezone=BERLIN, start_at=5, end_at=10**13)
    assert Clock.parse(clock.text()) == clock
    assert Clock.parse(clock.text().encode()) is Clock.parse(clock.text().encode())  # cached
