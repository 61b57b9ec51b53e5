"""How `emq` prints: JSON lines for scripts, aligned tables, durations, times with their zone,
a progress bar. In text, a JSON null reads ``-``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Optional, TextIO


def print_json(value: Any) -> None:
    print(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


NULL = "-"  # how a JSON null (a time not set, no worker...) reads in text
_zone: Optional[timezone] = None  # None: this machine's local time; `--utc` sets UTC


def show_times_in_utc(utc: bool) -> None:
    global _zone
    _zone = timezone.utc if utc else None


def cell(value: Any) -> str:
    """A value as text: ``-`` for None (never Python's ``None``)."""
    return NULL if value is None else str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    cells = [[cell(value) for value in row] for row in rows]
    widths = [
        max(len(h), *(len(row[i]) for row in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    for row in [list(headers), *cells]:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(), file=out)


def duration(ms: float) -> str:
    seconds = abs(ms) / 1000
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def when(epoch_ms: Optional[int]) -> str:
    """``2026-12-03 09:12:44 CET``: local time (UTC with ``--utc``), always with its zone."""
    if epoch_ms is None:
        return NULL
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).astimezone(_zone)
    zone = moment.strftime("%Z")
    if not zone or zone[0] in "+-":  # a zone without a name: its offset, as ISO 8601 writes it
        zone = moment.strftime("%z")
        zone = zone[:3] + ":" + zone[3:]
    return moment.strftime("%Y-%m-%d %H:%M:%S ") + zone


DELAYED_HEADERS = ["RUNS AT", "IN", "WHY"]


def delayed_cells(run_at: Optional[int], reason: Optional[str]) -> list[str]:
    """A delayed job's due time, how long until then, and why it waits (delay: its enqueue's
    delay, retry: a failed attempt's backoff)."""
    if run_at is None:
        return [NULL, NULL, reason or NULL]
    left_ms = run_at - now_ms()
    return [when(run_at), duration(left_ms) if left_ms > 0 else "due", reason or NULL]


def now_ms() -> float:
    # The service's times come from the Redis server's clock; this machine's clock is assumed
    # close to it (NTP). Lease times left are estimates to that precision.
    return time.time() * 1000


def summary(text: Optional[str], width: int = 72) -> str:
    """An error in one line: its first line, and its last when that says something more."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    # A traceback ends with its exception again, module-qualified (pkg.errors.Error: text):
    # that says nothing more than the first line.
    first, last = lines[0], lines[-1]
    line = first if first in last or last in first else f"{first}: {last}"
    return line if len(line) <= width else line[: width - 1] + "…"


class Progress:
    """A progress bar on stderr: ``[#####-----] 4000/10000  40%  3512 jobs/s``."""

    def __init__(self, total: Optional[int], out: TextIO, enabled: bool) -> None:
        self.total, self.out, self.enabled = total, out, enabled
        self.done = 0
        self.width = 0
        self.started = time.monotonic()

    def advance(self, count: int) -> None:
        self.done += count
        if not self.enabled:
            return
        rate = self.done / max(time.monotonic() - self.started, 1e-6)
        if self.total:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "-" * (30 - filled)
            line = f"[{bar}] {self.done}/{self.total} {100 * self.done // self.total:3d}%  {rate:.0f} jobs/s"
        else:
            line = f"{self.done} jobs  {rate:.0f} jobs/s"
        self.out.write("\r" + line.ljust(self.width))  # spaces over a longer previous frame
        self.width = len(line)
        self.out.flush()

    def finish(self) -> None:
        if self.enabled and self.done:
            self.out.write("\n")
            self.out.flush()
