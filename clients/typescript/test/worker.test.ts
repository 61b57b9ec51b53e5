// Worker: each job exactly once, retries and dead letters, lost leases, and stop() exactness.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Client,
  JobAborted,
  JobError,
  NotFound,
  RetryPolicy,
  Worker,
  type AckItem,
  type HeartbeatItem,
  type Job,
  type LeaseNext,
  type LeaseRequest,
  type WorkerOptions,
} from "echomq";
import { client, deferred, freshQueue, HookedClient, Proxy, SERVICE_URL, sleep, testWorker, waitFor } from "./helpers.js";

const FAST = { url: SERVICE_URL, waitMs: 500, leaseMs: 5000 } as const;

function worker(options: Partial<WorkerOptions> & Pick<WorkerOptions, "queue" | "handler">): Worker {
  return testWorker({ ...FAST, ...(options.client ? { url: undefined } : {}), ...options }); // url or client
}

function abortedBy(signal: AbortSignal): Promise<JobAborted> {
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(signal.reason as JobAborted), { once: true }));
}

test("two workers process N jobs exactly once, each at most `concurrency` at a time", async () => {
  const queue = freshQueue();
  const n = 600;
  for (let start = 0; start < n; start += 300) {
    await client.enqueueMany(
      queue,
      Array.from({ length: 300 }, (_, k) => ({ payload: { n: start + k }, id: `j${start + k}` })),
    );
  }
  const seen = new Map<string, number>();
  const workers = [0, 1].map(() => {
    let running = 0;
    const w = worker({
      queue,
      concurrency: 10,
      handler: async (job: Job) => {
        seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
        running += 1;
        most = Math.max(most, running);
        if ((job.payload as { n: number }).n % 7 === 0) await sleep(5);
        running -= 1;
        return { double: (job.payload as { n: number }).n * 2, attempt: job.attempt };
      },
    });
    return { w, run: w.run() };
  });
  let most = 0;
  await waitFor(async () => (await client.counts(queue)).completed === n, 30_000, "all jobs completed");
  const stats = await Promise.all(workers.map(({ w }) => w.stop()));
  for (const { run } of workers) await run;
  assert.equal(seen.size, n);
  assert.ok([...seen.values()].every((count) => count === 1), "a job ran twice");
  assert.ok(most <= 10, `${most} ran at once in one worker`);
  assert.equal(stats[0]!.acked + stats[1]!.acked, n);
  assert.ok(stats[0]!.acked > 0 && stats[1]!.acked > 0, "one worker did it all");
  for (const s of stats) assert.deepEqual([s.failed, s.lost, s.released, s.errors], [0, 0, 0, []]);
  assert.deepEqual((await client.job(queue, "j21")).result, { double: 42, attempt: 1 });
  assert.deepEqual(await client.counts(queue), { waiting: 0, delayed: 0, active: 0, completed: n, failed: 0, cancelled: 0, waiting_children: 0 });
});

test("batched: one lease for the free slots, one heartbeat for every lease, ack-manies with lease_next", async () => {
  const queue = freshQueue();
  const ids = ["a", "b", "c", "d", "e"];
  await client.enqueueMany(queue, ids.map((id) => ({ payload: id, id })));
  const hooked = new HookedClient({ url: SERVICE_URL });
  const beat = hooked.hold("heartbeatMany", "after");
  const gate = deferred();
  const w = worker({
    queue,
    client: hooked,
    concurrency: 5,
    heartbeatMs: 200,
    handler: async (job: Job) => (await gate.promise, job.id),
  });
  const run = w.run();
  await beat.reached.promise;
  beat.go();
  const [lease] = hooked.sent.get("lease")!.map((args) => args[1] as LeaseRequest);
  assert.equal(lease!.max_jobs, 5);
  assert.ok(lease!.request_id);
  const [leases] = hooked.sent.get("heartbeatMany")!.map((args) => args[1] as HeartbeatItem[]);
  assert.deepEqual(leases!.map((item) => item.id).sort(), ids);
  gate.resolve();
  await waitFor(async () => (await client.counts(queue)).completed === 5, 5000, "five acks");
  // Acks go a share of the slots at a time (3 of 5, then the rest), so two calls can be in
  // flight; their lease_next ask for the slots freed, 5 in all, each under its own request id.
  const acks = hooked.sent.get("ackMany")!;
  assert.deepEqual(
    acks.map((args) => (args[1] as AckItem[]).length),
    [3, 2],
  );
  assert.deepEqual(acks.flatMap((args) => (args[1] as AckItem[]).map((item) => item.id)).sort(), ids);
  const nexts = acks.map((args) => (args[2] as { leaseNext?: LeaseNext }).leaseNext!);
  assert.equal(nexts.reduce((sum, next) => sum + next.max_jobs!, 0), 5);
  const requestIds = new Set([lease!.request_id, ...nexts.map((next) => next.request_id)]);
  assert.equal(requestIds.size, 3);
  const stats = await w.stop();
  await run;
  assert.deepEqual([stats.acked, stats.released, stats.lost], [5, 0, 0]);
  await hooked.close();
});

