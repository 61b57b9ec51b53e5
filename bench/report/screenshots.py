"""The README's screenshots (docs/img/overview.png, ledger.png, timeline.png), taken of a scene
that looks like a service at work rather than a test.

    make screenshots                                        # about 4 minutes
    .venv/bin/python bench/screenshots.py --minutes 1 --out /tmp/shots

It starts the service as `make serve` does (embedded Valkey, a scratch data dir, a token), then
for --minutes runs producers and SDK workers (with sessions) on four queues: emails (some bounce:
dead letters), images (slow; a few files unreadable), webhooks (a flaky endpoint: retries with
backoff, some dead letters) and reports (long jobs with progress, two schedules), plus reminders
delayed by hours. The per-minute charts need minutes of history: the scene takes that long.
Then a burst of video jobs the image workers hold for minutes (the ledger), a report that fails
once and completes on its second attempt (its timeline), and Playwright drives Debian's
chromium over the dashboard for the three pictures. `make report` runs it too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from playwright.async_api import Page, async_playwright

from echomq import AsyncClient, Backoff, JobContext, JobError, Worker

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.support

from tests.support.launched import launched  # noqa: E402

CHROMIUM = os.environ.get("EMQ_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 720}
START_TIMEOUT_S = 30.0
TIMELINE_JOB = "report-2025-q3-sales"
# Reproducible choices: the same people, files and failures on every run.
rng = random.Random(26)

PEOPLE = ["ada", "grace", "alan", "edsger", "barbara", "donald", "frances", "ken", "margaret", "linus"]
DOMAINS = ["example.com", "example.org", "mail.example.net"]
TEMPLATES = ["order-confirmation", "password-reset", "shipping-update", "invoice", "welcome"]
BOUNCES = [
    "SMTP 550 5.1.1 <{to}>: Recipient address rejected: User unknown in virtual mailbox table",
    "SMTP 552 5.2.2 <{to}>: Mailbox full",
    "SMTP 554 5.7.1 <{to}>: Relay access denied",
]
UNREADABLE = "cannot identify image file 'uploads/{a:02x}/{b:02x}/IMG_{n}.HEIC' (no HEIF decoder)"
WEBHOOK_ERRORS = [
    "POST https://hooks.acme.example/orders: 503 Service Unavailable",
    "POST https://hooks.acme.example/orders: read timeout after 10 s",
    "POST https://hooks.acme.example/orders: 502 Bad Gateway",
]


@contextlib.contextmanager
def service(data_dir: Path, token: str) -> Iterator[str]:
    """`python -m echomq_http` with its embedded Valkey in data_dir and one admin token; SIGTERM
    at the end: it stops its Valkey on the way out."""
    log = data_dir.parent / "service.log"
    settings = {"EMQ_DATA_DIR": str(data_dir), "EMQ_AUTH_TOKENS": f"admin:{token}"}
    with launched(log, stop_with=signal.SIGTERM, **settings) as started:
        started.wait_ready()
        yield started.url


# --- the jobs -------------------------------------------------------------------------------------


def an_email() -> dict[str, Any]:
    person = rng.choice(PEOPLE)
    return {
        "to": f"{person}.{rng.randrange(100, 999)}@{rng.choice(DOMAINS)}",
        "template": rng.choice(TEMPLATES),
        "order": f"A-{rng.randrange(10000, 99999)}",
    }


def an_image() -> dict[str, Any]:
    folder = f"uploads/{rng.randrange(256):02x}/{rng.randrange(256):02x}"
    return {
        "src": f"{folder}/IMG_{rng.randrange(1000, 9999)}.jpg",
        "sizes": [320, 640, 1280],
        "format": "webp",
    }


def a_webhook() -> dict[str, Any]:
    return {
        "url": "https://hooks.acme.example/orders",
        "event": rng.choice(["order.paid", "order.shipped", "order.refunded"]),
        "order": f"A-{rng.randrange(10000, 99999)}",
    }


async def send_email(job: JobContext) -> dict[str, Any]:
    await asyncio.sleep(rng.uniform(0.05, 0.5))
    if rng.random() < 0.03:
        raise JobError(rng.choice(BOUNCES).format(to=job.payload["to"]), retry=False, plain=True)
    if rng.random() < 0.03:
        raise JobError("SMTP 421 4.7.0 Try again later, closing connection", plain=True)
    return {"message_id": f"<{secrets.token_hex(8)}@mail.example.com>"}


async def resize_image(job: JobContext) -> dict[str, Any]:
    if job.payload.get("format") == "mp4":  # the burst the ledger shows: minutes each
        await asyncio.sleep(600)
    await asyncio.sleep(rng.uniform(0.5, 2.0))
    if rng.random() < 0.02:
        a, b, n = rng.randrange(256), rng.randrange(256), rng.randrange(1000, 9999)
        raise JobError(UNREADABLE.format(a=a, b=b, n=n), retry=False, plain=True)
    return {
        "variants": [f"{job.payload['src'].rsplit('.', 1)[0]}-{size}.webp" for size in job.payload["sizes"]]
    }


async def deliver_webhook(job: JobContext) -> dict[str, Any]:
    await asyncio.sleep(rng.uniform(0.05, 0.3))
    if rng.random() < 0.02:
        raise JobError("POST https://hooks.acme.example/orders: 410 Gone", retry=False, plain=True)
    if rng.random() < 0.15:
        raise JobError(rng.choice(WEBHOOK_ERRORS), plain=True)
    return {"status": 200}


async def build_report(job: JobContext) -> dict[str, Any]:
    if job.id == TIMELINE_JOB and job.attempt == 1:
        await asyncio.sleep(1.5)
        raise JobError("timeout after 30 s reading ledger-db:5432 (canceling statement)", plain=True)
    for percent in (10, 35, 70, 90):
        await asyncio.sleep(rng.uniform(0.6, 1.2))
        job.report_progress({"percent": percent})
    return {"pages": rng.randrange(8, 40), "url": f"s3://acme-reports/{job.id}.pdf"}


# --- the scene ------------------------------------------------------------------------------------

Handler = Callable[[JobContext], Awaitable[Any]]
# queue, handler, worker ids, concurrency, heartbeat_s (None: the SDK's), session info
WORKERS: list[tuple[str, Handler, list[str], int, float | None, dict[str, Any]]] = [
    ("emails", send_email, ["mail-1", "mail-2"], 4, None, {"host": "mail-pool-a"}),
    ("images", resize_image, ["img-1", "img-2", "img-3"], 2, None, {"host": "gpu-box-2"}),
    ("webhooks", deliver_webhook, ["hooks-1"], 8, None, {"host": "edge-1"}),
    # Progress goes out with the next heartbeat: every second, so a report's steps show.
    ("reports", build_report, ["reports-1"], 2, 1.0, {"host": "batch-1"}),
]
RETRYING = {"max_attempts": 4, "backoff": {"type": "exponential", "delay_ms": 3000}}


async def produce(api: AsyncClient, until: float) -> None:
    """A steady flow: a few emails a second, an image, a webhook, a report now and then."""
    tick = 0
    while time.monotonic() < until:
        await api.enqueue_many(
            "emails", [{"payload": an_email(), **RETRYING} for _ in range(rng.randrange(1, 6))]
        )
        if tick % 2 == 0:
            await api.enqueue("images", an_image())
        await api.enqueue_many("webhooks", [{"payload": a_webhook(), **RETRYING} for _ in range(2)])
        if tick % 15 == 0:
            await api.enqueue("reports", {"report": "stock-levels", "warehouse": rng.choice(["BER", "AMS"])})
        tick += 1
        await asyncio.sleep(1.0)


async def set_the_scene(api: AsyncClient) -> None:
    await api.put_settings("images", max_in_flight=6)
    await api.put_settings("webhooks", rate_limit={"max": 20, "per_ms": 1000})
    await api.put_schedule(
        "reports",
        "daily-sales",
        {"payload": {"report": "sales", "period": "yesterday"}},
        cron="30 7 * * MON-FRI",
        timezone="Europe/Berlin",
        overlap="skip",
    )
    await api.put_schedule(
        "reports", "refresh-dashboards", {"payload": {"report": "dashboards"}}, every_ms=15 * 60_000
    )
    reminders = [
        {"payload": {**an_email(), "template": "cart-reminder"}, "delay_ms": rng.randrange(1, 20) * 3_600_000}
        for _ in range(24)
    ]
    await api.enqueue_many("emails", reminders)


async def stage(url: str, token: str, minutes: float) -> list[Worker]:
    """Runs the flow for `minutes`; answers the workers, still running (the ledger needs them)."""
    api = AsyncClient(url, token=token)
    await set_the_scene(api)
    workers = [
        Worker(
            queue,
            handler,
            url=url,
            token=token,
            worker_id=name,
            concurrency=slots,
            heartbeat_s=heartbeat_s,
            session_info=info,
        )
        for queue, handler, names, slots, heartbeat_s, info in WORKERS
        for name in names
    ]
    for worker in workers:
        asyncio.get_running_loop().create_task(worker.arun())
    await produce(api, time.monotonic() + minutes * 60)
    # The ledger: videos the image workers take one by one and hold for minutes, a backlog behind.
    for _ in range(6):
        await api.enqueue("images", {**an_image(), "format": "mp4"}, name="transcode")
        await asyncio.sleep(2.5)
    await api.enqueue_many("images", [{"payload": an_image()} for _ in range(40)])
    # The timeline: a report that fails once, then completes with progress.
    await api.enqueue(
        "reports",
        {"report": "sales", "period": "2025-Q3"},
        id=TIMELINE_JOB,
        name="quarterly-sales",
        backoff=Backoff(type="fixed", delay_ms=2000),
    )
    await api.wait("reports", TIMELINE_JOB, timeout_s=60)
    await api.pause("webhooks")  # an operator paused the flaky endpoint's queue; orders keep coming
    await api.enqueue_many("webhooks", [{"payload": a_webhook(), **RETRYING} for _ in range(35)])
    # Last, so the workers are still at it when the pictures are taken: a newsletter.
    newsletter = [{"payload": {**an_email(), "template": "newsletter"}} for _ in range(4000)]
    for start in range(0, len(newsletter), 500):
        await api.enqueue_many("emails", newsletter[start : start + 500])
    await api.aclose()
    return workers


async def photograph(url: str, token: str, out: Path) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = await browser.new_context(base_url=url, viewport=VIEWPORT)
        page = await context.new_page()
        await page.goto("/ui/sign-in")
        await page.get_by_label("Token").fill(token)
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url("**/ui")
        await shoot(page, "/ui", out / "overview.png")
        await shoot(page, "/ui/queues/images/active", out / "ledger.png")
        await shoot(page, f"/ui/queues/reports/jobs/{TIMELINE_JOB}", out / "timeline.png")
        await browser.close()


async def shoot(page: Page, path: str, target: Path) -> None:
    await page.goto(path)
    # Never "networkidle": a live page keeps re-reading what changes. Its script marks the body
    # once it follows the feed; a second more lets countdowns and charts settle.
    await page.wait_for_selector("body[data-live='open']")
    await page.wait_for_timeout(1000)
    await page.screenshot(path=str(target), full_page=True)
    print(f"screenshots: {target}", file=sys.stderr)


async def scene(url: str, token: str, minutes: float, out: Path) -> None:
    workers = await stage(url, token, minutes)
    await photograph(url, token, out)
    for worker in workers:
        worker.stop()
        worker.stop()  # the second skips the grace: the service goes with the scene


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=3.0, help="how long the flow runs before the pictures"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"needs chromium at {CHROMIUM} (apt-get install chromium)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    with (
        tempfile.TemporaryDirectory(prefix="emq-scene-") as scratch,
        service(Path(scratch) / "data", token) as url,
    ):
        asyncio.run(scene(url, token, args.minutes, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
