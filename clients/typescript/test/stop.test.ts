// The Worker stopped at every point of a job's life, against the real service: every job ends
// exactly once. A job whose handler returned is completed once (never released, never left
// active); a job that never ran, or whose handler outlived the grace, is waiting again with its
// attempt unspent; nothing is left in the ledger.
//
// The points are reached with hooks, not sleeps: handlers wait on gates, and HookedClient
// (helpers.ts) holds a call before it is sent or after the answer came: a request in flight.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, Worker, type Job, type WorkerOptions } from "echomq";
import { client, deferred, freshQueue, HookedClient, SERVICE_URL, sleep, testWorker } from "./helpers.js";

/** What handlers did: runs per job; gates a handler waits on before it returns. */
class Runs {
  readonly count = new Map<string, number>();
  readonly started = new Map<string, ReturnType<typeof deferred<void>>>();
  readonly gates = new Map<string, ReturnType<typeof deferred<void>>>();

  handler = async (job: Job): Promise<string> => {
    this.count.set(job.id, (this.count.get(job.id) ?? 0) + 1);
    this.startedOf(job.id).resolve();
    await this.gates.get(job.id)?.promise;
    return `done ${job.id}`;
  };

  startedOf(id: string): ReturnType<typeof deferred<void>> {
    if (!this.started.has(id)) this.started.set(id, deferred());
    return this.started.get(id)!;
  }

  gate(...ids: string[]): void {
    for (const id of ids) this.gates.set(id, deferred());
  }

  open(...ids: string[]): void {
    for (const id of ids) this.gates.get(id)!.resolve();
  }
}

function hookedWorker(hooked: Client, queue: string, runs: Runs, options: Partial<WorkerOptions> = {}): Worker {
  return testWorker({ client: hooked, queue, handler: runs.handler, waitMs: 500, ...options });
}

async function enqueue(queue: string, ...ids: string[]): Promise<void> {
  await client.enqueueMany(queue, ids.map((id) => ({ payload: id, id })));
}

/** A fresh queue holding these jobs, a hooked client, and the record of runs. */
async function scene(...ids: string[]): Promise<{ queue: string; hooked: HookedClient; runs: Runs }> {
  const queue = freshQueue();
  await enqueue(queue, ...ids);
  return { queue, hooked: new HookedClient({ url: SERVICE_URL }), runs: new Runs() };
}

/** completed: done once, by one run, with that run's result; back: waiting with the attempt
 * unspent (ran: those whose handler had started and outlived the grace); the ledger empty. */
async function assertEndedOnce(
  queue: string,
  runs: Runs,
  expected: { completed: Iterable<string>; back: Iterable<string>; ran?: Iterable<string> },
): Promise<void> {
  const completed = [...expected.completed];
  const back = [...expected.back];
  const ran = new Set(expected.ran ?? []);
  for (const id of completed) {
    const job = await client.job(queue, id);
    assert.deepEqual([job.state, job.result, runs.count.get(id)], ["completed", `done ${id}`, 1], id);
  }
  for (const id of back) {
    const job = await client.job(queue, id);
    assert.deepEqual([job.state, job.result], ["waiting", null], id);
    assert.equal(runs.count.get(id) ?? 0, ran.has(id) ? 1 : 0, id);
  }
  assert.deepEqual(await client.active(queue), []);
  const counts = await client.counts(queue);
  assert.deepEqual([counts.active, counts.completed, counts.waiting], [0, completed.length, back.length]);
  const again = [];
  while (again.length < back.length) again.push(...(await client.lease(queue, { worker: "checker", max_jobs: 100 })));
  // A release is not a delivery: the next lease is attempt 1.
  assert.deepEqual(again.map((job) => [job.id, job.attempt]).sort(), back.map((id) => [id, 1]).sort());
}

for (const when of ["before", "after"] as const) {
  test(`leased, not started: a lease held ${when} it is sent when stop() comes brings jobs that are released, never run`, async () => {
    const { queue, hooked, runs } = await scene("a", "b");
    const held = hooked.hold("lease", when);
    const w = hookedWorker(hooked, queue, runs, { concurrency: 4 });
    const run = w.run();
    await held.reached.promise;
    const stopping = w.stop();
    held.go();
    const stats = await stopping;
    await run;
    assert.deepEqual([stats.acked, stats.released], [0, 2]);
    await assertEndedOnce(queue, runs, { completed: [], back: ["a", "b"] });
    await hooked.close();
  });
}