test("throwing fails the attempt: retried, dead-lettered with retry false, delayed by retryAfterMs", async () => {
  const queue = freshQueue();
  const fixed = { type: "fixed", delay_ms: 0 } as const;
  await client.enqueue(queue, { payload: "flaky", id: "flaky", max_attempts: 3, backoff: fixed });
  await client.enqueue(queue, { payload: "bad", id: "bad", max_attempts: 3 });
  await client.enqueue(queue, { payload: "later", id: "later", max_attempts: 3 });
  await client.enqueue(queue, { payload: "bigint", id: "bigint", max_attempts: 1 });
  const w = worker({
    queue,
    concurrency: 4,
    handler: (job: Job) => {
      if (job.payload === "flaky" && job.attempt < 3) throw new Error(`flaky on attempt ${job.attempt}`);
      if (job.payload === "bad") throw new JobError("cannot be done", { retry: false });
      if (job.payload === "later") throw new JobError("not now", { retryAfterMs: 60_000 });
      if (job.payload === "bigint") return { n: 1n };
      return "made it";
    },
  });
  const run = w.run();
  await waitFor(async () => {
    const counts = await client.counts(queue);
    return counts.completed === 1 && counts.failed === 2 && counts.delayed === 1;
  });
  const stats = await w.stop();
  await run;
  const flaky = await client.job(queue, "flaky");
  assert.deepEqual([flaky.state, flaky.attempt, flaky.result], ["completed", 3, "made it"]);
  const bad = await client.job(queue, "bad");
  assert.deepEqual([bad.state, bad.attempt], ["failed", 1]);
  assert.match(bad.error!, /^JobError: cannot be done/);
  const later = await client.job(queue, "later");
  assert.deepEqual([later.state, later.attempt], ["delayed", 1]);
  const bigint = await client.job(queue, "bigint");
  assert.equal(bigint.state, "failed");
  assert.match(bigint.error!, /not JSON/);
  assert.deepEqual([stats.acked, stats.failed, stats.lost], [1, 5, 0]);
});

test("heartbeats keep a job that outlives its lease", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "slow" });
  const w = worker({ queue, leaseMs: 1000, handler: async () => (await sleep(2500), "slow but fine") });
  const run = w.run();
  await waitFor(async () => (await client.job(queue, "slow")).state === "completed", 10_000);
  const stats = await w.stop();
  await run;
  const job = await client.job(queue, "slow");
  assert.deepEqual([job.attempt, job.result], [1, "slow but fine"]);
  assert.deepEqual([stats.acked, stats.lost], [1, 0]);
});

test("a lease lost (heartbeat answers lease_lost) aborts the handler and its result is never acked", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "j", max_attempts: 1 });
  const started = deferred<Job>();
  const reasons: JobAborted[] = [];
  const w = worker({
    queue,
    worker: "w-lost",
    leaseMs: 1000,
    handler: async (job: Job) => {
      started.resolve(job);
      reasons.push(await abortedBy(job.signal));
      return "must not be acked";
    },
  });
  const run = w.run();
  await started.promise;
  await client.pause(queue); // so that the job is not leased again before we look
  assert.deepEqual(await client.releaseWorker(queue, "w-lost"), ["j"]); // an operator takes it away
  await waitFor(() => reasons.length === 1, 5000, "the abort");
  assert.equal(reasons[0]!.code, "lease_lost");
  await sleep(100);
  const stats = await w.stop();
  await run;
  assert.deepEqual([stats.lost, stats.acked, stats.released], [1, 0, 0]);
  const job = await client.job(queue, "j");
  assert.deepEqual([job.state, job.result, job.attempt], ["waiting", null, 1]);
});

test("a cancel (heartbeat answers cancel_requested) aborts the handler; the job is failed and ends cancelled", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "c", max_attempts: 3 });
  const started = deferred<Job>();
  const reasons: JobAborted[] = [];
  const w = worker({
    queue,
    leaseMs: 1000,
    handler: async (job: Job) => {
      started.resolve(job);
      reasons.push(await abortedBy(job.signal));
      return "must not be acked";
    },
  });
  const run = w.run();
  await started.promise;
  assert.equal((await client.cancel(queue, "c", "not needed")).cancel_requested, true);
  await waitFor(async () => (await client.job(queue, "c")).state === "cancelled", 5000, "the cancellation");
  const stats = await w.stop();
  await run;
  assert.equal(reasons[0]!.code, "cancel_requested");
  assert.deepEqual([stats.failed, stats.acked, stats.lost], [1, 0, 0]);
  assert.equal((await client.job(queue, "c")).attempt, 1);
});

