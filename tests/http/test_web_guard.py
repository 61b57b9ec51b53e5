"""What any web page can make a browser send, refused with or without tokens (echomq_http.api.webguard):
bodies not declared JSON (a cross-site form, a no-cors fetch) and Host headers the service does not
answer to (DNS rebinding). Bodyless calls and the SDKs' JSON still pass; nothing refused is stored."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from echomq_http.api.webguard import AllowedHosts, host_name, is_cross_site_type, is_json
from echomq_http.config import ConfigError, Settings
from tests.support import assert_problem, counts, enqueue, get_job
from tests.support.service import running_service

REBOUND = "rebind.attacker.example"
FORM = "application/x-www-form-urlencoded"
# What an HTML form or fetch() in no-cors mode sends cross-site without a CORS preflight.
SIMPLE_TYPES = [FORM, "multipart/form-data; boundary=x", "text/plain", "text/plain; charset=utf-8"]


@pytest.mark.parametrize("content_type", [*SIMPLE_TYPES, "application/xml", "text/json"])
async def test_an_enqueue_not_declared_json_is_415_and_stores_nothing(
    client: httpx.AsyncClient, queue: str, content_type: str
) -> None:
    body = b'{"payload": {"to": "victim"}}'  # valid JSON: only its declared type is wrong
    answer = await client.post(
        f"/v1/queues/{queue}/jobs", content=body, headers={"content-type": content_type}
    )
    assert "application/json" in assert_problem(answer, 415, "unsupported_media_type")["detail"]
    assert (await counts(client, queue))["waiting"] == 0
    assert queue not in (await client.get("/v1/queues")).text  # not even registered


async def test_a_body_of_no_declared_type_is_415(client: httpx.AsyncClient, queue: str) -> None:
    """fetch(url, {mode: "no-cors", body: new Blob([...])}) sends bytes without a Content-Type."""
    answer = await client.post(f"/v1/queues/{queue}/jobs", content=b'{"payload": 1}')
    assert "content-type" not in answer.request.headers
    assert_problem(answer, 415, "unsupported_media_type")
    assert (await counts(client, queue))["waiting"] == 0


@pytest.mark.parametrize("content_type", [FORM, "text/plain"])
async def test_a_bodyless_form_post_to_pause_is_415_and_pauses_nothing(
    client: httpx.AsyncClient, queue: str, content_type: str
) -> None:
    answer = await client.post(f"/v1/queues/{queue}/pause", headers={"content-type": content_type})
    assert_problem(answer, 415, "unsupported_media_type")
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is False
    untyped = await client.post(f"/v1/queues/{queue}/pause", content=b"x")
    assert_problem(untyped, 415, "unsupported_media_type")
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is False


async def test_bodyless_calls_without_a_content_type_still_work(
    client: httpx.AsyncClient, queue: str
) -> None:
    paused = await client.post(f"/v1/queues/{queue}/pause")
    assert "content-type" not in paused.request.headers and paused.status_code == 200, paused.text
    assert (await client.post(f"/v1/queues/{queue}/resume")).status_code == 200
    job = await enqueue(client, queue, 1, delay_ms=3_600_000)
    assert (await client.post(f"/v1/queues/{queue}/jobs/{job['id']}/promote")).status_code == 200
    assert (await client.post(f"/v1/queues/{queue}/jobs/{job['id']}/cancel")).status_code == 200
    assert (await client.delete(f"/v1/queues/{queue}/jobs/{job['id']}")).status_code == 204


async def test_a_bodyless_call_may_bring_a_type_no_page_can_send(
    client: httpx.AsyncClient, queue: str
) -> None:
    """aiohttp (the Python SDK's async transport) adds application/octet-stream to every POST."""
    octets = {"content-type": "application/octet-stream"}
    assert (await client.post(f"/v1/queues/{queue}/pause", headers=octets)).status_code == 200
    with_body = await client.post(f"/v1/queues/{queue}/resume", content=b"{}", headers=octets)
    assert_problem(with_body, 415, "unsupported_media_type")
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is True


@pytest.mark.parametrize(
    "content_type", ["application/json", "Application/JSON; charset=utf-8", "application/vnd.emq+json"]
)
async def test_json_types_are_accepted(client: httpx.AsyncClient, queue: str, content_type: str) -> None:
    answer = await client.post(
        f"/v1/queues/{queue}/jobs", content=b'{"payload": 7}', headers={"content-type": content_type}
    )
    assert answer.status_code == 201, answer.text
    assert (await get_job(client, queue, answer.json()["id"]))["payload"] == 7


async def test_a_rebound_host_is_refused_everywhere_but_the_probes(
    client: httpx.AsyncClient, queue: str
) -> None:
    rebound = {"host": f"{REBOUND}:8080"}
    stored = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": 1}, headers=rebound)
    assert REBOUND in assert_problem(stored, 421, "misdirected_request")["detail"]
    assert (await counts(client, queue))["waiting"] == 0
    for path in [f"/v1/queues/{queue}", "/v1/queues", "/metrics", "/ui", "/ui/sign-in", "/openapi.json", "/"]:
        assert_problem(await client.get(path, headers=rebound), 421, "misdirected_request")
    paused = await client.post(f"/v1/queues/{queue}/pause", headers=rebound)
    assert_problem(paused, 421, "misdirected_request")
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is False
    for probe in ["/healthz", "/readyz"]:
        assert (await client.get(probe, headers=rebound)).status_code == 200


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:8080", "localhost.", "127.0.0.1:1", "[::1]:8080", "[::1]", "10.1.2.3:80"]
)
async def test_loopback_names_and_addresses_are_served(
    client: httpx.AsyncClient, queue: str, host: str
) -> None:
    answer = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": 1}, headers={"host": host})
    assert answer.status_code == 201, answer.text


