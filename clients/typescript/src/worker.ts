// Worker: leases jobs, runs a handler on each, renews the leases, acks or fails or releases.
//
//   const worker = new Worker({ queue: "emails", concurrency: 8, handler: async (job) => {
//     await send(job.payload, { signal: job.signal });
//     return { sent: true };                         // the job's result (acked)
//   }});
//   await worker.run();                               // until stop() (or SIGTERM/SIGINT)
//
// - Leases for all free slots at once (max_jobs = free slots), each lease with a request_id, so
//   a lease repeated after a lost answer leases nothing twice. A lease waits (long poll) up to
//   waitMs for jobs to come.
// - Returning acks with the value as the result. Acks are gathered for up to ackBatchMs (or until
//   no handler runs, or a PIPELINE-th of the slots is done) into ack-many calls whose lease_next
//   leases the next jobs for the slots that freed up. A full worker keeps about PIPELINE such
//   calls in flight, so the service and Redis work on one batch while this process runs another.
//   Throwing fails the attempt with the error's text; an error with
//   `retry: false` dead-letters the job, one with `retryAfterMs` sets the delay (see JobError).
// - One heartbeat-many every heartbeatMs (leaseMs / 3) renews every lease held. A lease found
//   lost (the heartbeat answers lease_lost / job_not_found, or it could not be renewed before it
//   ran out) aborts the handler's signal and its outcome is discarded: never acked or failed.
//   A heartbeat answering cancel_requested (someone cancelled the job) aborts the signal too
//   (reason code "cancel_requested"), and once the handler ends the job is failed, whatever it
//   returned: the service then ends it cancelled. A handler done before that heartbeat is acked.
// - stop() (and SIGTERM/SIGINT with handleSignals) stops leasing and lets running handlers finish
//   for up to graceMs; acks of the handlers that returned until then are sent, the rest are
//   aborted and released (back to the front of the queue, the attempt not spent), and so are the
//   jobs that a lease in flight brings. A handler that returned is always acked (or failed).
// - Sessions (session: true, the default): the worker opens a session on its queue before its
//   first lease and renews it on the heartbeat timer (at least three times per sessionTtlMs,
//   default 30000), with info (host, pid, SDK, plus sessionInfo). If the process dies the
//   session lapses and the service gives its jobs back then, not when their leases run out. A
//   session heartbeat answering "quiet" (an operator's quiet) stops leasing; running jobs finish.
//   Once stopped and settled, the worker ends its session (which gives back anything still held).

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { Client, NO_RETRIES, type LeaseNext, type LeasedJob } from "./client.js";
import {
  BackendUnavailable,
  ConnectionFailed,
  Forbidden,
  InvalidRequest,
  JobAborted,
  JobNotFound,
  LeaseLost,
  NotFound,
  PayloadTooLarge,
  TooManyRequests,
  Unauthorized,
} from "./errors.js";

/** What a handler gets: the leased job as the API answers it, and a signal aborted when the
 * job is taken away (its `reason` is a JobAborted: "lease_lost", "stopped" or "cancel_requested"). */
export interface Job extends LeasedJob {
  readonly signal: AbortSignal;
}

export type Handler = (job: Job) => unknown;

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions {
  queue: string;
  handler: Handler;
  /** The service's base URL (default $EMQ_URL, else http://127.0.0.1:8080); not with `client`. */
  url?: string;
  /** Bearer token (default $EMQ_TOKEN); not with `client`. */
  token?: string;
  /** A client of your own (not closed by the worker). */
  client?: Client;
  /** This worker's name in the ledger (letters, digits, . _ -); default host-pid-random. */
  worker?: string;
  /** Jobs run at once (default 1). */
  concurrency?: number;
  /** Lease length in ms (default 30000). */
  leaseMs?: number;
  /** How long a lease waits for jobs to come, in ms (default 5000, at most 20000). */
  waitMs?: number;
  /** After stop(): how long running handlers may still finish, in ms (default 30000). */
  graceMs?: number;
  /** Heartbeat interval in ms (default leaseMs / 3). */
  heartbeatMs?: number;
  /** Acks are gathered this long (ms, default 5) into one call; sooner when no handler runs. */
  ackBatchMs?: number;
  /** SIGTERM and SIGINT call stop() while run() runs (a second one skips the grace period). */
  handleSignals?: boolean;
  /** Where warnings go (default: console.warn / console.error; info is dropped). */
  logger?: Logger;
  /** Open a worker session (default true); false: the v1 behaviour, leases only. */
  session?: boolean;
  /** The session lapses this long after its last renewal (ms, 1000..300000, default 30000). */
  sessionTtlMs?: number;
  /** Shown by GET .../workers with the host, pid and SDK (a JSON object, at most 4 KiB). */
  sessionInfo?: Record<string, unknown>;
}

