"""The dashboard without a browser: pages, forms that post and redirect (no JS needed), sign-in
and its cookie, CSRF refusals, what each role is offered and allowed, and bad input as 4xx."""

from __future__ import annotations

import hashlib
import re
import secrets
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis
from redis.cluster import RedisCluster

from echomq_http.api.webguard import AllowedHosts
from echomq_http.config import Settings
from echomq_http.store.keys import keys_of, ui_session_key
from echomq_http.ui import pages, sessions
from echomq_http.ui.access import SESSION_COOKIE
from echomq_http.ui.csrf import origin_refusal
from echomq_http.ui.render import iso, timestamp
from echomq_http.ui.sessions import SESSION_TTL_S
from tests.conftest import CLUSTER, TEST_SWEEP_INTERVAL_MS
from tests.support.service import running_service
from tests.ui.conftest import ADMIN, ONLY_OURS, PRODUCER, WORKER, csrf_of, signed_in


@pytest.fixture
def name() -> str:
    return f"ui-{secrets.token_hex(5)}"


@pytest.fixture
def admin(ui_url: str) -> Iterator[httpx.Client]:
    with signed_in(ui_url, ADMIN) as client:
        yield client


def enqueue(api: httpx.Client, queue: str, job_id: str, **fields: object) -> None:
    answer = api.post(f"/v1/queues/{queue}/jobs", json={"payload": {"n": job_id}, "id": job_id, **fields})
    assert answer.status_code == 201, answer.text


def lease(api: httpx.Client, queue: str, worker: str, lease_ms: int = 60_000) -> dict:
    answer = api.post(f"/v1/queues/{queue}/lease", json={"worker": worker, "lease_ms": lease_ms})
    [job] = answer.json()["jobs"]
    return job


def dead_letter(api: httpx.Client, queue: str, job_id: str, error: str, payload: object = None) -> None:
    enqueue(api, queue, job_id, max_attempts=1, **({"payload": payload} if payload is not None else {}))
    job = lease(api, queue, "w-fail")
    assert job["id"] == job_id
    answer = api.post(
        f"/v1/queues/{queue}/jobs/{job_id}/fail", json={"lease_id": job["lease_id"], "error": error}
    )
    assert answer.json()["state"] == "failed"


def post(client: httpx.Client, path: str, page: str, **fields: object) -> httpx.Response:
    """Post a form the way the page at `page` does: with that page's CSRF token."""
    token = csrf_of(client.get(page).text)
    return client.post(path, data={"csrf_token": token, **fields})


# --- pages --------------------------------------------------------------------------------------


def test_every_page_answers_html_with_a_content_security_policy(api, admin, name):
    enqueue(api, name, "j1")
    lease(api, name, "w1")
    dead_letter(api, name, "j2", "boom")
    for path in [
        "/ui",
        f"/ui/queues/{name}",
        *(f"/ui/queues/{name}/{tab}" for tab in pages.TABS),
        f"/ui/queues/{name}/search?q=boom",
        f"/ui/queues/{name}/jobs/j1",
        f"/ui/queues/{name}/jobs/j2",
    ]:
        answer = admin.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        assert "<script>" not in answer.text  # no inline script: the policy allows none


def test_the_overview_lists_counts_and_the_queue_page_the_ledger(api, admin, name):
    enqueue(api, name, "a")
    enqueue(api, name, "b")
    lease(api, name, "holder-1")
    overview = admin.get("/ui").text
    assert f'href="/ui/queues/{name}"' in overview
    ledger = admin.get(f"/ui/queues/{name}/active").text
    assert "holder-1" in ledger and 'data-remaining-ms="' in ledger
    waiting = admin.get(f"/ui/queues/{name}/waiting").text
    assert f"/ui/queues/{name}/jobs/b" in waiting and f"/ui/queues/{name}/jobs/a" not in waiting