async def test_emq_allowed_hosts_names_more_hosts(settings: Settings, queue: str) -> None:
    listed = dataclasses.replace(settings, allowed_hosts=("queue.example.com",))
    with running_service(listed) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            ours = await client.get(f"/v1/queues/{queue}", headers={"host": "Queue.Example.com:443"})
            assert ours.status_code == 200, ours.text
            other = await client.get(f"/v1/queues/{queue}", headers={"host": "example.com"})
            assert_problem(other, 421, "misdirected_request")
    anything = dataclasses.replace(settings, allowed_hosts=("*",))
    with running_service(anything) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get(f"/v1/queues/{queue}", headers={"host": REBOUND})).status_code == 200


async def test_the_bind_host_name_is_served(settings: Settings, queue: str) -> None:
    named = dataclasses.replace(settings, host="emq-1")  # the test server listens on 127.0.0.1 anyway
    with running_service(named) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            assert (
                await client.get(f"/v1/queues/{queue}", headers={"host": "emq-1:8080"})
            ).status_code == 200


def test_the_setting_is_read_and_checked() -> None:
    read = Settings.from_env({"EMQ_ALLOWED_HOSTS": " Queue.Example.com., emq-1 ,,*"}).allowed_hosts
    assert read == ("queue.example.com", "emq-1", "*")
    assert Settings.from_env({}).allowed_hosts == ()
    for wrong in ["https://queue.example.com", "queue.example.com:8080", "a/b", "a b"]:
        with pytest.raises(ConfigError, match="EMQ_ALLOWED_HOSTS"):
            Settings.from_env({"EMQ_ALLOWED_HOSTS": wrong})


def test_host_names_and_json_types() -> None:
    assert [host_name(h) for h in ["A.b:1", "[::1]:8080", "[::1]", "x.", "[bad"]] == [
        "a.b",
        "::1",
        "::1",
        "x",
        "[bad",
    ]
    hosts = AllowedHosts(["queue.example.com"], "0.0.0.0")
    assert hosts.allows(b"queue.example.com") and hosts.allows(b"192.168.1.9:8080")
    assert not hosts.allows(b"0.0.0.0.attacker.example") and not hosts.allows(b"")
    assert not hosts.allows(b"queue.example.com.attacker.example")
    assert is_json(b"application/json") and is_json(b"application/problem+json; charset=utf-8")
    assert not is_json(b"application/jsonx") and not is_json(b"text/plain+json") and not is_json(b"")
    assert is_cross_site_type(b"Text/Plain; charset=utf-8") and is_cross_site_type(
        b"multipart/form-data; b=x"
    )
    assert not is_cross_site_type(b"application/octet-stream") and not is_cross_site_type(b"application/json")
