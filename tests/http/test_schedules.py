"""Schedules through HTTP (contract v1.1, "Schedules"): put, replace, read, list, delete and
trigger; runs on a fixed grid, each one job with the schedule's name, at most the sweep interval
+ 1 s late; overlap skips; limit and end_at; pausing; a catch-up run after a downtime; re-puts
that never make a run twice; bad input; and exactly one job per run with four processes firing
at once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from echomq_http.config import Settings
from echomq_http.core.schedules import run_job_id
from tests.conftest import TEST_SWEEP_INTERVAL_MS
from tests.http.test_events import subscribed
from tests.support import assert_problem, eventually, get_job, job_call, lease_one
from tests.support.service import running_service

EVERY_MS = 1000
LATE_BY_AT_MOST_MS = TEST_SWEEP_INTERVAL_MS + 1000  # the contract's bound
CLOCK_MARGIN_MS = 250  # a busy test machine's scheduling
REPO = Path(__file__).parents[2]


def every(ms: int = EVERY_MS, payload: Any = None, **fields: Any) -> dict[str, Any]:
    return {"every_ms": ms, "job": {"payload": payload if payload is not None else {"tick": True}}, **fields}


async def put(
    client: httpx.AsyncClient, queue: str, name: str, body: dict[str, Any], status: int = 201
) -> Any:
    response = await client.put(f"/v1/queues/{queue}/schedules/{name}", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def view(client: httpx.AsyncClient, queue: str, name: str) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue}/schedules/{name}")
    assert response.status_code == 200, response.text
    return response.json()


async def made_jobs(client: httpx.AsyncClient, queue: str, name: str) -> list[dict[str, Any]]:
    """The jobs the schedule's runs made (not its triggers), oldest run first."""
    jobs = []
    for state in ("waiting", "active", "completed"):
        response = await client.get(f"/v1/queues/{queue}/jobs", params={"state": state, "limit": 1000})
        jobs += [job for job in response.json()["jobs"] if job["schedule"] == name and "-r" in job["id"]]
    return sorted(jobs, key=run_time)


def run_time(job: dict[str, Any]) -> int:
    return int(job["id"].rsplit("-r", 1)[1])


async def runs_reach(client: httpx.AsyncClient, queue: str, name: str, runs: int) -> dict[str, Any]:
    async def reached() -> bool:
        return (await view(client, queue, name))["runs"] >= runs

    await eventually(reached, f"{runs} runs of {name}", timeout_s=runs * EVERY_MS / 1000 + 10)
    return await view(client, queue, name)


async def test_put_answers_the_view_and_replace_keeps_runs_and_next_run(client, queue):
    created = await put(client, queue, "tick", every(payload={"n": 1.5}, overlap="allow"))
    assert created["schedule"] == "tick" and created["queue"] == queue
    assert created["job"]["payload"] == {"n": 1.5} and created["every_ms"] == EVERY_MS
    assert created["runs"] == 0 and created["last_run_at"] is None and created["last_job_id"] is None
    # The first run is one interval after creation.
    assert created["next_run_at"] == created["created_at"] + EVERY_MS
    ran = await runs_reach(client, queue, "tick", 2)
    # Replaced with the same timing: runs and next run kept (a re-deploy makes no extra run).
    replaced = await put(client, queue, "tick", every(payload={"n": 2}), status=200)
    assert replaced["runs"] >= ran["runs"] and replaced["job"]["payload"] == {"n": 2}
    assert replaced["next_run_at"] >= ran["next_run_at"]  # the same grid, not restarted from now
    assert (replaced["next_run_at"] - created["next_run_at"]) % EVERY_MS == 0
    assert replaced["created_at"] == created["created_at"] and replaced["updated_at"] > created["updated_at"]
    # Other timing: a new grid from now, runs still kept.
    moved = await put(client, queue, "tick", every(5000), status=200)
    assert moved["runs"] >= ran["runs"]
    assert moved["next_run_at"] == moved["updated_at"] + 5000  # a new grid from the PUT
    assert [
        s["schedule"] for s in (await client.get(f"/v1/queues/{queue}/schedules")).json()["schedules"]
    ] == ["tick"]
    assert (await client.delete(f"/v1/queues/{queue}/schedules/tick")).status_code == 204
    assert_problem(await client.delete(f"/v1/queues/{queue}/schedules/tick"), 404, "schedule_not_found")
    assert_problem(await client.get(f"/v1/queues/{queue}/schedules/tick"), 404, "schedule_not_found")
    assert (await client.get(f"/v1/queues/{queue}/schedules")).json() == {"schedules": []}