def test_a_region_is_served_alone_as_a_fragment(api, admin, name):
    enqueue(api, name, "a")
    fragment = admin.get(f"/ui/queues/{name}/waiting?fragment=tab")
    assert fragment.status_code == 200
    assert "<html" not in fragment.text and "/jobs/a" in fragment.text
    assert admin.get(f"/ui/queues/{name}/waiting?fragment=nope").status_code == 400


def test_cursor_paging_goes_through_every_job_once(api, admin, name):
    api.post(f"/v1/queues/{name}/enqueue", json={"jobs": [{"payload": i, "id": f"j{i}"} for i in range(7)]})
    seen: list[str] = []
    path = f"/ui/queues/{name}/waiting?limit=3"
    while path:
        html = admin.get(path).text
        seen += [f"j{i}" for i in range(7) if f'/jobs/j{i}"' in html]
        marker = html.find('rel="next"')
        path = (
            html[html.rfind('href="', 0, marker) + 6 : html.find('"', html.rfind('href="', 0, marker) + 6)]
            if marker > 0
            else ""
        )
        path = path.replace("&amp;", "&")
    assert sorted(seen) == sorted(f"j{i}" for i in range(7))


def test_the_job_page_shows_its_timeline(api, admin, name):
    enqueue(api, name, "t1")
    job = lease(api, name, "w-time")
    api.post(
        f"/v1/queues/{name}/jobs/t1/heartbeat", json={"lease_id": job["lease_id"], "progress": {"pct": 50}}
    )
    api.post(f"/v1/queues/{name}/jobs/t1/ack", json={"lease_id": job["lease_id"], "result": {"ok": True}})
    html = admin.get(f"/ui/queues/{name}/jobs/t1").text
    timeline = html[html.index('class="timeline"') :]
    order = [
        timeline.index(f"<strong>{kind}</strong>") for kind in ("enqueued", "leased", "progress", "completed")
    ]
    assert order == sorted(order)
    assert "w-time" in timeline and "fence 1" in timeline


def test_search_by_id_and_by_text_a_bounded_step_at_a_time(api, admin, name, monkeypatch):
    monkeypatch.setattr(pages, "SEARCH_BUDGET", 2)
    dead_letter(api, name, "f1", "disk full", payload={"city": "Lyon"})
    dead_letter(api, name, "f2", "timeout")
    dead_letter(api, name, "f3", "timeout")
    first = admin.get(f"/ui/queues/{name}/search", params={"q": "lyon"}).text
    assert "/jobs/f1" not in first and "Scan more" in first  # the first step read f3 and f2 only
    more = admin.get(f"/ui/queues/{name}/search", params={"q": "lyon", "offset": 2}).text
    assert "/jobs/f1" in more and "reached the end" in more
    assert "/jobs/f1" in admin.get(f"/ui/queues/{name}/search", params={"q": "DISK", "offset": 2}).text
    by_id = admin.get(f"/ui/queues/{name}/search", params={"q": "f2"}).text
    assert "The job with this id" in by_id


# --- actions without JS ---------------------------------------------------------------------------


def test_forms_post_and_redirect_back_with_a_notice(api, admin, name):
    page = f"/ui/queues/{name}/waiting"
    answer = post(admin, f"/ui/queues/{name}/pause", page, back=page)
    assert answer.status_code == 303 and answer.headers["location"] == f"{page}?notice=paused"
    assert api.get(f"/v1/queues/{name}").json()["paused"] is True
    assert "The queue is paused." in admin.get(answer.headers["location"]).text
    post(admin, f"/ui/queues/{name}/resume", page)
    assert api.get(f"/v1/queues/{name}").json()["paused"] is False


def test_retry_one_selected_or_all_and_delete(api, admin, name):
    for job_id in ("r1", "r2", "r3", "r4"):
        dead_letter(api, name, job_id, "boom")
    page = f"/ui/queues/{name}/failed"
    assert post(admin, f"/ui/queues/{name}/retry", page, id="r1").status_code == 303
    assert post(admin, f"/ui/queues/{name}/jobs/r2/delete", page).status_code == 303
    assert api.get(f"/v1/queues/{name}/jobs/r1").json()["state"] == "waiting"
    assert api.get(f"/v1/queues/{name}/jobs/r2").status_code == 404
    answer = post(admin, f"/ui/queues/{name}/retry", page, all="1")
    assert answer.headers["location"].endswith("notice=retried&n=2")
    assert api.get(f"/v1/queues/{name}").json()["counts"]["failed"] == 0