export interface WorkerStats {
  acked: number;
  failed: number;
  /** Leases lost: outcomes discarded. */
  lost: number;
  released: number;
  /** Acks, fails and releases that the service did not take (their leases run out). */
  errors: string[];
}

const MAX_ERROR_CHARS = 8000;
const MAX_BATCH = 1000; // ack-many and heartbeat-many take at most this many items
const MAX_LEASE = 100; // a lease takes at most this many jobs
const PIPELINE = 2; // ack-many calls (each with its lease_next) a full worker keeps in flight
const FATAL = [Unauthorized, Forbidden, InvalidRequest, NotFound]; // retrying cannot help
const TRANSIENT = [ConnectionFailed, BackendUnavailable, TooManyRequests]; // the service may take it later

type State = "running" | "settling" | "releasing" | "gone";

interface Entry {
  job: LeasedJob;
  /** Made when the handler first reads job.signal (most never do: an AbortController per job
   * is a noticeable part of a small job's cost). */
  abort?: AbortController;
  /** Why the job was taken away, once it was: a signal made later starts aborted. */
  aborted?: JobAborted;
  /** When the lease runs out by this process's clock, conservatively (performance.now()). */
  expiresAt: number;
  state: State;
}

interface Ack {
  entry: Entry;
  result: unknown;
}

const defaultLogger: Logger = {
  info: () => {},
  warn: (message) => console.warn(`echomq worker: ${message}`),
  error: (message) => console.error(`echomq worker: ${message}`),
};

export function defaultWorkerId(): string {
  const host = hostname().replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 80).replace(/^[-.]+|[-.]+$/g, "") || "worker";
  return `${host}-${process.pid}-${randomBytes(2).toString("hex")}`;
}

/** `Name: message` and the stack, cut to what a fail takes. */
export function errorText(error: unknown): string {
  let text: string;
  if (error instanceof Error) {
    const head = `${error.name}: ${error.message}`;
    const stack = error.stack ?? "";
    text = stack.includes(error.message) ? stack : `${head}\n\n${stack}`;
  } else {
    text = `Error: ${typeof error === "string" ? error : safeJson(error) ?? String(error)}`;
  }
  return text.length > MAX_ERROR_CHARS ? text.slice(0, MAX_ERROR_CHARS - 3) + "..." : text;
}

function safeJson(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
}

const now = () => performance.now();

function signalOf(entry: Entry): AbortSignal {
  if (entry.abort === undefined) {
    entry.abort = new AbortController();
    if (entry.aborted !== undefined) entry.abort.abort(entry.aborted);
  }
  return entry.abort.signal;
}

function abortEntry(entry: Entry, reason: JobAborted): void {
  entry.aborted ??= reason;
  entry.abort?.abort(reason);
}

export class Worker {
  readonly queue: string;
  readonly workerId: string;
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly waitMs: number;
  readonly heartbeatMs: number;
  readonly ackBatchMs: number;
  readonly session: boolean;
  readonly sessionTtlMs: number;
  readonly sessionInfo: Record<string, unknown>;
  /** What the last session heartbeat said: "running" or "quiet" (undefined before the first). */
  sessionState: string | undefined;
  graceMs: number;
  readonly stats: WorkerStats = { acked: 0, failed: 0, lost: 0, released: 0, errors: [] };

