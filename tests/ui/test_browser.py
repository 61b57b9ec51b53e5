"""The dashboard in a real browser (Debian's chromium through Playwright): sign in, live updates,
the lease countdown, the operator's actions, search, a job's timeline; every page checked with
axe-core (no serious or critical violation) and saved as a screenshot (SHOTS, a CI artifact)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.ui.conftest import ADMIN, CHROMIUM, SHOTS, require_chromium

TIMEOUT_MS = 10_000
PHONE = {"width": 375, "height": 800}
SERIOUS = {"serious", "critical"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    require_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, ui_url: str) -> Iterator[Page]:
    """A page signed in as an admin through the sign-in form."""
    context = browser.new_context(base_url=ui_url)
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())  # confirmations
    tab.goto("/ui")
    expect(tab).to_have_url(f"{ui_url}/ui/sign-in?next=/ui")
    tab.get_by_label("Token").fill(ADMIN)
    tab.get_by_role("button", name="Sign in").click()
    expect(tab.get_by_role("heading", name="Queues")).to_be_visible()
    yield tab
    context.close()


@pytest.fixture
def name() -> str:
    return f"ui-{secrets.token_hex(5)}"


def checked(page: Page, axe: Path, shot: str) -> None:
    """axe-core finds no serious or critical violation; the page is saved as a screenshot."""
    # Evaluated through the DevTools protocol, not as a <script> tag: the page's CSP (script-src
    # 'self') stays on, as the script under test runs under it.
    page.evaluate(axe.read_text() + "\n;0")
    found = page.evaluate("async () => (await axe.run()).violations")
    serious = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]]) for v in found if v["impact"] in SERIOUS
    ]
    assert serious == [], serious
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)


def live(page: Page) -> None:
    """Wait until the page's script follows the feed (it marks the body when the stream opened)."""
    expect(page.locator("body[data-live='open']")).to_have_count(1)


def enqueue(api: httpx.Client, queue: str, job_id: str, **fields: object) -> None:
    body = {"payload": {"order": job_id, "items": 3}, "id": job_id, **fields}
    assert api.post(f"/v1/queues/{queue}/jobs", json=body).status_code == 201


def lease(api: httpx.Client, queue: str, worker: str, lease_ms: int = 60_000) -> dict:
    return api.post(f"/v1/queues/{queue}/lease", json={"worker": worker, "lease_ms": lease_ms}).json()[
        "jobs"
    ][0]


def test_sign_in_page_is_accessible(browser: Browser, ui_url: str, axe_script: Path) -> None:
    context = browser.new_context(base_url=ui_url)
    tab = context.new_page()
    tab.goto("/ui/sign-in")
    checked(tab, axe_script, "sign-in")
    tab.get_by_label("Token").fill("not-a-token")
    tab.get_by_role("button", name="Sign in").click()
    expect(tab.get_by_role("alert")).to_contain_text("not one this service knows")
    context.close()


def test_a_job_appears_live_after_an_enqueue(
    page: Page, api: httpx.Client, name: str, axe_script: Path
) -> None:
    enqueue(api, name, "first")
    page.goto(f"/ui/queues/{name}/waiting")
    live(page)
    enqueue(api, name, "arrives-live")
    expect(page.get_by_role("link", name="arrives-live")).to_be_visible()
    checked(page, axe_script, "waiting")
    page.goto(f"/ui?prefix={name}")  # its page of the overview, whatever other tests left
    live(page)
    enqueue(api, name, "third")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=name, exact=True))
    expect(row.get_by_role("cell").nth(0)).to_have_text("3")
    checked(page, axe_script, "overview")


def test_a_hidden_page_stops_streaming_and_catches_up_on_return(
    page: Page, api: httpx.Client, name: str
) -> None:
    enqueue(api, name, "before")
    page.goto(f"/ui/queues/{name}/waiting")
    live(page)
    page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    expect(page.locator("body[data-live='closed']")).to_have_count(1)
    enqueue(api, name, "while-hidden")
    page.wait_for_timeout(500)
    expect(page.get_by_role("link", name="while-hidden")).to_have_count(0)  # nothing streamed meanwhile
    page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    expect(page.get_by_role("link", name="while-hidden")).to_be_visible()


def test_the_ledger_counts_a_lease_down_and_turns_red(
    page: Page, api: httpx.Client, name: str, axe_script: Path
) -> None:
    enqueue(api, name, "slow-job")
    enqueue(api, name, "long-job")
    lease(api, name, "worker-a", lease_ms=7000)
    lease(api, name, "worker-b", lease_ms=600_000)
    page.goto(f"/ui/queues/{name}/active")
    countdown = page.locator("tr", has_text="slow-job").locator(".countdown")
    first = countdown.inner_text()
    expect(countdown).not_to_have_text(first)  # it ticks
    expect(countdown).to_have_class("countdown soon", timeout=5000)  # its last 5 s: red
    expect(page.locator("tr", has_text="long-job").locator(".countdown")).to_have_class("countdown")
    checked(page, axe_script, "ledger")


