// The TypeScript SDK's Worker (clients/typescript) on a pre-filled queue: the counterpart of
// bullmq_bench.mjs's `worker` workload, for bench/bench.py's `ts_worker` row.
//
//   node bench/ts_worker_bench.mjs '<json spec>'
//
// Needs the SDK built (bench.py runs `npm ci` and `npm run build` in clients/typescript). The
// queue (spec.queue) holds spec.prefill jobs before this starts; a Worker (concurrency
// spec.concurrency, no-op handler) on spec.url works until all of them are acked. The window runs
// from the Worker's start to the last ack's answer (the same span BullMQ's is measured over with
// warmup_ms 0: from `new Worker` to its last `completed` event). Prints one JSON object, the shape
// bullmq_bench.mjs prints.

import { performance } from 'node:perf_hooks';
import { cpuSample as cpuSampleOf } from './cpu.mjs';
import { printResult } from './window.mjs';

const spec = JSON.parse(process.argv[2]);
const { Worker } = await import(new URL('../../clients/typescript/dist/index.js', import.meta.url).href);

const cpuSample = () => cpuSampleOf(spec.watch);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  let handled = 0;
  const worker = new Worker({
    url: spec.url,
    queue: spec.queue,
    concurrency: spec.concurrency,
    leaseMs: spec.lease_ms ?? 60_000,
    waitMs: 1000,
    handler: () => {
      handled += 1;
    },
  });
  const cpuStart = cpuSample();
  const started = performance.now();
  const run = worker.run();
  const limit = started + spec.duration_ms;
  while (worker.stats.acked < spec.prefill && performance.now() < limit) await sleep(2);
  const ended = performance.now();
  const cpuEnd = cpuSample();
  const stats = await worker.stop();
  await run;
  const cpu = {};
  for (const name of Object.keys(cpuEnd)) cpu[name] = cpuEnd[name] - cpuStart[name];
  const windowS = Math.max(1e-9, (ended - started) / 1000);
  return {
    jobs: stats.acked,
    requests: 0,
    errors: stats.errors.length + stats.lost + stats.failed,
    empty: stats.acked >= spec.prefill ? 1 : 0,
    window_s: windowS,
    planned_window_s: windowS,
    latencies_ms: [],
    cpu_s: cpu,
    handled,
  };
}

printResult('ts_worker_bench', spec.deadline_ms, main);