async def test_runs_make_one_job_each_on_the_grid_and_on_time(client, queue):
    async with subscribed(client, queue, after=0) as feed:
        created = await put(client, queue, "tick", every())
        await runs_reach(client, queue, "tick", 3)
        enqueued = await feed.until("enqueued", run_job_id("tick", created["next_run_at"] + 2 * EVERY_MS))
    await client.delete(f"/v1/queues/{queue}/schedules/tick")
    jobs = await made_jobs(client, queue, "tick")
    times = [run_time(job) for job in jobs]
    assert times[:3] == [created["next_run_at"] + k * EVERY_MS for k in range(3)]  # no gap, no drift
    for job in jobs:
        assert job["schedule"] == "tick" and job["payload"] == {"tick": True}
        assert 0 <= job["created_at"] - run_time(job) <= LATE_BY_AT_MOST_MS + CLOCK_MARGIN_MS
    scheduled = [event.data for event in enqueued if event.event == "enqueued"]
    assert scheduled[0]["schedule"] == "tick" and scheduled[0]["id"] == jobs[0]["id"]


async def test_a_run_does_not_wait_for_the_previous_job_to_start(client, queue):
    """Unlike schedulers that make the next job when the previous one becomes active: nobody
    leases here, and every run still makes its job."""
    await put(client, queue, "tick", every())
    await runs_reach(client, queue, "tick", 3)
    assert len(await made_jobs(client, queue, "tick")) >= 3


async def test_overlap_skip_counts_skipped_runs_until_the_job_is_done(client, queue):
    await put(client, queue, "report", every(overlap="skip"))
    first = await runs_reach(client, queue, "report", 1)

    async def skipped() -> bool:
        return (await view(client, queue, "report"))["skipped"] >= 2

    await eventually(skipped, "two skipped runs", timeout_s=10)
    assert (await view(client, queue, "report"))["runs"] == 1
    leased = await lease_one(client, queue)
    assert leased["id"] == first["last_job_id"]
    await job_call(client, queue, leased["id"], "ack", lease_id=leased["lease_id"])
    after = await runs_reach(client, queue, "report", 2)
    assert after["last_job_id"] != first["last_job_id"]
    assert len(await made_jobs(client, queue, "report")) == after["runs"]


async def test_limit_and_end_at_end_the_schedule_but_keep_it(client, queue):
    await put(client, queue, "twice", every(limit=2))
    ended = await runs_reach(client, queue, "twice", 2)
    assert ended["next_run_at"] is None and ended["runs"] == 2
    await asyncio.sleep(1.5 * EVERY_MS / 1000)
    assert (await view(client, queue, "twice"))["runs"] == 2
    assert len(await made_jobs(client, queue, "twice")) == 2

    created = await put(client, queue, "short", every(start_at=0))
    # A new grid starting in the past: the next grid point from now on; end it one run later.
    end_at = created["next_run_at"] + EVERY_MS // 2
    bounded = await put(client, queue, "short", every(start_at=0, end_at=end_at), status=200)
    assert bounded["next_run_at"] == created["next_run_at"]  # same timing: kept, within end_at

    async def over() -> bool:
        return (await view(client, queue, "short"))["next_run_at"] is None

    await eventually(over, "the schedule to end", timeout_s=10)
    assert (await view(client, queue, "short"))["runs"] == 1
    # Raising the limit of an ended schedule makes it go on from the present.
    resumed = await put(client, queue, "twice", every(limit=3), status=200)
    assert resumed["next_run_at"] is not None and resumed["next_run_at"] > ended["last_run_at"]


