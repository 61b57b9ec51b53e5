"""Bad input gets a clear 4xx problem+json answer and changes nothing; a 500 on bad input is a bug.

Every endpoint under /v1 is driven from one table of cases (``CASES``). Each case runs against a
freshly seeded queue (``World``: a leased job, a waiting one, a delayed one and a dead letter) and
is checked three ways:

1. the answer is the expected 4xx as RFC 9457 problem+json, and its detail names the fault;
2. nothing changed: every Redis key of the queue, the queue registry, and what the API itself
   reports (queue counts, ledger, each job's view) are identical before and after;
3. the seeded lease still works: a heartbeat with the real lease id answers 200.

Bodies that would be valid but for their one bad part carry the seeded job's real lease id, so a
service that forgot a check would really act on the job, and the snapshot would show it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from redis.asyncio import Redis as AsyncRedis

from echomq_http.config import Settings
from echomq_http.core import limits
from echomq_http.store.keys import QUEUE_REGISTRY, queue_prefix
from tests.conftest import HTTP_TIMEOUT_S, TEST_SWEEP_INTERVAL_MS
from tests.support.service import running_service

# --------------------------------------------------------------------------------------------
# The problem assertion
# --------------------------------------------------------------------------------------------

PROBLEM_JSON = "application/problem+json"
CODE_OF_STATUS = {
    400: "invalid_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}
# An empty or slash-containing path segment is resolved by the router before any handler runs:
# any of these is a clear answer, as long as it is not answered as some *other* request.
ROUTING_4XX = (400, 404, 405)


def assert_problem(
    response: httpx.Response,
    status: int | Sequence[int],
    code: str | None = None,
    hint: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """The response is problem+json with this status and code, and its detail names the fault.

    ``status`` may list acceptable statuses; ``code`` then defaults to the code of the status
    answered. ``hint``: the detail mentions this (or one of these), case-insensitively.
    """
    allowed = (status,) if isinstance(status, int) else tuple(status)
    where = f"{response.request.method} {response.request.url}"
    assert response.status_code in allowed, (
        f"{where}: expected {allowed}, got {response.status_code}: {response.text[:500]}"
    )
    content_type = response.headers.get("content-type", "")
    assert content_type.startswith(PROBLEM_JSON), f"{where}: content-type {content_type!r}"
    body = response.json()
    assert body["status"] == response.status_code, f"{where}: {body}"
    assert body["code"] == (code or CODE_OF_STATUS[response.status_code]), f"{where}: {body}"
    for member in ("type", "title", "detail"):
        assert isinstance(body[member], str) and body[member].strip(), f"{where}: no {member}: {body}"
    if hint is not None:
        hints = (hint,) if isinstance(hint, str) else tuple(hint)
        assert any(h.lower() in body["detail"].lower() for h in hints), (
            f"{where}: the detail should mention {hints}: {body}"
        )
    return body


# --------------------------------------------------------------------------------------------
# The world every case runs against, and its snapshot
# --------------------------------------------------------------------------------------------

QUEUE = "$Q"  # placeholder in case paths (and flows' bodies) for the seeded queue's name
LEASE = "$LEASE"  # placeholder in case bodies for the seeded job's real lease id
HELD, WAITING, LATER, DEAD = "held-1", "waiting-1", "later-1", "dead-1"
HOLDER = "w1"
GROUP = "g1"
SCHEDULE = "s1"
SEED_LEASE_MS = 120_000  # far longer than any test: the sweep never touches the seeded lease
WRONG_LEASE = "0" * 32
OTHER_TESTS_QUEUE = re.compile(r"t-[0-9a-f]{12}")  # conftest's queue names, for a shared Redis


@dataclass(frozen=True)
class World:
    queue: str
    lease_id: str  # HOLDER's lease on HELD


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.request.url}: {response.status_code} {response.text}"
    return response.json()


async def seed(client: httpx.AsyncClient, queue: str) -> World:
    """One job in each interesting state: failed (DEAD), active (HELD), waiting, delayed."""
    base = f"/v1/queues/{queue}"
    jobs = [
        {"id": DEAD, "payload": 0, "max_attempts": 1, "priority": 2},  # leased first, then failed
        {"id": HELD, "payload": {"n": 1}, "priority": 1},  # leased second, and kept
        {"id": WAITING, "payload": 2},
        {"id": LATER, "payload": 3, "delay_ms": 3_600_000},
    ]
    ok(await client.post(f"{base}/enqueue", json={"jobs": jobs}))
    (dead,) = ok(await client.post(f"{base}/lease", json={"worker": "w0"}))["jobs"]
    failure = {"lease_id": dead["lease_id"], "error": "boom", "retry": False}
    ok(await client.post(f"{base}/jobs/{DEAD}/fail", json=failure))
    lease = {"worker": HOLDER, "lease_ms": SEED_LEASE_MS}
    (held,) = ok(await client.post(f"{base}/lease", json=lease))["jobs"]
    assert (dead["id"], held["id"]) == (DEAD, HELD)
    return World(queue=queue, lease_id=held["lease_id"])


READERS = {
    "string": ("get", ()),
    "hash": ("hgetall", ()),
    "list": ("lrange", (0, -1)),
    "set": ("smembers", ()),
    "zset": ("zrange", (0, -1)),
}


async def redis_state(redis_client: AsyncRedis, queue: str) -> dict[str, Any]:
    """Every key of the queue with its type and full contents (TTLs left out: they tick)."""
    keys = sorted([key async for key in redis_client.scan_iter(match=queue_prefix(queue) + "*", count=1000)])
    async with redis_client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.type(key)
        kinds = [kind.decode() for kind in await pipe.execute()]
        for key, kind in zip(keys, kinds, strict=True):
            reader, args = READERS.get(kind, ("type", ()))
            getattr(pipe, reader)(key, *args, **({"withscores": True} if kind == "zset" else {}))
        values = await pipe.execute()
    return {
        key.decode(): (kind, sorted(value) if kind == "set" else value)
        for key, kind, value in zip(keys, kinds, values, strict=True)
    }


async def registry(redis_client: AsyncRedis, world: World) -> list[str]:
    """The queue registry, less other tests' queues (they may come and go on a shared Redis)."""
    names = [name.decode() for name in await redis_client.smembers(QUEUE_REGISTRY)]
    return sorted(name for name in names if name == world.queue or not OTHER_TESTS_QUEUE.fullmatch(name))


async def snapshot(client: httpx.AsyncClient, redis_client: AsyncRedis, world: World) -> dict[str, Any]:
    """What is stored (Redis) and what the API reports about it."""
    base = f"/v1/queues/{world.queue}"
    paths = [base, f"{base}/active", *(f"{base}/jobs/{job}" for job in (HELD, WAITING, LATER, DEAD))]
    answers = await asyncio.gather(*(client.get(path) for path in paths))
    return {
        "redis": await redis_state(redis_client, world.queue),
        "registry": await registry(redis_client, world),
        "api": {
            path: (answer.status_code, answer.json()) for path, answer in zip(paths, answers, strict=True)
        },
    }


async def assert_lease_still_works(client: httpx.AsyncClient, world: World) -> None:
    beat = await client.post(
        f"/v1/queues/{world.queue}/jobs/{HELD}/heartbeat", json={"lease_id": world.lease_id}
    )
    assert beat.status_code == 200, f"the seeded lease no longer works: {beat.status_code} {beat.text}"


def http_client(base_url: str) -> httpx.AsyncClient:
    # verify=False: plain HTTP on loopback, and it spares loading the CA bundle (~20 ms) per test.
    return httpx.AsyncClient(base_url=base_url, timeout=HTTP_TIMEOUT_S, verify=False)


