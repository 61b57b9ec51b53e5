"""Small client-side helpers shared by the HTTP tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from httpx import AsyncClient


async def enqueue(client: AsyncClient, queue: str, payload: Any = None, **fields: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": payload, **fields})
    assert response.status_code in (200, 201), response.text
    return response.json()


async def lease(client: AsyncClient, queue: str, worker: str = "w1", **fields: Any) -> list[dict[str, Any]]:
    response = await client.post(f"/v1/queues/{queue}/lease", json={"worker": worker, **fields})
    assert response.status_code == 200, response.text
    return response.json()["jobs"]


async def lease_one(client: AsyncClient, queue: str, worker: str = "w1", **fields: Any) -> dict[str, Any]:
    jobs = await lease(client, queue, worker, **fields)
    assert len(jobs) == 1, jobs
    return jobs[0]


async def job_call(client: AsyncClient, queue: str, job_id: str, action: str, **body: Any) -> Any:
    return await client.post(f"/v1/queues/{queue}/jobs/{job_id}/{action}", json=body)


async def get_job(client: AsyncClient, queue: str, job_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue}/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def counts(client: AsyncClient, queue: str) -> dict[str, int]:
    response = await client.get(f"/v1/queues/{queue}")
    assert response.status_code == 200, response.text
    return response.json()["counts"]


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert body["title"] and body["detail"] and body["type"]
    return body


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float, poll_s: float = 0.05) -> None:
    """Poll a condition of a server a fixture started; fail clearly if it never holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(poll_s)
