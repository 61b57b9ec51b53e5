"""The OpenAPI document: served == committed, it covers the whole contract, and it carries it:
a description for every operation, parameter, schema and field, a declared tag on every
operation, and examples that are valid requests and answers (against the document's schemas and
the Structs the service decodes with) and problems as the service really answers them."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import msgspec
import pytest

from echomq_http.api import examples, schemas
from echomq_http.api.openapi import PROBLEM_CODES, TAG_NAMES, document, render
from echomq_http.core.errors import PROBLEMS

COMMITTED = Path(__file__).parents[2] / "openapi" / "openapi.json"

CONTRACT = {
    ("post", "/v1/queues/{queue}/jobs"),
    ("post", "/v1/queues/{queue}/enqueue"),
    ("post", "/v1/flows"),  # v1.2
    ("get", "/v1/queues/{queue}/jobs/{id}/children"),  # v1.2
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
    ("get", "/v1/queues/{queue}/jobs"),
    ("post", "/v1/queues/{queue}/workers/{worker}/release"),
    ("post", "/v1/queues/{queue}/pause"),
    ("post", "/v1/queues/{queue}/resume"),
    ("post", "/v1/queues/{queue}/failed/retry"),
    ("put", "/v1/queues/{queue}/groups/{group}"),  # v1.1
    ("get", "/v1/queues/{queue}/groups"),
    ("get", "/v1/queues/{queue}/events"),  # v1.1
    ("post", "/v1/queues/{queue}/jobs/{id}/cancel"),  # v1.1
    ("post", "/v1/queues/{queue}/jobs/{id}/promote"),
    ("get", "/v1/queues/{queue}/history"),  # v1.1
    ("get", "/v1/queues/{queue}/settings"),  # v1.1
    ("put", "/v1/queues/{queue}/settings"),  # v1.1
    ("post", "/v1/queues/{queue}/workers/{worker}/heartbeat"),  # v1.1
    ("post", "/v1/queues/{queue}/workers/{worker}/quiet"),  # v1.1
    ("delete", "/v1/queues/{queue}/workers/{worker}"),  # v1.1
    ("put", "/v1/queues/{queue}/schedules/{schedule}"),  # v1.1
    ("get", "/v1/queues/{queue}/schedules/{schedule}"),  # v1.1
    ("delete", "/v1/queues/{queue}/schedules/{schedule}"),  # v1.1
    ("get", "/v1/queues/{queue}/schedules"),  # v1.1
    ("post", "/v1/queues/{queue}/schedules/{schedule}/trigger"),  # v1.1
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
}

# Every body's Struct by name, from the modules of the schemas package (one per tag).
STRUCTS = {
    name: value
    for module in pkgutil.iter_modules(schemas.__path__, schemas.__name__ + ".")
    for name, value in vars(importlib.import_module(module.name)).items()
    if isinstance(value, type) and issubclass(value, msgspec.Struct)
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


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for item in doc["paths"].values():
        for operation in item.values():
            yield operation["operationId"], operation


def test_every_operation_parameter_schema_and_field_is_described() -> None:
    doc = document()
    undescribed = []
    for operation_id, operation in _operations(doc):
        if not operation.get("description") or not operation.get("summary"):
            undescribed.append(operation_id)
        undescribed += [
            f"{operation_id} parameter {parameter['name']}"
            for parameter in operation.get("parameters", ())
            if not parameter.get("description")
        ]
        undescribed += [
            f"{operation_id} {status}"
            for status, response in operation["responses"].items()
            if not response.get("description")
        ]
    for name, schema in doc["components"]["schemas"].items():
        if not schema.get("description"):
            undescribed.append(f"schema {name} (give the Struct a docstring)")
        undescribed += [
            f"{name}.{field} (Annotated[..., Meta(description=...)] around the whole type)"
            for field, field_schema in schema.get("properties", {}).items()
            if not field_schema.get("description")
        ]
    assert undescribed == []


def test_every_operation_has_one_declared_tag() -> None:
    doc = document()
    declared = [tag["name"] for tag in doc["tags"]]
    assert len(declared) == len(set(declared)) and set(declared) == TAG_NAMES
    assert all(tag["description"] for tag in doc["tags"])
    used = set()
    for operation_id, operation in _operations(doc):
        assert len(operation["tags"]) == 1 and operation["tags"][0] in TAG_NAMES, operation_id
        used.add(operation["tags"][0])
    assert used == TAG_NAMES  # no tag without operations


MAIN_OPERATIONS = {
    # operationId: (has request examples, statuses with answer examples)
    "enqueue": (True, {201, 200}),
    "enqueueMany": (True, {200}),
    "lease": (True, {200}),
    "heartbeat": (True, {200}),
    "heartbeatMany": (True, {200}),
    "ack": (True, {200}),
    "ackMany": (True, {200}),
    "fail": (True, {200}),
    "release": (True, {200}),
    "getQueue": (False, {200}),
    "getJob": (False, {200}),
    "listFailed": (False, {200}),
}


def test_main_operations_and_every_problem_have_examples() -> None:
    operations = dict(_operations(document()))
    for operation_id, (request, statuses) in MAIN_OPERATIONS.items():
        operation = operations[operation_id]
        if request:
            assert operation["requestBody"]["content"]["application/json"]["examples"], operation_id
        for status in statuses:
            assert operation["responses"][str(status)]["content"]["application/json"]["examples"], (
                operation_id
            )
    ack_many = operations["ackMany"]["requestBody"]["content"]["application/json"]["examples"]
    assert any("lease_next" in example["value"] for example in ack_many.values())
    for operation_id, operation in operations.items():
        for status, response in operation["responses"].items():
            problem = response.get("content", {}).get("application/problem+json")
            if problem is not None:
                assert problem["examples"], f"{operation_id} {status}"
    assert set(examples.PROBLEMS) == set(PROBLEM_CODES)


def _examples(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], Any, bool]]:
    """(where, schema name, the example, its value, whether it is a request body) for every example."""
    for operation_id, operation in _operations(doc):
        contents = [("request", operation.get("requestBody", {}).get("content", {}), True)]
        contents += [
            (status, response.get("content", {}), False)
            for status, response in operation["responses"].items()
        ]
        for where, content, is_request in contents:
            for media_type, media in content.items():
                for name, example in media.get("examples", {}).items():
                    ref = media["schema"]["$ref"]
                    yield (
                        f"{operation_id} {where} {media_type} {name}",
                        ref.rsplit("/", 1)[1],
                        example,
                        is_request,
                    )


def _closed(node: Any) -> Any:
    """The schemas with every object closed: an answer's example with a field its Struct does
    not have fails too (answers' schemas leave additionalProperties open)."""
    if isinstance(node, dict):
        closed = {key: _closed(value) for key, value in node.items()}
        if node.get("type") == "object" and "properties" in node:
            closed["additionalProperties"] = False
        return closed
    if isinstance(node, list):
        return [_closed(value) for value in node]
    return node


def test_examples_are_valid_against_the_schemas_and_the_structs() -> None:
    doc = document()
    components = _closed(doc["components"])
    seen = 0
    for where, schema_name, example, is_request in _examples(doc):
        assert set(example) == {"summary", "value"} and example["summary"], where
        value = example["value"]
        root = {"components": components, "$ref": f"#/components/schemas/{schema_name}"}
        errors = [error.message for error in jsonschema_rs.Draft202012Validator(root).iter_errors(value)]
        assert errors == [], where
        if is_request:
            # What the service decodes a body with, and checks after (names, JSON nesting).
            msgspec.json.decode(msgspec.json.encode(value), type=STRUCTS[schema_name])
        seen += 1
    assert seen >= 40


def test_problem_examples_use_the_services_titles() -> None:
    titles = {code: (status, title) for status, code, title in PROBLEMS.values()}
    for code, value in examples.PROBLEMS.items():
        assert value["code"] == code and value["status"] == PROBLEM_CODES[code][0]
        if code in titles:
            assert (value["status"], value["title"]) == titles[code]


@pytest.mark.parametrize(
    "code", ["invalid_request", "job_not_found", "lease_lost", "job_active", "no_session"]
)
async def test_problem_examples_are_what_the_service_answers(
    client: httpx.AsyncClient, queue: str, code: str
) -> None:
    job = f"/v1/queues/{queue}/jobs/{examples.JOB_ID}"
    if code == "invalid_request":
        response = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": 1, "priority": 5000})
    elif code == "job_not_found":
        response = await client.post(job + "/ack", json={"lease_id": examples.LEASE_ID})
    elif code == "no_session":
        response = await client.post(f"/v1/queues/{queue}/workers/worker-7/quiet")
    else:
        created = await client.post(f"/v1/queues/{queue}/jobs", json={"payload": 1, "id": examples.JOB_ID})
        assert created.status_code == 201
        assert (await client.post(f"/v1/queues/{queue}/lease", json={"worker": "w1"})).json()["jobs"]
        if code == "lease_lost":
            response = await client.post(job + "/ack", json={"lease_id": examples.LEASE_ID})
        else:
            response = await client.delete(job)
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json() == examples.PROBLEMS[code]