@pytest.fixture
async def client(service_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """conftest's client to the session's service, made cheaply: this file has hundreds of tests."""
    async with http_client(service_url) as http:
        yield http


@pytest.fixture
async def world(client: httpx.AsyncClient, queue: str) -> World:
    return await seed(client, queue)


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str  # may contain QUEUE
    body: Any = None  # None: no body; bytes: sent as they are; anything else: sent as JSON
    status: int | tuple[int, ...] = 400
    code: str | None = None  # default: the code of the status (CODE_OF_STATUS)
    hint: str | tuple[str, ...] | None = None  # the detail mentions (one of) these

    def content(self, world: World) -> bytes | None:
        if self.body is None:
            return None
        raw = self.body
        if not isinstance(raw, bytes):
            raw = json.dumps(raw, ensure_ascii=False).encode()
        # A flow's nodes name their queue in the body: the seeded queue's, as in the paths.
        return raw.replace(LEASE.encode(), world.lease_id.encode()).replace(
            QUEUE.encode(), world.queue.encode()
        )

    def url(self, world: World) -> str:
        return self.path.replace(QUEUE, world.queue)


async def send(client: httpx.AsyncClient, world: World, case: Case) -> httpx.Response:
    content = case.content(world)
    headers = {"content-type": "application/json"} if content is not None else None
    return await client.request(case.method, case.url(world), content=content, headers=headers)


VALID: Any = object()  # Endpoint.case: the endpoint's valid body


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # format fields {queue}, {job}, {worker}, {group}, {schedule}
    body: Any = None  # a valid body: in each case below, the one bad part is the only fault

    def url(
        self,
        queue: str = QUEUE,
        job: str = HELD,
        worker: str = HOLDER,
        group: str = GROUP,
        schedule: str = SCHEDULE,
    ) -> str:
        return self.path.format(queue=queue, job=job, worker=worker, group=group, schedule=schedule)

    def case(
        self,
        case_id: str,
        body: Any = VALID,
        status: int | tuple[int, ...] = 400,
        code: str | None = None,
        hint: str | tuple[str, ...] | None = None,
        **names: str,
    ) -> Case:
        """A case on this endpoint: its valid body unless given another, path names as given."""
        body = self.body if body is VALID else body
        return Case(case_id, self.method, self.url(**names), body, status, code, hint)


ENDPOINTS: dict[str, Endpoint] = {
    "enqueue": Endpoint("POST", "/v1/queues/{queue}/jobs", {"payload": {"n": 9}}),
    "enqueue_many": Endpoint("POST", "/v1/queues/{queue}/enqueue", {"jobs": [{"payload": 9}]}),
    "lease": Endpoint("POST", "/v1/queues/{queue}/lease", {"worker": "w2"}),
    "heartbeat": Endpoint("POST", "/v1/queues/{queue}/jobs/{job}/heartbeat", {"lease_id": LEASE}),
    "heartbeat_many": Endpoint(
        "POST", "/v1/queues/{queue}/heartbeat", {"leases": [{"id": HELD, "lease_id": LEASE}]}
    ),
    "ack": Endpoint("POST", "/v1/queues/{queue}/jobs/{job}/ack", {"lease_id": LEASE}),
    "ack_many": Endpoint("POST", "/v1/queues/{queue}/ack", {"acks": [{"id": HELD, "lease_id": LEASE}]}),
    "fail": Endpoint("POST", "/v1/queues/{queue}/jobs/{job}/fail", {"lease_id": LEASE, "error": "boom"}),
    "release": Endpoint("POST", "/v1/queues/{queue}/jobs/{job}/release", {"lease_id": LEASE}),
    "get_job": Endpoint("GET", "/v1/queues/{queue}/jobs/{job}"),
    "list_children": Endpoint("GET", "/v1/queues/{queue}/jobs/{job}/children"),
    "create_flow": Endpoint(
        "POST",
        "/v1/flows",
        {"job": {"queue": QUEUE, "payload": 1, "children": [{"queue": QUEUE, "payload": 2}]}},
    ),
    "delete_job": Endpoint("DELETE", "/v1/queues/{queue}/jobs/{job}"),
    "list_queues": Endpoint("GET", "/v1/queues"),
    "get_queue": Endpoint("GET", "/v1/queues/{queue}"),
    "delete_queue": Endpoint("DELETE", "/v1/queues/{queue}"),
    "ledger": Endpoint("GET", "/v1/queues/{queue}/active"),
    "workers": Endpoint("GET", "/v1/queues/{queue}/workers"),
    "failed": Endpoint("GET", "/v1/queues/{queue}/failed"),
    "list_jobs": Endpoint("GET", "/v1/queues/{queue}/jobs?state=failed"),
    "release_worker": Endpoint("POST", "/v1/queues/{queue}/workers/{worker}/release"),
    "session_heartbeat": Endpoint("POST", "/v1/queues/{queue}/workers/{worker}/heartbeat", {"ttl_ms": 5000}),
    "quiet": Endpoint("POST", "/v1/queues/{queue}/workers/{worker}/quiet"),
    "end_session": Endpoint("DELETE", "/v1/queues/{queue}/workers/{worker}"),
    "pause": Endpoint("POST", "/v1/queues/{queue}/pause"),
    "resume": Endpoint("POST", "/v1/queues/{queue}/resume"),
    "redrive": Endpoint("POST", "/v1/queues/{queue}/failed/retry", {"ids": [DEAD]}),
    "get_settings": Endpoint("GET", "/v1/queues/{queue}/settings"),
    "put_settings": Endpoint(
        "PUT", "/v1/queues/{queue}/settings", {"max_in_flight": 3, "rate_limit": {"max": 5, "per_ms": 1000}}
    ),
    "set_group": Endpoint("PUT", "/v1/queues/{queue}/groups/{group}", {"max_in_flight": 2}),
    "list_groups": Endpoint("GET", "/v1/queues/{queue}/groups"),
    "put_schedule": Endpoint(
        "PUT", "/v1/queues/{queue}/schedules/{schedule}", {"every_ms": 60_000, "job": {"payload": {"n": 1}}}
    ),
    "get_schedule": Endpoint("GET", "/v1/queues/{queue}/schedules/{schedule}"),
    "delete_schedule": Endpoint("DELETE", "/v1/queues/{queue}/schedules/{schedule}"),
    "list_schedules": Endpoint("GET", "/v1/queues/{queue}/schedules"),
    "trigger_schedule": Endpoint("POST", "/v1/queues/{queue}/schedules/{schedule}/trigger"),
}
BODY_ENDPOINTS = [name for name, endpoint in ENDPOINTS.items() if endpoint.body is not None]
JOB_ENDPOINTS = [name for name, endpoint in ENDPOINTS.items() if "{job}" in endpoint.path]
QUEUE_ENDPOINTS = [name for name, endpoint in ENDPOINTS.items() if "{queue}" in endpoint.path]
WORKER_ENDPOINTS = [name for name, endpoint in ENDPOINTS.items() if "{worker}" in endpoint.path]
SCHEDULE_ENDPOINTS = [name for name, endpoint in ENDPOINTS.items() if "{schedule}" in endpoint.path]
Q = ENDPOINTS["get_queue"].url()
JOB = ENDPOINTS["get_job"].url()

# Names the contract rejects: not ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ (whole string).
BAD_NAMES = {
    "colon": "a:b",
    "space": "a b",
    "brace": "{a}",
    "leading-dash": "-a",
    "leading-dot": ".a",
    "129-chars": "a" * 129,
    "trailing-newline": "a\n",
    "non-ascii": "é",
}
BAD_BODY_NAMES = {**BAD_NAMES, "empty": "", "slash": "a/b"}  # in a path these two are routing matters
NAME_FIELDS = {"id", "worker", "ids", "group"}


def with_fields(endpoint: str, **fields: Any) -> dict[str, Any]:
    """The endpoint's valid body with some fields set (a value of ... removes the field)."""
    body = {**ENDPOINTS[endpoint].body, **fields}
    return {key: value for key, value in body.items() if value is not ...}


def path_id(method: str, path: str) -> str:
    return f"{method}-" + path.replace(QUEUE, "Q").strip("/").replace("/", ".")


# --- bodies that are not the JSON object the endpoint reads: the same faults everywhere ---

# RFC 8259: JSON text is UTF-8. A stray byte in a string the endpoint reads is unparseable input,
# never a server error, and must not be stored (to be served back later as invalid JSON).
INVALID_UTF8_BODIES = {
    "enqueue": b'{"payload": 1, "name": "\xff"}',
    "enqueue_many": b'{"jobs": [{"payload": 1, "name": "\xff"}]}',
    "lease": b'{"worker": "w\xff"}',
    "heartbeat": b'{"lease_id": "\xff"}',
    "heartbeat_many": b'{"leases": [{"id": "held-1", "lease_id": "\xff"}]}',
    "ack": b'{"lease_id": "\xff"}',
    "ack_many": b'{"acks": [{"id": "held-1", "lease_id": "\xff"}]}',
    "fail": b'{"lease_id": "$LEASE", "error": "\xe9"}',  # Latin-1, not UTF-8
    "release": b'{"lease_id": "\xff"}',
    "redrive": b'{"ids": ["\xff"]}',
    "put_settings": b'{"max_in_flight": 3, "\xff": 1}',
    "session_heartbeat": b'{"ttl_ms": "\xff"}',
    "set_group": b'{"max_in_flight": "\xff"}',
    "put_schedule": b'{"cron": "\xff", "job": {"payload": 1}}',
    "create_flow": b'{"job": {"queue": "q1", "payload": 1, "name": "\xff"}}',
}
# The same strings as an unpaired UTF-16 surrogate escape: valid-looking JSON, not encodable text.
LONE_SURROGATE_BODIES = {
    name: body.replace(b"\xff", rb"\ud800").replace(b"\xe9", rb"\udc00")
    for name, body in INVALID_UTF8_BODIES.items()
}
DEEP = b"[" * 5_000 + b"]" * 5_000  # deeper than any parser's recursion limit, yet only 10 KB
NESTED_65: list[Any] = []  # one level deeper than limits.MAX_JSON_DEPTH
for _ in range(limits.MAX_JSON_DEPTH):
    NESTED_65 = [NESTED_65]
# A float in the first field the endpoint reads makes the service decode the body a second time
# (to read integral floats as integers): deep nesting must be refused on that path too.
FLOAT_FIRST_FIELD = {
    "enqueue": "priority",
    "enqueue_many": "jobs",
    "lease": "lease_ms",
    "heartbeat": "lease_ms",
    "heartbeat_many": "leases",
    "ack": "lease_id",
    "ack_many": "acks",
    "fail": "retry_after_ms",
    "release": "lease_id",
    "redrive": "ids",
    "put_settings": "max_in_flight",
    "session_heartbeat": "ttl_ms",
    "set_group": "max_in_flight",
    "put_schedule": "every_ms",
    "create_flow": "job",
}


def body_syntax_cases() -> list[Case]:
    cases = []
    for name in BODY_ENDPOINTS:
        endpoint = ENDPOINTS[name]
        valid = json.dumps(endpoint.body).encode()
        faults: dict[str, bytes] = {
            "unparseable": b'{"oops',
            "not-json": b"hello",
            "trailing-garbage": valid + b" x",
            "json-array": b"[]",
            "json-array-of-body": b"[" + valid + b"]",
            "json-string": b'"hello"',
            "json-number": b"42",
            "json-null": b"null",
            "unknown-field": json.dumps({**endpoint.body, "bogus": 1}).encode(),
            "invalid-utf8": INVALID_UTF8_BODIES[name],
            "lone-surrogate": LONE_SURROGATE_BODIES[name],
            "float-then-deep-nesting": b'{"%s": 1.0, "bogus": %s}' % (FLOAT_FIRST_FIELD[name].encode(), DEEP),
        }
        if name not in ("redrive", "session_heartbeat"):  # optional bodies (empty = the defaults)
            faults["empty-body"] = b""
            faults["whitespace-body"] = b"  \n"
        for fault, body in faults.items():
            cases.append(Case(f"{name}-{fault}", endpoint.method, endpoint.url(), body, hint="request body"))
    return cases


# --- one bad field at a time ---


def ints(low: int, high: int | None) -> list[tuple[str, Any]]:
    """Bad values for an int field with the inclusive range low..high.

    Wrong types use a number in range, so only the type is wrong ("1", true). An integral float
    (1.0) is an integer to JSON Schema and to the service, so only out-of-range ones are bad.
    """
    fine = max(low, 1)
    values: list[tuple[str, Any]] = [
        ("string", str(fine)),
        ("float", fine + 0.5),
        ("bool", True),
        ("object", {"n": fine}),
        ("huge", 2**64),
        ("huge-float", 1e300),
        (f"below-{low}", low - 1),
        (f"below-{low}-as-float", float(low - 1)),
    ]
    if high is not None:
        values += [(f"above-{high}", high + 1), (f"above-{high}-as-float", float(high + 1))]
    return values


def bad_names() -> list[tuple[str, Any]]:
    return [*BAD_BODY_NAMES.items(), ("int", 5), ("list", ["a"])]


def required(values: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A required field: also missing, and null."""
    return [*values, ("missing", ...), ("null", None)]


def not_null(values: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """An optional field with a default: null is not a value for it."""
    return [*values, ("null", None)]


def field_cases(endpoint: str, fields: dict[str, list[tuple[str, Any]]]) -> list[Case]:
    """One case per (field, bad value); the detail names the field (or calls the name invalid)."""
    cases = []
    for field, values in fields.items():
        hint = (f"$.{field}", f"`{field}`", "invalid name") if field in NAME_FIELDS else field
        for label, value in values:
            body = with_fields(endpoint, **{field: value})
            cases.append(ENDPOINTS[endpoint].case(f"{endpoint}-{field}-{label}", body, hint=hint))
    return cases


MAX_ERROR = limits.MAX_ERROR_BYTES
LEASE_IDS = required([("empty", ""), ("129-chars", "x" * 129), ("int", 5), ("list", [LEASE])])
LEASE_MS = ints(limits.MIN_LEASE_MS, limits.MAX_LEASE_MS)
# An ack's lease_next is a lease request, checked as one before the ack is applied.
LEASE_NEXTS: list[tuple[str, Any]] = [
    ("string", "w2"),
    ("list", [{"worker": "w2"}]),
    ("no-worker", {}),
    ("worker-null", {"worker": None}),
    *((f"worker-{label}", {"worker": name}) for label, name in bad_names()),
    *((f"lease_ms-{label}", {"worker": "w2", "lease_ms": value}) for label, value in not_null(LEASE_MS)),
    *(
        (f"max_jobs-{label}", {"worker": "w2", "max_jobs": value})
        for label, value in not_null(ints(1, limits.MAX_JOBS_PER_LEASE))
    ),
    *(
        (f"wait_ms-{label}", {"worker": "w2", "wait_ms": value})
        for label, value in not_null(ints(0, limits.MAX_WAIT_MS))
    ),
    *((f"request_id-{label}", {"worker": "w2", "request_id": name}) for label, name in bad_names()),
    ("unknown-field", {"worker": "w2", "bogus": 1}),
]

FIELD_CASES = [
    *field_cases(
        "enqueue",
        {
            "payload": [("missing", ...)],
            "id": bad_names(),
            "name": [("empty", ""), ("129-chars", "n" * 129), ("int", 5)],
            "priority": not_null(ints(0, limits.MAX_PRIORITY)),
            "delay_ms": not_null(ints(0, limits.MAX_DELAY_MS)),
            "max_attempts": not_null(ints(1, limits.MAX_ATTEMPTS)),
            "group": bad_names(),
            "backoff": [
                ("string", "fixed"),
                ("list", []),
                ("linear", {"type": "linear", "delay_ms": 1000}),
                ("no-type", {"delay_ms": 1000}),
                ("no-delay", {"type": "fixed"}),
                ("delay-above-max", {"type": "fixed", "delay_ms": limits.MAX_BACKOFF_DELAY_MS + 1}),
                ("delay-negative", {"type": "exponential", "delay_ms": -1}),
                ("delay-float", {"type": "fixed", "delay_ms": 1.5}),
                ("unknown-field", {"type": "fixed", "delay_ms": 1000, "jitter": True}),
            ],
        },
    ),
    *field_cases(
        "lease",
        {
            "worker": required(bad_names()),
            "lease_ms": not_null(LEASE_MS),
            "max_jobs": not_null(ints(1, limits.MAX_JOBS_PER_LEASE)),
            "wait_ms": not_null(ints(0, limits.MAX_WAIT_MS)),
        },
    ),
    *field_cases("heartbeat", {"lease_id": LEASE_IDS, "lease_ms": LEASE_MS}),  # null: the lease's own
    *field_cases("ack", {"lease_id": LEASE_IDS, "lease_next": LEASE_NEXTS}),
    *field_cases("ack_many", {"lease_next": LEASE_NEXTS}),
    *field_cases("release", {"lease_id": LEASE_IDS}),
    # null is a value: back to the queue's group_max_in_flight
    *field_cases(
        "set_group", {"max_in_flight": [*ints(1, limits.MAX_GROUP_MAX_IN_FLIGHT), ("missing", ...)]}
    ),
    *field_cases(
        "fail",
        {
            "lease_id": LEASE_IDS,
            "error": required(
                [
                    ("int", 5),
                    ("list", ["boom"]),
                    (f"{MAX_ERROR + 1}-ascii-bytes", "e" * (MAX_ERROR + 1)),
                    # Under 8 KiB in characters, over it in UTF-8 bytes: the limit is on bytes.
                    ("2-byte-chars-over-8KiB", "é" * (MAX_ERROR // 2 + 1)),
                    ("3-byte-chars-over-8KiB", "€" * (MAX_ERROR // 3 + 1)),
                    ("4-byte-chars-over-8KiB", "😀" * (MAX_ERROR // 4 + 1)),
                ]
            ),
            "retry": not_null([("string", "yes"), ("int", 1), ("object", {})]),
            "retry_after_ms": ints(0, limits.MAX_DELAY_MS),  # null: the job's backoff
        },
    ),
    *field_cases(
        "session_heartbeat",
        {
            "ttl_ms": not_null(ints(limits.MIN_SESSION_TTL_MS, limits.MAX_SESSION_TTL_MS)),
            "info": [
                ("null", None),
                ("string", "host-1"),
                ("int", 5),
                ("list", [{"host": "h"}]),
                ("over-4KiB", {"host": "h" * limits.MAX_SESSION_INFO_BYTES}),
                ("nested-65", {"a": NESTED_65}),
            ],
        },
    ),
    *field_cases(
        "redrive",
        {
            "ids": [
                ("string", DEAD),
                ("object", {}),
                ("ints", [1]),
                ("null-item", [None]),
                *((f"item-{label}", [DEAD, name]) for label, name in BAD_BODY_NAMES.items()),
                (f"{limits.MAX_BATCH + 1}-ids", [DEAD] * (limits.MAX_BATCH + 1)),
            ],
        },
    ),
    *field_cases(
        "put_schedule",
        {
            "every_ms": ints(limits.MIN_EVERY_MS, limits.MAX_EVERY_MS),
            "cron": [("int", 5), ("empty", ""), ("4-fields", "* * * *"), ("bad-minute", "60 * * * *")],
            "timezone": not_null(
                [
                    ("int", 1),
                    ("unknown", "Nowhere/City"),
                    ("path", "../../etc/passwd"),
                    ("leap-seconds-copy", "right/UTC"),
                    ("posix-copy", "posix/Europe/Berlin"),
                    ("host-zone", "localtime"),
                    ("placeholder", "Factory"),
                ]
            ),
            "start_at": ints(0, limits.MAX_EPOCH_MS),
            "end_at": ints(0, limits.MAX_EPOCH_MS),
            "limit": ints(1, limits.MAX_SCHEDULE_LIMIT),
            "overlap": not_null([("unknown", "queue"), ("int", 1)]),
            "paused": not_null([("string", "yes"), ("int", 1)]),
            "job": required(
                [
                    ("int", 1),
                    ("no-payload", {}),
                    ("with-id", {"payload": 1, "id": "x"}),
                    ("with-delay", {"payload": 1, "delay_ms": 5}),
                    ("bad-group", {"payload": 1, "group": "a:b"}),
                    ("priority-1001", {"payload": 1, "priority": 1001}),
                    ("nested-65", {"payload": NESTED_65}),
                ]
            ),
        },
    ),
    *field_cases(
        "put_settings",
        {
            "max_in_flight": ints(1, limits.MAX_IN_FLIGHT_CAP),
            "group_max_in_flight": ints(1, limits.MAX_IN_FLIGHT_CAP),
            "max_stalls": ints(0, limits.MAX_STALLS),
            "completed_retention_s": ints(0, limits.MAX_RETENTION_S),
            "failed_retention_s": ints(0, limits.MAX_RETENTION_S),
            "events": not_null([("string", "off"), ("int", 0), ("object", {})]),
            "rate_limit": [
                ("int", 5),
                ("string", "5/1000"),
                ("no-max", {"per_ms": 1000}),
                ("no-per_ms", {"max": 5}),
                ("unknown-field", {"max": 5, "per_ms": 1000, "burst": 2}),
                *(
                    (f"max-{label}", {"max": value, "per_ms": 1000})
                    for label, value in ints(1, limits.MAX_RATE_JOBS)
                ),
                *(
                    (f"per_ms-{label}", {"max": 5, "per_ms": value})
                    for label, value in ints(limits.MIN_RATE_PER_MS, limits.MAX_RATE_PER_MS)
                ),
            ],
        },
    ),
]


# --- batches: sizes outside 1..1000, and one bad item among good ones rejects the whole batch ---


def batch_cases() -> list[Case]:
    many, acks = ENDPOINTS["enqueue_many"].url(), ENDPOINTS["ack_many"].url()
    beats = ENDPOINTS["heartbeat_many"].url()
    job = {"payload": 1}
    ack = {"id": HELD, "lease_id": LEASE}
    beat = {"id": HELD, "lease_id": LEASE}
    cases = [
        Case("enqueue_many-0-jobs", "POST", many, {"jobs": []}, hint="$.jobs"),
        Case("enqueue_many-1001-jobs", "POST", many, {"jobs": [job] * 1001}, hint="$.jobs"),
        Case("enqueue_many-jobs-missing", "POST", many, {}, hint="jobs"),
        Case("enqueue_many-jobs-null", "POST", many, {"jobs": None}, hint="$.jobs"),
        Case("enqueue_many-jobs-object", "POST", many, {"jobs": job}, hint="$.jobs"),
        Case("enqueue_many-item-not-object", "POST", many, {"jobs": [job, 1]}, hint="$.jobs[1]"),
        Case(
            "enqueue_many-item-unknown-field",
            "POST",
            many,
            {"jobs": [job, {**job, "bogus": 1}]},
            hint="$.jobs[1]",
        ),
        Case("ack_many-0-acks", "POST", acks, {"acks": []}, hint="$.acks"),
        Case("ack_many-1001-acks", "POST", acks, {"acks": [ack] * 1001}, hint="$.acks"),
        Case("ack_many-acks-missing", "POST", acks, {}, hint="acks"),
        Case("ack_many-acks-null", "POST", acks, {"acks": None}, hint="$.acks"),
        Case("ack_many-item-no-lease-id", "POST", acks, {"acks": [ack, {"id": HELD}]}, hint="lease_id"),
        Case("ack_many-item-no-id", "POST", acks, {"acks": [ack, {"lease_id": LEASE}]}, hint="`id`"),
        Case("ack_many-item-unknown-field", "POST", acks, {"acks": [{**ack, "bogus": 1}]}, hint="bogus"),
        Case("heartbeat_many-0-leases", "POST", beats, {"leases": []}, hint="$.leases"),
        Case("heartbeat_many-1001-leases", "POST", beats, {"leases": [beat] * 1001}, hint="$.leases"),
        Case("heartbeat_many-leases-missing", "POST", beats, {}, hint="leases"),
        Case("heartbeat_many-leases-null", "POST", beats, {"leases": None}, hint="$.leases"),
        Case("heartbeat_many-leases-object", "POST", beats, {"leases": beat}, hint="$.leases"),
        Case(
            "heartbeat_many-item-no-lease-id",
            "POST",
            beats,
            {"leases": [beat, {"id": HELD}]},
            hint="lease_id",
        ),
        Case(
            "heartbeat_many-item-no-id", "POST", beats, {"leases": [beat, {"lease_id": LEASE}]}, hint="`id`"
        ),
        Case(
            "heartbeat_many-item-progress-too-large",
            "POST",
            beats,
            {"leases": [{**beat, "progress": "x" * limits.MAX_PROGRESS_BYTES}]},
            hint="progress",
        ),
        Case(
            "heartbeat_many-item-progress-too-deep",
            "POST",
            beats,
            {"leases": [{**beat, "progress": NESTED_65}]},
            hint="nested",
        ),
    ]
    # Only the 500th item (index 499) is bad. Were the rest stored, 999 new jobs would show.
    for label, bad in [
        ("priority-1001", {"priority": 1001}),
        ("max_attempts-0", {"max_attempts": 0}),
        ("delay_ms-negative", {"delay_ms": -1}),
        ("no-payload", {"payload": ...}),
        *((f"id-{k}", {"id": v}) for k, v in BAD_BODY_NAMES.items()),
    ]:
        items: list[Any] = [{"payload": i} for i in range(1000)]
        items[499] = {key: value for key, value in {**items[499], **bad}.items() if value is not ...}
        cases.append(
            Case(f"enqueue_many-item-500-{label}", "POST", many, {"jobs": items}, hint="$.jobs[499]")
        )
    # The first ack is the real one: were the batch applied, the seeded job would be completed.
    for label, bad in [
        ("lease_id-empty", {"lease_id": ""}),
        ("lease_id-int", {"lease_id": 7}),
        *((f"id-{k}", {"id": v}) for k, v in BAD_BODY_NAMES.items()),
    ]:
        items = [ack] + [{"id": f"other-{i}", "lease_id": WRONG_LEASE} for i in range(1, 1000)]
        items[499] = {**items[499], **bad}
        cases.append(Case(f"ack_many-item-500-{label}", "POST", acks, {"acks": items}, hint="$.acks[499]"))
    # The first lease is the real one: were the batch applied, the seeded lease would be renewed.
    for label, bad in [
        ("lease_id-empty", {"lease_id": ""}),
        ("lease_id-null", {"lease_id": None}),
        *((f"lease_ms-{k}", {"lease_ms": v}) for k, v in LEASE_MS),
        *((f"id-{k}", {"id": v}) for k, v in BAD_BODY_NAMES.items()),
    ]:
        leases = [beat] + [{"id": f"other-{i}", "lease_id": WRONG_LEASE} for i in range(1, 1000)]
        leases[499] = {**leases[499], **bad}
        cases.append(
            Case(f"heartbeat_many-item-500-{label}", "POST", beats, {"leases": leases}, hint="$.leases[499]")
        )
    return cases


# --- any-JSON fields (payload, result) pass through raw, but must still be JSON ---


def raw_json_cases() -> list[Case]:
    enqueue, many = ENDPOINTS["enqueue"].url(), ENDPOINTS["enqueue_many"].url()
    ack, acks = ENDPOINTS["ack"].url(), ENDPOINTS["ack_many"].url()
    raw = [
        ("enqueue-payload-deeply-nested", enqueue, b'{"payload": ' + DEEP + b"}"),
        (
            "enqueue-whole-float-and-deeply-nested-payload",
            enqueue,
            b'{"priority": 1.0, "payload": ' + DEEP + b"}",
        ),
        ("enqueue_many-payload-deeply-nested", many, b'{"jobs": [{"payload": ' + DEEP + b"}]}"),
        ("ack-result-deeply-nested", ack, b'{"lease_id": "$LEASE", "result": ' + DEEP + b"}"),
        (
            "ack_many-result-deeply-nested",
            acks,
            b'{"acks": [{"id": "held-1", "lease_id": "$LEASE", "result": ' + DEEP + b"}]}",
        ),
        ("enqueue-payload-invalid-utf8", enqueue, b'{"payload": "\xff"}'),
        ("enqueue_many-payload-invalid-utf8", many, b'{"jobs": [{"payload": {"k": "\xc3("}}]}'),
        ("ack-result-invalid-utf8", ack, b'{"lease_id": "$LEASE", "result": "\xc3"}'),
        (
            "ack_many-result-invalid-utf8",
            acks,
            b'{"acks": [{"id": "held-1", "lease_id": "$LEASE", "result": "\xc3"}]}',
        ),
        ("enqueue-payload-nan", enqueue, b'{"payload": NaN}'),
        ("enqueue_many-payload-beyond-a-double", many, b'{"jobs": [{"payload": [1e999]}]}'),
        (
            "ack_many-result-beyond-a-double",
            acks,
            b'{"acks": [{"id": "held-1", "lease_id": "$LEASE", "result": {"n": -1e400}}]}',
        ),
        ("enqueue-payload-unquoted-key", enqueue, b'{"payload": {a: 1}}'),
        ("enqueue-payload-single-quotes", enqueue, b"{\"payload\": 'x'}"),
        ("enqueue-payload-truncated", enqueue, b'{"payload": {"a": [1, 2}'),
        ("ack-result-trailing-comma", ack, b'{"lease_id": "$LEASE", "result": [1, 2,]}'),
    ]
    return [Case(label, "POST", url, body, hint="request body") for label, url, body in raw]


# --- names in the path ---


def path_name_cases() -> list[Case]:
    """A bad queue, job id or worker in the path is a 400 on every endpoint that takes one."""
    cases = []
    for label, name in BAD_NAMES.items():
        encoded = quote(name, safe="")
        for endpoint in QUEUE_ENDPOINTS:
            e = ENDPOINTS[endpoint]
            cases.append(e.case(f"{endpoint}-path-queue-{label}", hint="queue name", queue=encoded))
        for endpoint in JOB_ENDPOINTS:
            e = ENDPOINTS[endpoint]
            cases.append(e.case(f"{endpoint}-path-job-{label}", hint="job id", job=encoded))
        for endpoint in WORKER_ENDPOINTS:
            e = ENDPOINTS[endpoint]
            cases.append(e.case(f"{endpoint}-path-worker-{label}", hint="worker", worker=encoded))
        e = ENDPOINTS["set_group"]
        cases.append(e.case(f"set_group-path-group-{label}", hint="group", group=encoded))
        for endpoint in SCHEDULE_ENDPOINTS:
            e = ENDPOINTS[endpoint]
            cases.append(e.case(f"{endpoint}-path-schedule-{label}", hint="schedule name", schedule=encoded))
    # An empty or slash-containing name never reaches a handler as a name, but must not be answered
    # as some other request either (e.g. /v1/queues//active as the queue named "active").
    # (GET /v1/queues/ is the queue list with a trailing slash, a fine answer: not a case.)
    for label, name in (("empty", ""), ("slash", "a%2Fb")):
        for endpoint in QUEUE_ENDPOINTS:
            if not (endpoint == "get_queue" and name == ""):
                e = ENDPOINTS[endpoint]
                cases.append(e.case(f"{endpoint}-path-queue-{label}", status=ROUTING_4XX, queue=name))
        for endpoint in JOB_ENDPOINTS:
            e = ENDPOINTS[endpoint]
            cases.append(e.case(f"{endpoint}-path-job-{label}", status=ROUTING_4XX, job=name))
        for endpoint in WORKER_ENDPOINTS:
            e = ENDPOINTS[endpoint]
            cases.append(e.case(f"{endpoint}-path-worker-{label}", status=ROUTING_4XX, worker=name))
        e = ENDPOINTS["set_group"]
        cases.append(e.case(f"set_group-path-group-{label}", status=ROUTING_4XX, group=name))
        for endpoint in SCHEDULE_ENDPOINTS:
            if not (endpoint == "get_schedule" and name == ""):  # the listing, with a trailing slash
                e = ENDPOINTS[endpoint]
                cases.append(e.case(f"{endpoint}-path-schedule-{label}", status=ROUTING_4XX, schedule=name))
    # A name holding an encoded '/' must not be routed as the rest of another path: the queue named
    # "<q>/jobs/waiting-1" is a bad name, not job waiting-1 of queue <q>.
    smuggled = {"job-path": f"{QUEUE}%2Fjobs%2F{WAITING}", "pause": f"{QUEUE}%2Fpause"}
    return [
        *cases,
        ENDPOINTS["get_queue"].case(
            "GET-queue-name-smuggling-a-job-path", status=ROUTING_4XX, queue=smuggled["job-path"]
        ),
        Case(
            "DELETE-queue-name-smuggling-a-job-path",
            "DELETE",
            f"/v1/queues/{smuggled['job-path']}",
            status=ROUTING_4XX,
        ),
        Case(
            "POST-queue-name-smuggling-pause", "POST", f"/v1/queues/{smuggled['pause']}", status=ROUTING_4XX
        ),
    ]


# --- query parameters ---


def query_cases() -> list[Case]:
    bad_ints = [
        ("0", "0"),
        ("abc", "abc"),
        ("float", "1.5"),
        ("negative", "-1"),
        ("empty", ""),
        ("exponent", "1e3"),
        ("huge", "9" * 30),
        ("hex", "0x10"),
        # Python's int() takes these; an HTTP API must not read them as numbers.
        ("underscore", "1_0"),
        ("arabic-indic-digit", quote("\u0661")),
        ("spaces", "%205%20"),
        ("fullwidth-digit", quote("\uff15")),
    ]
    cases = []
    for name, high in (
        ("ledger", limits.MAX_LEDGER_PAGE),
        ("failed", limits.MAX_PAGE),
        ("list_jobs", limits.MAX_PAGE),
        ("list_groups", limits.MAX_PAGE),
    ):
        path = ENDPOINTS[name].url()
        sep = "&" if "?" in path else "?"
        for label, value in [*bad_ints, (f"above-{high}", str(high + 1))]:
            cases.append(Case(f"{name}-limit-{label}", "GET", f"{path}{sep}limit={value}", hint="limit"))
        if name in ("list_jobs", "list_groups"):
            continue
        for label, value in [
            ("negative", "-1"),
            ("abc", "abc"),
            ("float", "0.5"),
            ("empty", ""),
            ("underscore", "1_0"),
            ("above-2^31", str(2**31 + 1)),
        ]:
            cases.append(Case(f"{name}-offset-{label}", "GET", f"{path}?offset={value}", hint="offset"))
    return [*cases, *list_jobs_cases(), *flag_and_worker_cases(), *repeated_query_cases()]


def repeated_query_cases() -> list[Case]:
    """A query parameter given twice is refused on every route, even one it does not read and
    with the endpoint's valid body: the answer would otherwise depend on which one the parser
    keeps."""
    cases = []
    for name, endpoint in ENDPOINTS.items():
        body = endpoint.body if endpoint.method != "GET" else None
        path = endpoint.url()
        sep = "&" if "?" in path else "?"
        for label, query in (("unread", "echo=1&echo=2"), ("blank", "echo=&echo=2")):
            cases.append(
                Case(
                    f"{name}-query-{label}-repeated",
                    endpoint.method,
                    f"{path}{sep}{query}",
                    body,
                    hint="echo",
                )
            )
    bare = ENDPOINTS["list_jobs"].url().split("?")[0]
    for name, path, query in (
        ("list_jobs-state", bare, "state=failed&state=waiting"),
        ("list_jobs-limit", ENDPOINTS["list_jobs"].url(), "limit=1&limit=1000"),
        ("ledger-limit", ENDPOINTS["ledger"].url(), "limit=1&limit=1000"),
        ("failed-offset", ENDPOINTS["failed"].url(), "offset=0&offset=1"),
        ("get_job-wait_ms", ENDPOINTS["get_job"].url(), "wait_ms=0&wait_ms=1000"),
        ("delete_queue-force", ENDPOINTS["delete_queue"].url(), "force=false&force=true"),
    ):
        method = "DELETE" if name.startswith("delete") else "GET"
        sep = "&" if "?" in path else "?"
        hint = name.split("-")[1]
        cases.append(Case(f"{name}-repeated", method, f"{path}{sep}{query}", hint=f"parameter {hint}"))
    return cases


def list_jobs_cases() -> list[Case]:
    """The listing's state (required, one of the states) and cursor (one the service gave)."""
    path = ENDPOINTS["list_jobs"].url().split("?")[0]
    cases = [
        Case(f"list_jobs-state-{label}", "GET", path + query, hint="state")
        for label, query in (
            ("missing", ""),
            ("empty", "?state="),
            ("unknown", "?state=dead"),
            ("upper", "?state=FAILED"),
        )
    ]
    garbage = {
        "not-base64": "!!!",
        "not-json": "bm90IGpzb24",  # "not json"
        "empty-array": "W10",  # []
        "other-state": "WyJ3YWl0aW5nIiwieiIsIjEiLCJhIl0",  # ["waiting","z","1","a"]
        "bad-score": "WyJmYWlsZWQiLCJ6IiwiKDEiLCJhIl0",  # ["failed","z","(1","a"]
        "bad-id": "WyJmYWlsZWQiLCJ6IiwiMSIsImE6YiJd",  # ["failed","z","1","a:b"]
        "too-long": "A" * (limits.MAX_CURSOR_CHARS + 1),
    }
    for label, cursor in garbage.items():
        cases.append(
            Case(f"list_jobs-cursor-{label}", "GET", f"{path}?state=failed&cursor={cursor}", hint="cursor")
        )
    return cases


def flag_and_worker_cases() -> list[Case]:
    cases = []
    for label, value in (("yes", "yes"), ("one", "1"), ("empty", ""), ("upper", "TRUE")):
        path = ENDPOINTS["delete_queue"].url()
        cases.append(Case(f"delete_queue-force-{label}", "DELETE", f"{path}?force={value}", hint="force"))
    for label, value in BAD_BODY_NAMES.items():
        cases.append(
            Case(
                f"list_groups-cursor-{label}",
                "GET",
                f"{ENDPOINTS['list_groups'].url()}?cursor={quote(value, safe='')}",
                hint="cursor",
            )
        )
        cases.append(
            Case(
                f"ledger-worker-{label}",
                "GET",
                f"{ENDPOINTS['ledger'].url()}?worker={quote(value, safe='')}",
                hint="worker",
            )
        )
    return cases


# --- unknown paths and wrong methods: problem+json too, not the framework's default page ---


def routing_cases() -> list[Case]:
    not_found = [
        ("GET", "/v1/nope"),
        ("GET", "/v2/queues"),
        ("GET", f"{Q}/nope"),
        ("POST", f"{JOB}/nope"),
        ("POST", f"{JOB}/ack/extra"),
        ("GET", "/v1"),
        ("GET", "/nope"),
    ]
    wrong_method = [
        ("PUT", f"{Q}/jobs"),
        ("DELETE", f"{Q}/jobs"),
        ("DELETE", "/v1/queues"),
        ("POST", "/v1/queues"),
        ("PUT", Q),
        ("GET", f"{Q}/lease"),
        ("GET", f"{Q}/enqueue"),
        ("GET", f"{Q}/ack"),
        ("GET", f"{Q}/heartbeat"),
        ("PATCH", JOB),
        ("POST", JOB),
        ("PUT", JOB),
        ("GET", f"{JOB}/heartbeat"),
        ("GET", f"{JOB}/ack"),
        ("DELETE", f"{JOB}/fail"),
        ("GET", f"{JOB}/release"),
        ("POST", f"{Q}/active"),
        ("DELETE", f"{Q}/workers"),
        ("PUT", f"{Q}/failed"),
        ("GET", f"{Q}/workers/{HOLDER}/release"),
        ("GET", f"{Q}/pause"),
        ("DELETE", f"{Q}/resume"),
        ("GET", f"{Q}/failed/retry"),
    ]
    return [
        *(
            Case(f"unknown-path-{path_id(method, path)}", method, path, status=404, hint="not found")
            for method, path in not_found
        ),
        *(
            Case(f"wrong-method-{path_id(method, path)}", method, path, status=405, hint="method")
            for method, path in wrong_method
        ),
    ]


# --- well-formed requests the job's state refuses: 404 / 409, and still nothing changes ---


def domain_cases() -> list[Case]:
    cases = []
    for call in ("heartbeat", "ack", "fail", "release"):
        e = ENDPOINTS[call]
        cases += [
            e.case(f"{call}-missing-job", status=404, code="job_not_found", hint="nope-1", job="nope-1"),
            e.case(f"{call}-wrong-lease", {**e.body, "lease_id": WRONG_LEASE}, 409, "lease_lost", "lease"),
        ]
        # A lease id is good only on the job it was given for, and only while that job is leased.
        for other in (WAITING, LATER, DEAD):
            cases.append(
                e.case(f"{call}-lease-on-{other}", status=409, code="lease_lost", hint="lease", job=other)
            )
    # A failed ack leases nothing for its lease_next: the waiting job stays waiting.
    e, lease_next = ENDPOINTS["ack"], {"worker": "w2", "max_jobs": 10}
    cases += [
        e.case(
            "ack-missing-job-with-lease_next",
            {**e.body, "lease_next": lease_next},
            404,
            "job_not_found",
            "nope-1",
            job="nope-1",
        ),
        e.case(
            "ack-wrong-lease-with-lease_next",
            {"lease_id": WRONG_LEASE, "lease_next": lease_next},
            409,
            "lease_lost",
            "lease",
        ),
    ]
    # A flow: the same job twice, a parent on a node, an unknown policy, too deep, too many.
    e = ENDPOINTS["create_flow"]
    leaf = {"queue": QUEUE, "payload": 1, "id": "twice"}
    deep: dict[str, Any] = {"queue": QUEUE, "payload": 1}
    for _ in range(10):
        deep = {"queue": QUEUE, "payload": 1, "children": [deep]}
    cases += [
        e.case(
            "create_flow-same-job-twice",
            {"job": {"queue": QUEUE, "payload": 0, "children": [leaf, leaf]}},
            hint="twice",
        ),
        e.case(
            "create_flow-parent-on-a-node",
            {"job": {**leaf, "parent": {"queue": QUEUE, "id": HELD}}},
            hint="parent",
        ),
        e.case("create_flow-unknown-policy", {"job": {**leaf, "on_failure": "retry"}}, hint="on_failure"),
        e.case("create_flow-11-levels", {"job": deep}, hint="levels"),
        e.case(
            "create_flow-1001-jobs",
            {"job": {"queue": QUEUE, "payload": 0, "children": [{"queue": QUEUE, "payload": 1}] * 1000}},
            hint="1000",
        ),
        e.case(
            "create_flow-id-of-another-job",
            {"job": {"queue": QUEUE, "payload": 0, "children": [{"queue": QUEUE, "payload": 1, "id": HELD}]}},
            409,
            "job_exists",
            HELD,
        ),
    ]
    for call in ("get_job", "delete_job", "list_children"):
        e = ENDPOINTS[call]
        cases.append(
            e.case(f"{call}-missing-job", status=404, code="job_not_found", hint="nope-1", job="nope-1")
        )
    cases.append(
        ENDPOINTS["delete_job"].case("delete_job-leased", status=409, code="job_active", hint="leased")
    )
    # The seeded worker has no session: quieting it is refused, and changes nothing.
    cases.append(ENDPOINTS["quiet"].case("quiet-no-session", status=409, code="no_session", hint="session"))
    return cases


CASES: list[Case] = [
    *body_syntax_cases(),
    *FIELD_CASES,
    *batch_cases(),
    *raw_json_cases(),
    *path_name_cases(),
    *query_cases(),
    *routing_cases(),
    *domain_cases(),
]
assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"

ANSWERED: dict[str, int] = {}  # case id -> status answered, for the final no-5xx check


# --------------------------------------------------------------------------------------------
# The table-driven test
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
async def test_bad_input_is_a_clear_4xx_and_changes_nothing(
    client: httpx.AsyncClient, redis_client: AsyncRedis, world: World, case: Case
) -> None:
    before = await snapshot(client, redis_client, world)
    response = await send(client, world, case)
    ANSWERED[case.id] = response.status_code
    assert_problem(response, case.status, case.code, case.hint)
    assert await snapshot(client, redis_client, world) == before, "the bad request changed stored state"
    await assert_lease_still_works(client, world)


# --------------------------------------------------------------------------------------------
# The limits themselves are allowed: the rejections above are about range, not blanket refusals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """A request at the limits and its answer, with the wall clock (ms) around it."""

    world: World
    body: Any
    answer: httpx.Response
    sent_ms: int
    answered_ms: int

    def expires_as_asked(self, expires_at_ms: int, lease_ms: int) -> bool:
        """A lease deadline of lease_ms from the moment the service handled the request."""
        return self.sent_ms + lease_ms - CLOCK_SLACK_MS <= expires_at_ms <= self.answered_ms + lease_ms


CLOCK_SLACK_MS = 1  # the service's clock (Redis TIME) and this one round to the millisecond apart
INT_FIELDS = ("priority", "max_attempts")


def epoch_ms() -> int:
    return int(time.time() * 1000)


async def job_view(client: httpx.AsyncClient, world: World, job_id: str) -> dict[str, Any]:
    return ok(await client.get(f"/v1/queues/{world.queue}/jobs/{job_id}"))


async def stored_as_sent(client: httpx.AsyncClient, x: Exchange) -> None:
    """A new job, stored with every value sent (whole floats as the integers they are)."""
    created = x.answer.json()
    state = "delayed" if x.body.get("delay_ms") else "waiting"
    job_id = x.body.get("id", created["id"])
    assert created == {"id": job_id, "queue": x.world.queue, "state": state, "created": True}
    view = await job_view(client, x.world, job_id)
    assert view["payload"] == x.body["payload"] and view["state"] == state
    assert view["name"] == x.body.get("name")
    for field in INT_FIELDS:
        if field in x.body:
            assert view[field] == x.body[field] and isinstance(view[field], int), (field, view)


async def all_stored(client: httpx.AsyncClient, x: Exchange) -> None:
    """One new waiting job per item, in order, each with an id of its own."""
    jobs = x.answer.json()["jobs"]
    assert len(jobs) == len(x.body["jobs"])
    assert all(job == {**job, "queue": x.world.queue, "state": "waiting", "created": True} for job in jobs)
    assert len({job["id"] for job in jobs}) == len(jobs)
    counts = ok(await client.get(f"/v1/queues/{x.world.queue}"))["counts"]
    assert counts["waiting"] == 1 + len(jobs)  # the seeded waiting job, and these


async def leased_the_waiting_job(client: httpx.AsyncClient, x: Exchange) -> None:
    (job,) = x.answer.json()["jobs"]  # the one leasable job of the world, whatever max_jobs says
    assert (job["id"], job["queue"], job["attempt"]) == (WAITING, x.world.queue, 1)
    assert x.expires_as_asked(job["lease_expires_at"], x.body.get("lease_ms", limits.DEFAULT_LEASE_MS))
    view = await job_view(client, x.world, WAITING)
    assert (view["state"], view["worker"]) == ("active", x.body["worker"])


async def lease_renewed(client: httpx.AsyncClient, x: Exchange) -> None:
    beat = x.answer.json()
    assert (beat["id"], beat["lease_id"]) == (HELD, x.world.lease_id)
    lease_ms = x.body.get("lease_ms") or SEED_LEASE_MS  # null: the lease's own length
    assert x.expires_as_asked(beat["lease_expires_at"], lease_ms), beat
    assert (await job_view(client, x.world, HELD))["lease_expires_at"] == beat["lease_expires_at"]


async def retry_delayed(client: httpx.AsyncClient, x: Exchange) -> None:
    assert x.answer.json() == {"id": HELD, "state": "delayed", "attempt": 1}
    view = await job_view(client, x.world, HELD)
    assert (view["state"], view["error"]) == ("delayed", x.body["error"])  # the whole 8 KiB kept


async def first_acked_rest_not_found(client: httpx.AsyncClient, x: Exchange) -> None:
    results = x.answer.json()["results"]
    assert results[0] == {"id": HELD, "ok": True, "state": "completed"}
    others = [{"id": item["id"], "ok": False, "code": "job_not_found"} for item in x.body["acks"][1:]]
    assert results[1:] == others
    assert (await job_view(client, x.world, HELD))["state"] == "completed"


async def dead_letter_retried(client: httpx.AsyncClient, x: Exchange) -> None:
    assert x.answer.json() == {"retried": [DEAD]}  # once, however often it is named
    view = await job_view(client, x.world, DEAD)
    assert view["state"] == "waiting"


async def first_renewed_rest_not_found(client: httpx.AsyncClient, x: Exchange) -> None:
    first, *rest = x.answer.json()["results"]
    assert (first["id"], first["ok"], first["lease_id"]) == (HELD, True, x.world.lease_id)
    assert first["cancel_requested"] is False
    assert x.expires_as_asked(first["lease_expires_at"], SEED_LEASE_MS)
    assert rest == [{"id": item["id"], "ok": False, "code": "job_not_found"} for item in x.body["leases"][1:]]


async def renewed_as_asked_in_order(client: httpx.AsyncClient, x: Exchange) -> None:
    """Each item renews the lease in turn: the last one sent sets the deadline."""
    results = x.answer.json()["results"]
    assert [(r["id"], r["ok"]) for r in results] == [(HELD, True)] * len(x.body["leases"])
    for result, item in zip(results, x.body["leases"], strict=True):
        assert x.expires_as_asked(result["lease_expires_at"], item["lease_ms"] or SEED_LEASE_MS)
    view = await job_view(client, x.world, HELD)
    assert view["lease_expires_at"] == results[-1]["lease_expires_at"]


async def acked_and_next_leased(client: httpx.AsyncClient, x: Exchange) -> None:
    """The held job completed, and the one leasable job went to lease_next's worker."""
    answer = x.answer.json()
    if "results" in answer:
        assert answer["results"] == [{"id": HELD, "ok": True, "state": "completed"}]
    else:
        assert (answer["id"], answer["state"]) == (HELD, "completed")
    (job,) = answer["jobs"]
    assert (job["id"], job["attempt"]) == (WAITING, 1)
    assert x.expires_as_asked(job["lease_expires_at"], int(x.body["lease_next"]["lease_ms"]))
    assert (await job_view(client, x.world, HELD))["state"] == "completed"
    view = await job_view(client, x.world, WAITING)
    assert (view["state"], view["worker"]) == ("active", x.body["lease_next"]["worker"])


async def acked_nothing_leased(client: httpx.AsyncClient, x: Exchange) -> None:
    assert x.answer.json() == {"id": HELD, "state": "completed"}  # no jobs field without lease_next
    assert (await job_view(client, x.world, HELD))["state"] == "completed"
    assert (await job_view(client, x.world, WAITING))["state"] == "waiting"


Check = Callable[[httpx.AsyncClient, Exchange], Awaitable[None]]
EDGE_BODIES: list[tuple[str, str, Any, int, Check]] = [
    ("enqueue-priority-0", "enqueue", {"payload": 1, "priority": 0}, 201, stored_as_sent),
    (
        "enqueue-priority-1000",
        "enqueue",
        {"payload": 1, "priority": limits.MAX_PRIORITY},
        201,
        stored_as_sent,
    ),
    ("enqueue-max_attempts-1", "enqueue", {"payload": 1, "max_attempts": 1}, 201, stored_as_sent),
    (
        "enqueue-max_attempts-1000",
        "enqueue",
        {"payload": 1, "max_attempts": limits.MAX_ATTEMPTS},
        201,
        stored_as_sent,
    ),
    (
        "enqueue-delay-30-days",
        "enqueue",
        {"payload": 1, "delay_ms": limits.MAX_DELAY_MS},
        201,
        stored_as_sent,
    ),
    (
        "enqueue-backoff-1-day",
        "enqueue",
        {"payload": 1, "backoff": {"type": "fixed", "delay_ms": limits.MAX_BACKOFF_DELAY_MS}},
        201,
        stored_as_sent,
    ),
    ("enqueue-id-128-chars", "enqueue", {"payload": 1, "id": "i" * 128}, 201, stored_as_sent),
    ("enqueue-name-128-chars", "enqueue", {"payload": 1, "name": "n" * 128}, 201, stored_as_sent),
    (
        "enqueue_many-1000",
        "enqueue_many",
        {"jobs": [{"payload": i} for i in range(1000)]},
        200,
        all_stored,
    ),
    (
        "lease-edges",
        "lease",
        {
            "worker": "w" * 128,
            "lease_ms": limits.MIN_LEASE_MS,
            "max_jobs": limits.MAX_JOBS_PER_LEASE,
            "wait_ms": 0,
        },
        200,
        leased_the_waiting_job,
    ),
    (
        "lease-max-lease",
        "lease",
        {"worker": "w2", "lease_ms": limits.MAX_LEASE_MS},
        200,
        leased_the_waiting_job,
    ),
    (
        "heartbeat-max-lease",
        "heartbeat",
        {"lease_id": LEASE, "lease_ms": limits.MAX_LEASE_MS},
        200,
        lease_renewed,
    ),
    (
        "heartbeat-min-lease",
        "heartbeat",
        {"lease_id": LEASE, "lease_ms": limits.MIN_LEASE_MS},
        200,
        lease_renewed,
    ),
    ("heartbeat-lease-ms-null", "heartbeat", {"lease_id": LEASE, "lease_ms": None}, 200, lease_renewed),
    # Integral floats are integers (as JSON Schema has it), in range like any other.
    (
        "enqueue-whole-floats",
        "enqueue",
        {"payload": 1.5, "priority": 1000.0, "max_attempts": 1.0},
        201,
        stored_as_sent,
    ),
    (
        "lease-whole-floats",
        "lease",
        {"worker": "w2", "lease_ms": 1000.0, "max_jobs": 100.0},
        200,
        leased_the_waiting_job,
    ),
    (
        "fail-error-8KiB-of-2-byte-chars",
        "fail",
        {"lease_id": LEASE, "error": "é" * (MAX_ERROR // 2), "retry_after_ms": limits.MAX_DELAY_MS},
        200,
        retry_delayed,
    ),
    (
        "ack_many-1000",
        "ack_many",
        {"acks": [{"id": HELD, "lease_id": LEASE}] + [{"id": f"x{i}", "lease_id": "x"} for i in range(999)]},
        200,
        first_acked_rest_not_found,
    ),
    (
        "heartbeat_many-1000",
        "heartbeat_many",
        {
            "leases": [{"id": HELD, "lease_id": LEASE}]
            + [{"id": f"x{i}", "lease_id": "x"} for i in range(999)]
        },
        200,
        first_renewed_rest_not_found,
    ),
    (
        "heartbeat_many-lease-ms-edges",
        "heartbeat_many",
        {
            "leases": [
                {"id": HELD, "lease_id": LEASE, "lease_ms": limits.MIN_LEASE_MS},
                {"id": HELD, "lease_id": LEASE, "lease_ms": None},
                {"id": HELD, "lease_id": LEASE, "lease_ms": limits.MAX_LEASE_MS},
            ]
        },
        200,
        renewed_as_asked_in_order,
    ),
    (
        "ack-lease_next-edges",
        "ack",
        {
            "lease_id": LEASE,
            "lease_next": {
                "worker": "w" * 128,
                "lease_ms": limits.MIN_LEASE_MS,
                "max_jobs": limits.MAX_JOBS_PER_LEASE,
                "wait_ms": 0,
                "request_id": "r" * 128,
            },
        },
        200,
        acked_and_next_leased,
    ),
    ("ack-lease_next-null", "ack", {"lease_id": LEASE, "lease_next": None}, 200, acked_nothing_leased),
    (
        "ack_many-lease_next-whole-floats",
        "ack_many",
        {"acks": [{"id": HELD, "lease_id": LEASE}], "lease_next": {"worker": "w2", "lease_ms": 1000.0}},
        200,
        acked_and_next_leased,
    ),
    ("redrive-empty-body", "redrive", b"", 200, dead_letter_retried),
    ("redrive-1000-ids", "redrive", {"ids": [DEAD] * limits.MAX_BATCH}, 200, dead_letter_retried),
]
# (endpoint, query, the ids of the page: the world has one dead letter and one leased job)
EDGE_QUERIES = [
    ("failed", "?limit=1", [DEAD]),
    ("failed", f"?limit={limits.MAX_PAGE}", [DEAD]),
    ("failed", f"?offset={2**31}", []),
    ("list_jobs", "&limit=1", [DEAD]),
    ("list_jobs", f"&limit={limits.MAX_PAGE}", [DEAD]),
    ("ledger", "?limit=1", [HELD]),
    ("ledger", f"?limit={limits.MAX_LEDGER_PAGE}", [HELD]),
    ("ledger", f"?worker={'w' * 128}", []),  # nobody by that name holds anything
]


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "check"),
    [(e, b, s, c) for _, e, b, s, c in EDGE_BODIES],
    ids=[label for label, *_ in EDGE_BODIES],
)
async def test_values_at_the_limits_are_accepted(
    client: httpx.AsyncClient, world: World, endpoint: str, body: Any, status: int, check: Check
) -> None:
    case = ENDPOINTS[endpoint].case("edge", body)
    content = case.content(world)
    sent_ms = epoch_ms()
    response = await send(client, world, case)
    answered_ms = epoch_ms()
    assert response.status_code == status, response.text
    # Accepted means done as asked: the answer, and what is stored, say so.
    sent = json.loads(content) if content else {}
    await check(client, Exchange(world, sent, response, sent_ms, answered_ms))


@pytest.mark.parametrize(
    ("endpoint", "query", "ids"), EDGE_QUERIES, ids=[f"{e}{q}" for e, q, _ in EDGE_QUERIES]
)
async def test_query_values_at_the_limits_are_accepted(
    client: httpx.AsyncClient, world: World, endpoint: str, query: str, ids: list[str]
) -> None:
    response = await client.get(ENDPOINTS[endpoint].url(queue=world.queue) + query)
    assert response.status_code == 200, response.text
    page = response.json()
    assert [job["id"] for job in page["jobs"]] == ids
    if endpoint == "failed":
        assert page["total"] == 1  # however much of it the page shows


# --------------------------------------------------------------------------------------------
# 413: a body over the configured limit, with or without a Content-Length
# --------------------------------------------------------------------------------------------

SMALL_BODY_LIMIT = 2048
OVERSIZED = "x" * (SMALL_BODY_LIMIT + 100)
OVERSIZED_BODIES: dict[str, Any] = {
    "enqueue": {"payload": OVERSIZED},
    "enqueue_many": {"jobs": [{"payload": "x" * 100}] * 30},
    "lease": {"worker": "w2", "bogus": OVERSIZED},
    "heartbeat": {"lease_id": LEASE, "bogus": OVERSIZED},
    "heartbeat_many": {"leases": [{"id": HELD, "lease_id": LEASE}] * 100},
    "ack": {"lease_id": LEASE, "result": OVERSIZED},
    "ack_many": {"acks": [{"id": HELD, "lease_id": LEASE, "result": OVERSIZED}]},
    "fail": {"lease_id": LEASE, "error": OVERSIZED},  # under 8 KiB: only the body limit is hit
    "release": {"lease_id": LEASE, "bogus": OVERSIZED},
    "redrive": {"ids": [DEAD] * 300},
    "put_settings": {"max_in_flight": 3, "bogus": OVERSIZED},
    "session_heartbeat": {"info": {"host": OVERSIZED}},  # under 4 KiB: only the body limit is hit
    "set_group": {"max_in_flight": 2, "bogus": OVERSIZED},
    "put_schedule": {"every_ms": 60_000, "job": {"payload": OVERSIZED}},
    "create_flow": {"job": {"queue": QUEUE, "payload": OVERSIZED}},
}
assert set(OVERSIZED_BODIES) == set(BODY_ENDPOINTS)


@pytest.fixture(scope="module")
def small_service_url(redis_url: str) -> Iterator[str]:
    """The service with conftest's settings but a 2 KiB body limit, over real HTTP like the rest."""
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
    with running_service(dataclasses.replace(settings, max_body_bytes=SMALL_BODY_LIMIT)) as url:
        yield url


@pytest.fixture
async def small_client(small_service_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(small_service_url) as http:
        yield http


@pytest.fixture
async def small_world(small_client: httpx.AsyncClient, queue: str) -> World:
    return await seed(small_client, queue)


async def in_chunks(content: bytes, size: int = 500) -> AsyncIterator[bytes]:
    """A streamed body: httpx sends it with Transfer-Encoding: chunked and no Content-Length."""
    for start in range(0, len(content), size):
        yield content[start : start + size]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS)
async def test_body_over_the_limit_is_413_and_stores_nothing(
    small_client: httpx.AsyncClient,
    redis_client: AsyncRedis,
    small_world: World,
    endpoint: str,
    chunked: bool,
) -> None:
    e = ENDPOINTS[endpoint]
    content = e.case("oversized", OVERSIZED_BODIES[endpoint]).content(small_world)
    assert content is not None and len(content) > SMALL_BODY_LIMIT
    before = await snapshot(small_client, redis_client, small_world)
    response = await small_client.request(
        e.method,
        e.url(queue=small_world.queue),
        content=in_chunks(content) if chunked else content,
        headers={"content-type": "application/json"},
    )
    assert ("content-length" not in response.request.headers) is chunked
    assert_problem(response, 413, "payload_too_large", "large")
    assert await snapshot(small_client, redis_client, small_world) == before
    await assert_lease_still_works(small_client, small_world)


async def test_body_at_the_limit_is_accepted(small_client: httpx.AsyncClient, queue: str) -> None:
    body = b'{"payload": "' + b"x" * (SMALL_BODY_LIMIT - 15) + b'"}'
    assert len(body) == SMALL_BODY_LIMIT
    response = await small_client.post(
        f"/v1/queues/{queue}/jobs", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 201, response.text


# --------------------------------------------------------------------------------------------
# No case in the whole table produced a 5xx
# --------------------------------------------------------------------------------------------


async def test_no_case_in_the_table_answered_5xx(client: httpx.AsyncClient, world: World) -> None:
    # Normally every case has run above; replay any that has not (e.g. under -k), so this holds alone.
    for case in CASES:
        if case.id not in ANSWERED:
            ANSWERED[case.id] = (await send(client, world, case)).status_code
    server_errors = {case_id: status for case_id, status in ANSWERED.items() if status >= 500}
    assert not server_errors, f"{len(server_errors)} bad-input cases answered 5xx: {server_errors}"
