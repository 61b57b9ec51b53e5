// A throughput workload's measured window, for the Node benchmark clients (bullmq_bench.mjs,
// ts_next_bench.mjs): work before the warm-up ends is not counted, the window ends early when
// the queue runs dry, and the CPU of the watched processes is sampled at its start and end.
// cpuSample: () => {name: seconds of CPU so far} (cpu.mjs). And printResult: how the SDK bench
// clients (ts_worker_bench.mjs, ts_next_bench.mjs) end.

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class Window {
  constructor(warmupMs, durationMs, cpuSample) {
    this.cpuSample = cpuSample;
    const now = Date.now();
    this.start = now + warmupMs;
    this.end = this.start + durationMs;
    this.jobs = 0;
    this.requests = 0;
    this.errors = 0;
    this.firstEmptyAt = null;
    this.latencies = [];
    this.cpuStart = null;
    this.cpuEnd = null;
    setTimeout(() => { this.cpuStart = this.cpuSample(); }, warmupMs);
    setTimeout(() => { if (this.cpuEnd === null) this.cpuEnd = this.cpuSample(); }, warmupMs + durationMs);
  }
  // The work is done before the planned end (a drain): the window and its CPU end now.
  closeNow() {
    if (this.cpuEnd !== null) return;
    this.end = Math.min(this.end, Date.now());
    this.cpuEnd = this.cpuSample();
  }
  inside(now) { return now >= this.start && now < this.end && this.firstEmptyAt === null; }
  note(jobs, requests, latencyMs) {
    if (this.inside(Date.now())) {
      this.jobs += jobs;
      this.requests += requests;
      this.latencies.push(latencyMs);
    }
  }
  empty() {
    const now = Date.now();
    if (now >= this.start && now < this.end && this.firstEmptyAt === null) this.firstEmptyAt = now;
  }
  over() { return Date.now() >= this.end; }
  async finished() {
    while (this.cpuEnd === null) await sleep(5);
  }
  result(extra = {}) {
    const end = this.firstEmptyAt ?? this.end;
    const cpu = {};
    for (const name of Object.keys(this.cpuEnd)) cpu[name] = this.cpuEnd[name] - this.cpuStart[name];
    return {
      jobs: this.jobs,
      requests: this.requests,
      errors: this.errors,
      empty: this.firstEmptyAt === null ? 0 : 1,
      window_s: Math.max(1e-9, (end - this.start) / 1000),
      planned_window_s: (this.end - this.start) / 1000,
      latencies_ms: this.latencies.map((ms) => Math.round(ms * 10000) / 10000),
      cpu_s: cpu,
      ...extra,
    };
  }
}


// Runs main() under a deadline and prints its result as one JSON line (exit 0), or the error
// (exit 1); exit 2 when the deadline passes first.
export function printResult(name, deadlineMs, main) {
  const deadline = setTimeout(() => {
    process.stderr.write(`${name}: passed its deadline\n`);
    process.exit(2);
  }, deadlineMs || 120000);
  deadline.unref();
  main().then(
    (result) => process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0)),
    (error) => {
      process.stderr.write(`${name}: ${error?.stack || error}\n`);
      process.exit(1);
    },
  );
}
