// The Client's reads against the real service: outcome waits, job listing page by page, history,
// progress on a heartbeat, and the service's own endpoints.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, JobNotFound } from "echomq";
import { cleanup, client, freshQueue, SERVICE_URL } from "./helpers.js";

test("wait answers on the outcome, or with the state when its time is up", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: 1, id: "runs" });
  const [held] = await client.lease(queue, { worker: "w1" });
  assert.ok(held);
  const started = Date.now();
  assert.equal((await client.wait(queue, "runs", { timeoutMs: 300 })).state, "active");
  assert.ok(Date.now() - started >= 250);

  setTimeout(() => void client.ack(queue, "runs", held.lease_id, { result: "done" }), 300);
  const done = await client.wait(queue, "runs", { timeoutMs: 10_000 });
  assert.deepEqual([done.state, done.result], ["completed", "done"]);

  await client.enqueue(queue, { payload: 1, id: "gone" });
  setTimeout(() => void client.deleteJob(queue, "gone"), 300);
  await assert.rejects(client.wait(queue, "gone", { timeoutMs: 10_000 }), JobNotFound);
});

/** A Client whose job reads wait at most 200 ms each (the service's cap is a minute), counted. */
class ShortSteps extends Client {
  protected override readonly waitStepMs = 200;
  readonly waits: number[] = [];

  override job(queue: string, id: string, options: { wait_ms?: number } = {}) {
    this.waits.push(options.wait_ms ?? 0);
    return super.job(queue, id, options);
  }
}

test("a wait longer than one call allows takes several, and still ends on the outcome", async () => {
  const queue = freshQueue();
  const stepping = new ShortSteps({ url: SERVICE_URL });
  cleanup(() => stepping.close());
  await client.enqueue(queue, { payload: 1, id: "j" });
  const [held] = await client.lease(queue, { worker: "w1" });
  assert.ok(held);

  assert.equal((await stepping.wait(queue, "j", { timeoutMs: 700 })).state, "active");
  assert.ok(stepping.waits.length >= 4, `${stepping.waits}`);
  assert.ok(stepping.waits.every((waitMs) => waitMs <= 200));

  setTimeout(() => void client.fail(queue, "j", held.lease_id, "boom", { retry: false }), 500);
  assert.equal((await stepping.wait(queue, "j", { timeoutMs: 10_000 })).state, "failed");
});

test("listJobs pages through a state; jobs reads every page", async () => {
  const queue = freshQueue();
  await client.enqueueMany(queue, [1, 2, 3, 4, 5].map((n) => ({ payload: n, id: `j${n}` })));
  const first = await client.listJobs(queue, { state: "waiting", limit: 2 });
  assert.deepEqual(
    first.jobs.map((job) => job.id),
    ["j1", "j2"],
  );
  assert.ok(first.next_cursor);
  const second = await client.listJobs(queue, { state: "waiting", limit: 2, cursor: first.next_cursor });
  assert.deepEqual(
    second.jobs.map((job) => job.id),
    ["j3", "j4"],
  );

  const all: string[] = [];
  for await (const job of client.jobs(queue, { state: "waiting", limit: 2 })) all.push(job.id);
  assert.deepEqual(all, ["j1", "j2", "j3", "j4", "j5"]);
  const none = await client.listJobs(queue, { state: "failed" });
  assert.deepEqual([none.jobs, none.next_cursor], [[], null]);
});

test("history counts per minute; a heartbeat's progress is kept on the job", async () => {
  const queue = freshQueue();
  await client.enqueueMany(queue, [{ payload: 1, id: "p" }, { payload: 2 }]);
  const [held] = await client.lease(queue, { worker: "w1" });
  assert.ok(held);
  await client.heartbeat(queue, held.id, held.lease_id, { progress: { done: 1, of: 2 } });
  await client.heartbeat(queue, held.id, held.lease_id, { lease_ms: 60_000 }); // keeps the last
  assert.deepEqual((await client.job(queue, held.id)).progress, { done: 1, of: 2 });

  const minutes = await client.history(queue, 5);
  assert.equal(minutes.length, 5);
  assert.equal(
    minutes.reduce((sum, minute) => sum + minute.enqueued, 0),
    2,
  );
  assert.ok(minutes[0]!.at < minutes[4]!.at);
  assert.equal((await client.history(queue)).length, 60);
});

test("the service's endpoints: health, readiness, metrics, the document", async () => {
  assert.equal(await client.healthz(), true);
  assert.equal(await client.readyz(), true);
  assert.match(await client.metrics(), /^emq_/m);
  assert.match(String((await client.openapi()).openapi), /^3\.1/);
});
