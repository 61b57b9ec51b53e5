"""Examples in the OpenAPI document: request bodies and answers of the main operations, and one
problem per error code. They tell one story (job order-7 of queue emails, enqueued, leased,
renewed, acked or failed) with the values the service really answers.

tests/http/test_openapi.py validates each against its schema and decodes it into its Struct, so
an example cannot drift from the contract. To add one: an entry under the operation's id in
REQUESTS or RESPONSES (by status), then `make openapi`.
"""

from __future__ import annotations

from typing import Any

from echomq_http.core.errors import problem_type

Example = dict[str, Any]

QUEUE = "emails"
JOB_ID = "order-7"
LEASE_ID = "9f0c3b7ad2e14c6b8a5f0e1d2c3b4a59"
NEXT_LEASE_ID = "4be1d07c9a3f42e8b6c5d4e3f2a1b0c9"
ENQUEUED_AT = 1764403200100
LEASED_AT = 1764403200123
EXPIRES_AT = LEASED_AT + 30_000


def example(summary: str, value: Any) -> Example:
    return {"summary": summary, "value": value}


def leased_job(job_id: str = JOB_ID, lease_id: str = LEASE_ID, fence: int = 42, **fields: Any) -> Example:
    job = {
        "id": job_id,
        "queue": QUEUE,
        "name": "welcome-email",
        "payload": {"to": "ada@example.com", "template": "welcome"},
        "attempt": 1,
        "max_attempts": 5,
        "lease_id": lease_id,
        "lease_expires_at": EXPIRES_AT,
        "fence": fence,
        "enqueued_at": ENQUEUED_AT,
        "traceparent": None,
    }
    return {**job, **fields}


def job_view(**fields: Any) -> Example:
    job = {
        "id": JOB_ID,
        "queue": QUEUE,
        "name": "welcome-email",
        "state": "completed",
        "payload": {"to": "ada@example.com", "template": "welcome"},
        "result": {"message_id": "<20251129.42@mail.example.com>"},
        "error": None,
        "attempt": 1,
        "max_attempts": 5,
        "priority": 0,
        "created_at": ENQUEUED_AT,
        "updated_at": LEASED_AT + 2_480,
        "worker": None,
        "lease_expires_at": None,
        "progress": None,
        "cancel_requested": False,
        "group": None,
        "stalls": 0,
        "schedule": None,
        "finished_at": LEASED_AT + 2_480,
        "run_at": None,
        "delay_reason": None,
    }
    return {**job, **fields}


NEXT_JOB = leased_job("order-8", NEXT_LEASE_ID, 43, name=None, payload={"to": "grace@example.com"})
FAILED_JOB = job_view(
    state="failed",
    result=None,
    error="SMTP 550: mailbox unavailable",
    attempt=2,
    updated_at=LEASED_AT + 61_250,
    finished_at=LEASED_AT + 61_250,
)
NEXT = {"worker": "w1", "wait_ms": 5000, "request_id": "w1-next-118"}

