"""Hooks for the schemathesis run (tests/http/test_schemathesis.py): an outcome wait of a job
that never finishes lasts its whole wait_ms (up to 60 s), which the run has no time for. The
wait is cut just before the call, in every phase (the coverage phase's boundary values too)."""

from __future__ import annotations

from typing import Any

import schemathesis

LONGEST_WAIT_MS = 200


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    query = case.query
    if query and isinstance(query.get("wait_ms"), int) and case.operation.path.endswith("/jobs/{id}"):
        query["wait_ms"] = min(query["wait_ms"], LONGEST_WAIT_MS)
