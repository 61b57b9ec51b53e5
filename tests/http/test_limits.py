"""Limits that hold under abuse: nesting depth, slow bodies, batch sizes, error text."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx
import pytest

from service import limits
from service.config import Settings
from tests.server import running_service
from tests.support import assert_problem, counts, enqueue, job_call, lease_one


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("field", ["payload", "result"])
async def test_json_nesting_depth_is_limited(client: httpx.AsyncClient, queue: str, field: str) -> None:
    deep, fine = nested(limits.MAX_JSON_DEPTH + 1), nested(limits.MAX_JSON_DEPTH)
    if field == "payload":
        body = '{"payload": %s}'
        bad = await client.post(f"/v1/queues/{queue}/jobs", content=body % deep)
        assert "nested deeper" in assert_problem(bad, 400, "invalid_request")["detail"]
        assert (await counts(client, queue))["waiting"] == 0
        assert (await client.post(f"/v1/queues/{queue}/jobs", content=body % fine)).status_code == 201
    else:
        await enqueue(client, queue, 1)
        job = await lease_one(client, queue)
        body = '{"lease_id": "' + job["lease_id"] + '", "result": %s}'
        path = f"/v1/queues/{queue}/jobs/{job['id']}/ack"
        assert_problem(await client.post(path, content=body % deep), 400, "invalid_request")
        assert (await counts(client, queue))["active"] == 1
        assert (await client.post(path, content=body % fine)).status_code == 200


async def test_a_string_full_of_brackets_is_not_nesting(client: httpx.AsyncClient, queue: str) -> None:
    created = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": "[" * 500 + '\\"{' * 100})
    assert created.status_code == 201


async def test_a_trickled_body_times_out(settings: Settings, queue: str) -> None:
    impatient = dataclasses.replace(settings, body_timeout_s=1)
    with running_service(impatient) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /v1/queues/{queue}/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
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