test("running: a handler that returns within the grace is acked; one that outlives it is released", async () => {
  const { queue, hooked, runs } = await scene("quick", "slow");
  runs.gate("quick", "slow");
  const w = hookedWorker(hooked, queue, runs, { concurrency: 2, graceMs: 400 });
  const run = w.run();
  await Promise.all([runs.startedOf("quick").promise, runs.startedOf("slow").promise]);
  const stopping = w.stop();
  await sleep(50);
  runs.open("quick"); // returns during the grace
  const stats = await stopping;
  await run;
  runs.open("slow"); // returns after its job was released: discarded
  await sleep(50);
  assert.deepEqual([stats.acked, stats.released], [1, 1]);
  await assertEndedOnce(queue, runs, { completed: ["quick"], back: ["slow"], ran: ["slow"] });
  await hooked.close();
});

test("returned, its ack gathered and not yet sent: stop() sends it", async () => {
  const { queue, hooked, runs } = await scene("a", "b");
  runs.gate("b");
  // Acks wait a minute for company while b runs (and a share of the slots, 2 of 4, is not done).
  const w = hookedWorker(hooked, queue, runs, { concurrency: 4, ackBatchMs: 60_000 });
  const run = w.run();
  await Promise.all([runs.startedOf("a").promise, runs.startedOf("b").promise]);
  await sleep(100); // a returned at once: its ack waits in the batch (b still runs)
  assert.equal(hooked.calls.get("ackMany") ?? 0, 0);
  assert.equal((await client.job(queue, "a")).state, "active");
  const stopping = w.stop();
  runs.open("b");
  const stats = await stopping;
  await run;
  assert.deepEqual([stats.acked, stats.released], [2, 0]);
  await assertEndedOnce(queue, runs, { completed: ["a", "b"], back: [] });
  await hooked.close();
});

for (const when of ["before", "after"] as const) {
  test(`ack in flight (held ${when} it is sent): acked once; the jobs its lease_next brings are released`, async () => {
    const { queue, hooked, runs } = await scene("a", "b", "c", "d");
    // At concurrency 2 each returned job's ack goes in an ack-many of its own (a PIPELINE-th
    // of the slots), each with a lease_next of one: both are held, so neither brings a job
    // that could run before stop().
    const held = [hooked.hold("ackMany", when), hooked.hold("ackMany", when, 2)];
    const w = hookedWorker(hooked, queue, runs, { concurrency: 2 });
    const run = w.run();
    await Promise.all(held.map((hold) => hold.reached.promise)); // the first two returned
    const stopping = w.stop();
    for (const hold of held) hold.go();
    const stats = await stopping;
    await run;
    const first = [...runs.count.keys()].sort();
    assert.equal(first.length, 2);
    const rest = ["a", "b", "c", "d"].filter((id) => !first.includes(id));
    assert.deepEqual([stats.acked, stats.released], [2, 2]);
    await assertEndedOnce(queue, runs, { completed: first, back: rest });
    await hooked.close();
  });
}

test("a heartbeat in flight at stop(): the job that returns meanwhile is acked", async () => {
  const { queue, hooked, runs } = await scene("a");
  runs.gate("a");
  const held = hooked.hold("heartbeatMany", "after");
  const w = hookedWorker(hooked, queue, runs, { heartbeatMs: 100 });
  const run = w.run();
  await held.reached.promise;
  const stopping = w.stop();
  runs.open("a");
  await sleep(50);
  held.go();
  const stats = await stopping;
  await run;
  assert.deepEqual([stats.acked, stats.released, stats.lost], [1, 0, 0]);
  await assertEndedOnce(queue, runs, { completed: ["a"], back: [] });
  await hooked.close();
});

for (const afterMs of [0, 15, 40, 120]) {
  test(`stop() ${afterMs} ms into a busy run: every job completed once or waiting untouched`, async () => {
    const queue = freshQueue();
    const ids = Array.from({ length: 300 }, (_, n) => `j${n}`);
    await enqueue(queue, ...ids);
    const runs = new Runs();
    const handler = async (job: Job) => {
      if (Number(job.id.slice(1)) % 3 === 0) await sleep(Number(job.id.slice(1)) % 20);
      return runs.handler(job);
    };
    const w = testWorker({ url: SERVICE_URL, queue, handler, concurrency: 20, waitMs: 500 });
    const run = w.run();
    await sleep(afterMs);
    const stats = await w.stop();
    await run;
    const ran = [...runs.count.keys()];
    assert.equal(stats.acked, ran.length);
    await assertEndedOnce(queue, runs, { completed: ran, back: ids.filter((id) => !runs.count.has(id)) });
  });
}
