"""The OpenAPI document: served == committed, and it covers the whole contract."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from service.openapi import document, render

COMMITTED = Path(__file__).parents[2] / "openapi" / "openapi.json"

CONTRACT = {
    ("post", "/v1/queues/{queue}/jobs"),
    ("post", "/v1/queues/{queue}/enqueue"),
    ("post", "/v1/queues/{queue}/lease"),
    ("post", "/v1/queues/{queue}/jobs/{id}/heartbeat"),
    ("post", "/v1/queues/{queue}/heartbeat"),  # v1.1
    ("post", "/v1/queues/{queue}/jobs/{id}/ack"),
    ("post", "/v1/queues/{queue}/ack"),
    ("post", "/v1/queues/{queue}/jobs/{id}/fail"),
    ("post", "/v1/queues/{queue}/jobs/{id}/release"),
    ("get", "/v1/queues/{queue}/jobs/{id}"),
    ("delete", "/v1/queues/{queue}/jobs/{id}"),
    ("get", "/v1/queues"),
    ("get", "/v1/queues/{queue}"),
    ("delete", "/v1/queues/{queue}"),  # v1.1
    ("get", "/v1/queues/{queue}/active"),
    ("get", "/v1/queues/{queue}/workers"),
    ("get", "/v1/queues/{queue}/failed"),
    ("post", "/v1/queues/{queue}/workers/{worker}/release"),
    ("post", "/v1/queues/{queue}/pause"),
    ("post", "/v1/queues/{queue}/resume"),
    ("post", "/v1/queues/{queue}/failed/retry"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
}


def test_committed_document_is_what_the_app_builds() -> None:
    assert COMMITTED.read_bytes() == render(document()), "run `make openapi` and commit the result"


async def test_served_document_is_the_committed_one(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.content == COMMITTED.read_bytes()


def test_document_covers_the_contract_with_stable_operation_ids() -> None:
    doc = json.loads(COMMITTED.read_text())
    assert doc["openapi"].startswith("3.1")
    served = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert served == CONTRACT
    operation_ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
    refs = {ref.rsplit("/", 1)[1] for ref in _refs(doc["paths"])}
    assert refs <= set(doc["components"]["schemas"])


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []
