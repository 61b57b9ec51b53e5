"""Builds the OpenAPI 3.1 document from the app's route handlers and the msgspec Structs.

Each handler's ``opt`` (set in echomq_http.api.routes) names its tag, request body, responses, problem
codes and query parameters, and its ``description`` says what it does; schemas come from msgspec
(JSON Schema 2020-12, as OpenAPI 3.1 uses) with the Structs' field descriptions and docstrings;
examples come from echomq_http.api.examples. ``python -m echomq_http.api.openapi`` prints the document that
openapi/openapi.json holds. It must stay clean under `redocly lint` and compile as orval and
@hey-api/openapi-ts generate it (tests/generators): a schema is never named `<operationId>Result`,
orval's name for an operation's answer.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from importlib.metadata import version
from typing import Any

import msgspec
from litestar.handlers import HTTPRouteHandler

from echomq_http.api import examples
from echomq_http.api.auth import ALLOWED, Action, Role
from echomq_http.api.schemas.common import NAME_RULE, Health, Problem
from echomq_http.api.webguard import CHANGING_METHODS
from echomq_http.core import limits

TITLE = "EchoMQ HTTP"
# The document describes the API this package serves, so it carries the package's version.
API_VERSION = version("echomq-http")
LICENSE = {"name": "MIT", "identifier": "MIT"}
# Relative: the service that serves the document (/docs sends its requests there); generated
# clients take the service's address at run time anyway.
SERVERS = [{"url": "/", "description": "the service that serves this document"}]
_PATH_PARAM = re.compile(r"\{(\w+):\w+\}")
_REF = "#/components/schemas/{name}"
BEARER = [{"bearer": []}]  # checked only when tokens are configured (EMQ_AUTH_TOKENS)
OPEN: list[dict[str, list[str]]] = []  # overrides the document's BEARER: no token, ever

DESCRIPTION = f"""\
A reliable job queue on Redis over REST/JSON. Producers enqueue jobs; workers lease them, keep
their leases with heartbeats, and finish each with ack, fail or release. A leased job stays in
the queue's in-flight ledger until it is acked, failed or released; when its lease expires, the
stalled sweep gives it back to waiting. Delivery is at least once: a job can run more than once.

Times are epoch milliseconds on the Redis server's clock. Names (queues, job ids, workers) are
{NAME_RULE}. Request bodies refuse unknown fields. Errors are RFC 9457 problem details
(application/problem+json) with a machine-readable `code`; 429 and 503 come with Retry-After.

