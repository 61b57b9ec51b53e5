"""search-jobs: one bounded step of the dashboard's text search, in each state it searches."""

from __future__ import annotations

import json

from tests.lua.conftest import decoded
from tests.lua.test_lua_operate import failed, leased


async def search(q, state: str, text: str, offset: int = 0, budget: int = 100, limit: int = 100):
    return decoded(await q.call("search-jobs", state, text, offset, budget, limit))


async def test_finds_text_in_payloads_and_errors_most_recent_failure_first(q):
    await failed(q, "a", payload=b'{"city": "Lyon"}')
    await failed(q, "b", payload=b'{"city": "Oslo"}')
    await failed(q, "c", payload=b'{"city": "Paris"}')
    # Errors are "<id> failed"; the text is matched in lower case, the caller folds it.
    assert await search(q, "failed", "oslo") == [3, 3, "b"]
    assert await search(q, "failed", "a failed") == [3, 3, "a"]
    assert await search(q, "failed", "failed") == [3, 3, "c", "b", "a"]
    assert await search(q, "failed", "nowhere") == [3, 3]


async def test_a_step_reads_at_most_its_budget_and_the_next_goes_on(q):
    await failed(q, "a", "b", "c", "d", "e")
    assert await search(q, "failed", "failed", offset=0, budget=2) == [2, 5, "e", "d"]
    assert await search(q, "failed", "failed", offset=2, budget=2) == [4, 5, "c", "b"]
    assert await search(q, "failed", "failed", offset=4, budget=2) == [5, 5, "a"]
    assert await search(q, "failed", "failed", offset=5, budget=2) == [5, 5]


async def test_a_step_stops_at_its_limit_of_matches(q):
    await failed(q, "a", "b", "c", "d")
    # Stopped after the second match: the next step starts just after it.
    assert await search(q, "failed", "failed", limit=2) == [2, 4, "d", "c"]
    assert await search(q, "failed", "failed", offset=2, limit=2) == [4, 4, "b", "a"]


async def test_completed_cancelled_and_delayed_jobs_are_searched_too(q):
    [job] = await leased(q, "done", payload=b'{"note": "Needle"}')
    await q.ack((job.id, job.lease_id))
    await q.add("later", delay_ms=60_000, payload=b'{"note": "needle later"}')
    await q.add("gone", payload=b'{"note": "needle gone"}')
    await q.call("cancel", "gone", "")
    assert await search(q, "completed", "needle") == [1, 1, "done"]
    assert await search(q, "delayed", "needle") == [1, 1, "later"]
    assert await search(q, "cancelled", "needle") == [1, 1, "gone"]


async def test_an_entry_whose_job_left_the_state_is_passed_over(q):
    await failed(q, "a", "b")
    await q.call("redrive", json.dumps(["a"]), 0, "", 0)
    assert await search(q, "failed", "failed") == [1, 1, "b"]


async def test_a_step_ends_once_it_has_read_4_mib_of_payloads(q):
    big = json.dumps({"blob": "x" * (1536 * 1024)}).encode()  # 1.5 MiB each
    await failed(q, "a", "b", "c", "d", payload=big)
    # Newest first: d, c, b take 4.5 MiB, so the step ends after b; a is the next step's.
    assert await search(q, "failed", "nowhere") == [3, 4]
    assert await search(q, "failed", "nowhere", offset=3) == [4, 4]