# operationId -> example name -> example of the request body
REQUESTS: dict[str, dict[str, Example]] = {
    "enqueue": {
        "minimal": example(
            "A payload, nothing else: a new random id", {"payload": {"to": "ada@example.com"}}
        ),
        "options": example(
            "Your own id (idempotent), a name, retries with backoff",
            {
                "id": JOB_ID,
                "name": "welcome-email",
                "payload": {"to": "ada@example.com", "template": "welcome"},
                "priority": 10,
                "max_attempts": 5,
                "backoff": {"type": "exponential", "delay_ms": 2000},
            },
        ),
        "delayed": example("Leasable in one minute", {"payload": {"remind": "ada"}, "delay_ms": 60_000}),
    },
    "enqueueMany": {
        "batch": example(
            "Two jobs in one call",
            {
                "jobs": [
                    {"id": JOB_ID, "payload": {"to": "ada@example.com"}},
                    {"id": "order-8", "payload": {"to": "grace@example.com"}, "priority": 5},
                ]
            },
        )
    },
    "lease": {
        "long_poll": example(
            "One job, waiting up to 5 s for one to arrive",
            {"worker": "w1", "lease_ms": 30_000, "wait_ms": 5000},
        ),
        "batch": example(
            "Up to 10 jobs at once, safe to retry (request_id)",
            {"worker": "w1", "max_jobs": 10, "request_id": "w1-lease-117"},
        ),
    },
    "heartbeat": {
        "renew": example("Renew with the lease's own length", {"lease_id": LEASE_ID}),
        "longer": example("Renew for a minute from now", {"lease_id": LEASE_ID, "lease_ms": 60_000}),
    },
    "heartbeatMany": {
        "two": example(
            "Renew two leases",
            {
                "leases": [
                    {"id": JOB_ID, "lease_id": LEASE_ID},
                    {"id": "order-8", "lease_id": NEXT_LEASE_ID, "lease_ms": 60_000},
                ]
            },
        )
    },
    "ack": {
        "result": example(
            "Done, with a result",
            {"lease_id": LEASE_ID, "result": {"message_id": "<20251129.42@mail.example.com>"}},
        ),
        "lease_next": example(
            "Done, and lease the next job in the same call", {"lease_id": LEASE_ID, "lease_next": NEXT}
        ),
    },
    "ackMany": {
        "lease_next": example(
            "Two acks, then lease the next job",
            {
                "acks": [
                    {"id": JOB_ID, "lease_id": LEASE_ID, "result": {"sent": True}},
                    {"id": "order-6", "lease_id": "0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"},
                ],
                "lease_next": NEXT,
            },
        )
    },
    "fail": {
        "retry": example(
            "Failed; retry with the job's backoff",
            {"lease_id": LEASE_ID, "error": "SMTP 451: try again later"},
        ),
        "retry_after": example(
            "Failed; retry in 10 s",
            {"lease_id": LEASE_ID, "error": "rate limited by the SMTP relay", "retry_after_ms": 10_000},
        ),
        "dead_letter": example(
            "Failed for good: dead-letter it now",
            {"lease_id": LEASE_ID, "error": "SMTP 550: mailbox unavailable", "retry": False},
        ),
    },
    "release": {"give_back": example("Give the job back unworked", {"lease_id": LEASE_ID})},
    "redriveFailed": {
        "listed": example("These dead letters only", {"ids": [JOB_ID, "order-9"]}),
        "all": example("Every dead letter (or send no body)", {}),
    },
    "putSchedule": {
        "cron": example(
            "Weekdays at 07:30 in Berlin",
            {
                "cron": "30 7 * * MON-FRI",
                "timezone": "Europe/Berlin",
                "job": {"payload": {"report": "daily-sales"}, "name": "report", "max_attempts": 5},
                "overlap": "skip",
            },
        ),
        "every": example(
            "Every 5 minutes, 100 times",
            {"every_ms": 300_000, "job": {"payload": {"poll": "inbox"}}, "limit": 100},
        ),
    },
}

SCHEDULE_VIEW = {
    "job": {
        "payload": {"report": "daily-sales"},
        "name": "report",
        "priority": 0,
        "max_attempts": 5,
        "backoff": None,
        "group": None,
    },
    "cron": "30 7 * * MON-FRI",
    "every_ms": None,
    "timezone": "Europe/Berlin",
    "start_at": None,
    "end_at": None,
    "limit": None,
    "overlap": "skip",
    "paused": False,
    "schedule": "daily-sales",
    "queue": QUEUE,
    "next_run_at": 1764484200000,
    "last_run_at": 1764397800000,
    "last_job_id": "daily-sales-r1764397800000",
    "runs": 12,
    "skipped": 1,
    "created_at": 1763370000000,
    "updated_at": 1764403200100,
}

COUNTS = {"waiting": 1204, "delayed": 17, "active": 8, "completed": 9876, "failed": 3, "cancelled": 1}

