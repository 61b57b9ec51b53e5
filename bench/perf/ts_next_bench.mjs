// The TypeScript SDK's Client in single-job loops, each ack leasing the next job (lease_next,
// max_jobs 1): the counterpart of bullmq_bench.mjs's `fetch_next` (moveToCompleted(..., true)),
// both Node clients, for bench/bench.py's `ts_next` row.
//
//   node bench/ts_next_bench.mjs '<json spec>'
//
// Needs the SDK built (bench.py builds clients/typescript). spec.queue holds jobs before this
// starts; spec.concurrency loops on one Client (keep-alive undici) run from the warm-up to the
// window's end. Prints one JSON object, the shape bullmq_bench.mjs prints.

import { performance } from 'node:perf_hooks';
import { cpuSample as cpuSampleOf } from './cpu.mjs';
import { Window, printResult } from './window.mjs';

const spec = JSON.parse(process.argv[2]);
const { Client } = await import(new URL('../../clients/typescript/dist/index.js', import.meta.url).href);

const cpuSample = () => cpuSampleOf(spec.watch);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const client = new Client({ url: spec.url });
  const window = new Window(spec.warmup_ms, spec.duration_ms, cpuSample);
  const loop = async (index) => {
    const worker = `ts-next-${index}`;
    const next = { worker, lease_ms: spec.lease_ms, max_jobs: 1, wait_ms: 0 };
    let [job] = await client.lease(spec.queue, next);
    while (!window.over()) {
      if (!job) {
        window.empty();
        await sleep(5);
        [job] = await client.lease(spec.queue, next);
        continue;
      }
      const started = performance.now();
      const answer = await client.ack(spec.queue, job.id, job.lease_id, { lease_next: next });
      window.note(1, 1, performance.now() - started);
      [job] = answer.jobs ?? [];
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, (_, index) => loop(index)));
  await window.finished();
  await client.close();
  return window.result();
}

printResult('ts_next_bench', spec.deadline_ms, main);