def test_declare_a_worker_dead_and_see_its_jobs_go_back(
    page: Page, api: httpx.Client, name: str, axe_script: Path
) -> None:
    for job_id in ("held-1", "held-2"):
        enqueue(api, name, job_id)
        lease(api, name, "crashed-box")
    api.post(
        f"/v1/queues/{name}/workers/crashed-box/heartbeat", json={"ttl_ms": 60_000, "info": {"host": "box-7"}}
    )
    page.goto(f"/ui/queues/{name}/workers")
    checked(page, axe_script, "workers")
    row = page.locator("tr", has_text="crashed-box")
    expect(row).to_contain_text("2 job(s)")
    row.get_by_role("button", name="Declare dead (release its jobs)").click()
    expect(page.get_by_role("status")).to_have_text("Released 2 job(s) back to waiting.")
    page.get_by_role("link", name=re.compile(r"^waiting( \d+)?$")).click()
    expect(page.get_by_role("link", name="held-1")).to_be_visible()
    assert api.get(f"/v1/queues/{name}").json()["counts"]["active"] == 0


def test_retry_a_failed_job(page: Page, api: httpx.Client, name: str, axe_script: Path) -> None:
    enqueue(api, name, "broken", max_attempts=1)
    job = lease(api, name, "w")
    api.post(
        f"/v1/queues/{name}/jobs/broken/fail",
        json={"lease_id": job["lease_id"], "error": "disk full on /var"},
    )
    page.goto(f"/ui/queues/{name}/failed")
    row = page.locator("tr", has_text="broken")
    expect(row).to_contain_text("disk full on /var")
    checked(page, axe_script, "failed")
    row.get_by_role("button", name="Retry").click()
    expect(page.get_by_role("status")).to_have_text("Retried 1 job(s).")
    assert api.get(f"/v1/queues/{name}/jobs/broken").json()["state"] == "waiting"


def test_edit_a_setting(page: Page, api: httpx.Client, name: str, axe_script: Path) -> None:
    page.goto(f"/ui/queues/{name}/settings")
    checked(page, axe_script, "settings")
    page.get_by_label("Max in flight", exact=True).fill("12")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text("Settings saved.")
    expect(page.get_by_label("Max in flight", exact=True)).to_have_value("12")
    assert api.get(f"/v1/queues/{name}/settings").json()["max_in_flight"] == 12


def test_search_failed_jobs(page: Page, api: httpx.Client, name: str, axe_script: Path) -> None:
    for job_id, error in (("needle-job", "connection refused by db-3"), ("other-job", "timeout")):
        enqueue(api, name, job_id, max_attempts=1)
        job = lease(api, name, "w")
        api.post(f"/v1/queues/{name}/jobs/{job_id}/fail", json={"lease_id": job["lease_id"], "error": error})
    page.goto(f"/ui/queues/{name}/failed")
    page.get_by_label("Search by id or text in payloads and errors").fill("DB-3")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("link", name="needle-job")).to_be_visible()
    expect(page.get_by_role("link", name="other-job")).to_have_count(0)
    checked(page, axe_script, "search")


def test_a_jobs_timeline_grows_live(page: Page, api: httpx.Client, name: str, axe_script: Path) -> None:
    enqueue(api, name, "tracked")
    job = lease(api, name, "worker-9")
    page.goto(f"/ui/queues/{name}/jobs/tracked")
    live(page)
    api.post(
        f"/v1/queues/{name}/jobs/tracked/heartbeat",
        json={"lease_id": job["lease_id"], "progress": {"pct": 60}},
    )
    api.post(
        f"/v1/queues/{name}/jobs/tracked/ack", json={"lease_id": job["lease_id"], "result": {"rows": 42}}
    )
    timeline = page.locator("ol.timeline")
    expect(timeline.locator("li")).to_have_count(4)
    expect(timeline).to_contain_text("leased by worker-9")
    expect(page.get_by_role("heading", name="Result")).to_be_visible()
    checked(page, axe_script, "job")


def test_readable_and_keyboard_usable_at_phone_width(
    page: Page, api: httpx.Client, name: str, axe_script: Path
) -> None:
    enqueue(api, name, "phone-job")
    page.set_viewport_size(PHONE)
    for path in ("/ui", f"/ui/queues/{name}/waiting", f"/ui/queues/{name}/jobs/phone-job"):
        page.goto(path)
        # Nothing but the tables' own scroll areas is wider than the screen.
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], path
    checked(page, axe_script, "phone-job")
    page.goto(f"/ui/queues/{name}/waiting")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    for _ in range(12):  # the tab links are reachable by keyboard
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent").startswith("failed"):
            break
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{page.url.split('/ui/')[0]}/ui/queues/{name}/failed")


def test_trigger_a_schedule(page: Page, api: httpx.Client, name: str, axe_script: Path) -> None:
    schedule = {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"payload": {"report": "nightly"}}}
    assert api.put(f"/v1/queues/{name}/schedules/nightly-report", json=schedule).status_code == 201
    page.goto(f"/ui/queues/{name}/schedules")
    row = page.locator("tr", has_text="nightly-report")
    expect(row).to_contain_text("0 3 * * *")
    checked(page, axe_script, "schedules")
    row.get_by_role("button", name="Trigger").click()
    expect(page.get_by_role("status")).to_have_text("Schedule triggered: one job enqueued.")
    assert api.get(f"/v1/queues/{name}").json()["counts"]["waiting"] == 1