def test_the_delayed_tab_shows_when_and_why_and_run_now_makes_a_job_waiting(api, ui_url, admin, name):
    enqueue(api, name, "later", delay_ms=3_600_000)
    enqueue(api, name, "flaky")
    job = lease(api, name, "w1")
    failed = {"lease_id": job["lease_id"], "error": "busy", "retry_after_ms": 7_200_000}
    assert api.post(f"/v1/queues/{name}/jobs/flaky/fail", json=failed).json()["state"] == "delayed"
    page = f"/ui/queues/{name}/delayed"
    tab = admin.get(page).text
    run_at = api.get(f"/v1/queues/{name}/jobs/later").json()["run_at"]
    assert f'<time datetime="{iso(run_at)}">{timestamp(run_at)}</time>' in tab and "UTC" in tab
    # "in 59 min 59 s", or "in 1 h" when the page is drawn in the same millisecond (or its clock
    # reads a hair behind the server's)
    assert re.search(r"\(in (59 min|1 h\))", tab) and re.search(r"\(in (1 h 59 min|2 h\))", tab)
    assert tab.count('class="badge reason-retry"') == 1 and tab.count('class="badge reason-delay"') == 1
    assert tab.count(">Run now<") == 2

    answer = post(admin, f"/ui/queues/{name}/jobs/later/promote", page, back=page)
    assert answer.status_code == 303 and answer.headers["location"] == f"{page}?notice=promoted"
    assert api.get(f"/v1/queues/{name}/jobs/later").json()["state"] == "waiting"
    assert "The job is waiting now." in admin.get(answer.headers["location"]).text
    job_page = f"/ui/queues/{name}/jobs/flaky"
    assert ">Run now<" in admin.get(job_page).text and "reason-retry" in admin.get(job_page).text
    assert post(admin, f"/ui/queues/{name}/jobs/flaky/promote", job_page, back=job_page).status_code == 303
    assert api.get(f"/v1/queues/{name}/jobs/flaky").json()["state"] == "waiting"
    assert ">Run now<" not in admin.get(job_page).text
    # Not delayed any more: refused, nothing changes.
    assert post(admin, f"/ui/queues/{name}/jobs/flaky/promote", job_page).status_code == 409
    enqueue(api, name, "again", delay_ms=3_600_000)
    with signed_in(ui_url, PRODUCER) as producer:
        assert ">Run now<" in producer.get(page).text
    with signed_in(ui_url, WORKER) as worker:
        assert ">Run now<" not in worker.get(page).text
        assert post(worker, f"/ui/queues/{name}/jobs/again/promote", page).status_code == 403
    assert api.get(f"/v1/queues/{name}/jobs/again").json()["state"] == "delayed"


def test_declare_a_worker_dead_and_quiet_one(api, admin, name):
    enqueue(api, name, "d1")
    enqueue(api, name, "d2")
    lease(api, name, "doomed")
    lease(api, name, "doomed")
    api.post(f"/v1/queues/{name}/workers/calm/heartbeat", json={"ttl_ms": 60_000})
    page = f"/ui/queues/{name}/workers"
    html = admin.get(page).text
    assert "doomed" in html and "Declare dead" in html
    answer = post(admin, f"/ui/queues/{name}/workers/doomed/release", page)
    assert answer.headers["location"].endswith("notice=released&n=2")
    assert api.get(f"/v1/queues/{name}").json()["counts"] == {
        **api.get(f"/v1/queues/{name}").json()["counts"],
        "waiting": 2,
        "active": 0,
    }
    post(admin, f"/ui/queues/{name}/workers/calm/quiet", page)
    calm = [w for w in api.get(f"/v1/queues/{name}/workers").json()["workers"] if w["worker"] == "calm"]
    assert calm[0]["session"]["state"] == "quiet"