async def test_a_paused_schedule_makes_no_runs_and_resumes_from_the_present(client, queue):
    paused = await put(client, queue, "p", every(paused=True))
    assert paused["next_run_at"] is None and paused["paused"] is True
    await asyncio.sleep(1.5 * EVERY_MS / 1000)
    assert (await view(client, queue, "p"))["runs"] == 0
    resumed = await put(client, queue, "p", every(), status=200)
    assert resumed["next_run_at"] is not None and resumed["next_run_at"] > resumed["updated_at"]
    await runs_reach(client, queue, "p", 1)


async def test_trigger_makes_a_job_now_outside_the_timetable(client, queue):
    created = await put(client, queue, "t", every(60_000, payload={"manual": True}, limit=1))
    response = await client.post(f"/v1/queues/{queue}/schedules/t/trigger")
    assert response.status_code == 201, response.text
    made = response.json()
    assert made["state"] == "waiting" and made["created"] is True and made["queue"] == queue
    job = await get_job(client, queue, made["id"])
    assert job["schedule"] == "t" and job["payload"] == {"manual": True}
    again = (await client.post(f"/v1/queues/{queue}/schedules/t/trigger")).json()
    assert again["id"] != made["id"]
    after = await view(client, queue, "t")
    assert after["last_job_id"] == again["id"]
    assert (after["runs"], after["next_run_at"]) == (0, created["next_run_at"])
    assert_problem(await client.post(f"/v1/queues/{queue}/schedules/none/trigger"), 404, "schedule_not_found")


async def test_a_run_makes_the_job_of_its_template_with_its_group(client, queue):
    template = {"payload": {"n": 1}, "name": "digest", "priority": 5, "max_attempts": 7, "group": "tenant-1"}
    await put(client, queue, "g", {"every_ms": EVERY_MS, "job": template, "paused": True})
    made = (await client.post(f"/v1/queues/{queue}/schedules/g/trigger")).json()  # a paused one too
    job = await get_job(client, queue, made["id"])
    assert (job["name"], job["priority"], job["max_attempts"], job["group"]) == ("digest", 5, 7, "tenant-1")
    await put(client, queue, "g", {"every_ms": EVERY_MS, "job": template}, status=200)
    ran = await runs_reach(client, queue, "g", 1)
    job = await get_job(client, queue, ran["last_job_id"])
    assert (job["group"], job["schedule"], job["priority"]) == ("tenant-1", "g", 5)
    groups = (await client.get(f"/v1/queues/{queue}/groups")).json()["groups"]
    assert [(group["group"], group["waiting"]) for group in groups] == [("tenant-1", 2)]


async def test_cron_schedules_follow_their_timezone(client, queue):
    body = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "job": {"payload": 1}}
    created = await put(client, queue, "nightly", body)
    local = time.gmtime(created["next_run_at"] / 1000)
    assert (local.tm_min, local.tm_sec) == (30, 0)
    assert local.tm_hour in (0, 1)  # 02:30 in Berlin is 00:30 or 01:30 UTC
    hourly = await put(client, queue, "hourly", {"cron": "@hourly", "job": {"payload": 1}})
    assert hourly["next_run_at"] % 3_600_000 == 0 and hourly["cron"] == "@hourly"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"job": {"payload": 1}}, "exactly one of cron and every_ms"),
        ({"cron": "* * * * *", "every_ms": 1000, "job": {"payload": 1}}, "exactly one of cron and every_ms"),
        ({"cron": "* * *", "job": {"payload": 1}}, "has 3 fields"),
        ({"cron": "0 25 * * *", "job": {"payload": 1}}, "bad hour"),
        ({"cron": "@reboot", "job": {"payload": 1}}, "unknown cron macro"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus", "job": {"payload": 1}}, "unknown timezone"),
        ({"every_ms": 999, "job": {"payload": 1}}, "every_ms"),
        ({"every_ms": 1000, "start_at": 10, "end_at": 5, "job": {"payload": 1}}, "end_at is before start_at"),
        ({"every_ms": 1000, "limit": 0, "job": {"payload": 1}}, "limit"),
        ({"every_ms": 1000, "overlap": "queue", "job": {"payload": 1}}, "overlap"),
        ({"every_ms": 1000, "job": {"payload": 1, "id": "x"}}, "id"),
        ({"every_ms": 1000, "job": {"payload": 1, "delay_ms": 5}}, "delay_ms"),
        ({"every_ms": 1000}, "job"),
    ],
)
async def test_bad_input_is_refused_with_what_is_wrong_and_stores_nothing(client, queue, body, says):
    problem = assert_problem(
        await client.put(f"/v1/queues/{queue}/schedules/s", json=body), 400, "invalid_request"
    )
    assert says in problem["detail"]
    assert_problem(await client.get(f"/v1/queues/{queue}/schedules/s"), 404, "schedule_not_found")