# operationId -> status -> example name -> example of the answer
RESPONSES: dict[str, dict[int, dict[str, Example]]] = {
    "enqueue": {
        201: {
            "created": example(
                "Stored now", {"id": JOB_ID, "queue": QUEUE, "state": "waiting", "created": True}
            )
        },
        200: {
            "existing": example(
                "The id was already kept: nothing changed",
                {"id": JOB_ID, "queue": QUEUE, "state": "active", "created": False},
            )
        },
    },
    "enqueueMany": {
        200: {
            "batch": example(
                "One stored now, one already kept",
                {
                    "jobs": [
                        {"id": JOB_ID, "queue": QUEUE, "state": "completed", "created": False},
                        {"id": "order-8", "queue": QUEUE, "state": "waiting", "created": True},
                    ]
                },
            )
        }
    },
    "lease": {
        200: {
            "one": example("A job leased", {"jobs": [leased_job()]}),
            "none": example("Nothing to lease within wait_ms", {"jobs": []}),
        }
    },
    "heartbeat": {
        200: {
            "renewed": example(
                "The lease's new end",
                {"id": JOB_ID, "lease_id": LEASE_ID, "lease_expires_at": LEASED_AT + 75_000},
            )
        }
    },
    "heartbeatMany": {
        200: {
            "one_lost": example(
                "One renewed, one lost (its lease had expired)",
                {
                    "results": [
                        {
                            "id": JOB_ID,
                            "ok": True,
                            "lease_id": LEASE_ID,
                            "lease_expires_at": LEASED_AT + 45_000,
                            "cancel_requested": False,
                        },
                        {"id": "order-8", "ok": False, "code": "lease_lost"},
                    ]
                },
            )
        }
    },
    "ack": {
        200: {
            "completed": example("Completed", {"id": JOB_ID, "state": "completed"}),
            "lease_next": example(
                "Completed, and the next job leased", {"id": JOB_ID, "state": "completed", "jobs": [NEXT_JOB]}
            ),
        }
    },
    "ackMany": {
        200: {
            "lease_next": example(
                "One completed, one lease lost, and the next job leased",
                {
                    "results": [
                        {"id": JOB_ID, "ok": True, "state": "completed"},
                        {"id": "order-6", "ok": False, "code": "lease_lost"},
                    ],
                    "jobs": [NEXT_JOB],
                },
            )
        }
    },
    "fail": {
        200: {
            "retry": example("Waits out its backoff", {"id": JOB_ID, "state": "delayed", "attempt": 1}),
            "dead_letter": example("Dead-lettered", {"id": JOB_ID, "state": "failed", "attempt": 2}),
        }
    },
    "release": {200: {"released": example("Back in line, first", {"id": JOB_ID, "state": "waiting"})}},
    "promote": {200: {"waiting": example("Waiting now, last in line", {"id": JOB_ID, "state": "waiting"})}},
    "getJob": {
        200: {
            "completed": example("A completed job", job_view()),
            "active": example(
                "A leased job",
                job_view(
                    state="active",
                    result=None,
                    worker="w1",
                    lease_expires_at=EXPIRES_AT,
                    updated_at=LEASED_AT,
                    progress={"done": 40, "of": 100},
                    finished_at=None,
                ),
            ),
            "delayed": example(
                "A failed attempt waiting out its backoff",
                job_view(
                    state="delayed",
                    result=None,
                    error="SMTP 451: try again later",
                    updated_at=LEASED_AT + 1_200,
                    finished_at=None,
                    run_at=LEASED_AT + 3_200,
                    delay_reason="retry",
                ),
            ),
        }
    },
    "getQueue": {200: {"counts": example("Counts", {"name": QUEUE, "paused": False, "counts": COUNTS})}},
    "listQueues": {
        200: {
            "two": example(
                "Two queues",
                {
                    "queues": [
                        {"name": QUEUE, "paused": False, "counts": COUNTS},
                        {
                            "name": "sms",
                            "paused": True,
                            "counts": {
                                "waiting": 40,
                                "delayed": 0,
                                "active": 0,
                                "completed": 12,
                                "failed": 0,
                                "cancelled": 0,
                            },
                        },
                    ]
                },
            )
        }
    },
    "getLedger": {
        200: {
            "two": example(
                "Two jobs in flight, oldest lease first",
                {
                    "jobs": [
                        {
                            "id": JOB_ID,
                            "worker": "w1",
                            "attempt": 1,
                            "leased_at": LEASED_AT,
                            "lease_expires_at": EXPIRES_AT,
                        },
                        {
                            "id": "order-8",
                            "worker": "w2",
                            "attempt": 2,
                            "leased_at": LEASED_AT + 950,
                            "lease_expires_at": EXPIRES_AT + 950,
                        },
                    ]
                },
            )
        }
    },
    "listWorkers": {
        200: {
            "two": example(
                "Who holds what",
                {
                    "workers": [
                        {"worker": "w1", "jobs": [JOB_ID]},
                        {"worker": "w2", "jobs": ["order-8", "order-9"]},
                    ]
                },
            )
        }
    },
    "listFailed": {200: {"page": example("A page of one dead letter", {"jobs": [FAILED_JOB], "total": 1})}},
    "redriveFailed": {200: {"retried": example("Sent back to waiting", {"retried": [JOB_ID]})}},
    "releaseWorker": {
        200: {"released": example("Taken from the worker", {"released": ["order-8", "order-9"]})}
    },
    "putSchedule": {
        201: {
            "created": example(
                "Created",
                {**SCHEDULE_VIEW, "runs": 0, "skipped": 0, "last_run_at": None, "last_job_id": None},
            )
        },
        200: {"replaced": example("Replaced: runs kept", SCHEDULE_VIEW)},
    },
    "getSchedule": {200: {"one": example("A schedule", SCHEDULE_VIEW)}},
    "triggerSchedule": {
        201: {
            "made": example(
                "One job made now",
                {"id": "5f1c0e2d9a8b7c6d5e4f3a2b", "queue": QUEUE, "state": "waiting", "created": True},
            )
        }
    },
    "pauseQueue": {200: {"paused": example("Paused", {"name": QUEUE, "paused": True})}},
    "resumeQueue": {200: {"resumed": example("Resumed", {"name": QUEUE, "paused": False})}},
}