test("a lease that could not be renewed before it ran out aborts the handler; nothing is acked", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "j" });
  const proxy = await Proxy.start();
  const started = deferred<Job>();
  const aborted = deferred<number>();
  const w = worker({
    queue,
    url: proxy.url,
    leaseMs: 1000,
    waitMs: 0,
    handler: async (job: Job) => {
      started.resolve(job);
      const reason = await abortedBy(job.signal);
      assert.equal(reason.code, "lease_lost");
      aborted.resolve(performance.now());
      return "stale";
    },
  });
  const run = w.run();
  const job = await started.promise;
  const cutAt = performance.now();
  proxy.setCut(true); // the service is unreachable: heartbeats fail
  const abortedAt = await aborted.promise;
  assert.ok(abortedAt - cutAt < 1500, `aborted ${abortedAt - cutAt} ms after the cut`);
  await client.pause(queue);
  proxy.setCut(false);
  const stats = await w.stop();
  await run;
  await proxy.close();
  assert.equal(stats.lost, 1);
  assert.equal(stats.acked, 0);
  const view = await client.job(queue, job.id);
  assert.notEqual(view.state, "completed");
  assert.equal(view.result, null);
});

test("an ack that meets an outage is sent again while the lease lives: acked once, at stop() too", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "j" });
  const proxy = await Proxy.start();
  // The client gives up at once: what carries the ack through is the worker's own repeat.
  const cut = new Client({ url: proxy.url, retry: new RetryPolicy({ retries: 0 }) });
  const started = deferred();
  const gate = deferred();
  const w = worker({
    queue,
    client: cut,
    leaseMs: 10_000,
    handler: async () => {
      started.resolve();
      await gate.promise;
      return "through the outage";
    },
  });
  const run = w.run();
  await started.promise;
  proxy.setCut(true);
  const stopping = w.stop(); // stop() while the ack cannot get through: it waits for it
  gate.resolve();
  await sleep(1500);
  assert.equal((await client.job(queue, "j")).state, "active");
  proxy.setCut(false);
  const stats = await stopping;
  await run;
  await cut.close();
  await proxy.close();
  assert.deepEqual([stats.acked, stats.released, stats.lost, stats.errors], [1, 0, 0, []]);
  const job = await client.job(queue, "j");
  assert.deepEqual([job.state, job.result, job.attempt], ["completed", "through the outage", 1]);
});

test("stop(): a handler that returns as stop() is called is acked, not released", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "j" });
  const started = deferred();
  const gate = deferred();
  const w = worker({
    queue,
    handler: async () => {
      started.resolve();
      await gate.promise;
      return "done at stop";
    },
  });
  const run = w.run();
  await started.promise;
  const stopping = w.stop();
  gate.resolve();
  const stats = await stopping;
  await run;
  assert.deepEqual([stats.acked, stats.released, stats.lost], [1, 0, 0]);
  const job = await client.job(queue, "j");
  assert.deepEqual([job.state, job.result], ["completed", "done at stop"]);
});

test("stop(): gathered acks are flushed; a job running past graceMs is aborted and released, attempt unspent", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: "quick", id: "quick" });
  await client.enqueue(queue, { payload: "honours", id: "honours", max_attempts: 1 });
  await client.enqueue(queue, { payload: "ignores", id: "ignores", max_attempts: 1 });
  const reasons: string[] = [];
  const runningNow = new Set<string>();
  const w = worker({
    queue,
    concurrency: 3,
    graceMs: 300,
    ackBatchMs: 60_000, // the quick job's ack waits in the batch until stop() sends it
    handler: async (job: Job) => {
      runningNow.add(job.id);
      if (job.payload === "quick") return "quick";
      if (job.payload === "honours") {
        const reason = await abortedBy(job.signal);
        reasons.push(reason.code);
        throw reason;
      }
      await sleep(1500); // ignores the signal: its return comes too late and is discarded
      return "too late";
    },
  });
  const run = w.run();
  await waitFor(() => runningNow.size === 3, 5000, "three jobs started");
  assert.equal((await client.job(queue, "quick")).state, "active"); // acked only at stop
  const begun = performance.now();
  const stats = await w.stop();
  await run;
  const took = performance.now() - begun;
  assert.ok(took >= 280 && took < 1400, `stop took ${took} ms`);
  assert.deepEqual(reasons, ["stopped"]);
  assert.deepEqual([stats.acked, stats.released, stats.failed, stats.lost], [1, 2, 0, 0]);
  assert.equal((await client.job(queue, "quick")).result, "quick");
  for (const id of ["honours", "ignores"]) assert.equal((await client.job(queue, id)).state, "waiting", id);
  await sleep(1500); // the ignoring handler returns now: nothing happens to its job
  assert.equal((await client.job(queue, "ignores")).state, "waiting");
  const again = await client.lease(queue, { worker: "w2", max_jobs: 10 });
  assert.deepEqual(
    again.map((job) => [job.id, job.attempt]).sort(),
    [
      ["honours", 1],
      ["ignores", 1],
    ],
  ); // released: the attempt was not spent (max_attempts 1, and still leased)
});