async def test_bad_schedule_names_are_refused(client, queue):
    for method in ("get", "delete"):
        response = await client.request(method.upper(), f"/v1/queues/{queue}/schedules/-bad")
        assert_problem(response, 400, "invalid_request")
    assert_problem(
        await client.put(f"/v1/queues/{queue}/schedules/a:b", json=every()), 400, "invalid_request"
    )


async def test_re_putting_all_the_time_never_makes_a_run_twice_or_misses_one(client, queue):
    """A deploy loop that re-declares its schedule while it runs, racing the firing sweeps."""
    created = await put(client, queue, "busy", every())
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        await put(client, queue, "busy", every(), status=200)
        await asyncio.sleep(0.05)
    await client.delete(f"/v1/queues/{queue}/schedules/busy")
    jobs = await made_jobs(client, queue, "busy")
    times = [run_time(job) for job in jobs]
    assert len(times) >= 3
    assert times == [created["next_run_at"] + k * EVERY_MS for k in range(len(times))]


async def test_one_catch_up_run_after_a_downtime_then_on_the_grid_from_the_present(private_redis_url):
    settings = Settings(redis_url=private_redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
    queue = "catch-up"
    with running_service(settings) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            created = await put(client, queue, "tick", every(overlap="allow"))
            first = created["next_run_at"]
    await asyncio.sleep(3.6)  # no replica for more than three runs
    with running_service(settings) as url:
        restarted_at = int(time.time() * 1000)
        async with httpx.AsyncClient(base_url=url) as client:
            await runs_reach(client, queue, "tick", 2)
            times = [run_time(job) for job in await made_jobs(client, queue, "tick")]
    assert times[0] == first  # the run missed first stands for all the missed ones, once
    assert all(at > restarted_at - CLOCK_MARGIN_MS for at in times[1:])  # then from the present
    assert all((at - first) % EVERY_MS == 0 for at in times)  # on the same grid
    assert len(times) == len(set(times))


FIRERS = 4


def test_four_firing_processes_make_exactly_one_job_per_run(private_redis_url):
    """Processes (not tasks) firing the same due runs as fast as they can: each run is fired by
    exactly one of them, and every run time is made once, with no gap."""
    command = [sys.executable, "-m", "tests.schedule_firer", private_redis_url, "fired", "20", "7.0"]
    setup = subprocess.run(
        [*command[:4], "setup", "20"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert setup.returncode == 0, setup.stderr
    firers = [
        subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(FIRERS)
    ]
    outputs = [firer.communicate(timeout=60) for firer in firers]
    assert all(firer.returncode == 0 for firer in firers), [err for _, err in outputs]
    fired = sum(int(out.split()[0]) for out, _ in outputs)
    report = subprocess.run(
        [*command[:4], "report", "20"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert report.returncode == 0, report.stderr
    jobs, runs, gaps, firing_processes = (int(value) for value in report.stdout.split())
    assert jobs >= 20 * 3  # each schedule ran at least three times in the 7 s (the first after 3 s)
    assert fired == jobs == runs  # no run fired twice (even when its job id would have deduplicated it)
    assert gaps == 0
    assert firing_processes >= 2  # they really raced
