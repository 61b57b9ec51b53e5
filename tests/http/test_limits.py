"""Limits that hold under abuse: nesting depth, slow bodies, batch sizes, error text, connections."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from pathlib import Path

import httpx
import pytest

from echomq_http.config import Settings
from echomq_http.core import limits
from tests.support import assert_problem, counts, enqueue, job_call, lease_one
from tests.support.launched import launched_service
from tests.support.raw_http import Answer, RawConnection, post_request
from tests.support.service import running_service

JSON = {"content-type": "application/json"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("field", ["payload", "result"])
async def test_json_nesting_depth_is_limited(client: httpx.AsyncClient, queue: str, field: str) -> None:
    deep, fine = nested(limits.MAX_JSON_DEPTH + 1), nested(limits.MAX_JSON_DEPTH)
    if field == "payload":
        body = '{"payload": %s}'
        bad = await client.post(f"/v1/queues/{queue}/jobs", content=body % deep, headers=JSON)
        assert "nested deeper" in assert_problem(bad, 400, "invalid_request")["detail"]
        assert (await counts(client, queue))["waiting"] == 0
        fine_answer = await client.post(f"/v1/queues/{queue}/jobs", content=body % fine, headers=JSON)
        assert fine_answer.status_code == 201
    else:
        await enqueue(client, queue, 1)
        job = await lease_one(client, queue)
        body = '{"lease_id": "' + job["lease_id"] + '", "result": %s}'
        path = f"/v1/queues/{queue}/jobs/{job['id']}/ack"
        assert_problem(await client.post(path, content=body % deep, headers=JSON), 400, "invalid_request")
        assert (await counts(client, queue))["active"] == 1
        assert (await client.post(path, content=body % fine, headers=JSON)).status_code == 200


async def test_a_string_full_of_brackets_is_not_nesting(client: httpx.AsyncClient, queue: str) -> None:
    created = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": "[" * 500 + '\\"{' * 100})
    assert created.status_code == 201


BEYOND_A_DOUBLE = {
    "1e999": "1e999",
    "negative": "-1E+0999",
    "400-digits": "1" + "0" * 400,
    "fraction": "0.5e309",
    "rounds-up": "1.7976931348623159e308",
}


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE.values(), ids=BEYOND_A_DOUBLE.keys())
@pytest.mark.parametrize("field", ["payload", "result", "progress", "info"])
async def test_numbers_a_double_cannot_hold_are_refused(
    client: httpx.AsyncClient, queue: str, field: str, number: str
) -> None:
    """Most parsers read 1e999 as Infinity, which no JSON encoder can write back: refused (400)
    in every value kept verbatim, and nothing is stored."""
    value = f'{{"a": [1, {number}], "s": "1e999"}}'
    if field == "payload":
        refused = await client.post(
            f"/v1/queues/{queue}/jobs", content=f'{{"payload": {value}}}', headers=JSON
        )
        assert (await counts(client, queue))["waiting"] == 0
    elif field == "info":
        refused = await client.post(
            f"/v1/queues/{queue}/workers/w1/heartbeat", content=f'{{"info": {value}}}', headers=JSON
        )
        workers = (await client.get(f"/v1/queues/{queue}/workers")).json()["workers"]
        assert workers == []
    else:
        await enqueue(client, queue, 1)
        job = await lease_one(client, queue)
        action = "ack" if field == "result" else "heartbeat"
        body = '{{"lease_id": "{}", "{}": {}}}'.format(job["lease_id"], field, value)
        refused = await client.post(
            f"/v1/queues/{queue}/jobs/{job['id']}/{action}", content=body, headers=JSON
        )
        view = (await client.get(f"/v1/queues/{queue}/jobs/{job['id']}")).json()
        assert view["state"] == "active" and view["progress"] is None
    assert "out of range" in assert_problem(refused, 400, "invalid_request")["detail"]


async def test_numbers_a_double_holds_are_kept_as_sent(client: httpx.AsyncClient, queue: str) -> None:
    payload = '["1e999", 1.7976931348623157e308, -1e308, 1e-999, 0.{}1, {}]'.format("0" * 400, "9" * 99)
    created = await client.post(f"/v1/queues/{queue}/jobs", content=f'{{"payload": {payload}}}', headers=JSON)
    assert created.status_code == 201, created.text
    assert (await lease_one(client, queue))["payload"] == json.loads(payload)


async def test_a_large_body_is_checked_for_depth_exactly(client: httpx.AsyncClient, queue: str) -> None:
    """The depth check reads ~1 MB bodies in one pass: 64 levels anywhere in it pass, 65 at its
    end are refused, brackets in strings do not count."""
    flat = ",".join(["[]"] * 150_000)
    fine = nested(limits.MAX_JSON_DEPTH - 1).replace("][", "][" + flat + "],[", 1)
    strings = ",".join(['"[[[\\"{"'] * 20_000)
    for body, status in [
        (f"[{flat},{nested(limits.MAX_JSON_DEPTH - 1)}]", 201),
        (f"[{flat},{nested(limits.MAX_JSON_DEPTH)}]", 400),
        (f"[{fine}]", 201),
        (f"[{strings},{nested(limits.MAX_JSON_DEPTH - 1)}]", 201),
    ]:
        answer = await client.post(f"/v1/queues/{queue}/jobs", content=f'{{"payload": {body}}}', headers=JSON)
        assert answer.status_code == status, (answer.text[:200], len(body))
    assert (await counts(client, queue))["waiting"] == 3


async def test_a_trickled_body_times_out(settings: Settings, queue: str) -> None:
    impatient = dataclasses.replace(settings, body_timeout_s=1)
    with running_service(impatient) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /v1/queues/{queue}/jobs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            'Content-Length: 100\r\n\r\n{"payload":'.encode()
        )
        await writer.drain()
        started = time.monotonic()
        head = await asyncio.wait_for(reader.read(4096), 10)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert b"request_timeout" in head
        assert 0.8 < time.monotonic() - started < 8
        writer.close()


async def test_error_text_is_limited(client: httpx.AsyncClient, queue: str) -> None:
    await enqueue(client, queue, 1)
    job = await lease_one(client, queue)
    too_long = await job_call(client, queue, job["id"], "fail", lease_id=job["lease_id"], error="é" * 4097)
    assert_problem(too_long, 400, "invalid_request")
    ok = await job_call(
        client, queue, job["id"], "fail", lease_id=job["lease_id"], error="e" * limits.MAX_ERROR_BYTES
    )
    assert ok.status_code == 200


async def test_batches_are_limited(client: httpx.AsyncClient, queue: str) -> None:
    over = {"jobs": [{"payload": i} for i in range(limits.MAX_BATCH + 1)]}
    assert_problem(await client.post(f"/v1/queues/{queue}/enqueue", json=over), 400, "invalid_request")
    full = {"jobs": [{"payload": i} for i in range(limits.MAX_BATCH)]}
    assert (await client.post(f"/v1/queues/{queue}/enqueue", json=full)).status_code == 200
    too_many_acks = {"acks": [{"id": f"j{i}", "lease_id": "x"} for i in range(limits.MAX_BATCH + 1)]}
    assert_problem(await client.post(f"/v1/queues/{queue}/ack", json=too_many_acks), 400, "invalid_request")
    too_many_beats = {"leases": [{"id": f"j{i}", "lease_id": "x"} for i in range(limits.MAX_BATCH + 1)]}
    beats = await client.post(f"/v1/queues/{queue}/heartbeat", json=too_many_beats)
    assert_problem(beats, 400, "invalid_request")


CONNECTION_CAP = 16  # the least EMQ_MAX_CONNECTIONS takes
RECOVERY_DEADLINE_S = 30.0
LONG_POLL_MS = 5000  # long enough for all of them to be waiting at once


def served(answer: Answer) -> bool:
    return answer.status == 200 and answer.body == b'{"status":"ok"}'


def long_poll_request(queue: str, wait_ms: int) -> bytes:
    return post_request(f"/v1/queues/{queue}/lease", b'{"worker": "w1", "wait_ms": %d}' % wait_ms)


@pytest.mark.timeout(120)
def test_idle_connections_make_room_and_busy_ones_beyond_the_cap_get_503(
    redis_url: str, tmp_path: Path, queue: str
) -> None:
    cap = {"EMQ_MAX_CONNECTIONS": str(CONNECTION_CAP)}
    with (
        launched_service(redis_url, tmp_path / "service.log", **cap) as service,
        contextlib.ExitStack() as stack,
    ):
        service.wait_ready()

        def connect() -> RawConnection:
            return stack.enter_context(RawConnection(service.url, timeout_s=30))

        # Up to the cap, every connection is served and stays open; one more is served too, and
        # the connection idle the longest is closed to make room for it.
        idle = [connect() for _ in range(CONNECTION_CAP)]
        assert all(served(connection.ask()) for connection in idle)
        assert served(connect().ask())
        assert idle[0].is_closed()

        # Every connection busy (long polls): one more request gets uvicorn's 503, and is closed.
        polls = [connect() for _ in range(CONNECTION_CAP)]
        for poll in polls:
            poll.send(long_poll_request(queue, LONG_POLL_MS))
        deadline = time.monotonic() + RECOVERY_DEADLINE_S
        for _ in range(10 * CONNECTION_CAP):  # bounded: each try opens a connection
            if not served(refused := (extra := connect()).ask()):  # until the polls are all in
                break
            assert time.monotonic() < deadline, "never refused with every connection busy"
        else:
            raise AssertionError("never refused with every connection busy")
        assert refused.status == 503
        assert refused.headers[b"content-type"] == b"text/plain; charset=utf-8"
        assert refused.headers[b"connection"] == b"close"
        assert refused.body == b"Service Unavailable"
        assert extra.is_closed()
        assert "WARNING:  Exceeded concurrency limit." in service.log()

        # Once the polls end, their connections are idle again: new connections are served.
        assert all(poll.answer().status == 200 for poll in polls)
        assert served(connect().ask())
