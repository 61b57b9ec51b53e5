// BullMQ side of bench/bench.py: the same workloads, on the same Redis, in one Node process.
//
//   NODE_PATH=~/.cache/echomq-bench/node/node_modules node bench/bullmq_bench.mjs '<json spec>'
//
// bench.py installs bullmq (pinned: bench_plan.BULLMQ_VERSION) into a cache folder outside the repository and runs
// this script once per workload; it prints one JSON object on stdout. Workloads (spec.workload):
//   add          Queue.add, one job per call, spec.concurrency calls in flight
//   addBulk      Queue.addBulk of spec.batch jobs, spec.concurrency calls in flight
//   worker       a Worker (concurrency spec.concurrency, no-op processor) on a pre-filled queue; with
//                spec.drain the window (and the CPU's) ends when the last job is completed
//   manual       spec.concurrency loops, each its own Worker (autorun off): getNextJob(token) then
//                job.moveToCompleted(result, token, false), one job at a time
//   fetch_next   the same loops, each completing its job with job.moveToCompleted(result, token, true),
//                which fetches the next job in the same call (as BullMQ's Worker does)
//   latency      a Worker (concurrency 1) waiting on an empty queue; the time from calling
//                Queue.add to the processor being called, spec.samples times, one at a time
//   memory       used_memory before and after adding spec.count jobs (addBulk) to a new queue
//   ack_cost     spec.in_flight jobs moved to active (getNextJob, 12 h locks), then acked one at a
//                time with job.moveToCompleted(result, token, false): first the spec.samples oldest
//                (lease order), then the jobs at spec.positions among the rest (lease order
//                positions); the Redis time per ack from INFO commandstats (EVALSHA + EVAL)
// Work before the warm-up ends is not counted; the window ends early when the queue runs dry.

import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { cpuSample as cpuSampleOf } from './cpu.mjs';
import { Window as MeasuredWindow } from './window.mjs';

const spec = JSON.parse(process.argv[2]);
// Resolve bullmq from the cache folder bench.py installed it in (spec.node_modules).
const require = createRequire(path.join(spec.node_modules, 'noop.js'));
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const connection = { host: spec.host, port: spec.port, maxRetriesPerRequest: null };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const cpuSample = () => cpuSampleOf(spec.watch);

class Window extends MeasuredWindow {
  constructor(warmupMs, durationMs) {
    super(warmupMs, durationMs, cpuSample);
  }
}

// Set-up, not measured: count jobs in addBulk calls of 1000, a few in flight at once.
async function prefill(queue, count) {
  const batch = Array.from({ length: 1000 }, () => ({ name: 'job', data: spec.payload }));
  let left = count;
  const loop = async () => {
    while (left > 0) {
      const size = Math.min(1000, left);
      left -= size;
      await queue.addBulk(size === 1000 ? batch : batch.slice(0, size));
    }
  };
  await Promise.all(Array.from({ length: 4 }, loop));
}

// INFO commandstats: answered calls (not failed or rejected: an EVALSHA answered NOSCRIPT is a
// failed call) and usec of the script commands (EVALSHA + EVAL).
async function scriptStats(client) {
  const info = await client.info('commandstats');
  let calls = 0;
  let usec = 0;
  for (const line of info.split(/\r?\n/)) {
    const match = /^cmdstat_(?:evalsha|eval):(.*)$/.exec(line);
    if (!match) continue;
    const stats = Object.fromEntries(match[1].split(',').map((pair) => pair.split('=')));
    calls += Number(stats.calls) - Number(stats.failed_calls || 0) - Number(stats.rejected_calls || 0);
    usec += Number(stats.usec);
  }
  return { calls, usec };
}

function median(values) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.round(0.5 * (sorted.length - 1))];
}

async function usedMemory(client) {
  const info = await client.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)[1]);
}