Whatever the tokens, a POST, PUT or DELETE under /v1 with a body sends `Content-Type:
application/json` (or a `+json` type), and one without a body sends no form or text/plain type,
else 415 unsupported_media_type (what a web page's form could send is refused); and the Host
header names the service (a loopback name, an IP address, or a name in EMQ_ALLOWED_HOSTS), else
421 misdirected_request.

Auth: when the service runs with tokens (EMQ_AUTH_TOKENS), every /v1 call needs
`Authorization: Bearer <token>`. Producer tokens enqueue and read, worker tokens lease,
heartbeat, ack, fail, release and read, admin tokens do everything; a token can be limited to
queue name patterns. /healthz, /readyz, /openapi.json and /docs need no token.

Interactive documentation of this document is served at /docs."""

# One tag per operation: generated clients make one API class per tag.
TAGS: list[dict[str, str]] = [
    {
        "name": "Jobs",
        "description": "Put jobs in and read them back: enqueue one job or up to 1000 (producer or "
        "admin tokens), read a job in any state (any token).",
    },
    {
        "name": "Working",
        "description": "What workers call in a loop: lease jobs (with a long poll), keep their leases "
        "with heartbeats, and finish each with ack, fail or release (worker or admin tokens). "
        "Ack, fail and release are safe to repeat with the same lease id; a lease is, with a "
        "request_id.",
    },
    {
        "name": "Inspect",
        "description": "Read a queue's state: its counts and pause state, the in-flight ledger, who "
        "holds what, the dead letters (any token).",
    },
    {
        "name": "Operate",
        "description": "Operator actions: pause and resume leasing, redrive dead letters, release a "
        "dead worker's jobs, delete a job or a whole queue (admin tokens).",
    },
    {
        "name": "Schedules",
        "description": "Recurring jobs: cron (in a timezone) or fixed intervals, each run making exactly "
        "one job whatever the number of replicas; put, read, delete and trigger them (reading: any "
        "token; the rest: producer or admin tokens).",
    },
    {"name": "Service", "description": "Health, readiness, metrics and this document."},
]
TAG_NAMES = frozenset(tag["name"] for tag in TAGS)

# problem code -> (HTTP status, when the service answers it)
PROBLEM_CODES: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "malformed or out-of-range input (invalid_request); nothing was changed"),
    "unauthorized": (401, "tokens are configured and the bearer token is missing or unknown (unauthorized)"),
    "forbidden": (
        403,
        "the token's role may not do this, or it does not cover the queue, or the worker name belongs "
        "to another token while that token's leases or session last (forbidden)",
    ),
    "job_not_found": (
        404,
        "no such job in the queue: never enqueued, deleted, or past its retention (job_not_found)",
    ),
    "schedule_not_found": (404, "no such schedule in the queue (schedule_not_found)"),
    "request_timeout": (408, "the request body did not arrive within EMQ_BODY_TIMEOUT_S (request_timeout)"),
    "lease_lost": (
        409,
        "the lease is not the job's current, unexpired one: it expired, or the job was released, "
        "reclaimed or finished under another lease; stop working on the job, which may be delivered "
        "again (lease_lost)",
    ),
    "job_active": (
        409,
        "the job is leased, or the queue has jobs in flight and force is not true (job_active)",
    ),
    "no_session": (
        409,
        "the worker has no live session in the queue: none was started, or it lapsed or ended (no_session)",
    ),
    "not_delayed": (409, "the job is not delayed: it is waiting, active or finished (not_delayed)"),
    "job_exists": (
        409,
        "a node's id names a job that is not that node of this flow (another job, or a flow with "
        "another tree under this root id) (job_exists): nothing was made",
    ),
    "too_many_queues": (
        409,
        "the queue is new and the service holds EMQ_MAX_QUEUES queues already (too_many_queues): "
        "nothing was stored; delete a queue to make room",
    ),
    "payload_too_large": (413, "the body is over EMQ_MAX_BODY_BYTES (payload_too_large)"),
    "unsupported_media_type": (
        415,
        "the request has a body whose Content-Type is not application/json (or a +json type), or "
        "none; or no body and a form's or text/plain Content-Type (unsupported_media_type); nothing "
        "was changed",
    ),
    "misdirected_request": (
        421,
        "the Host header names a host the service does not answer to: not a loopback name, an IP "
        "address, or one in EMQ_ALLOWED_HOSTS (misdirected_request); nothing was changed",
    ),
    "too_many_requests": (
        429,
        "EMQ_MAX_WAITERS long polls already wait on this process (too_many_requests); retry after "
        "Retry-After",
    ),
    "backend_unavailable": (
        503,
        "Redis is unreachable or cannot take writes now, or in durable mode no replica confirmed the "
        "write (backend_unavailable); retry after Retry-After",
    ),
}
# What any /v1 call can answer, what any with a parameter can, and any that reads a body.
ALWAYS = ("unauthorized", "forbidden", "misdirected_request", "backend_unavailable")
WITH_PARAMETERS = ("invalid_request",)
WITH_BODY = ("invalid_request", "request_timeout", "payload_too_large")
CHANGING = ("unsupported_media_type",)  # any POST, PUT or DELETE, with a body or not (webguard)

PATH_PARAMETERS = {
    "queue": f"the queue's name ({NAME_RULE}); a queue never used reads as an empty one",
    "id": f"the job's id ({NAME_RULE})",
    "worker": "the worker's name, as it leased its jobs",
    "group": f"the group's name ({NAME_RULE}), as jobs were enqueued with it",
    "schedule": f"the schedule's name ({NAME_RULE})",
}


def _roles(action: Action, scoped: bool) -> str:
    """Who may call: a sentence from the auth table itself."""
    roles = [role.value for role in Role if action in ALLOWED[role]]
    named = " or ".join(roles)
    who = (
        "a token of any role"
        if len(roles) == len(Role)
        else f"{'an' if named[0] in 'aeiou' else 'a'} {named} token"
    )
    return f"Auth: {who}{' that covers the queue' if scoped else ''}."


def _problems(codes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The error responses of the given problem codes, by status, each with its examples."""
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(codes):
        by_status.setdefault(PROBLEM_CODES[code][0], []).append(code)
    responses: dict[str, dict[str, Any]] = {}
    for status, status_codes in by_status.items():
        text = "; or ".join(PROBLEM_CODES[code][1] for code in status_codes)
        response: dict[str, Any] = {
            "description": text[0].upper() + text[1:],
            "content": {
                "application/problem+json": {
                    "schema": {"$ref": _REF.format(name="Problem")},
                    "examples": {
                        code: examples.example(code, examples.PROBLEMS[code]) for code in status_codes
                    },
                }
            },
        }
        if status in (429, 503):
            response["headers"] = {
                "Retry-After": {
                    "schema": {"type": "integer"},
                    "description": "seconds to wait before retrying",
                }
            }
        responses[str(status)] = response
    return responses


def _json(struct: type, description: str, named_examples: dict[str, Any] | None = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": {"$ref": _REF.format(name=struct.__name__)}}
    if named_examples:
        media["examples"] = named_examples
    return {"description": description, "content": {"application/json": media}}


def _first_sentence(struct: type) -> str:
    text = " ".join((struct.__doc__ or struct.__name__).split())
    return text.split(". ", 1)[0].rstrip(".") + "."


def _operation(handler: HTTPRouteHandler, path_params: list[str]) -> tuple[dict[str, Any], list[type]]:
    opt = handler.opt
    operation_id = handler.operation_id
    assert isinstance(operation_id, str)
    structs: list[type] = []
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": PATH_PARAMETERS[name],
            "schema": {"type": "string", "pattern": limits.NAME_PATTERN},
        }
        for name in path_params
    ]
    for name, kind, description, maximum in opt.get("query", ()):
        # kind: a JSON type; "cursor" (opaque text); a tuple of the values allowed (required); or a
        # schema of its own (a dict).
        schema: dict[str, Any] = {"type": "string" if kind == "cursor" or isinstance(kind, tuple) else kind}
        if isinstance(kind, dict):
            schema = kind
        elif kind == "integer":
            schema["minimum"] = 0 if name in ("offset", "wait_ms", "after") else 1
            schema["maximum"] = maximum
        elif kind == "boolean":
            schema["default"] = False
        elif kind == "cursor":
            schema["maxLength"] = limits.MAX_CURSOR_CHARS
        elif isinstance(kind, tuple):
            schema["enum"] = list(kind)
        else:
            schema["pattern"] = limits.NAME_PATTERN
        required = isinstance(kind, tuple)
        parameters.append(
            {"name": name, "in": "query", "required": required, "description": description, "schema": schema}
        )
    description = " ".join(
        part for part in (handler.description, _roles(opt["action"], "queue" in path_params)) if part
    )
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "tags": [opt["tag"]],
        "summary": handler.summary,
        "description": description,
    }
    if parameters:
        operation["parameters"] = parameters
    codes = [*opt.get("errors", ()), *ALWAYS]
    if parameters:
        codes.extend(WITH_PARAMETERS)
    body = opt.get("request_body")
    if body is not None:
        structs.append(body)
        codes.extend(WITH_BODY)
        media: dict[str, Any] = {"schema": {"$ref": _REF.format(name=body.__name__)}}
        if operation_id in examples.REQUESTS:
            media["examples"] = examples.REQUESTS[operation_id]
        operation["requestBody"] = {
            "required": opt.get("body_optional") is not True,
            "description": _first_sentence(body),
            "content": {"application/json": media},
        }
    if set(handler.http_methods) & CHANGING_METHODS:
        codes.extend(CHANGING)
    responses: dict[str, Any] = {}
    answered = examples.RESPONSES.get(operation_id, {})
    for status, answer in opt.get("responses", {}).items():
        if isinstance(answer, dict):  # not JSON: {"media", "schema", "description", "struct"?}
            if answer.get("struct") is not None:
                structs.append(answer["struct"])
            content = {answer["media"]: {"schema": answer["schema"]}}
            responses[str(status)] = {"description": answer["description"], "content": content}
            continue
        struct, text = answer if isinstance(answer, tuple) else (answer, None)
        if struct is None:
            responses[str(status)] = {"description": text or "Done; no content"}
        else:
            structs.append(struct)
            responses[str(status)] = _json(struct, text or _first_sentence(struct), answered.get(status))
    responses.update(_problems(codes))
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
        "info": {"title": TITLE, "version": API_VERSION, "description": DESCRIPTION, "license": LICENSE},
        "servers": SERVERS,
        "security": BEARER,  # what an operation says nothing of needs; the open ones say OPEN
        "tags": TAGS,
        "paths": paths,  # in the order of the handlers: the order a reader meets them
        "components": {
            "schemas": {name: _without_empty_any_of(schema) for name, schema in sorted(components.items())},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token of EMQ_AUTH_TOKENS: role producer, worker or admin, possibly "
                    "limited to queue name patterns. Not checked when the service runs without tokens.",
                }
            },
        },
    }