def test_a_session_past_its_time_shows_as_lapsed(api, admin, name, redis_url):
    api.post(f"/v1/queues/{name}/workers/gone/heartbeat", json={"ttl_ms": 60_000, "info": {"host": "h1"}})
    enqueue(api, name, "held")
    lease(api, name, "gone")
    html = admin.get(f"/ui/queues/{name}/workers").text
    assert "badge alive" in html and "h1" in html
    # Its time ran out, and the sweep has not come yet (its index still says later).
    client = (RedisCluster if CLUSTER else Redis).from_url(redis_url)
    try:
        client.hset(keys_of(name, CLUSTER).session("gone"), "expires_at", 1)
    finally:
        client.close()
    html = admin.get(f"/ui/queues/{name}/workers").text
    assert "badge lapsed" in html and "badge alive" not in html and "1 job(s)" in html


def test_settings_saved_from_the_form(api, admin, name):
    page = f"/ui/queues/{name}/settings"
    answer = post(admin, page, page, max_in_flight="7", rate_max="10", rate_per_ms="1000", events="on")
    assert answer.status_code == 303
    settings = api.get(f"/v1/queues/{name}/settings").json()
    assert settings["max_in_flight"] == 7 and settings["rate_limit"] == {"max": 10, "per_ms": 1000}
    assert settings["events"] is True and settings["max_stalls"] is None


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"max_in_flight": "abc"},
        {"max_in_flight": "-1"},
        {"rate_max": "10"},  # without its period
        {"rate_max": "10", "rate_per_ms": "5"},  # a period under 1000 ms
        {"failed_retention_s": "99999999999999999999"},
    ],
)
def test_bad_settings_are_a_400_page(admin, name, fields):
    page = f"/ui/queues/{name}/settings"
    answer = post(admin, page, page, **fields)
    assert answer.status_code == 400 and answer.headers["content-type"].startswith("text/html")


def test_bad_input_is_a_4xx_never_a_500(api, admin, name):
    enqueue(api, name, "x")
    failed_page = f"/ui/queues/{name}/failed"
    for path, status in [
        (f"/ui/queues/{name}/waiting?cursor=garbage", 400),
        (f"/ui/queues/{name}/waiting?limit=0", 400),
        (f"/ui/queues/{name}/active?offset=-1", 400),
        (f"/ui/queues/{name}/active?worker=bad%20name", 400),
        (f"/ui/queues/{name}/search?q=x&state=waiting", 400),
        (f"/ui/queues/{name}/jobs/nope", 404),
        ("/ui/queues/bad%20name/waiting", 400),
        (f"/ui/queues/{name}/nope", 404),
    ]:
        assert admin.get(path).status_code == status, path
    assert post(admin, f"/ui/queues/{name}/retry", failed_page).status_code == 400  # nothing selected
    assert post(admin, f"/ui/queues/{name}/retry", failed_page, id="bad id").status_code == 400
    assert post(admin, f"/ui/queues/{name}/workers/nobody/quiet", failed_page).status_code == 409
    lease(api, name, "w")
    assert post(admin, f"/ui/queues/{name}/jobs/x/delete", failed_page).status_code == 409
    answer = admin.post(
        f"/ui/queues/{name}/pause", content=b"\xff\xfe", headers={"content-type": "multipart/form-data"}
    )
    assert 400 <= answer.status_code < 500


# --- sign-in, cookies, CSRF, roles ----------------------------------------------------------------


def test_the_front_door_leads_to_the_dashboard_without_a_token(ui_url):
    with httpx.Client(base_url=ui_url) as anonymous:
        answer = anonymous.get("/")
        assert answer.status_code == 307 and answer.headers["location"] == "/ui"
        # The dashboard asks for the token itself.
        assert anonymous.get("/", follow_redirects=True).url.path == "/ui/sign-in"