test("stop(): jobs that a lease in flight brings are released, never started", async () => {
  const queue = freshQueue();
  let calls = 0;
  const w = worker({ queue, concurrency: 4, waitMs: 3000, handler: () => void (calls += 1) });
  const run = w.run();
  await sleep(300); // the long poll is waiting
  const stopping = w.stop();
  await client.enqueueMany(queue, [{ payload: 1, id: "a" }, { payload: 2, id: "b" }]);
  const stats = await stopping;
  await run;
  assert.equal(calls, 0);
  assert.equal(stats.released, 2);
  for (const id of ["a", "b"]) assert.equal((await client.job(queue, id)).state, "waiting", id);
  const again = await client.lease(queue, { worker: "w2", max_jobs: 10 });
  assert.deepEqual(again.map((job) => job.attempt), [1, 1]);
});

test("handleSignals: SIGTERM stops the worker; a second stop skips the grace period", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: null, id: "j" });
  const started = deferred();
  const w = worker({
    queue,
    graceMs: 60_000,
    handleSignals: true,
    handler: async (job: Job) => {
      started.resolve();
      await abortedBy(job.signal);
    },
  });
  const run = w.run();
  await started.promise;
  const listeners = process.listenerCount("SIGTERM");
  process.kill(process.pid, "SIGTERM");
  await sleep(200);
  const begun = performance.now();
  process.kill(process.pid, "SIGTERM"); // impatient: skip the grace
  const stats = await run;
  assert.ok(performance.now() - begun < 2000);
  assert.equal(stats.released, 1);
  assert.equal(process.listenerCount("SIGTERM"), listeners - 1);
  assert.equal((await client.job(queue, "j")).state, "waiting");
});

test("run() rejects when leasing cannot work (wrong URL)", async () => {
  const w = worker({ queue: freshQueue(), url: `${SERVICE_URL}/nowhere`, handler: () => undefined });
  await assert.rejects(w.run(), NotFound);
});

test("a worker opens a session with info, honours quiet, and ends the session on stop", async () => {
  const queue = freshQueue();
  const release = deferred();
  let started = 0;
  await client.enqueueMany(queue, [0, 1, 2].map((n) => ({ id: `j${n}`, payload: n })));
  const w = worker({
    queue,
    sessionTtlMs: 1500,
    sessionInfo: { role: "test" },
    handler: async () => {
      started += 1;
      await release.promise;
    },
  });
  const run = w.run();
  await waitFor(() => started === 1);
  const [listed] = await client.workers(queue);
  assert.equal(listed?.worker, w.workerId);
  assert.equal(listed?.session?.state, "running");
  assert.deepEqual({ ...(listed?.session?.info as object), pid: 0, host: "" }, { role: "test", sdk: "echomq-ts/0.1.0", pid: 0, host: "" });
  assert.equal((await client.quiet(queue, w.workerId)).state, "quiet");
  await waitFor(() => w.sessionState === "quiet");
  release.resolve();
  await waitFor(async () => (await client.counts(queue)).completed === 1);
  await sleep(500); // a worker still leasing would have taken the next job by now
  const counts = await client.counts(queue);
  assert.deepEqual([counts.completed, counts.waiting, counts.active, started], [1, 2, 0, 1]);
  await w.stop();
  await run;
  assert.deepEqual(await client.workers(queue), []); // the session ended with the worker
});

test("without sessions the worker opens none", async () => {
  const queue = freshQueue();
  const release = deferred();
  let started = false;
  await client.enqueue(queue, { id: "a", payload: 1 });
  const w = worker({
    queue,
    session: false,
    handler: async () => {
      started = true;
      await release.promise;
    },
  });
  const run = w.run();
  await waitFor(() => started);
  const [listed] = await client.workers(queue);
  assert.equal(listed?.session, null);
  release.resolve();
  await w.stop();
  await run;
});
