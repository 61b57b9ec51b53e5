// An EchoMQ HTTP worker in TypeScript. Its client is generated from the service's OpenAPI
// document (openapi-typescript writes src/schema.d.ts; openapi-fetch makes the typed calls), so a
// change of the contract that breaks this code fails `npm run build`.
//
//   npm ci && npm run build
//   EMQ_URL=http://127.0.0.1:8080 node dist/worker.js shout --concurrency 4
//
// Payload {"text": string} -> result {"shout": TEXT, "worker": name}; any other payload fails the
// attempt with retry: false (dead letter). Leases are renewed every lease_ms / 3 while a job runs;
// a heartbeat answered lease_lost aborts the job and nothing is acked. SIGTERM/SIGINT: take no
// more jobs, abort the running ones and release their leases, exit 0.

import { hostname } from "node:os";
import { parseArgs } from "node:util";
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type LeasedJob = components["schemas"]["LeasedJob"];
type Problem = components["schemas"]["Problem"];

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    concurrency: { type: "string", default: "2" },
    "lease-ms": { type: "string", default: "30000" },
    "wait-ms": { type: "string", default: "5000" },
    worker: { type: "string" },
  },
});
const queue = positionals[0] ?? "shout";
const concurrency = Number(values.concurrency);
const leaseMs = Number(values["lease-ms"]);
const waitMs = Number(values["wait-ms"]);
const worker =
  values.worker ?? `node-${hostname().replace(/[^A-Za-z0-9._-]/g, "-")}-${process.pid}`.slice(0, 128);
const token = process.env.EMQ_TOKEN;

const client = createClient<paths>({
  baseUrl: (process.env.EMQ_URL ?? "http://127.0.0.1:8080").replace(/\/$/, ""),
  headers: token ? { Authorization: `Bearer ${token}` } : {},
});

// Thrown for input that no retry can fix: the attempt fails with retry: false (dead letter).
class Permanent extends Error {
  override name = "Permanent";
}

async function handle(job: LeasedJob, signal: AbortSignal): Promise<unknown> {
  const payload = job.payload as { text?: unknown; delay_ms?: unknown } | null;
  if (typeof payload?.text !== "string") throw new Permanent("payload.text must be a string");
  const delay = typeof payload.delay_ms === "number" ? payload.delay_ms : 0;
  if (delay > 0) await sleep(delay, signal); // stands for slow work that honours the signal
  return { shout: payload.text.toUpperCase(), worker };
}

function log(event: string, fields: Record<string, unknown> = {}): void {
  console.log(JSON.stringify({ event, ...fields }));
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(timer), reject(signal.reason)), { once: true });
  });
}

const isLost = (error: Problem | undefined) =>
  error?.code === "lease_lost" || error?.code === "job_not_found";

let stopping = false;
const stopped = new AbortController(); // aborted on SIGTERM/SIGINT
const running = new Map<string, { abort: AbortController; done: Promise<void> }>();

async function release(job: LeasedJob): Promise<void> {
  const { error } = await client.POST("/v1/queues/{queue}/jobs/{id}/release", {
    params: { path: { queue, id: job.id } },
    body: { lease_id: job.lease_id },
  });
  log(error ? "release-failed" : "released", { id: job.id, code: error?.code });
}

async function run(job: LeasedJob, abort: AbortController): Promise<void> {
  const heartbeat = setInterval(async () => {
    try {
      const { error } = await client.POST("/v1/queues/{queue}/jobs/{id}/heartbeat", {
        params: { path: { queue, id: job.id } },
        body: { lease_id: job.lease_id, lease_ms: leaseMs },
      });
      if (isLost(error)) abort.abort("lease_lost");
    } catch {
      // the service is unreachable: try again at the next beat
    }
  }, leaseMs / 3);
  let outcome: { result: unknown } | { error: unknown };
  try {
    outcome = { result: await handle(job, abort.signal) };
  } catch (error) {
    outcome = { error };
  } finally {
    clearInterval(heartbeat);
  }
  if (abort.signal.aborted) {
    // Never ack blindly: the lease is lost (another worker may hold the job), or we are stopping.
    if (abort.signal.reason === "stopping") await release(job);
    else log("lease-lost", { id: job.id });
    return;
  }
  const path = { params: { path: { queue, id: job.id } } };
  if ("result" in outcome) {
    const { error } = await client.POST("/v1/queues/{queue}/jobs/{id}/ack", {
      ...path,
      body: { lease_id: job.lease_id, result: outcome.result },
    });
    log(error ? "ack-failed" : "done", { id: job.id, attempt: job.attempt, code: error?.code });
  } else {
    const text = String(outcome.error instanceof Error ? outcome.error.stack : outcome.error);
    const { data, error } = await client.POST("/v1/queues/{queue}/jobs/{id}/fail", {
      ...path,
      body: {
        lease_id: job.lease_id,
        error: text.slice(0, 4000),
        retry: !(outcome.error instanceof Permanent),
      },
    });
    log(error ? "fail-failed" : "failed", { id: job.id, state: data?.state, code: error?.code });
  }
}

function start(job: LeasedJob): void {
  const entry = { abort: new AbortController(), done: Promise.resolve() };
  entry.done = run(job, entry.abort)
    .catch((error) => log("job-error", { id: job.id, error: String(error) }))
    .finally(() => running.delete(job.id));
  running.set(job.id, entry);
}

async function main(): Promise<void> {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, () => {
      stopping = true;
      stopped.abort();
    });
  }
  log("started", { queue, worker, concurrency });
  while (!stopping) {
    const free = concurrency - running.size;
    if (free <= 0) {
      await Promise.race([...[...running.values()].map((entry) => entry.done), sleep(60_000, stopped.signal)]).catch(
        () => undefined,
      );
      continue;
    }
    // The long poll is not aborted on SIGTERM: a job leased at that instant would be lost until
    // its lease ran out. It answers within wait_ms; whatever it brings is released.
    let jobs: LeasedJob[] = [];
    try {
      const { data, error } = await client.POST("/v1/queues/{queue}/lease", {
        params: { path: { queue } },
        body: { worker, lease_ms: leaseMs, max_jobs: free, wait_ms: waitMs },
      });
      if (error) throw new Error(`${error.status} ${error.code}: ${error.detail}`);
      jobs = data.jobs;
    } catch (error) {
      log("lease-failed", { error: String(error) });
      await sleep(1000, stopped.signal).catch(() => undefined);
      continue;
    }
    for (const job of jobs) {
      if (stopping) await release(job);
      else start(job);
    }
  }
  for (const entry of running.values()) entry.abort.abort("stopping");
  await Promise.all([...running.values()].map((entry) => entry.done));
  log("stopped");
}

await main();