def test_without_a_cookie_pages_send_to_sign_in_and_actions_are_refused(ui_url, name):
    with httpx.Client(base_url=ui_url, headers={"Origin": ui_url}) as anonymous:
        answer = anonymous.get(f"/ui/queues/{name}/active")
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/sign-in?next=")
        token = csrf_of(anonymous.get("/ui/sign-in").text)
        assert anonymous.post(f"/ui/queues/{name}/pause", data={"csrf_token": token}).status_code == 401
        assert anonymous.get(f"/ui/queues/{name}/events").status_code == 303


def test_sign_in_keeps_a_session_not_the_token_and_sign_out_revokes_it(ui_url, redis_url):
    with httpx.Client(base_url=ui_url, headers={"Origin": ui_url}) as browser:
        token = csrf_of(browser.get("/ui/sign-in").text)
        wrong = browser.post("/ui/sign-in", data={"token": "guess", "csrf_token": token})
        assert wrong.status_code == 401 and "not one this service knows" in wrong.text
        answer = browser.post(
            "/ui/sign-in", data={"token": ADMIN, "csrf_token": token, "next": "//evil.example"}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/ui"
        set_cookies = answer.headers.get_list("set-cookie")
        assert not any(ADMIN in cookie for cookie in set_cookies)
        cookie = next(c for c in set_cookies if c.startswith(f"{SESSION_COOKIE}="))
        session_id = cookie.split(";")[0].partition("=")[2]
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/ui", f"max-age={SESSION_TTL_S}"} <= attributes
        assert "secure" not in attributes  # plain http here; over https the cookie is Secure
        # Redis keeps the token's digest (never the token) under the session id's digest.
        client = (RedisCluster if CLUSTER else Redis).from_url(redis_url)
        try:
            key = ui_session_key(hashlib.sha256(session_id.encode()).hexdigest())
            assert client.get(key) == hashlib.sha256(ADMIN.encode()).hexdigest().encode()
            assert 0 < client.ttl(key) <= SESSION_TTL_S
        finally:
            client.close()
        assert browser.get("/ui").status_code == 200
        with httpx.Client(base_url=ui_url, cookies={SESSION_COOKIE: session_id}) as copied:
            assert copied.get("/ui").status_code == 200  # the cookie works from anywhere...
            out = browser.post("/ui/sign-out", data={"csrf_token": token})
            assert out.status_code == 303
            assert browser.get("/ui").status_code == 303
            revoked = copied.get("/ui")  # ...until sign-out ends the session itself
            assert revoked.status_code == 303 and revoked.headers["location"].startswith("/ui/sign-in")
        with httpx.Client(base_url=ui_url, cookies={SESSION_COOKIE: ADMIN}) as raw_token:
            assert raw_token.get("/ui").status_code == 303  # a token is no session id


def test_failed_sign_ins_are_braked_per_client_address(private_redis_url):
    settings = Settings(redis_url=private_redis_url, auth_entries=(f"admin:{ADMIN}",))
    with running_service(settings) as url, httpx.Client(base_url=url, headers={"Origin": url}) as browser:
        token = csrf_of(browser.get("/ui/sign-in").text)
        for _ in range(sessions.MAX_FAILURES):
            wrong = browser.post("/ui/sign-in", data={"token": "guess", "csrf_token": token})
            assert wrong.status_code == 401
        braked = browser.post("/ui/sign-in", data={"token": "guess", "csrf_token": token})
        assert braked.status_code == 429 and "Too many failed sign-ins" in braked.text
        assert 1 <= int(braked.headers["retry-after"]) <= sessions.FAILURE_WINDOW_S
        right = browser.post("/ui/sign-in", data={"token": ADMIN, "csrf_token": token})
        assert right.status_code == 429  # else guessing would go on, only slower to notice
        assert not any(c.startswith(SESSION_COOKIE) for c in right.headers.get_list("set-cookie"))


def test_a_trickled_form_times_out(settings):
    impatient = Settings(redis_url=settings.redis_url, auth_entries=(f"admin:{ADMIN}",), body_timeout_s=1)
    with running_service(impatient) as url:
        netloc = url.removeprefix("http://")
        host, port = netloc.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.sendall(
                f"POST /ui/sign-in HTTP/1.1\r\nHost: {netloc}\r\nOrigin: {url}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                "Content-Length: 100\r\n\r\ntoken=a".encode()
            )
            started = time.monotonic()
            head = connection.recv(4096)
            assert head.startswith(b"HTTP/1.1 408"), head
            assert 0.8 < time.monotonic() - started < 8


def test_a_rebound_host_gets_no_dashboard_and_its_origin_passes_no_csrf(ui_url):
    rebound = "rebind.attacker.example:8080"
    with httpx.Client(base_url=ui_url, headers={"Origin": f"http://{rebound}", "Host": rebound}) as page:
        assert page.get("/ui/sign-in").status_code == 421
        assert page.post("/ui/sign-in", data={"token": ADMIN, "csrf_token": "0" * 64}).status_code == 421
    hosts = AllowedHosts((), "127.0.0.1")
    same = {"host": rebound, "origin": f"http://{rebound}"}
    assert origin_refusal(same, hosts) == "the request's Origin is not this service's host"
    assert origin_refusal({"host": rebound, "referer": f"http://{rebound}/ui"}, hosts) is not None
    assert origin_refusal({"host": "localhost:8080", "origin": "http://localhost:8080"}, hosts) is None
    assert origin_refusal({"host": "localhost:8080", "origin": "http://localhost:3000"}, hosts) is not None
    listed = AllowedHosts(("rebind.attacker.example",), "127.0.0.1")
    assert origin_refusal(same, listed) is None  # what the operator listed is ours


def test_cross_site_posts_are_refused_with_403(api, ui_url, name):
    with signed_in(ui_url, ADMIN) as browser:
        page = f"/ui/queues/{name}/waiting"
        token = csrf_of(browser.get(page).text)
        path = f"/ui/queues/{name}/pause"
        no_origin = httpx.Headers({"Origin": ""})
        for headers, data in [
            ({"Origin": "https://evil.example"}, {"csrf_token": token}),
            ({"Origin": ui_url, "Sec-Fetch-Site": "cross-site"}, {"csrf_token": token}),
            ({"Origin": ui_url}, {}),  # no token
            ({"Origin": ui_url}, {"csrf_token": "0" * 64}),  # not the cookie's
        ]:
            answer = browser.post(path, data=data, headers=headers)
            assert answer.status_code == 403, (headers, data)
        del browser.headers["Origin"]
        assert browser.post(path, data={"csrf_token": token}).status_code == 403  # neither Origin nor Referer
        answer = browser.post(path, data={"csrf_token": token}, headers={"Referer": ui_url + page})
        assert answer.status_code == 303
        assert no_origin is not None
    assert api.get(f"/v1/queues/{name}").json()["paused"] is True


def test_a_role_sees_only_what_it_may_do_and_is_refused_the_rest(api, ui_url, name):
    enqueue(api, name, "k1")
    lease(api, name, "holder")
    dead_letter(api, name, "k2", "boom")
    with signed_in(ui_url, WORKER) as worker:
        failed = worker.get(f"/ui/queues/{name}/failed").text
        assert "Retry" not in failed and "Delete" not in failed
        assert "Declare dead" not in worker.get(f"/ui/queues/{name}/workers").text
        assert ">Pause<" not in worker.get(f"/ui/queues/{name}").text
        assert "Save settings" not in worker.get(f"/ui/queues/{name}/settings").text
        assert post(worker, f"/ui/queues/{name}/pause", f"/ui/queues/{name}").status_code == 403
        assert post(worker, f"/ui/queues/{name}/retry", f"/ui/queues/{name}", all="1").status_code == 403
        assert post(worker, f"/ui/queues/{name}/jobs/k1/cancel", f"/ui/queues/{name}").status_code == 403
    with signed_in(ui_url, PRODUCER) as producer:
        job = producer.get(f"/ui/queues/{name}/jobs/k1").text
        assert ">Cancel<" in job and ">Delete<" not in job
        assert post(producer, f"/ui/queues/{name}/jobs/k1/cancel", f"/ui/queues/{name}").status_code == 303
    assert api.get(f"/v1/queues/{name}/jobs/k1").json()["cancel_requested"] is True


def test_a_token_of_some_queues_sees_only_those(api, ui_url, name):
    ours = f"ours-{name}"
    enqueue(api, ours, "o1")
    enqueue(api, name, "n1")
    with signed_in(ui_url, ONLY_OURS) as scoped:
        overview = scoped.get("/ui").text
        assert f"/ui/queues/{ours}" in overview and f'/ui/queues/{name}"' not in overview
        assert scoped.get(f"/ui/queues/{name}").status_code == 403
        assert scoped.get(f"/ui/queues/{name}/events").status_code == 403
        assert post(scoped, f"/ui/queues/{ours}/pause", f"/ui/queues/{ours}").status_code == 303


def test_the_live_feed_is_the_queues_event_stream_signed_in_by_cookie(api, admin, name):
    enqueue(api, name, "e1")
    with admin.stream("GET", f"/ui/queues/{name}/events", params={"after": 0}) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        text = ""
        for chunk in stream.iter_text():
            text += chunk
            if "event: enqueued" in text:
                break
    assert '"id":"e1"' in text


def test_without_tokens_the_dashboard_is_open(redis_url, name):
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
    with running_service(settings) as url, httpx.Client(base_url=url, headers={"Origin": url}) as browser:
        assert browser.get("/ui").status_code == 200
        assert browser.get("/ui/sign-in").status_code == 303
        page = browser.get(f"/ui/queues/{name}")
        assert ">Pause<" in page.text and "Signed in" not in page.text
        answer = browser.post(f"/ui/queues/{name}/pause", data={"csrf_token": csrf_of(page.text)})
        assert answer.status_code == 303


def test_schedules_trigger_pause_resume_and_delete(api, ui_url, name):
    schedule = {"every_ms": 3_600_000, "job": {"payload": {"report": "daily"}}}
    assert api.put(f"/v1/queues/{name}/schedules/nightly", json=schedule).status_code == 201
    page = f"/ui/queues/{name}/schedules"
    base = f"/ui/queues/{name}/schedules/nightly"
    with signed_in(ui_url, WORKER) as worker:
        html = worker.get(page).text
        assert "nightly" in html and ">Trigger<" not in html
        assert post(worker, base + "/trigger", page).status_code == 403
    with signed_in(ui_url, PRODUCER) as producer:
        assert ">Trigger<" in producer.get(page).text
        assert post(producer, base + "/trigger", page).headers["location"].endswith("notice=triggered")
        assert api.get(f"/v1/queues/{name}").json()["counts"]["waiting"] == 1
        made = api.get(f"/v1/queues/{name}/schedules/nightly").json()["last_job_id"]
        job_page = producer.get(f"/ui/queues/{name}/jobs/{made}").text
        assert "<dt>Schedule</dt>" in job_page and ">nightly</a>" in job_page
        post(producer, base + "/pause", page)
        view = api.get(f"/v1/queues/{name}/schedules/nightly").json()
        assert (
            view["paused"] is True
            and view["next_run_at"] is None
            and view["job"]["payload"] == {"report": "daily"}
        )
        post(producer, base + "/resume", page)
        assert api.get(f"/v1/queues/{name}/schedules/nightly").json()["paused"] is False
        assert post(producer, f"/ui/queues/{name}/schedules/nope/trigger", page).status_code == 404
        post(producer, base + "/delete", page)
        assert api.get(f"/v1/queues/{name}/schedules/nightly").status_code == 404
