"""observability.replica_totals and observability.totals: the processes of a replica sharing their
totals through a directory (each ReplicaTotals here stands for one process), added up and cut down to
a token's queues."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from echomq_http.observability.exposition import Family, render
from echomq_http.observability.replica_totals import (
    GAUGES_FRESH_FOR_S,
    SNAPSHOT_SUFFIX,
    WRITING_SUFFIX,
    ReplicaTotals,
    Snapshot,
)
from echomq_http.observability.telemetry import Telemetry
from echomq_http.observability.totals import HistogramCounts, Totals, add_up, only_queues

Q1 = (("queue", "emails"),)
Q2 = (("queue", "sms"),)


def encoded(written_at: float, totals: Totals) -> bytes:
    return msgspec.msgpack.encode(Snapshot(written_at, totals))


def counting(enqueued: dict[tuple[tuple[str, str], ...], int], waiters: int = 0) -> Totals:
    return Totals(counters={"emq_jobs_enqueued": dict(enqueued)}, gauges={"waiters": {(): waiters}})


class Process:
    """What one process counts, and its part in the shared directory."""

    def __init__(self, directory: Path) -> None:
        self.totals = Totals()
        self.share = ReplicaTotals(directory, lambda: self.totals)


def test_a_scrape_adds_up_every_process_s_latest_snapshot(tmp_path: Path) -> None:
    a, b = Process(tmp_path), Process(tmp_path)
    a.totals = counting({Q1: 3}, waiters=1)
    b.totals = counting({Q1: 5, Q2: 1}, waiters=2)
    b.share.write()
    replica = a.share.read()  # a's own totals as of now, b's last snapshot
    assert replica.counters["emq_jobs_enqueued"] == {Q1: 8, Q2: 1}
    assert replica.gauges["waiters"] == {(): 3}

    b.totals = counting({Q1: 7, Q2: 1}, waiters=0)  # not written yet: a still reads b's last snapshot
    assert a.share.read().counters["emq_jobs_enqueued"][Q1] == 8
    # A scrape on b writes b's snapshot first, and reads a's from a's last scrape: never less.
    assert b.share.read().counters["emq_jobs_enqueued"][Q1] == 10
    assert a.share.read().counters["emq_jobs_enqueued"][Q1] == 10


def test_a_dead_process_s_counts_stay_and_its_gauges_go(tmp_path: Path) -> None:
    live = Process(tmp_path)
    live.totals = counting({Q1: 2}, waiters=1)
    dead = encoded(time.monotonic() - GAUGES_FRESH_FOR_S - 1, counting({Q1: 40}, waiters=9))
    (tmp_path / f"999-0000{SNAPSHOT_SUFFIX}").write_bytes(dead)
    replica = live.share.read()
    assert replica.counters["emq_jobs_enqueued"] == {Q1: 42}
    assert replica.gauges["waiters"] == {(): 1}


def test_half_written_and_unreadable_files_are_not_read(tmp_path: Path) -> None:
    a = Process(tmp_path)
    a.totals = counting({Q1: 1})
    (tmp_path / f"998-0000{WRITING_SUFFIX}").write_bytes(encoded(time.monotonic(), counting({Q1: 5})))
    (tmp_path / f"997-0000{SNAPSHOT_SUFFIX}").write_bytes(b"\x93not msgpack of a snapshot")
    assert a.share.read().counters["emq_jobs_enqueued"] == {Q1: 1}


def test_two_processes_never_share_a_file(tmp_path: Path) -> None:
    # The same pid (as a restarted worker may get) still gets a file of its own.
    assert Process(tmp_path).share.path != Process(tmp_path).share.path


async def test_stopping_writes_the_last_counts(tmp_path: Path) -> None:
    a, b = Process(tmp_path), Process(tmp_path)
    b.share.start()
    b.totals = counting({Q2: 4})
    await b.share.stop()
    assert a.share.read().counters["emq_jobs_enqueued"] == {Q2: 4}


def test_histograms_add_up_bucket_by_bucket() -> None:
    one = Totals(histograms={"h": {Q1: HistogramCounts([1, 0, 2], 3.5)}})
    two = Totals(histograms={"h": {Q1: HistogramCounts([0, 4, 1], 1.0), Q2: HistogramCounts([1, 1, 1], 2.0)}})
    summed = add_up([one, two]).histograms["h"]
    assert summed[Q1] == HistogramCounts([1, 4, 3], 4.5) and summed[Q1].count == 8
    assert summed[Q2] == HistogramCounts([1, 1, 1], 2.0)
    assert one.histograms["h"][Q1] == HistogramCounts([1, 0, 2], 3.5)  # the parts are left as they were


def test_a_token_s_queues_and_the_series_without_a_queue() -> None:
    totals = Totals(
        counters={"emq_jobs_failed": {(*Q1, ("reason", "fail")): 1, (*Q2, ("reason", "fail")): 2}},
        histograms={"h": {Q2: HistogramCounts([1], 1.0), (("route", "/x"),): HistogramCounts([2], 1.0)}},
        gauges={"waiters": {(): 3}},
    )
    cut = only_queues(totals, lambda queue: queue == "emails")
    assert cut.counters == {"emq_jobs_failed": {(*Q1, ("reason", "fail")): 1}}
    assert list(cut.histograms["h"]) == [(("route", "/x"),)]
    assert cut.gauges == {"waiters": {(): 3}}
    families = [Family("emq_jobs_failed", "d", "counter"), Family("h", "d", "histogram")]
    assert "sms" not in render(families, cut)


def test_every_counter_of_telemetry_reaches_metrics() -> None:
    telemetry = Telemetry()
    telemetry.record_stale("emails", 2)  # a counter added after the others
    text = render(telemetry.families, telemetry.totals())
    assert 'emq_stale_index_entries_total{queue="emails"} 2' in text
