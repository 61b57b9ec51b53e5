// Client: every main operation against the real service, and errors typed by problem code.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  APIError,
  Client,
  ConnectionFailed,
  InvalidRequest,
  JobNotFound,
  LeaseLost,
  NO_RETRIES,
  NotDelayed,
  NotFound,
  type LeasedJob,
} from "echomq";
import { client, freshQueue, SERVICE_URL } from "./helpers.js";

test("enqueue, enqueueMany, job and counts", async () => {
  const queue = freshQueue();
  const created = await client.enqueue(queue, { payload: { to: "ada" }, id: "a", max_attempts: 5 });
  assert.deepEqual(created, { id: "a", queue, state: "waiting", created: true });
  const again = await client.enqueue(queue, { payload: { to: "someone else" }, id: "a" });
  assert.equal(again.created, false); // idempotent by id: the first stays

  const many = await client.enqueueMany(queue, [{ payload: 1 }, { payload: 2, delay_ms: 60_000 }, { payload: 3, id: "c" }]);
  assert.equal(many.length, 3);
  assert.deepEqual(
    many.map((job) => job.state),
    ["waiting", "delayed", "waiting"],
  );

  const job = await client.job(queue, "a");
  assert.equal(job.state, "waiting");
  assert.deepEqual(job.payload, { to: "ada" });
  assert.equal(job.max_attempts, 5);
  assert.deepEqual(await client.counts(queue), { waiting: 3, delayed: 1, active: 0, completed: 0, failed: 0, cancelled: 0, waiting_children: 0 });
  assert.equal((await client.queue(queue)).paused, false);
});

test("lease with a request_id is idempotent; heartbeat and heartbeatMany", async () => {
  const queue = freshQueue();
  await client.enqueueMany(queue, [{ payload: 1, id: "j1" }, { payload: 2, id: "j2" }, { payload: 3, id: "j3" }]);
  const request = { worker: "w1", lease_ms: 5000, max_jobs: 2, request_id: "req-1" };
  const first = await client.lease(queue, request);
  const repeat = await client.lease(queue, request);
  assert.equal(first.length, 2);
  assert.deepEqual(
    repeat.map((job) => [job.id, job.lease_id]),
    first.map((job) => [job.id, job.lease_id]),
  );
  const [a, b] = first as [LeasedJob, LeasedJob];
  assert.equal(a.attempt, 1);

  const beat = await client.heartbeat(queue, a.id, a.lease_id, { lease_ms: 60_000 });
  assert.equal(beat.lease_id, a.lease_id);
  assert.ok(beat.lease_expires_at > a.lease_expires_at);

  const results = await client.heartbeatMany(queue, [
    { id: a.id, lease_id: a.lease_id },
    { id: b.id, lease_id: "not-its-lease" },
    { id: "nope", lease_id: "x" },
  ]);
  assert.equal(results.length, 3);
  assert.equal(results[0]!.ok, true);
  assert.equal(results[0]!.cancel_requested, false);
  assert.deepEqual([results[1]!.ok, results[1]!.code], [false, "lease_lost"]);
  assert.deepEqual([results[2]!.ok, results[2]!.code], [false, "job_not_found"]);

  await assert.rejects(client.heartbeat(queue, b.id, "not-its-lease"), LeaseLost);
});

test("ack with lease_next, ackMany with leaseNext", async () => {
  const queue = freshQueue();
  await client.enqueueMany(queue, Array.from({ length: 6 }, (_, n) => ({ payload: n, id: `j${n}` })));
  const [job] = await client.lease(queue, { worker: "w1" });
  assert.ok(job);
  const acked = await client.ack(queue, job.id, job.lease_id, {
    result: { sum: 1 },
    lease_next: { worker: "w1", max_jobs: 2, request_id: "n-1" },
  });
  assert.equal(acked.state, "completed");
  assert.equal(acked.jobs?.length, 2);
  assert.deepEqual((await client.job(queue, job.id)).result, { sum: 1 });

  const held = acked.jobs!;
  const many = await client.ackMany(
    queue,
    [...held.map((j) => ({ id: j.id, lease_id: j.lease_id, result: j.payload })), { id: "j5", lease_id: "not-held" }],
    { leaseNext: { worker: "w1", max_jobs: 10, request_id: "n-2" } },
  );
  assert.deepEqual(
    many.results.map((r) => [r.ok, r.code ?? null]),
    [
      [true, null],
      [true, null],
      [false, "lease_lost"],
    ],
  );
  assert.equal(many.jobs?.length, 3); // j3, j4, j5: what was left
  const plain = await client.ackMany(queue, many.jobs!.map((j) => ({ id: j.id, lease_id: j.lease_id })));
  assert.equal(plain.jobs, undefined);
  assert.ok(plain.results.every((r) => r.ok));
  assert.equal((await client.counts(queue)).completed, 6);
});