  private readonly handler: Handler;
  private readonly client: Client;
  private readonly ownClient: boolean;
  private readonly handleSignals: boolean;
  private readonly log: Logger;
  private readonly requestPrefix = `r${randomBytes(6).toString("hex")}`;
  private requests = 0;

  private readonly held = new Map<string, Entry>(); // by lease id: every lease this worker holds
  private running = 0; // handlers whose outcome is still awaited
  private claimed = 0; // slots that leases in flight may fill
  private polling = false; // a lease call (not an ack's lease_next) is in flight or backing off
  private acks: Ack[] = [];
  private ackTimer: NodeJS.Timeout | undefined;
  private readonly inflight = new Set<Promise<void>>(); // acks, fails, releases, polls
  private tick: NodeJS.Timeout | undefined;
  private beating = false;
  private lastBeat = 0;
  private beatDelay: number;
  private failures = 0;

  private started = false;
  private stopping = false;
  private stopRequested = false;
  private finished: Promise<WorkerStats> | undefined;
  private wakeBackoff: (() => void) | undefined; // ends a lease's back-off early (stop)
  private stopWaiter: Promise<void>;
  private resolveStop!: () => void;
  private idleWaiters: Array<() => void> = [];
  private endGrace: (() => void) | undefined;
  private fatal: unknown;
  private quiet = false; // the session said quiet: lease nothing more
  private sessionOpened = false;
  private sessionBeating = false;
  private lastSessionBeat = 0;

  constructor(options: WorkerOptions) {
    if (!options.queue) throw new TypeError("queue is required");
    if (typeof options.handler !== "function") throw new TypeError("handler must be a function");
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be an integer >= 1");
    if (options.client && (options.url !== undefined || options.token !== undefined)) {
      throw new TypeError("give either client or url/token");
    }
    this.queue = options.queue;
    this.handler = options.handler;
    this.workerId = options.worker ?? defaultWorkerId();
    this.concurrency = concurrency;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.waitMs = options.waitMs ?? 5_000;
    this.graceMs = options.graceMs ?? 30_000;
    this.heartbeatMs = options.heartbeatMs ?? this.leaseMs / 3;
    this.beatDelay = this.heartbeatMs;
    this.ackBatchMs = options.ackBatchMs ?? 5;
    this.handleSignals = options.handleSignals ?? false;
    this.log = options.logger ?? defaultLogger;
    this.session = options.session ?? true;
    this.sessionTtlMs = options.sessionTtlMs ?? 30_000;
    if (!Number.isInteger(this.sessionTtlMs) || this.sessionTtlMs < 1000 || this.sessionTtlMs > 300_000) {
      throw new RangeError("sessionTtlMs must be an integer in 1000..300000");
    }
    this.sessionInfo = { host: hostname(), pid: process.pid, sdk: "echomq-ts/0.1.0", ...options.sessionInfo };
    this.ownClient = options.client === undefined;
    this.client = options.client ?? new Client({ url: options.url, token: options.token });
    this.stopWaiter = new Promise((resolve) => (this.resolveStop = resolve));
  }

  /** Work until stop() (or SIGTERM/SIGINT with handleSignals); resolves with the stats once
   * everything held is given back. Rejects if leasing met an error retrying cannot fix
   * (unauthorized, forbidden, invalid request, wrong URL), after giving back what it held. */
  run(): Promise<WorkerStats> {
    if (this.started) throw new Error("this worker has run already");
    this.started = true;
    this.finished = this.work();
    return this.finished;
  }

  /** Stop taking jobs; resolves when run() is over. A second call skips the grace period. */
  stop(): Promise<WorkerStats> {
    if (this.stopRequested) {
      this.graceMs = 0;
      this.endGrace?.();
    }
    this.stopRequested = true;
    this.stopping = true; // from now on nothing is leased
    this.resolveStop();
    this.wakeBackoff?.();
    return this.finished ?? Promise.resolve(this.stats);
  }

  // --- the run -----------------------------------------------------------------------------------