const workloads = {
  async add(queue) {
    const window = new Window(spec.warmup_ms, spec.duration_ms);
    const loop = async () => {
      while (!window.over()) {
        const started = performance.now();
        await queue.add('job', spec.payload);
        window.note(1, 1, performance.now() - started);
      }
    };
    await Promise.all(Array.from({ length: spec.concurrency }, loop));
    await window.finished();
    return window.result();
  },

  async addBulk(queue) {
    const jobs = Array.from({ length: spec.batch }, () => ({ name: 'job', data: spec.payload }));
    const window = new Window(spec.warmup_ms, spec.duration_ms);
    const loop = async () => {
      while (!window.over()) {
        const started = performance.now();
        await queue.addBulk(jobs);
        window.note(spec.batch, 1, performance.now() - started);
      }
    };
    await Promise.all(Array.from({ length: spec.concurrency }, loop));
    await window.finished();
    return window.result();
  },

  async worker(queue) {
    await prefill(queue, spec.prefill);
    const window = new Window(spec.warmup_ms, spec.duration_ms);
    let done = 0;
    const worker = new Worker(spec.queue, async () => {}, { connection, concurrency: spec.concurrency });
    worker.on('completed', () => {
      done += 1;
      window.note(1, 1, 0);
      if (done === spec.prefill) {
        window.empty();
        if (spec.drain) window.closeNow();
      }
    });
    worker.on('error', () => { window.errors += 1; });
    while (!window.over() && done < spec.prefill) await sleep(20);
    await window.finished();
    await worker.close(true);
    const result = window.result();
    result.latencies_ms = [];
    return result;
  },

  async manual(queue) {
    await prefill(queue, spec.prefill);
    const workers = [];
    let workerErrors = 0;
    for (let i = 0; i < spec.concurrency; i++) {
      const worker = new Worker(spec.queue, null, { connection, autorun: false });
      worker.on('error', () => { workerErrors += 1; });
      await worker.waitUntilReady();
      workers.push(worker);
    }
    const window = new Window(spec.warmup_ms, spec.duration_ms);
    const loop = async (worker) => {
      const token = randomUUID();
      while (!window.over()) {
        const started = performance.now();
        const job = await worker.getNextJob(token, { block: false });
        if (!job) {
          window.empty();
          await sleep(5);
          continue;
        }
        await job.moveToCompleted('ok', token, false);
        window.note(1, 2, performance.now() - started);
      }
    };
    await Promise.all(workers.map(loop));
    await window.finished();
    await Promise.all(workers.map((worker) => worker.close(true)));
    window.errors += workerErrors;
    return window.result();
  },

  async fetch_next(queue) {
    await prefill(queue, spec.prefill);
    const workers = [];
    let workerErrors = 0;
    for (let i = 0; i < spec.concurrency; i++) {
      const worker = new Worker(spec.queue, null, { connection, autorun: false });
      worker.on('error', () => { workerErrors += 1; });
      await worker.waitUntilReady();
      workers.push(worker);
    }
    const window = new Window(spec.warmup_ms, spec.duration_ms);
    const loop = async (worker) => {
      const token = randomUUID();
      let job = await worker.getNextJob(token, { block: false });
      while (!window.over()) {
        if (!job) {
          window.empty();
          await sleep(5);
          job = await worker.getNextJob(token, { block: false });
          continue;
        }
        const started = performance.now();
        const next = await job.moveToCompleted('ok', token, true);
        window.note(1, 1, performance.now() - started);
        // What BullMQ's Worker does with the answer (Worker.handleCompleted).
        job = Array.isArray(next) ? await worker.nextJobFromJobData(next[0], next[1], token) : undefined;
      }
    };
    await Promise.all(workers.map(loop));
    await window.finished();
    await Promise.all(workers.map((worker) => worker.close(true)));
    window.errors += workerErrors;
    return window.result();
  },

  async latency(queue) {
    let onStart = null;
    const worker = new Worker(spec.queue, async () => {
      const startedAt = performance.now();
      if (onStart) onStart(startedAt);
    }, { connection, concurrency: 1 });
    await worker.waitUntilReady();
    await sleep(200);
    const window = new Window(0, spec.duration_ms);
    for (let i = 0; i < spec.samples && !window.over(); i++) {
      // Let the worker go back to waiting (blocked on Redis) before the next job arrives.
      await sleep(spec.settle_ms);
      const started = new Promise((resolve) => { onStart = resolve; });
      const sentAt = performance.now();
      await queue.add('job', spec.payload);
      const startedAt = await started;
      window.jobs += 1;
      window.requests += 1;
      window.latencies.push(startedAt - sentAt);
    }
    await worker.close();
    window.end = Date.now();
    window.cpuEnd = cpuSample();
    return window.result();
  },

  async ack_cost(queue) {
    const setupStarted = performance.now();
    await prefill(queue, spec.in_flight);
    // A few Workers (each its own connection) move the jobs to active; the locks outlast the run.
    const workers = [];
    for (let i = 0; i < 8; i++) {
      const worker = new Worker(spec.queue, null, { connection, autorun: false, lockDuration: 12 * 3600 * 1000 });
      worker.on('error', () => {});
      await worker.waitUntilReady();
      workers.push(worker);
    }
    const held = new Map(); // job id -> { job, token }
    let left = spec.in_flight;
    const take = async (worker) => {
      const token = randomUUID();
      while (left > 0) {
        left -= 1;
        const job = await worker.getNextJob(token, { block: false });
        if (!job) throw new Error(`ack_cost: the queue ran dry with ${held.size} jobs active`);
        held.set(job.id, { job, token });
      }
    };
    await Promise.all(workers.map(take));
    // Lease order, from Redis itself: the active list's right end holds the oldest.
    const client = new IORedis(connection);
    const activeKey = `bull:${spec.queue}:active`;
    const order = (await client.lrange(activeKey, 0, -1)).reverse().map((id) => held.get(id));
    const setupS = (performance.now() - setupStarted) / 1000;

    const timed = async (entries) => {
      const inFlight = await client.llen(activeKey);
      const before = await scriptStats(client);
      const clientMs = [];
      for (const { job, token } of entries) {
        const started = performance.now();
        await job.moveToCompleted('ok', token, false);
        clientMs.push(performance.now() - started);
      }
      const after = await scriptStats(client);
      const calls = after.calls - before.calls;
      return {
        acks: entries.length,
        in_flight_before: inFlight,
        script_calls: calls,
        redis_us_per_call: calls ? (after.usec - before.usec) / calls : null,
        client_ms_p50: median(clientMs),
        client_ms_mean: clientMs.reduce((a, b) => a + b, 0) / Math.max(1, clientMs.length),
      };
    };
    const lease = await timed(order.slice(0, spec.samples));
    const rest = order.slice(spec.samples);
    const random = await timed(spec.positions.map((index) => rest[index]));
    await client.quit();
    await Promise.all(workers.map((worker) => worker.close(true)));
    return { in_flight: spec.in_flight, setup_s: Math.round(setupS * 10) / 10, lease, random };
  },

  async memory(queue) {
    const client = new IORedis(connection);
    const before = await usedMemory(client);
    await prefill(queue, spec.count);
    const after = await usedMemory(client);
    await client.quit();
    return { jobs: spec.count, used_memory_before: before, used_memory_after: after };
  },
};

async function main() {
  const queue = new Queue(spec.queue, { connection });
  await queue.waitUntilReady();
  try {
    const result = await workloads[spec.workload](queue);
    // A pipe takes the output in pieces: exit only once all of it is written.
    await new Promise((resolve) => process.stdout.write(JSON.stringify(result) + '\n', resolve));
  } finally {
    await queue.close();
  }
}

const deadline = setTimeout(() => {
  process.stderr.write(`bullmq_bench: ${spec.workload} passed its deadline\n`);
  process.exit(2);
}, spec.deadline_ms || 120000);
deadline.unref();

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`bullmq_bench: ${error?.stack || error}\n`);
    process.exit(1);
  },
);