def problem(status: int, code: str, title: str, detail: str) -> Example:
    return {"type": problem_type(code), "title": title, "status": status, "detail": detail, "code": code}


# problem code -> an example of it, as the service answers it
PROBLEMS: dict[str, Example] = {
    "invalid_request": problem(
        400, "invalid_request", "Invalid request", "request body: Expected `int` <= 1000 - at `$.priority`"
    ),
    "unauthorized": problem(401, "unauthorized", "Unauthorized", "send Authorization: Bearer <token>"),
    "forbidden": problem(403, "forbidden", "Forbidden", "the producer role may not work"),
    "job_not_found": problem(404, "job_not_found", "Job not found", f"no such job in this queue: {JOB_ID}"),
    "request_timeout": problem(
        408, "request_timeout", "Request body too slow", "the request body did not arrive within 30 s"
    ),
    "lease_lost": problem(
        409, "lease_lost", "Lease lost", f"this lease id is not the job's current, unexpired lease: {JOB_ID}"
    ),
    "job_active": problem(
        409,
        "job_active",
        "Job is active",
        f"the job is leased; this is not allowed while it is active: {JOB_ID}",
    ),
    "schedule_not_found": problem(
        404, "schedule_not_found", "Schedule not found", "no such schedule in this queue: nightly-report"
    ),
    "no_session": problem(
        409, "no_session", "No session", "the worker has no live session in this queue: worker-7"
    ),
    "not_delayed": problem(
        409,
        "not_delayed",
        "Job is not delayed",
        f"the job is not delayed (only a delayed job can be promoted): {JOB_ID}",
    ),
    "job_exists": problem(
        409,
        "job_exists",
        "Job exists",
        "a job with this id exists and is not this node of the flow: report-2026-12",
    ),
    "too_many_queues": problem(
        409,
        "too_many_queues",
        "Too many queues",
        "the service holds EMQ_MAX_QUEUES queues already; delete one to make room for a new queue: orders-eu",
    ),
    "payload_too_large": problem(413, "payload_too_large", "Payload too large", "Request Entity Too Large"),
    "unsupported_media_type": problem(
        415,
        "unsupported_media_type",
        "Unsupported media type",
        "the request body must be JSON (Content-Type: application/json), not 'text/plain'",
    ),
    "misdirected_request": problem(
        421,
        "misdirected_request",
        "Host not allowed",
        "this service does not answer to the host 'rebind.attacker.example'; an operator lists its "
        "names in EMQ_ALLOWED_HOSTS",
    ),
    "too_many_requests": problem(
        429, "too_many_requests", "Too many waiting requests", "2000 long-poll requests are waiting already"
    ),
    "backend_unavailable": problem(
        503,
        "backend_unavailable",
        "Backend unavailable",
        "Redis is unavailable: Error 111 connecting to 127.0.0.1:6379. Connection refused.",
    ),
}
