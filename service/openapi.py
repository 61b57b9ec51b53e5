"""Builds the OpenAPI 3.1 document from the app's route handlers and the msgspec Structs.

Each handler's ``opt`` (set in service.routes) names its request body, responses, error
statuses and query parameters; schemas come from msgspec (JSON Schema 2020-12, as OpenAPI 3.1
uses). ``python -m service.openapi`` prints the document that openapi/openapi.json holds.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

import msgspec
from litestar.handlers import HTTPRouteHandler

from service import limits
from service.schemas import Health, Problem

TITLE = "EchoMQ HTTP"
API_VERSION = "1.0.0"
_PATH_PARAM = re.compile(r"\{(\w+):\w+\}")
_REF = "#/components/schemas/{name}"
BEARER = [{"bearer": []}]  # checked only when tokens are configured (EMQ_AUTH_TOKENS)

ERROR_TEXT = {
    400: "Malformed or out-of-range input (invalid_request); nothing was changed",
    401: "Auth is on and the bearer token is missing or unknown (unauthorized)",
    403: "The token lacks the role or the queue (forbidden)",
    404: "No such job in that queue (job_not_found)",
    409: "Lease lost (lease_lost) or job active (job_active)",
    413: "Body over the configured limit (payload_too_large)",
    429: "Too many long-poll requests waiting on this replica (too_many_requests); see Retry-After",
    503: "Redis unreachable (backend_unavailable); see Retry-After",
}


def _problem(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": ERROR_TEXT[status],
        "content": {"application/problem+json": {"schema": {"$ref": _REF.format(name="Problem")}}},
    }
    if status in (429, 503):
        response["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
    return response


def _json(struct: type, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(name=struct.__name__)}}},
    }


def _operation(handler: HTTPRouteHandler, path_params: list[str]) -> tuple[dict[str, Any], list[type]]:
    opt = handler.opt
    structs: list[type] = []
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": limits.NAME_PATTERN},
        }
        for name in path_params
    ]
    for name, kind, description, maximum in opt.get("query", ()):
        schema: dict[str, Any] = {"type": kind}
        if kind == "integer":
            schema["minimum"] = 0 if name == "offset" else 1
            schema["maximum"] = maximum
        elif kind == "boolean":
            schema["default"] = False
        else:
            schema["pattern"] = limits.NAME_PATTERN
        parameters.append(
            {"name": name, "in": "query", "required": False, "description": description, "schema": schema}
        )
    operation: dict[str, Any] = {"operationId": handler.operation_id, "summary": handler.summary}
    if handler.description:
        operation["description"] = handler.description
    if parameters:
        operation["parameters"] = parameters
    body = opt.get("request_body")
    if body is not None:
        structs.append(body)
        operation["requestBody"] = {
            "required": opt.get("body_optional") is not True,
            "content": {"application/json": {"schema": {"$ref": _REF.format(name=body.__name__)}}},
        }
    responses: dict[str, Any] = {}
    for status, struct in opt.get("responses", {}).items():
        if struct is None:
            responses[str(status)] = {"description": "Done; no content"}
        else:
            structs.append(struct)
            responses[str(status)] = _json(struct, "Success")
    for status in (*opt.get("errors", ()), 401, 403, 503):
        responses[str(status)] = _problem(status)
    operation["responses"] = dict(sorted(responses.items()))
    operation["security"] = BEARER
    return operation, structs


def build_document(handlers: Iterable[HTTPRouteHandler], service_paths: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    structs: list[type] = [Problem, Health]
    for handler in handlers:
        for path in sorted(handler.paths):
            path_params = _PATH_PARAM.findall(path)
            template = _PATH_PARAM.sub(r"{\1}", path)
            for method in sorted(handler.http_methods):
                operation, used = _operation(handler, path_params)
                structs.extend(used)
                paths.setdefault(template, {})[method.lower()] = operation
    paths.update(service_paths)
    _, components = msgspec.json.schema_components(dict.fromkeys(structs), ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": TITLE,
            "version": API_VERSION,
            "description": "A reliable job queue on Redis over REST/JSON. Times are epoch "
            "milliseconds on the Redis server's clock. Errors are RFC 9457 problem details.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Roles producer, worker, admin; see EMQ_AUTH_TOKENS. "
                    "Not checked when the service runs without tokens.",
                }
            },
        },
    }


SERVICE_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "operationId": "healthz",
            "summary": "The process is running",
            "responses": {"200": _json(Health, "Alive")},
        }
    },
    "/readyz": {
        "get": {
            "operationId": "readyz",
            "summary": "Redis answers",
            "responses": {"200": _json(Health, "Ready"), "503": _problem(503)},
        }
    },
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus text format",
            "security": BEARER,
            "responses": {
                "200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
                "401": _problem(401),
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1 document",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    },
}


def document() -> dict[str, Any]:
    from service.routes import QUEUE_HANDLERS

    return build_document(QUEUE_HANDLERS, SERVICE_PATHS)


def render(doc: dict[str, Any]) -> bytes:
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(render(document()))
