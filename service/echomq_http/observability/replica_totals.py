"""A replica's totals when it runs several processes (EMQ_WORKERS > 1): each uvicorn worker
counts on its own, so each writes a snapshot of its totals into a directory they share (the
launcher makes it for the run), about once a second and before each scrape it answers; a scrape
adds up every process's latest snapshot, so whichever process answers, it reports the replica.

A snapshot is written aside and renamed over the last one, so a reader never sees half of one.
A process that exits leaves its last snapshot behind: the replica's counters never go down
(one killed outright loses at most its last second). Its gauges stop counting once that
snapshot is stale, since a live process rewrites its own every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from echomq_http.observability.totals import Totals, add_up
from echomq_http.runtime.background import stop_task

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_S = 1.0
GAUGES_FRESH_FOR_S = 3 * SNAPSHOT_INTERVAL_S  # a process whose snapshot is older is gone or stuck
SNAPSHOT_SUFFIX = ".totals"
WRITING_SUFFIX = ".writing"  # not a snapshot until renamed: readers never list it


class Snapshot(msgspec.Struct):
    # time.monotonic(): one clock for all the processes of a machine, and no jumps.
    written_at: float
    totals: Totals


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Snapshot)


class ReplicaTotals:
    """This process's part in the shared directory, and the sum of every process's."""

    def __init__(self, directory: Path, own_totals: Callable[[], Totals]) -> None:
        self.directory = directory
        self._own_totals = own_totals
        # Not the pid alone: a later worker given a dead one's pid must not write over its totals.
        self.path = directory / f"{os.getpid()}-{secrets.token_hex(4)}{SNAPSHOT_SUFFIX}"
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._failing = False

    def write(self) -> Totals:
        """Replace this process's snapshot with its totals now; returns them. Plain blocking I/O:
        a few kilobytes written and renamed take less than a thread hop would."""
        totals = self._own_totals()
        aside = self.path.with_suffix(WRITING_SUFFIX)
        try:
            aside.write_bytes(_encoder.encode(Snapshot(time.monotonic(), totals)))
            os.replace(aside, self.path)
        except OSError as error:
            if not self._failing:  # once, not every second
                log.warning("cannot write this process's metrics snapshot in %s: %s", self.directory, error)
            self._failing = True
        else:
            self._failing = False
        return totals

    def read(self) -> Totals:
        """The replica's totals: this process's as of now, every other's last snapshot."""
        parts = [self.write()]
        now = time.monotonic()
        for path in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            if path == self.path:
                continue
            try:
                snapshot = _decoder.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError) as error:
                log.warning("skipping the metrics snapshot %s: %s", path, error)
                continue
            totals = snapshot.totals
            if now - snapshot.written_at > GAUGES_FRESH_FOR_S:
                totals = msgspec.structs.replace(totals, gauges={})
            parts.append(totals)
        return add_up(parts)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="emq-metrics-snapshots")

    async def stop(self) -> None:
        await stop_task(self._task, self._stopping)
        self.write()  # what this process counted last stays in the replica's totals

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            self.write()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), SNAPSHOT_INTERVAL_S)
