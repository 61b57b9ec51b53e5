"""Prometheus text exposition of the queue gauges and this replica's counters."""

from __future__ import annotations

from collections.abc import Iterable

from service.longpoll import WakeHub
from service.queue import JobQueues
from service.sweeper import Sweeper

STATES = ("waiting", "delayed", "active", "completed", "failed")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


async def render(queues: JobQueues, hub: WakeHub, sweeper: Sweeper) -> str:
    views = [await queues.queue_view(name) for name in await queues.queue_names()]
    jobs = [
        (f'{{queue="{_escape(view.name)}",state="{state}"}}', getattr(view.counts, state))
        for view in views
        for state in STATES
    ]
    paused = [(f'{{queue="{_escape(view.name)}"}}', float(view.paused)) for view in views]
    totals = sweeper.totals
    lines = [
        *_family("emq_jobs", "gauge", "Jobs per queue and state.", jobs),
        *_family("emq_queue_paused", "gauge", "1 when the queue is paused.", paused),
        *_family(
            "emq_long_poll_waiters", "gauge", "Lease requests waiting on this replica.", [("", hub.waiting)]
        ),
        *_family(
            "emq_sweep_runs_total", "counter", "Stalled sweeps run by this replica.", [("", sweeper.runs)]
        ),
        *_family(
            "emq_sweep_reclaimed_total",
            "counter",
            "Expired leases this replica's sweep returned to waiting.",
            [("", totals.reclaimed)],
        ),
        *_family(
            "emq_sweep_dead_lettered_total",
            "counter",
            "Expired leases on their last attempt this replica's sweep moved to failed.",
            [("", totals.dead_lettered)],
        ),
        *_family(
            "emq_sweep_duration_seconds",
            "gauge",
            "Duration of the last sweep.",
            [("", sweeper.last_duration_s)],
        ),
    ]
    return "\n".join(lines) + "\n"
