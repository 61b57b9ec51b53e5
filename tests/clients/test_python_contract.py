"""The Python SDK against the contract, openapi/openapi.json: every operation has a method on
Client and AsyncClient that takes each of its parameters and body fields, and every model in
echomq.models has its schema's fields. An operation or a field the service gains fails here until
the SDK has it (the TypeScript SDK's twin is clients/typescript/test/contract.test.ts)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from echomq import AsyncClient, Client
from echomq import models as m
from tests.clients.support import ROOT

DOCUMENT = json.loads((ROOT / "openapi" / "openapi.json").read_text())
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]
VERBS = ("get", "put", "post", "delete", "patch")

METHOD_OF_OPERATION = {
    "healthz": "healthz",
    "readyz": "readyz",
    "metrics": "metrics",
    "openapi": "openapi",
    "listQueues": "list_queues",
    "getQueue": "queue",
    "enqueue": "enqueue",
    "enqueueMany": "enqueue_many",
    "createFlow": "create_flow",
    "listChildren": "children",
    "lease": "lease",
    "heartbeat": "heartbeat",
    "heartbeatMany": "heartbeat_many",
    "ack": "ack",
    "ackMany": "ack_many",
    "fail": "fail",
    "release": "release",
    "getJob": "get_job",
    "deleteJob": "delete_job",
    "deleteQueue": "delete_queue",
    "getLedger": "ledger",
    "listWorkers": "workers",
    "listFailed": "failed",
    "listJobs": "list_jobs",
    "cancel": "cancel",
    "promote": "promote",
    "events": "events",
    "history": "history",
    "redriveFailed": "retry_failed",
    "releaseWorker": "release_worker",
    "sessionHeartbeat": "session_heartbeat",
    "quietWorker": "quiet",
    "endSession": "end_session",
    "pauseQueue": "pause",
    "resumeQueue": "resume",
    "getSettings": "get_settings",
    "putSettings": "put_settings",
    "setGroupLimit": "set_group_limit",
    "listGroups": "list_groups",
    "putSchedule": "put_schedule",
    "getSchedule": "get_schedule",
    "listSchedules": "list_schedules",
    "deleteSchedule": "delete_schedule",
    "triggerSchedule": "trigger_schedule",
}
# Methods built on an operation's method: wait loops over get_job's wait_ms; lease_answer is
# lease answered whole (with retry_after_ms: the Worker's); queues follows list_queues to its
# last page.
HELPERS = {"wait", "lease_answer", "queues"}

# The model of each schema. A request body needs none: the SDK builds it from the method's
# arguments, which test_each_method_takes_what_its_operation_reads checks.
MODEL_OF_SCHEMA: dict[str, type[msgspec.Struct]] = {
    "AckItem": m.AckItem,
    "AckItemResult": m.AckOutcome,
    "AckManyResponse": m.AckedMany,
    "AckResponse": m.Acked,
    "Backoff": m.Backoff,
    "CancelResponse": m.Cancelled,
    "ChildCounts": m.ChildCounts,
    "ChildView": m.Child,
    "ChildrenPage": m.ChildPage,
    "Counts": m.Counts,
    "EnqueueManyResponse": m._EnqueueMany,
    "EnqueueRequest": m.NewJob,
    "EnqueueResponse": m.Enqueued,
    "FailResponse": m.Failed,
    "FailedPage": m.FailedPage,
    "FlowJob": m.FlowJob,
    "FlowNode": m.FlowNode,
    "FlowResponse": m._Flow,
    "GroupLimitResponse": m.GroupLimit,
    "GroupPage": m.GroupPage,
    "GroupView": m.GroupInfo,
    "HeartbeatItem": m.HeartbeatItem,
    "HeartbeatItemResult": m.HeartbeatOutcome,
    "HeartbeatManyResponse": m._HeartbeatMany,
    "HeartbeatResponse": m.Heartbeat,
    "HistoryMinute": m.HistoryMinute,
    "HistoryView": m._History,
    "JobPage": m.JobPage,
    "JobRef": m.JobRef,
    "JobView": m.Job,
    "LeaseRequest": m.LeaseNext,  # an ack's lease_next
    "LeaseResponse": m.LeaseAnswer,
    "LeasedJob": m.LeasedJob,
    "LedgerEntry": m.LedgerEntry,
    "LedgerView": m._Ledger,
    "PauseResponse": m.Paused,
    "Problem": m.Problem,
    "PromoteResponse": m.Promoted,
    "QueueList": m.QueuePage,
    "QueueSettings": m.QueueSettings,
    "QueueView": m.QueueInfo,
    "QuietResponse": m.Quieted,
    "RateLimit": m.RateLimit,
    "RedriveResponse": m._Redriven,
    "ReleaseResponse": m.Released,
    "ScheduleJob": m.ScheduleJob,
    "ScheduleList": m._Schedules,
    "ScheduleView": m.Schedule,
    "SessionHeartbeatResponse": m.Session,
    "StreamEvent": m.Event,
    "WorkerHoldings": m.WorkerHoldings,
    "WorkerReleaseResponse": m._WorkerReleased,
    "WorkerSession": m.WorkerSession,
    "WorkersView": m._Workers,
}
NOT_MODELLED = {"Health": "healthz() and readyz() answer a bool: the status code says it all"}
# Models that read one field of an answer another model reads whole.
PART_READERS = {m._Leased: "LeaseResponse", m._AckMany: "AckManyResponse"}
EXTRA_FIELDS = {(m.Event, "event_id"): "the event's SSE id, sent beside its JSON, not in it"}


def operations() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in DOCUMENT["paths"].values():
        for verb, operation in path.items():
            if verb in VERBS:
                yield operation["operationId"], operation


def ref_name(schema: dict[str, Any]) -> str:
    return schema["$ref"].rsplit("/", 1)[-1]


def body_schema(operation: dict[str, Any]) -> str | None:
    content = operation.get("requestBody", {}).get("content", {})
    return ref_name(content["application/json"]["schema"]) if content else None


def request_schemas() -> set[str]:
    """The schemas a request body is made of: the bodies and every schema they refer to."""
    found: set[str] = set()
    pending = [name for _, operation in operations() if (name := body_schema(operation))]
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending += [ref.rsplit("/", 1)[-1] for ref in refs(SCHEMAS[name])]
    return found


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_") and name not in ("close", "aclose")
    }


# --- operations ----------------------------------------------------------------------------------


def test_every_operation_has_a_method_on_both_clients_and_no_method_is_extra() -> None:
    sync, asyn = public_methods(Client), public_methods(AsyncClient)
    assert {operation_id for operation_id, _ in operations()} == set(METHOD_OF_OPERATION)
    assert set(METHOD_OF_OPERATION.values()) | HELPERS == sync.keys() == asyn.keys()
    for name, signature in sync.items():
        assert list(signature.parameters) == list(asyn[name].parameters), name
        method = getattr(AsyncClient, name)
        if inspect.isgeneratorfunction(getattr(Client, name)):  # events: an iterator of each kind
            assert inspect.isasyncgenfunction(method), name
        else:
            assert inspect.iscoroutinefunction(method), name


@pytest.mark.parametrize("operation_id", sorted(METHOD_OF_OPERATION))
def test_each_method_takes_what_its_operation_reads(operation_id: str) -> None:
    """Path and query parameters, and the fields of the request body, are arguments of the same
    name (the SDK builds each body from its method's arguments)."""
    operation = dict(operations())[operation_id]
    method = METHOD_OF_OPERATION[operation_id]
    wanted = {parameter["name"] for parameter in operation.get("parameters", [])}
    if (body := body_schema(operation)) is not None:
        wanted |= set(SCHEMAS[body]["properties"])
    for cls in (Client, AsyncClient):
        taken = set(inspect.signature(getattr(cls, method)).parameters)
        assert wanted <= taken, f"{cls.__name__}.{method} lacks {sorted(wanted - taken)}"


# --- models ----------------------------------------------------------------------------------------


def test_every_schema_has_a_model_or_is_built_from_arguments() -> None:
    bodies = {name for _, operation in operations() if (name := body_schema(operation))}
    assert set(SCHEMAS) == set(MODEL_OF_SCHEMA) | bodies | set(NOT_MODELLED)
    models = {
        cls
        for cls in vars(m).values()
        if isinstance(cls, type) and issubclass(cls, msgspec.Struct) and cls.__module__ == m.__name__
    }
    assert models - {m._Model} == set(MODEL_OF_SCHEMA.values()) | set(PART_READERS)


def test_part_readers_read_fields_of_their_schema() -> None:
    for cls, schema in PART_READERS.items():
        names = {field.encode_name for field in msgspec.structs.fields(cls)}
        assert names <= set(SCHEMAS[schema]["properties"]), cls.__name__


@pytest.mark.parametrize("schema", sorted(MODEL_OF_SCHEMA))
def test_each_model_has_its_schemas_fields(schema: str) -> None:
    cls = MODEL_OF_SCHEMA[schema]
    properties: dict[str, Any] = SCHEMAS[schema]["properties"]
    required = set(SCHEMAS[schema].get("required", []))
    fields = {
        field.encode_name: field
        for field in msgspec.inspect.type_info(cls).fields
        if (cls, field.name) not in EXTRA_FIELDS
    }
    assert set(fields) == set(properties), f"{cls.__name__}: fields differ from {schema}'s"
    is_request = schema in request_schemas()
    for name, field in fields.items():
        where = f"{cls.__name__}.{name} ({schema})"
        # An answer may leave out what is not required: the model must decode without it.
        if name not in required:
            assert not field.required, f"{where} is optional in the document"
        # A request the model can build must have what the document requires.
        elif is_request:
            assert field.required, f"{where} is required in the document"
        if schema_allows_null(properties[name]):
            assert type_allows_none(field.type), f"{where} may be null in the document"
        values = schema_enum(properties[name])
        if values is not None and (literal := literal_values(field.type)) is not None:
            assert literal == values, f"{where}: {sorted(literal)} is not the document's {sorted(values)}"


def schema_allows_null(schema: dict[str, Any]) -> bool:
    if "anyOf" in schema:
        return any(schema_allows_null(member) for member in schema["anyOf"])
    if "enum" in schema:
        return None in schema["enum"]
    if "$ref" in schema or "type" in schema:
        kind = schema.get("type")
        return kind == "null" or (isinstance(kind, list) and "null" in kind)
    return True  # no type: any JSON value, null included


def schema_enum(schema: dict[str, Any]) -> set[Any] | None:
    if "enum" in schema:
        return set(schema["enum"])
    found = [set(member["enum"]) for member in schema.get("anyOf", []) if "enum" in member]
    return set().union(*found) if found else None


def type_allows_none(kind: msgspec.inspect.Type) -> bool:
    if isinstance(kind, msgspec.inspect.UnionType):
        return any(type_allows_none(member) for member in kind.types)
    return isinstance(kind, (msgspec.inspect.NoneType, msgspec.inspect.AnyType))


def literal_values(kind: msgspec.inspect.Type) -> set[Any] | None:
    if isinstance(kind, msgspec.inspect.LiteralType):
        return set(kind.values)
    if isinstance(kind, msgspec.inspect.UnionType):
        found = [values for member in kind.types if (values := literal_values(member)) is not None]
        return set().union(*found) if found else None
    return None
