// Schedules: put, read, list, replace, trigger, delete against the real service; a run made by the
// service's sweeper; errors typed by problem code.

import assert from "node:assert/strict";
import { test } from "node:test";
import { APIError, InvalidRequest, NotFound, ScheduleNotFound } from "echomq";
import { client, freshQueue, waitFor } from "./helpers.js";

const FIVE_MINUTES_MS = 300_000;

test("putSchedule, schedule, schedules, replace, triggerSchedule, deleteSchedule", async () => {
  const queue = freshQueue();
  const made = await client.putSchedule(queue, "report", {
    cron: "*/5 * * * *",
    timezone: "Europe/Berlin",
    overlap: "skip",
    job: { payload: { report: "sales" }, name: "report", priority: 7, max_attempts: 2, group: "g1" },
  });
  assert.deepEqual(
    [made.schedule, made.queue, made.cron, made.every_ms, made.timezone, made.overlap, made.runs],
    ["report", queue, "*/5 * * * *", null, "Europe/Berlin", "skip", 0],
  );
  assert.deepEqual(made.job, { payload: { report: "sales" }, name: "report", priority: 7, max_attempts: 2, backoff: null, group: "g1" });
  assert.ok(made.next_run_at !== null && made.next_run_at % FIVE_MINUTES_MS === 0);
  assert.deepEqual(await client.schedule(queue, "report"), made);

  const ticks = await client.putSchedule(queue, "ticks", { every_ms: 60_000, paused: true, job: { payload: 1 } });
  assert.deepEqual([ticks.paused, ticks.next_run_at, ticks.timezone], [true, null, "UTC"]);
  // Replaced as a whole: what is left out goes back to its default; the creation time stays.
  const replaced = await client.putSchedule(queue, "report", { every_ms: 3_600_000, job: { payload: null } });
  assert.deepEqual([replaced.cron, replaced.overlap, replaced.job.name, replaced.created_at], [null, "allow", null, made.created_at]);
  assert.deepEqual(
    (await client.schedules(queue)).map((view) => view.schedule),
    ["report", "ticks"],
  );

  const triggered = await client.triggerSchedule(queue, "ticks");
  assert.deepEqual([triggered.created, triggered.state, triggered.queue], [true, "waiting", queue]);
  assert.equal((await client.job(queue, triggered.id)).schedule, "ticks");
  const after = await client.schedule(queue, "ticks");
  assert.deepEqual([after.last_job_id, after.runs, after.next_run_at], [triggered.id, 0, null]);

  await client.deleteSchedule(queue, "ticks");
  assert.deepEqual(
    (await client.schedules(queue)).map((view) => view.schedule),
    ["report"],
  );
  assert.equal((await client.job(queue, triggered.id)).state, "waiting"); // the jobs it made stay
});

test("a schedule's run is made by the service", async () => {
  const queue = freshQueue();
  await client.putSchedule(queue, "tick", { every_ms: 1000, job: { payload: { n: 1 }, name: "tick" } });
  const ran = await waitFor(
    async () => {
      const view = await client.schedule(queue, "tick");
      return view.runs >= 1 ? view : undefined;
    },
    15_000,
    "the first run",
  );
  assert.ok(ran); // waitFor answers only once it has one
  assert.equal(ran.last_job_id, `tick-r${ran.last_run_at}`);
  const job = await client.job(queue, ran.last_job_id!);
  assert.deepEqual([job.schedule, job.name, job.payload], ["tick", "tick", { n: 1 }]);
  await client.deleteSchedule(queue, "tick");
});

test("schedule errors: schedule_not_found, and a bad cron with the service's message", async () => {
  const queue = freshQueue();
  for (const call of [
    () => client.schedule(queue, "nope"),
    () => client.deleteSchedule(queue, "nope"),
    () => client.triggerSchedule(queue, "nope"),
  ]) {
    const missing = await call().catch((error: unknown) => error);
    assert.ok(missing instanceof ScheduleNotFound && missing instanceof APIError && !(missing instanceof NotFound));
    assert.deepEqual([missing.status, missing.code], [404, "schedule_not_found"]);
  }

  const badCron = await client.putSchedule(queue, "bad", { cron: "61 * * * *", job: { payload: 1 } }).catch((error: unknown) => error);
  assert.ok(badCron instanceof InvalidRequest);
  assert.equal(badCron.status, 400);
  assert.match(badCron.detail, /invalid cron '61 \* \* \* \*'/);
  const both = await client
    .putSchedule(queue, "bad", { cron: "@daily", every_ms: 60_000, job: { payload: 1 } })
    .catch((error: unknown) => error);
  assert.ok(both instanceof InvalidRequest && both.detail.includes("exactly one of cron and every_ms"));
  assert.deepEqual(await client.schedules(queue), []);
});
