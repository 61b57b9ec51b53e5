"""bench.py's workload for the dashboard (issue 17): how fast its pages answer on a big queue.

    .venv/bin/python bench/bench.py --only ui_pages [--quick] [--no-bullmq]

  ui_pages  its own Redis and one service replica of one process. One queue is filled with
            FILL_JOBS jobs (1,000,000; --quick 100,000) in batches of 1,000 over HTTP (the
            enqueue-many endpoint, FILL_CONCURRENCY requests at once), then IN_FLIGHT (10,000)
            of them are leased by 10 workers with long leases. Then each dashboard page is read
            ROUNDS times in turn, one request at a time: the overview, the queue's waiting tab
            (first page and the page after it, by cursor), the ledger (first page) and the
            workers tab. Figures: each page's median and p95 latency; the target is 200 ms.

Each function takes bench.py's Bench and returns a dict of figures; the ``*_rows``,
``*_table`` and ``*_summary`` functions turn them into bench.py's table rows and their own table.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

QUEUE = "ui-bench"
FILL_JOBS, FILL_JOBS_QUICK = 1_000_000, 100_000
IN_FLIGHT = 10_000
BATCH = 1000
FILL_CONCURRENCY = 16
LEASE_MS = 3600 * 1000  # nothing expires during the bench
WORKERS = 10
ROUNDS = 30
TARGET_MS = 200.0
NEXT_LINK = re.compile(r'href="([^"]+)" rel="next"')


async def _fill(url: str, jobs: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        batches = iter(range(0, jobs, BATCH))

        async def sender() -> None:
            for start in batches:
                body = {"jobs": [{"payload": {"n": n}} for n in range(start, min(start + BATCH, jobs))]}
                (await http.post(f"/v1/queues/{QUEUE}/enqueue", json=body)).raise_for_status()

        await asyncio.gather(*(sender() for _ in range(FILL_CONCURRENCY)))


def _lease(url: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        for number in range(IN_FLIGHT // 100):
            asked = {"worker": f"w{number % WORKERS}", "max_jobs": 100, "lease_ms": LEASE_MS}
            http.post(f"/v1/queues/{QUEUE}/lease", json=asked).raise_for_status()


def _timings(http: httpx.Client, path: str) -> list[float]:
    took = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        answer = http.get(path)
        took.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
    return took


def ui_pages(bench: Any) -> dict[str, Any]:
    jobs = FILL_JOBS_QUICK if bench.args.quick else FILL_JOBS
    with bench.own_stack("ui-pages", replicas=1, workers=1) as stack:
        url = stack.service.urls[0]
        started = time.monotonic()
        asyncio.run(_fill(url, jobs + IN_FLIGHT))
        fill_s = time.monotonic() - started
        _lease(url)
        with httpx.Client(base_url=url, timeout=60) as http:
            first = http.get(f"/ui/queues/{QUEUE}/waiting").text
            second = NEXT_LINK.search(first)
            pages = {
                "overview": "/ui",
                "waiting, first page": f"/ui/queues/{QUEUE}/waiting",
                "waiting, next page": second.group(1).replace("&amp;", "&") if second else "",
                "ledger (active)": f"/ui/queues/{QUEUE}/active",
                "workers": f"/ui/queues/{QUEUE}/workers",
            }
            counts = http.get(f"/v1/queues/{QUEUE}").json()["counts"]
            took = {page: _timings(http, path) for page, path in pages.items() if path}
    return {
        "waiting": counts["waiting"],
        "active": counts["active"],
        "fill_s": fill_s,
        "fill_jobs_per_s": (jobs + IN_FLIGHT) / fill_s,
        "pages": {
            page: {"median_ms": statistics.median(ms), "p95_ms": sorted(ms)[int(len(ms) * 0.95) - 1]}
            for page, ms in took.items()
        },
    }


def ui_pages_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    scale = f"{result['waiting']:,} waiting, {result['active']:,} in flight"
    return [
        row(
            "ui_pages",
            f"dashboard {page}, {scale} (median)",
            "ms",
            ours_value=round(figures["median_ms"], 1),
            target=f"<= {TARGET_MS:g}",
            met=figures["median_ms"] <= TARGET_MS,
        )
        for page, figures in result["pages"].items()
    ]


def ui_pages_table(result: dict[str, Any]) -> str:
    lines = [
        f"Queue: {result['waiting']:,} waiting, {result['active']:,} in flight (filled at "
        f"{result['fill_jobs_per_s']:,.0f} jobs/s). {ROUNDS} reads of each page, one at a time.",
        "",
        "| page | median | p95 |",
        "|---|---|---|",
    ]
    for page, figures in result["pages"].items():
        lines.append(f"| {page} | {figures['median_ms']:.1f} ms | {figures['p95_ms']:.1f} ms |")
    return "\n".join(lines)


def ui_pages_summary(result: dict[str, Any]) -> str:
    return ", ".join(f"{page} {figures['median_ms']:.0f} ms" for page, figures in result["pages"].items())
