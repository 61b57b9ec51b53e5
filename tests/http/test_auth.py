"""Auth: every role against every class of endpoint, queue patterns, and what stays public."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis as AsyncRedis

from echomq_http.__main__ import is_loopback
from echomq_http.api.auth import Action, Authenticator, Forbidden, Unauthorized
from echomq_http.config import ConfigError, Settings
from tests.conftest import remove_queue
from tests.support import assert_problem
from tests.support.service import running_service

TOKENS = {"admin": "Adm1n-secret", "worker": "w-secret", "producer": "p-secret", "scoped": "s-secret"}
ENTRIES = (
    "admin:Adm1n-secret",
    "worker:w-secret",
    "producer:p-secret",
    "worker:s-secret:emails|sms-*",
)
Q = "/v1/queues/{q}"
JOB = Q + "/jobs/j1"

# (action class, method, path, body) for every endpoint.
ENDPOINTS = [
    ("enqueue", "POST", Q + "/jobs", {"payload": 1}),
    ("enqueue", "POST", Q + "/enqueue", {"jobs": [{"payload": 1}]}),
    ("work", "POST", Q + "/lease", {"worker": "w"}),
    ("work", "POST", JOB + "/heartbeat", {"lease_id": "x"}),
    ("work", "POST", Q + "/heartbeat", {"leases": [{"id": "j1", "lease_id": "x"}]}),
    ("work", "POST", JOB + "/ack", {"lease_id": "x"}),
    ("work", "POST", JOB + "/ack", {"lease_id": "x", "lease_next": {"worker": "w"}}),
    ("work", "POST", Q + "/ack", {"acks": [{"id": "j1", "lease_id": "x"}]}),
    ("work", "POST", JOB + "/fail", {"lease_id": "x", "error": "e"}),
    ("work", "POST", JOB + "/release", {"lease_id": "x"}),
    ("enqueue", "POST", JOB + "/promote", None),
    ("read", "GET", JOB, None),
    ("read", "GET", "/v1/queues", None),
    ("read", "GET", Q, None),
    ("read", "GET", Q + "/active", None),
    ("read", "GET", Q + "/workers", None),
    ("read", "GET", Q + "/failed", None),
    ("read", "GET", Q + "/jobs?state=waiting", None),
    ("read", "GET", Q + "/settings", None),
    ("admin", "PUT", Q + "/settings", {"max_in_flight": 3}),
    ("read", "GET", Q + "/groups", None),
    ("admin", "DELETE", JOB, None),
    ("admin", "DELETE", Q, None),
    ("admin", "POST", Q + "/workers/w/release", None),
    ("work", "POST", Q + "/workers/w/heartbeat", {"ttl_ms": 5000}),
    ("work", "DELETE", Q + "/workers/w", None),
    ("admin", "POST", Q + "/workers/w/quiet", None),
    ("admin", "POST", Q + "/pause", None),
    ("admin", "POST", Q + "/resume", None),
    ("admin", "POST", Q + "/failed/retry", None),
    ("admin", "PUT", Q + "/groups/g", {"max_in_flight": 2}),
    ("enqueue", "PUT", Q + "/schedules/s", {"every_ms": 60_000, "job": {"payload": 1}}),
    ("read", "GET", Q + "/schedules/s", None),
    ("read", "GET", Q + "/schedules", None),
    ("enqueue", "POST", Q + "/schedules/s/trigger", None),
    ("enqueue", "DELETE", Q + "/schedules/s", None),
    (
        "enqueue",
        "POST",
        "/v1/flows",
        {"job": {"queue": "{q}", "payload": 1, "children": [{"queue": "{q}", "payload": 2}]}},
    ),
    ("read", "GET", JOB + "/children", None),
]
ALLOWED = {
    "admin": {"enqueue", "work", "read", "admin"},
    "worker": {"work", "read"},
    "producer": {"enqueue", "read"},
}


@pytest.fixture(scope="module")
def auth_url(redis_url: str) -> Iterator[str]:
    with running_service(Settings(redis_url=redis_url, auth_entries=ENTRIES)) as url:
        yield url


@pytest.fixture
async def http(auth_url: str) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=auth_url, timeout=30) as client:
        yield client


def bearer(role: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[role]}"}


async def call(
    http: httpx.AsyncClient, method: str, path: str, body: object, headers: dict[str, str]
) -> httpx.Response:
    return await http.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("role", ["admin", "worker", "producer"])
@pytest.mark.parametrize(("action", "method", "path", "body"), ENDPOINTS)
async def test_each_role_on_each_endpoint(
    http: httpx.AsyncClient, queue: str, role: str, action: str, method: str, path: str, body: object
) -> None:
    if isinstance(body, dict) and "job" in body and path == "/v1/flows":
        body = json.loads(json.dumps(body).replace("{q}", queue))
    response = await call(http, method, path.format(q=queue), body, bearer(role))
    if action in ALLOWED[role]:
        assert response.status_code not in (401, 403), response.text
        assert response.status_code < 500, response.text
    else:
        assert_problem(response, 403, "forbidden")


@pytest.mark.parametrize(("action", "method", "path", "body"), ENDPOINTS)
@pytest.mark.parametrize(
    "authorization", [None, "Bearer nope", "Bearer", "Basic dzpzZWNyZXQ=", "w-secret", "Token w-secret"]
)
async def test_missing_or_unknown_tokens_get_401(
    http: httpx.AsyncClient,
    queue: str,
    action: str,
    method: str,
    path: str,
    body: object,
    authorization: str | None,
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    response = await call(http, method, path.format(q=queue), body, headers)
    assert_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_unauthorized_calls_change_nothing(http: httpx.AsyncClient, queue: str) -> None:
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1}, headers={"authorization": "Bearer nope"})
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1}, headers=bearer("worker"))
    view = await http.get(f"/v1/queues/{queue}", headers=bearer("admin"))
    assert view.json()["counts"]["waiting"] == 0


@pytest.mark.parametrize(
    ("queue_name", "allowed"), [("emails", True), ("sms-eu", True), ("sms", False), ("emails2", False)]
)
async def test_queue_patterns_limit_a_token(http: httpx.AsyncClient, queue_name: str, allowed: bool) -> None:
    response = await http.post(
        f"/v1/queues/{queue_name}/lease", json={"worker": "w"}, headers=bearer("scoped")
    )
    if allowed:
        assert response.status_code == 200
    else:
        assert_problem(response, 403, "forbidden")


async def test_a_scoped_token_lists_only_its_queues(http: httpx.AsyncClient, queue: str) -> None:
    for name in (queue, "emails"):
        created = await http.post(f"/v1/queues/{name}/jobs", json={"payload": 1}, headers=bearer("admin"))
        assert created.status_code == 201
    scoped = (await http.get("/v1/queues", headers=bearer("scoped"))).json()["queues"]
    assert {entry["name"] for entry in scoped} == {"emails"}
    everything = (await http.get("/v1/queues", headers=bearer("admin"))).json()["queues"]
    assert {queue, "emails"} <= {entry["name"] for entry in everything}
    await http.post("/v1/queues/emails/pause", headers=bearer("admin"))  # keep it out of other tests' way
    await http.post("/v1/queues/emails/resume", headers=bearer("admin"))


async def test_public_endpoints_and_metrics(http: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert (await http.get(path)).status_code == 200
    assert_problem(await http.get("/metrics"), 401, "unauthorized")
    for role in ("producer", "worker", "admin", "scoped"):
        assert (await http.get("/metrics", headers=bearer(role))).status_code == 200


async def test_a_flow_needs_the_right_on_every_queue_it_names_and_makes_nothing_without(
    http: httpx.AsyncClient, queue: str, scoped_queue: str
) -> None:
    """The scoped token covers sms-*: a flow whose child is in another queue is refused whole."""
    await http.put(f"/v1/queues/{scoped_queue}/settings", json={}, headers=bearer("admin"))
    flow = {
        "job": {"queue": scoped_queue, "id": "p", "payload": 1, "children": [{"queue": queue, "payload": 2}]}
    }
    for role in ("scoped", "worker"):
        assert_problem(await http.post("/v1/flows", json=flow, headers=bearer(role)), 403, "forbidden")
    assert (await http.get(f"/v1/queues/{scoped_queue}/jobs/p", headers=bearer("admin"))).status_code == 404
    answer = await http.post("/v1/flows", json=flow, headers=bearer("producer"))
    assert answer.status_code == 201, answer.text


@pytest.fixture
async def scoped_queue(redis_client: AsyncRedis) -> AsyncIterator[str]:
    """A fresh queue that the scoped token covers (sms-*); removed afterwards."""
    name = f"sms-{secrets.token_hex(6)}"
    yield name
    await remove_queue(redis_client, name)


async def work_one_job(http: httpx.AsyncClient, queue: str) -> None:
    """Enqueue, lease and ack a job, so the queue has counters, a histogram and gauges."""
    admin = bearer("admin")
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 1}, headers=admin)
    await http.post(f"/v1/queues/{queue}/jobs", json={"payload": 2}, headers=admin)
    leased = await http.post(f"/v1/queues/{queue}/lease", json={"worker": "w"}, headers=admin)
    (job,) = leased.json()["jobs"]
    acked = await http.post(
        f"/v1/queues/{queue}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"]}, headers=admin
    )
    assert acked.status_code == 200, acked.text


async def test_a_scoped_token_sees_only_its_queues_in_metrics(
    http: httpx.AsyncClient, queue: str, scoped_queue: str
) -> None:
    for name in (queue, scoped_queue):
        await work_one_job(http, name)
    scoped = await http.get("/metrics", headers=bearer("scoped"))
    assert scoped.status_code == 200
    assert queue not in scoped.text  # not in a label, not anywhere
    for series in ("emq_jobs_enqueued_total", "emq_lease_to_ack_seconds_count", "emq_queue_depth"):
        assert f'{series}{{queue="{scoped_queue}"}}' in scoped.text
    assert "emq_http_request_duration_seconds_count{" in scoped.text  # no queue label: kept
    for role in ("admin", "worker"):  # unscoped tokens see every queue
        everything = (await http.get("/metrics", headers=bearer(role))).text
        assert f'emq_jobs_enqueued_total{{queue="{queue}"}}' in everything
        assert f'emq_jobs_enqueued_total{{queue="{scoped_queue}"}}' in everything


def test_tokens_file_and_entry_parsing(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# operators\nadmin:from-file\n\nworker:w1:a|b-*, producer:p1\n")
    settings = Settings.from_env({"EMQ_AUTH_TOKENS": "worker:from-env", "EMQ_AUTH_TOKENS_FILE": str(tokens)})
    assert settings.auth_entries == ("worker:from-env", "admin:from-file", "worker:w1:a|b-*", "producer:p1")
    auth = Authenticator.from_entries(settings.auth_entries)
    grant = auth.identify("Bearer w1")
    assert grant.covers("b-x") and not grant.covers("c")
    with pytest.raises(Unauthorized):
        auth.identify("Bearer from-fil")
    with pytest.raises(Forbidden):
        auth.authorize(auth.identify("bearer p1"), Action.WORK, None)
    for bad in ("root:x", "admin:", "admin"):
        with pytest.raises(ConfigError):
            Authenticator.from_entries([bad])
    with pytest.raises(ConfigError):
        Settings.from_env({"EMQ_AUTH_TOKENS_FILE": str(tmp_path / "missing")})


def test_without_tokens_the_service_refuses_a_public_address(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env.update(HOST="0.0.0.0", PORT="0", EMQ_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run(
        [sys.executable, "-m", "echomq_http"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "EMQ_AUTH_TOKENS" in done.stderr and "EMQ_ALLOW_INSECURE" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before starting anything


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