  private async work(): Promise<WorkerStats> {
    const onSignal = () => void this.stop();
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    this.log.info(`${this.workerId}: working on queue ${this.queue} (concurrency ${this.concurrency})`);
    this.lastBeat = now();
    if (!this.stopping) await this.sessionBeat(); // the session opens before the first lease
    this.tick = setInterval(() => this.onTick(), Math.max(50, Math.min(this.heartbeatMs, 500)));
    try {
      this.pump();
      await this.stopWaiter;
      await this.windDown();
    } finally {
      clearInterval(this.tick);
      await this.endSession();
      if (this.ackTimer) clearTimeout(this.ackTimer);
      if (this.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      if (this.ownClient) await this.client.close();
      this.log.info(`${this.workerId}: stopped (${JSON.stringify(this.stats)})`);
    }
    if (this.fatal !== undefined) throw this.fatal;
    return this.stats;
  }

  private async windDown(): Promise<void> {
    // 1. Running handlers may finish within the grace period (their acks keep flowing).
    if (this.running > 0 && this.graceMs > 0) {
      this.log.info(`waiting up to ${this.graceMs} ms for ${this.running} running job(s)`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.graceMs);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.endGrace = done;
        this.idleWaiters.push(done);
      });
    }
    // 2. The rest are aborted; their leases are given back below, whatever the handlers do now.
    for (const entry of this.held.values()) {
      if (entry.state !== "running") continue;
      entry.state = "releasing";
      this.running -= 1;
      abortEntry(entry, new JobAborted("stopped", "the worker stopped and the grace period ran out"));
    }
    // 3. Acks gathered so far, fails, and the lease calls in flight (whatever they bring is
    //    released as it comes): all settled before the running jobs are released, or a lease in
    //    flight could take them again.
    await this.settle();
    // 4. Release what is left.
    for (const entry of this.held.values()) {
      if (entry.state === "releasing") this.track(this.release(entry));
    }
    await this.settle();
  }

  private async settle(): Promise<void> {
    while (this.acks.length > 0 || this.inflight.size > 0) {
      if (this.acks.length > 0) this.flushAcks();
      await Promise.all([...this.inflight]);
    }
  }

  private track(promise: Promise<void>): void {
    const tracked = promise.catch((error) => this.log.error(`internal error: ${String(error)}`));
    this.inflight.add(tracked);
    void tracked.finally(() => this.inflight.delete(tracked));
  }

  private free(): number {
    return Math.min(MAX_LEASE, this.concurrency - this.running - this.claimed);
  }

  private nextRequestId(): string {
    this.requests += 1;
    return `${this.requestPrefix}-${this.requests}`;
  }

  /** Sends what is due: gathered acks (with a lease for the free slots), else a lease. */
  private pump(): void {
    if (this.acks.length > 0) {
      if (this.acks.length >= this.share() || this.running === 0 || this.stopping) this.flushAcks();
      else this.ackTimer ??= setTimeout(() => this.flushAcks(), this.ackBatchMs);
    }
    if (!this.stopping && !this.quiet && !this.polling && this.acks.length === 0 && this.free() > 0) {
      this.polling = true;
      this.track(this.poll());
    }
  }

  // --- leasing -----------------------------------------------------------------------------------

  private async poll(): Promise<void> {
    const wanted = this.free();
    this.claimed += wanted;
    const sentAt = now();
    let jobs: LeasedJob[] = [];
    let backoff = 0;
    try {
      jobs = await this.client.lease(this.queue, {
        worker: this.workerId,
        lease_ms: this.leaseMs,
        max_jobs: wanted,
        wait_ms: this.waitMs,
        request_id: this.nextRequestId(),
      });
      this.failures = 0;
    } catch (error) {
      if (FATAL.some((Class) => error instanceof Class)) {
        this.log.error(`lease failed, stopping: ${String(error)}`);
        this.fatal ??= error;
        void this.stop();
      } else {
        this.failures += 1;
        backoff = Math.min(10_000, 200 * 2 ** this.failures) * (0.5 + Math.random() / 2);
        this.log.warn(`lease failed (${String(error)}); trying again in ${Math.round(backoff)} ms`);
      }
    } finally {
      this.claimed -= wanted;
    }
    this.accept(jobs, sentAt);
    if (backoff > 0 && !this.stopping) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => done(), backoff);
        const done = () => {
          clearTimeout(timer);
          this.wakeBackoff = undefined;
          resolve();
        };
        this.wakeBackoff = done;
      });
    }
    this.polling = false;
    if (!this.stopping) this.pump();
  }

  /** Jobs a lease brought: started, or released when the worker is stopping. */
  private accept(jobs: LeasedJob[], sentAt: number): void {
    for (const job of jobs) {
      const entry: Entry = { job, expiresAt: sentAt + this.leaseMs, state: "running" };
      this.held.set(job.lease_id, entry);
      if (this.stopping || this.running >= this.concurrency) {
        entry.state = "releasing";
        this.track(this.release(entry));
      } else {
        this.running += 1;
        void this.runHandler(entry);
      }
    }
  }

  // --- one job -----------------------------------------------------------------------------------

  private async runHandler(entry: Entry): Promise<void> {
    const job = { ...entry.job } as Job;
    Object.defineProperty(job, "signal", { enumerable: true, get: () => signalOf(entry) });
    let ok: boolean;
    let value: unknown;
    try {
      value = await this.handler(job);
      ok = true;
    } catch (error) {
      value = error;
      ok = false;
    }
    if (entry.state !== "running") return; // lost or released meanwhile: the outcome is discarded
    entry.state = "settling";
    this.running -= 1;
    if (entry.aborted?.code === "cancel_requested") {
      ok = false; // whatever it returned: an ack would complete a job someone cancelled
      value = entry.aborted;
    }
    if (ok && value !== undefined && safeJson(value) === undefined) {
      ok = false;
      value = new TypeError("the handler's result is not JSON");
    }
    if (ok) this.acks.push({ entry, result: value });
    else this.track(this.fail(entry, value));
    if (this.running === 0) this.wakeIdle();
    this.pump();
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const waiter of waiters) waiter();
  }

  private lose(entry: Entry, why: string): void {
    if (entry.state === "running") {
      this.running -= 1;
      abortEntry(entry, new JobAborted("lease_lost", why));
      this.stats.lost += 1;
      this.log.warn(`job ${entry.job.id}: ${why}; outcome discarded`);
      if (this.running === 0) this.wakeIdle();
    } else if (entry.state === "releasing") {
      this.log.warn(`job ${entry.job.id}: ${why}; nothing to release`);
    } else {
      return; // settling: its ack or fail answers for itself
    }
    entry.state = "gone";
    this.held.delete(entry.job.lease_id);
    if (!this.stopping) this.pump();
  }

  // --- acks, fails, releases ------------------------------------------------------------------------

  private flushAcks(): void {
    if (this.ackTimer) {
      clearTimeout(this.ackTimer);
      this.ackTimer = undefined;
    }
    const size = this.share();
    for (let left = Math.ceil(this.acks.length / size); left > 0; left -= 1) {
      this.track(this.sendAcks(this.acks.splice(0, size), left));
    }
  }

  /** The acks worth a call of their own: a PIPELINE-th of the slots. */
  private share(): number {
    return Math.min(MAX_BATCH, Math.ceil(this.concurrency / PIPELINE));
  }

  /** Acks batch; its lease_next takes a 1/parts part of the free slots (parts 0: no lease). */
  private async sendAcks(batch: Ack[], parts = 1): Promise<void> {
    const wanted = this.stopping || this.quiet || parts === 0 ? 0 : Math.max(0, Math.ceil(this.free() / parts));
    const leaseNext: LeaseNext | undefined =
      wanted > 0
        ? { worker: this.workerId, lease_ms: this.leaseMs, max_jobs: wanted, wait_ms: 0, request_id: this.nextRequestId() }
        : undefined;
    this.claimed += wanted;
    const sentAt = now();
    const items = batch.map(({ entry, result }) =>
      result === undefined
        ? { id: entry.job.id, lease_id: entry.job.lease_id }
        : { id: entry.job.id, lease_id: entry.job.lease_id, result },
    );
    let jobs: LeasedJob[] = [];
    try {
      const answer = await this.persist(
        () => this.client.ackMany(this.queue, items, { leaseNext }),
        batch.map((ack) => ack.entry),
      );
      answer.results.forEach((result, index) => {
        const entry = batch[index]!.entry;
        if (result.ok) this.stats.acked += 1;
        else {
          this.stats.lost += 1;
          this.log.warn(`job ${entry.job.id}: not acked, ${result.code}`);
        }
        this.forget(entry);
      });
      jobs = answer.jobs ?? [];
    } catch (error) {
      if ((error instanceof InvalidRequest || error instanceof PayloadTooLarge) && batch.length > 1) {
        // One result the service refuses refuses the whole batch (nothing was acked): one by one.
        await Promise.all(batch.map((ack) => this.sendAcks([ack], 0)));
      } else if (error instanceof InvalidRequest || error instanceof PayloadTooLarge) {
        await this.fail(batch[0]!.entry, new TypeError(`the service refused the result: ${error.detail}`));
      } else {
        for (const { entry } of batch) {
          this.stats.errors.push(`ack ${entry.job.id}: ${String(error)}`);
          this.forget(entry);
        }
        this.log.error(`ack of ${batch.length} job(s) failed (${String(error)}); their leases will run out`);
      }
    } finally {
      this.claimed -= wanted;
    }
    this.accept(jobs, sentAt);
    if (!this.stopping) this.pump();
  }

  private async fail(entry: Entry, error: unknown): Promise<void> {
    const hint = (error ?? {}) as { retry?: unknown; retryAfterMs?: unknown };
    const retryAfter = hint.retryAfterMs;
    try {
      const options = {
        retry: hint.retry === false ? false : undefined,
        retry_after_ms:
          typeof retryAfter === "number" && Number.isFinite(retryAfter) ? Math.max(0, Math.round(retryAfter)) : undefined,
      };
      const text = errorText(error);
      await this.persist(() => this.client.fail(this.queue, entry.job.id, entry.job.lease_id, text, options), [entry]);
      this.stats.failed += 1;
    } catch (problem) {
      if (problem instanceof LeaseLost || problem instanceof JobNotFound) {
        this.stats.lost += 1;
        this.log.warn(`job ${entry.job.id}: failure not recorded, ${problem.code}`);
      } else {
        this.stats.errors.push(`fail ${entry.job.id}: ${String(problem)}`);
        this.log.error(`job ${entry.job.id}: fail not recorded (${String(problem)}); its lease will run out`);
      }
    }
    this.forget(entry);
  }

  private async release(entry: Entry): Promise<void> {
    try {
      await this.persist(() => this.client.release(this.queue, entry.job.id, entry.job.lease_id), [entry]);
      this.stats.released += 1;
      this.log.info(`released job ${entry.job.id}`);
    } catch (error) {
      if (error instanceof LeaseLost || error instanceof JobNotFound) {
        this.log.warn(`job ${entry.job.id}: not released, ${error.code}`);
      } else {
        this.stats.errors.push(`release ${entry.job.id}: ${String(error)}`);
        this.log.warn(`could not release job ${entry.job.id} (${String(error)}); its lease will run out`);
      }
    }
    this.forget(entry);
  }

  /** call(), again after transient errors while a lease of these entries may still be alive (the
   * client has retried already). Safe: the service answers a repeated ack, fail or release (same
   * lease) as it answered the first, and a lease_next repeats by its request_id. */
  private async persist<T>(call: () => Promise<T>, entries: Entry[]): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (error) {
        const alive = entries.some((entry) => now() < entry.expiresAt);
        if (!alive || !TRANSIENT.some((Class) => error instanceof Class)) throw error;
        const delay = Math.min(5000, 200 * 2 ** attempt) * (0.5 + Math.random() / 2);
        this.log.warn(`${String(error)}; trying again in ${Math.round(delay)} ms`);
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  private forget(entry: Entry): void {
    entry.state = "gone";
    this.held.delete(entry.job.lease_id);
  }

  // --- heartbeats --------------------------------------------------------------------------------

  private onTick(): void {
    const at = now();
    for (const entry of this.held.values()) {
      if (entry.state === "running" && at >= entry.expiresAt) this.lose(entry, "the lease ran out without a renewal");
    }
    if (this.session && !this.sessionBeating && at - this.lastSessionBeat >= this.sessionEvery()) {
      this.track(this.sessionBeat());
    }
    if (!this.beating && this.held.size > 0 && at - this.lastBeat >= this.beatDelay) {
      this.beating = true;
      this.lastBeat = at;
      this.track(this.beat());
    }
  }

  // --- the session -------------------------------------------------------------------------------

  /** Session heartbeats: every heartbeatMs, and at least three times per sessionTtlMs. */
  private sessionEvery(): number {
    return Math.min(this.heartbeatMs, this.sessionTtlMs / 3);
  }

  private async sessionBeat(): Promise<void> {
    if (!this.session || this.sessionBeating) return;
    this.sessionBeating = true;
    this.lastSessionBeat = now();
    try {
      const answer = await this.client.sessionHeartbeat(
        this.queue,
        this.workerId,
        { ttl_ms: this.sessionTtlMs, info: this.sessionInfo },
        { retry: NO_RETRIES, timeoutMs: Math.max(1000, this.sessionEvery()) },
      );
      this.sessionOpened = true;
      this.sessionState = answer.state;
      if (answer.state === "quiet" && !this.quiet) {
        this.quiet = true;
        this.log.info(`${this.workerId}: quieted; leasing nothing more, finishing ${this.running} job(s)`);
      }
    } catch (error) {
      this.lastSessionBeat = now() - this.sessionEvery() / 2; // again in half the interval
      this.log.warn(`session heartbeat failed (${String(error)})`);
    } finally {
      this.sessionBeating = false;
    }
  }

  /** Once stopped and settled: end the session (it gives back anything still held). */
  private async endSession(): Promise<void> {
    if (!this.sessionOpened) return;
    this.sessionOpened = false;
    try {
      const released = await this.client.endSession(this.queue, this.workerId);
      if (released.length > 0) this.log.warn(`ending the session gave back ${released.join(", ")}`);
    } catch (error) {
      this.log.warn(`could not end the session (${String(error)}); it will lapse`);
    }
  }

  private async beat(): Promise<void> {
    const entries = [...this.held.values()].filter((entry) => entry.state !== "gone");
    const sentAt = now();
    try {
      for (let start = 0; start < entries.length; start += MAX_BATCH) {
        const chunk = entries.slice(start, start + MAX_BATCH);
        const results = await this.client.heartbeatMany(
          this.queue,
          chunk.map((entry) => ({ id: entry.job.id, lease_id: entry.job.lease_id })),
          // The next beat is the retry; one that hangs must not outlive the lease.
          { retry: NO_RETRIES, timeoutMs: Math.max(1000, Math.min(this.heartbeatMs, this.leaseMs / 2)) },
        );
        results.forEach((result, index) => {
          const entry = chunk[index]!;
          if (!result.ok) this.lose(entry, `heartbeat answered ${result.code}`);
          else {
            entry.expiresAt = Math.max(entry.expiresAt, sentAt + this.leaseMs);
            if (result.cancel_requested && entry.state === "running" && entry.aborted === undefined) {
              // Failed once its handler ends (runHandler): the service then ends it cancelled.
              abortEntry(entry, new JobAborted("cancel_requested", "the job's cancellation was requested"));
            }
          }
        });
      }
      this.beatDelay = this.heartbeatMs;
    } catch (error) {
      // Again soon: a quarter of what is left of the earliest lease, at least 200 ms.
      let earliest = Infinity;
      for (const entry of this.held.values()) earliest = Math.min(earliest, entry.expiresAt);
      this.beatDelay = Math.min(this.heartbeatMs, Math.max(200, (earliest - now()) / 4));
      this.log.warn(`heartbeat failed (${String(error)}); again in ${Math.round(this.beatDelay)} ms`);
    } finally {
      this.beating = false;
    }
  }
}
