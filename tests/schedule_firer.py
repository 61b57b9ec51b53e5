"""A process that fires a queue's due schedule runs, for tests/http/test_schedules.py's race of
several processes (python -m tests.schedule_firer REDIS_URL MODE SCHEDULES [SECONDS]):

  setup   put SCHEDULES every-second schedules on the queue "fire-race"
  fired   fire due runs as fast as it can for SECONDS; print how many runs this process fired
  report  print: jobs made, runs counted by the schedules, run times missing between each
          schedule's first run and its last, and how many processes fired at least one run
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import msgspec

from echomq_http.api.schemas.schedules import ScheduleRequest
from echomq_http.config import Settings
from echomq_http.core.schedules import Schedules, run_job_id
from echomq_http.store.connect import close, connect
from tests.support.queues import job_queues

QUEUE = "fire-race"
EVERY_MS = 1000
START_AFTER_MS = 3000
FIRERS_KEY = "fire-race:firers"  # a test-only key: the pids of the processes that fired a run


async def main(url: str, mode: str, count: int, seconds: float) -> None:
    client = await connect(Settings(redis_url=url))
    queues = job_queues(client, max_concurrent_calls=8)
    schedules = Schedules(queues)
    names = [f"s{i}" for i in range(count)]
    try:
        if mode == "setup":
            # The first run once the firing processes are up: a run due before any process fires
            # would be a catch-up run (the next one from the present: a gap the report counts).
            start_at = int(time.time() * 1000) + START_AFTER_MS
            body = msgspec.json.encode({"every_ms": EVERY_MS, "start_at": start_at, "job": {"payload": None}})
            for name in names:
                await schedules.put(QUEUE, name, msgspec.json.decode(body, type=ScheduleRequest))
        elif mode == "fired":
            fired = 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                report = await schedules.fire_due(QUEUE)
                if report.runs_fired:
                    fired += report.runs_fired
                    await client.sadd(FIRERS_KEY, os.getpid())
                await asyncio.sleep(0.002)
            print(fired)
        else:
            jobs = runs = gaps = 0
            for name in names:
                view = await schedules.get(QUEUE, name)
                runs += view.runs
                assert view.start_at is not None and view.last_run_at is not None
                for at in range(view.start_at, view.last_run_at + 1, EVERY_MS):
                    if await client.exists(queues.keys(QUEUE).job(run_job_id(name, at))):
                        jobs += 1
                    else:
                        gaps += 1
            print(jobs, runs, gaps, await client.scard(FIRERS_KEY))
    finally:
        await queues.aclose()
        await close(client)


if __name__ == "__main__":
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), seconds))