def _without_empty_any_of(node: Any) -> Any:
    """The schema with every anyOf that has an empty branch dropped. msgspec writes `Raw | None` as
    anyOf [{}, null], but {} alone already matches any JSON value, null too (OpenAPI 3.1), and
    linters flag the anyOf as illogical."""
    if isinstance(node, list):
        return [_without_empty_any_of(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _without_empty_any_of(value)
        for key, value in node.items()
        if not (key == "anyOf" and {} in value)
    }


SERVICE_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "operationId": "healthz",
            "tags": ["Service"],
            "summary": "The process is running",
            "description": "Answers 200 while the process runs, without asking Redis (a liveness "
            "probe). Auth: none.",
            "security": OPEN,
            "responses": {"200": _json(Health, "Alive", {"ok": examples.example("Alive", {"status": "ok"})})},
        }
    },
    "/readyz": {
        "get": {
            "operationId": "readyz",
            "tags": ["Service"],
            "summary": "Redis answers",
            "description": "Answers 200 when Redis answers a PING, else 503 backend_unavailable (a "
            "readiness probe). Auth: none.",
            "security": OPEN,
            "responses": {
                "200": _json(Health, "Ready", {"ready": examples.example("Ready", {"status": "ready"})}),
                **_problems(["backend_unavailable"]),
            },
        }
    },
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "tags": ["Service"],
            "summary": "Prometheus text format",
            "description": "Per-queue job counters, gauges and the lease-to-ack histogram, and this "
            "replica's sweep, long-poll and HTTP metrics, in the Prometheus text format (README, "
            "Observability). Auth: a token of any role; one limited to queue patterns sees only "
            "those queues' series.",
            "security": BEARER,
            "responses": {
                "200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
                **_problems(["unauthorized"]),
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "tags": ["Service"],
            "summary": "This document",
            "description": "This OpenAPI 3.1 document, as openapi/openapi.json in the repository holds "
            "it. Interactive documentation of it is served at /docs. Auth: none.",
            "security": OPEN,
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
    from echomq_http.api.routes import QUEUE_HANDLERS

    return build_document(QUEUE_HANDLERS, SERVICE_PATHS)


def render(doc: dict[str, Any]) -> bytes:
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(render(document()))