test("fail: retried while attempts are left, dead-lettered with retry false; release spends no attempt", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "r", max_attempts: 3, backoff: { type: "fixed", delay_ms: 0 } });
  await client.enqueue(queue, { payload: null, id: "d", max_attempts: 3 });
  await client.enqueue(queue, { payload: null, id: "l", max_attempts: 3 });

  const leased = await client.lease(queue, { worker: "w1", max_jobs: 3 });
  const byId = new Map(leased.map((job) => [job.id, job]));
  const r = byId.get("r")!;
  const d = byId.get("d")!;
  const l = byId.get("l")!;

  const retried = await client.fail(queue, r.id, r.lease_id, "boom");
  assert.deepEqual([retried.state, retried.attempt], ["waiting", 1]);
  const later = await client.fail(queue, l.id, l.lease_id, "later", { retry_after_ms: 60_000 });
  assert.equal(later.state, "delayed");
  const dead = await client.fail(queue, d.id, d.lease_id, "permanent", { retry: false });
  assert.equal(dead.state, "failed");
  const page = await client.failed(queue);
  assert.deepEqual(
    page.jobs.map((job) => [job.id, job.error]),
    [["d", "permanent"]],
  );
  // The same fail again (an answer lost on the way) answers as the first did and changes nothing.
  assert.deepEqual(await client.fail(queue, d.id, d.lease_id, "again"), dead);
  assert.equal((await client.job(queue, "d")).error, "permanent");
  await assert.rejects(client.ack(queue, d.id, d.lease_id), LeaseLost);

  const [again] = await client.lease(queue, { worker: "w2" });
  assert.equal(again?.id, "r");
  assert.equal(again.attempt, 2);
  const released = await client.release(queue, again.id, again.lease_id);
  assert.deepEqual(released, { id: "r", state: "waiting" });
  const [third] = await client.lease(queue, { worker: "w2" });
  assert.equal(third?.attempt, 2); // the release did not count as a delivery
  assert.deepEqual(await client.retryFailed(queue, ["d"]), ["d"]);
  assert.equal((await client.job(queue, "d")).state, "waiting");
});

test("a delayed job shows when it runs and why; promote makes it waiting now", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: 1, id: "later", delay_ms: 3_600_000 });
  const delayed = await client.job(queue, "later");
  assert.deepEqual([delayed.state, delayed.delay_reason], ["delayed", "delay"]);
  assert.equal(delayed.run_at, delayed.created_at + 3_600_000);
  assert.deepEqual(await client.promote(queue, "later"), { id: "later", state: "waiting" });
  const waiting = await client.job(queue, "later");
  assert.deepEqual([waiting.state, waiting.run_at, waiting.delay_reason], ["waiting", null, null]);
  await assert.rejects(client.promote(queue, "later"), (error: unknown) => error instanceof NotDelayed && error.status === 409);
  await assert.rejects(client.promote(queue, "nope"), JobNotFound);
});

test("settings, group caps and the group listing", async () => {
  const queue = freshQueue();
  assert.equal((await client.settings(queue)).max_in_flight, null);
  const stored = await client.putSettings(queue, { max_in_flight: 3, rate_limit: { max: 10, per_ms: 1000 } });
  assert.equal(stored.max_in_flight, 3);
  assert.deepEqual((await client.settings(queue)).rate_limit, { max: 10, per_ms: 1000 });
  await client.enqueueMany(queue, [
    { payload: 1, group: "a" },
    { payload: 2, group: "a" },
    { payload: 3, group: "b" },
  ]);
  assert.deepEqual(await client.setGroupLimit(queue, "a", 1), { group: "a", max_in_flight: 1 });
  const leased = await client.lease(queue, { worker: "w1", max_jobs: 10 });
  assert.equal(leased.length, 2); // a at its own cap of 1, and b
  const page = await client.groups(queue);
  assert.deepEqual(
    page.groups.map((g) => [g.group, g.waiting, g.active]),
    [
      ["a", 1, 1],
      ["b", 0, 1],
    ],
  );
  await assert.rejects(client.putSettings(queue, { max_in_flight: 0 }), InvalidRequest);
});

test("queues come page by page, and queues() follows every page", async () => {
  const queue = freshQueue();
  const names = [0, 1, 2].map((n) => `${queue}-${n}`);
  try {
    for (const name of names) await client.enqueue(name, { payload: 1 });
    const first = await client.listQueues({ limit: 2, prefix: queue });
    assert.deepEqual(first.queues.map((q) => q.name), names.slice(0, 2));
    const rest = await client.listQueues({ limit: 2, prefix: queue, cursor: first.next_cursor ?? undefined });
    assert.deepEqual(rest.queues.map((q) => q.name), names.slice(2));
    assert.equal(rest.next_cursor, null);
    assert.deepEqual((await client.queues({ prefix: queue })).map((q) => q.name), names);
  } finally {
    for (const name of names) await client.deleteQueue(name);
  }
});

test("errors are typed by problem code", async () => {
  const queue = freshQueue();
  const missing = await client.job(queue, "nope").catch((error: unknown) => error);
  assert.ok(missing instanceof JobNotFound);
  assert.ok(missing instanceof APIError);
  assert.deepEqual([missing.status, missing.code], [404, "job_not_found"]);
  assert.ok(missing.detail.length > 0);

  await client.enqueue(queue, { payload: 1, id: "x" });
  const [job] = await client.lease(queue, { worker: "w1" });
  const lost = await client.ack(queue, job!.id, "wrong-lease").catch((error: unknown) => error);
  assert.ok(lost instanceof LeaseLost);
  assert.deepEqual([lost.status, lost.code], [409, "lease_lost"]);

  const invalid = await client.lease(queue, { worker: "w1", max_jobs: 0 }).catch((error: unknown) => error);
  assert.ok(invalid instanceof InvalidRequest);
  assert.deepEqual([invalid.status, invalid.code], [400, "invalid_request"]);

  const wrongPath = new Client({ url: `${SERVICE_URL}/nowhere`, retry: NO_RETRIES });
  await assert.rejects(wrongPath.counts(queue), (error: unknown) => error instanceof NotFound && error.code === "not_found");
  await wrongPath.close();

  const nobody = new Client({ url: "http://127.0.0.1:9", retry: NO_RETRIES });
  await assert.rejects(nobody.counts(queue), (error: unknown) => error instanceof ConnectionFailed && !error.sent);
  await nobody.close();
});
