"""The abuse harness's judge (bench/abuse_check.py) on small recorded runs: a flood after which
the probes are slow or fail, memory over the bound, a late or missing reclaim, or a hostile
request served must fail; the second allowed to recover is not judged."""

from __future__ import annotations

from typing import Any

from tests.support.abuse_check import Bounds, judge, judge_flood, latency, table

T0 = 1_000.0
BOUNDS = Bounds(p99_ms=1000, rss_mb=300, release_ms=3200, recover_s=1.0)


def probes(from_s: float, to_s: float, latency_ms: float = 5.0, status: int = 200) -> list[list[Any]]:
    """A probe every 0.1 s in [from_s, to_s) (seconds after T0)."""
    steps = round((to_s - from_s) * 10)
    return [[0, T0 + from_s + i / 10, T0 + from_s + i / 10, latency_ms, status] for i in range(steps)]


def flood(name: str = "sse", release_ms: list[float] | None = None, **summary: Any) -> dict[str, Any]:
    """A flood from 0 to 10 s; its worker fault's job leased again after release_ms."""
    return {
        "name": name,
        "started": T0,
        "engaged": T0 + 1,
        "ended": T0 + 10,
        "summary": summary or {"statuses": {"200": 200}, "streams_open": 200},
        "fault": {"kind": "worker-kill", "t": T0 + 2, "skipped": "", "release_ms": release_ms or [2500]},
    }


RSS = {"service0": [[T0 + 1, 90.0], [T0 + 9, 120.0], [T0 + 14, 95.0]]}


def test_a_flood_the_service_shrugs_off_passes() -> None:
    row = judge_flood(flood(), probes(0, 15), RSS, BOUNDS, next_start=T0 + 15)
    assert row.failures == []
    assert (row.rss_peak_mb, row.rss_after_mb, row.release_ms) == (120.0, 95.0, 2500)
    assert (row.during.n, row.after.n) == (110, 40)


def test_probes_slow_during_the_flood_and_its_recovery_second_are_not_judged() -> None:
    during = probes(0, 11, latency_ms=4000, status=503)
    row = judge_flood(flood(), during + probes(11, 15), RSS, BOUNDS, next_start=T0 + 15)
    assert row.failures == []
    assert (row.during.errors, row.during.p99_ms) == (110, 4000)


def test_slow_probes_after_the_flood_fail() -> None:
    after = probes(11, 15, latency_ms=1500)
    row = judge_flood(flood(), probes(0, 11) + after, RSS, BOUNDS, next_start=T0 + 15)
    assert row.failures == ["sse: probe p99 1500 ms after the flood > 1000 ms"]


def test_failed_probes_after_the_flood_fail() -> None:
    after = probes(11, 13) + probes(13, 15, status=0)
    row = judge_flood(flood(), probes(0, 11) + after, RSS, BOUNDS, next_start=T0 + 15)
    assert row.failures == ["sse: 20 of 40 probes failed after the flood"]


def test_no_probe_after_the_flood_fails() -> None:
    row = judge_flood(flood(), probes(0, 11), RSS, BOUNDS, next_start=T0 + 15)
    assert row.failures == ["sse: no probe was sent after the flood"]


def test_a_process_over_the_memory_bound_fails() -> None:
    rss = {"service0": [[T0 + 1, 90.0]], "service1": [[T0 + 5, 301.0], [T0 + 14, 100.0]]}
    row = judge_flood(flood(), probes(0, 15), rss, BOUNDS, next_start=T0 + 15)
    assert row.failures == ["sse: a service process reached 301 MB > 300 MB"]
    assert row.rss_after_mb == 100.0


def test_a_late_missing_or_skipped_reclaim_fails() -> None:
    late = judge_flood(flood(release_ms=[1000, 60_616]), probes(0, 15), RSS, BOUNDS, T0 + 15)
    assert late.failures == ["sse: worker-kill's job leased again 60616 ms after the fault > 3200 ms"]
    never = flood()
    never["fault"]["release_ms"] = None
    assert judge_flood(never, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == [
        "sse: the job of the worker-kill was never leased again"
    ]
    skipped = flood()
    skipped["fault"]["skipped"] = "the worker got no job to hold in time"
    assert judge_flood(skipped, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == [
        "sse: worker-kill not injected (the worker got no job to hold in time)"
    ]


def test_a_late_reclaim_while_every_live_worker_was_busy_is_shown_and_passes() -> None:
    busy = flood(release_ms=[3662])
    busy["fault"]["release_busy_ms"] = [3662]  # the chaos checker found no worker told "nothing"
    row = judge_flood(busy, probes(0, 15), RSS, BOUNDS, T0 + 15)
    assert (row.failures, row.release_ms, row.release_busy) == ([], 3662, True)
    assert "3.66 s (every live worker busy)" in table([row], latency(probes(0, 15), T0, T0 + 15), 90.0)


def test_a_hostile_request_served_fails_and_refused_passes() -> None:
    served = flood("web", statuses={"form-enqueue": {"201": 50}, "rebound-host": {"421": 50}})
    row = judge_flood(served, probes(0, 15), RSS, BOUNDS, T0 + 15)
    assert row.failures == ["web: form-enqueue was served ({'201': 50})"]
    refused = flood("web", statuses={"form-enqueue": {"415": 50}, "rebound-host": {"400": 50}})
    assert judge_flood(refused, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == []
    unsent = flood("web", statuses={"form-enqueue": {"415": 1}, "rebound-host": {}})
    assert judge_flood(unsent, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == [
        "web: no rebound-host request was answered in the flood's time"
    ]
    big = flood("headers", statuses={"200": 4}, mb_sent_each=[20.0] * 4)
    assert judge_flood(big, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == [
        "headers: a request with [20.0, 20.0, 20.0, 20.0] MB of headers was served"
    ]


def test_listings_among_thousands_of_queues_must_answer() -> None:
    answered = {"/ui": [(200, 0.05, 9000)], "/metrics": [(200, 0.02, 60000)]}
    ok = flood("queues", created={"201": 2000}, pages=answered)
    assert judge_flood(ok, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == []
    broken = flood("queues", created={"201": 2000}, pages={"/ui": [(503, 5.0, 0)], "/v1/queues": []})
    assert judge_flood(broken, probes(0, 15), RSS, BOUNDS, T0 + 15).failures == [
        "queues: /ui answered [503]",
        "queues: /v1/queues was not fetched",
    ]


def test_each_flood_is_judged_up_to_the_next_and_tabled() -> None:
    second = flood("silent", opened=2000, closed_by_service=2000)
    second.update(started=T0 + 15, ended=T0 + 25)
    second["fault"]["t"] = T0 + 17
    slow_after_second = probes(26, 30, latency_ms=2000)
    rows = judge([flood(), second], probes(0, 26) + slow_after_second, RSS, BOUNDS, end=T0 + 30)
    assert [row.failures for row in rows] == [[], ["silent: probe p99 2000 ms after the flood > 1000 ms"]]
    markdown = table(rows, latency(probes(-5, 0), T0 - 5, T0), 80.0)
    lines = markdown.splitlines()
    assert len(lines) == 5  # header, rule, baseline, two floods
    assert lines[3].startswith("| sse |") and lines[3].endswith("| PASS |")
    assert lines[4].startswith("| silent | 2000 open, 2000 closed by the service |")
    assert lines[4].endswith("| FAIL |")
