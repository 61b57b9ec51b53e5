// Client: the API's operations, typed by the document (src/schema.ts is generated from
// openapi/openapi.json by `npm run generate`). Every call goes through `call`, whose path, body
// and answer types are looked up in the generated `paths`: a path, field or answer the document
// does not have fails to compile.
//
// Data is the API's JSON as it is (snake_case fields: lease_id, max_jobs, ...). Errors are thrown
// as the classes of errors.ts, chosen by the problem's code. Calls that are safe to repeat are
// retried on 503, 429 and lost connections (see RetryPolicy). test/contract.test.ts checks that
// every operation of the document has its method here.

import { APIError, BackendUnavailable, ConnectionFailed, EchoMQError, TooManyRequests, errorFor } from "./errors.js";
import { EventFeed, IDLE_MS, type EventsOptions, type FeedEvent } from "./events.js";
import { Transport, type Answer } from "./http.js";
import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];
export type EnqueueRequest = Schemas["EnqueueRequest"];
export type EnqueueResponse = Schemas["EnqueueResponse"];
export type LeaseRequest = Schemas["LeaseRequest"];
export type LeasedJob = Schemas["LeasedJob"];
export type HeartbeatItem = Schemas["HeartbeatItem"];
export type HeartbeatResponse = Schemas["HeartbeatResponse"];
export type HeartbeatResult = Schemas["HeartbeatItemResult"];
export type AckItem = Schemas["AckItem"];
export type AckResponse = Schemas["AckResponse"];
export type AckResult = Schemas["AckItemResult"];
export type AckManyResponse = Schemas["AckManyResponse"];
export type FailResponse = Schemas["FailResponse"];
export type ReleaseResponse = Schemas["ReleaseResponse"];
export type CancelResponse = Schemas["CancelResponse"];
export type PromoteResponse = Schemas["PromoteResponse"];
export type FlowNode = Schemas["FlowNode"];
export type FlowJob = Schemas["FlowJob"];
export type ChildView = Schemas["ChildView"];
export type ChildrenPage = Schemas["ChildrenPage"];
export type JobView = Schemas["JobView"];
export type JobState = JobView["state"];
export type JobPage = Schemas["JobPage"];
export type HistoryMinute = Schemas["HistoryMinute"];
export type QueueView = Schemas["QueueView"];
export type Counts = Schemas["Counts"];
export type FailedPage = Schemas["FailedPage"];
export type PauseResponse = Schemas["PauseResponse"];
export type LedgerEntry = Schemas["LedgerEntry"];
export type WorkerHoldings = Schemas["WorkerHoldings"];
export type SessionHeartbeatResponse = Schemas["SessionHeartbeatResponse"];
export type QuietResponse = Schemas["QuietResponse"];
export type QueueSettings = Schemas["QueueSettings"];
export type GroupLimitResponse = Schemas["GroupLimitResponse"];
export type GroupPage = Schemas["GroupPage"];
export type QueueList = Schemas["QueueList"];
export type ScheduleRequest = Schemas["ScheduleRequest"];
export type ScheduleJob = Schemas["ScheduleJob"];
export type ScheduleView = Schemas["ScheduleView"];

function everyIdGiven(node: FlowNode): boolean {
  return node.id != null && (node.children ?? []).every(everyIdGiven);
}

// --- types looked up in the generated document ------------------------------------------------

type Method = "get" | "post" | "put" | "delete";
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
/** The paths that have this method. */
type PathsWith<M extends Method> = {
  [P in keyof paths]: [NonNullable<paths[P][M]>] extends [never] ? never : P;
}[keyof paths];
type PathParams<O> = O extends { parameters: { path: infer X } } ? X : undefined;
type Query<O> = O extends { parameters: { query?: infer Q } } ? ([Q] extends [never] ? undefined : Q) : undefined;
type Body<O> = O extends { requestBody: { content: { "application/json": infer B } } }
  ? B
  : O extends { requestBody?: { content: { "application/json": infer B } } }
    ? B | undefined
    : undefined;
type JsonOf<R> = R extends { content: { "application/json": infer J } } ? J : never;
/** What a success answers: the JSON of its 2xx responses (undefined for 204). */
type Success<O> = O extends { responses: infer R }
  ? { [S in keyof R]: S extends 200 | 201 ? JsonOf<R[S]> : S extends 204 ? undefined : never }[keyof R]
  : never;

interface Call<O> {
  path: PathParams<O>;
  query?: Query<O>;
  body?: Body<O>;
  headers?: Record<string, string>;
  /** Safe to repeat after an ambiguous failure (a 503, a dropped connection). */
  idempotent: boolean;
  /** The service may hold the answer this long (a long poll): added to the timeout. */
  longPollMs?: number;
  timeoutMs?: number;
  /** Retries of this call; default: the client's policy. */
  retry?: RetryPolicy;
}

// --- retries -----------------------------------------------------------------------------------

/** Retries of calls that are safe to repeat: GETs, enqueue with a client-chosen id, heartbeat,
 * ack with the same lease, lease with a request_id... on 503 and lost connections. Any call is
 * retried when the connection could not be opened (nothing was sent) or on 429 (the service did
 * nothing). Delays grow exponentially with full jitter; a Retry-After is honoured (capped). */
export class RetryPolicy {
  readonly retries: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;

  constructor(options: { retries?: number; baseDelayMs?: number; maxDelayMs?: number } = {}) {
    this.retries = options.retries ?? 4;
    this.baseDelayMs = options.baseDelayMs ?? 200;
    this.maxDelayMs = options.maxDelayMs ?? 5000;
  }

  shouldRetry(attempt: number, idempotent: boolean, error: unknown): boolean {
    if (attempt >= this.retries) return false;
    if (error instanceof TooManyRequests) return true;
    if (error instanceof ConnectionFailed) return !error.sent || idempotent;
    if (error instanceof BackendUnavailable) return idempotent;
    return false;
  }

  delayMs(attempt: number, error: unknown): number {
    const backoff = Math.random() * Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** attempt);
    const hinted = error instanceof APIError ? error.retryAfterMs : undefined;
    return hinted ? Math.min(this.maxDelayMs, Math.max(backoff, hinted)) : backoff;
  }
}

export const NO_RETRIES = new RetryPolicy({ retries: 0 });

export interface ClientOptions {
  /** The service's base URL; default $EMQ_URL, else http://127.0.0.1:8080. */
  url?: string;
  /** Bearer token; default $EMQ_TOKEN. */
  token?: string;
  /** Per-request timeout in ms (default 30000); a long poll adds its wait_ms. */
  timeoutMs?: number;
  retry?: RetryPolicy;
  /** Keep-alive connections to the service at most (default 64). */
  connections?: number;
}

export interface LeaseNext {
  worker: string;
  lease_ms?: number;
  max_jobs?: number;
  wait_ms?: number;
  request_id?: string | null;
}

export const DEFAULT_URL = "http://127.0.0.1:8080";
export const VERSION = "0.1.0";

/** The states a job's outcome wait ends on. */
export const OUTCOMES: ReadonlySet<JobState> = new Set(["completed", "failed", "cancelled"]);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const seg = encodeURIComponent;
const QUEUES_PER_PAGE = 1000; // the most per page of GET /v1/queues: the fewest calls

/** A sleep that an abort ends early. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return sleep(ms);
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  readonly retry: RetryPolicy;
  /** The longest wait_ms the service takes on a job read: longer outcome waits take several. */
  protected readonly waitStepMs: number = 60_000;
  private readonly transport: Transport;

  constructor(options: ClientOptions = {}) {
    this.url = (options.url ?? process.env.EMQ_URL ?? DEFAULT_URL).replace(/\/+$/, "");
    const token = options.token ?? (process.env.EMQ_TOKEN || undefined);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retry = options.retry ?? new RetryPolicy();
    const headers: Record<string, string> = { accept: "application/json", "user-agent": `echomq-ts/${VERSION}` };
    if (token) headers.authorization = `Bearer ${token}`;
    this.transport = new Transport(this.url, { headers, connections: options.connections });
  }

  /** Closes the kept connections; calls after this fail. */
  close(): Promise<void> {
    return this.transport.close();
  }

  // --- producing --------------------------------------------------------------------------------

  /** Add a job. With `id` the call is idempotent: an existing job with that id is left as it is
   * and answered with `created: false`. */
  enqueue(queue: string, job: EnqueueRequest, options: { traceparent?: string } = {}): Promise<EnqueueResponse> {
    return this.call("post", "/v1/queues/{queue}/jobs", {
      path: { queue },
      body: job,
      headers: traceHeaders(options.traceparent),
      idempotent: job.id != null,
    });
  }

  /**
   * Make a flow: `job` runs once all its `children` (jobs in any queues, each maybe with children
   * of its own) have finished; answers the jobs made or found, root first. With every node's `id`
   * given the call is idempotent (and retried safely); JobExists when a node's id is another job's
   * (nothing is made).
   */
  async createFlow(job: FlowNode): Promise<FlowJob[]> {
    const answer = await this.call("post", "/v1/flows", {
      path: undefined,
      body: { job },
      idempotent: everyIdGiven(job),
    });
    return answer.jobs;
  }

  /** Add 1..1000 jobs in one request, all or none. */
  async enqueueMany(
    queue: string,
    jobs: EnqueueRequest[],
    options: { traceparent?: string } = {},
  ): Promise<EnqueueResponse[]> {
    const answer = await this.call("post", "/v1/queues/{queue}/enqueue", {
      path: { queue },
      body: { jobs },
      headers: traceHeaders(options.traceparent),
      idempotent: jobs.every((job) => job.id != null),
    });
    return answer.jobs;
  }

  // --- working ----------------------------------------------------------------------------------

  /** Take up to `max_jobs` jobs; with `wait_ms`, wait (long poll) until one comes. With a
   * `request_id` the call is idempotent (a repeat answers the jobs the first one leased), and so
   * retried after an ambiguous failure. */
  async lease(queue: string, request: LeaseRequest): Promise<LeasedJob[]> {
    const answer = await this.call("post", "/v1/queues/{queue}/lease", {
      path: { queue },
      body: request,
      idempotent: request.request_id != null,
      longPollMs: request.wait_ms ?? 0,
    });
    return answer.jobs;
  }

  /** Renew one lease (`lease_ms`: its new length from now; default its own length). `progress`
   * (any JSON, at most 64 KiB) is stored on the job and sent as a progress event; left out, the
   * last one stays. */
  heartbeat(
    queue: string,
    id: string,
    leaseId: string,
    options: { lease_ms?: number; progress?: unknown } = {},
  ): Promise<HeartbeatResponse> {
    return this.call("post", "/v1/queues/{queue}/jobs/{id}/heartbeat", {
      path: { queue, id },
      body: { lease_id: leaseId, ...options },
      idempotent: true,
    });
  }

  /** Renew up to 1000 leases in one call: a result per lease, in order (ok, or code lease_lost /
   * job_not_found / forbidden: the job's worker name belongs to another token). */
  async heartbeatMany(
    queue: string,
    leases: HeartbeatItem[],
    options: { timeoutMs?: number; retry?: RetryPolicy } = {},
  ): Promise<HeartbeatResult[]> {
    const answer = await this.call("post", "/v1/queues/{queue}/heartbeat", {
      path: { queue },
      body: { leases },
      idempotent: true,
      ...options,
    });
    return answer.results;
  }

  /** Complete a job with its result. With `lease_next` the answer adds `jobs`: what that lease
   * request answered (a failed ack leases nothing). */
  ack(
    queue: string,
    id: string,
    leaseId: string,
    options: { result?: unknown; lease_next?: LeaseNext } = {},
  ): Promise<AckResponse> {
    const body: { lease_id: string; result?: unknown; lease_next?: LeaseNext } = { lease_id: leaseId };
    if (options.result !== undefined) body.result = options.result;
    if (options.lease_next) body.lease_next = options.lease_next;
    return this.call("post", "/v1/queues/{queue}/jobs/{id}/ack", {
      path: { queue, id },
      body,
      ...ackRepeat(options.lease_next),
    });
  }

  /** Ack 1..1000 jobs in one call: a result per ack (ok, or code lease_lost / job_not_found).
   * With `leaseNext` the answer adds `jobs`, leased after the whole batch. */
  ackMany(
    queue: string,
    acks: AckItem[],
    options: { leaseNext?: LeaseNext; timeoutMs?: number; retry?: RetryPolicy } = {},
  ): Promise<AckManyResponse> {
    const { leaseNext, ...rest } = options;
    return this.call("post", "/v1/queues/{queue}/ack", {
      path: { queue },
      body: leaseNext ? { acks, lease_next: leaseNext } : { acks },
      ...ackRepeat(leaseNext),
      ...rest,
    });
  }

  /** Cancel a job: a waiting or delayed one at once; an active one is flagged (cancel_requested)
   * for its worker, whose fail or release ends it cancelled (an ack still completes it). Safe to
   * repeat: cancelling again changes nothing. */
  cancel(queue: string, id: string, reason?: string): Promise<CancelResponse> {
    return this.call("post", "/v1/queues/{queue}/jobs/{id}/cancel", {
      path: { queue, id },
      body: reason === undefined ? {} : { reason },
      idempotent: true,
    });
  }

  /** Run a delayed job now (an enqueue's delay_ms, or a failed attempt's backoff): it is waiting
   * at once, at the back of its priority. NotDelayed (409) when the job is in another state, so
   * not retried: a repeat after a lost answer would say not_delayed. */
  promote(queue: string, id: string): Promise<PromoteResponse> {
    return this.call("post", "/v1/queues/{queue}/jobs/{id}/promote", { path: { queue, id }, idempotent: false });
  }

  /** Fail an attempt: retried after the job's backoff (or `retry_after_ms`) while attempts are
   * left, else dead-lettered; `retry: false` dead-letters at once. The same call again (same
   * lease) answers as the first did and changes nothing: safe to repeat. */
  fail(
    queue: string,
    id: string,
    leaseId: string,
    error: string,
    options: { retry?: boolean; retry_after_ms?: number } = {},
  ): Promise<FailResponse> {
    return this.call("post", "/v1/queues/{queue}/jobs/{id}/fail", {
      path: { queue, id },
      body: { lease_id: leaseId, error, retry: options.retry, retry_after_ms: options.retry_after_ms },
      idempotent: true,
    });
  }

  /** Give a leased job back: to the front of the queue, the attempt not spent. The same
   * release again answers as the first did: safe to repeat. */
  release(queue: string, id: string, leaseId: string): Promise<ReleaseResponse> {
    return this.call("post", "/v1/queues/{queue}/jobs/{id}/release", {
      path: { queue, id },
      body: { lease_id: leaseId },
      idempotent: true,
    });
  }

  // --- looking ----------------------------------------------------------------------------------

  /** A job, whatever its state (completed and failed ones while they are retained). With
   * `wait_ms` (at most 60000) answered as soon as it is completed, failed or cancelled, or after
   * wait_ms as it is then (`wait` waits longer). */
  job(queue: string, id: string, options: { wait_ms?: number } = {}): Promise<JobView> {
    return this.call("get", "/v1/queues/{queue}/jobs/{id}", {
      path: { queue, id },
      query: options.wait_ms ? { wait_ms: options.wait_ms } : undefined,
      idempotent: true,
      longPollMs: options.wait_ms ?? 0,
    });
  }

  /** The job once it is completed, failed or cancelled, or as it is after `timeoutMs` (default
   * 60000: check its `state`); JobNotFound if it is deleted. Waits past a minute take several
   * calls. */
  async wait(queue: string, id: string, options: { timeoutMs?: number } = {}): Promise<JobView> {
    const deadline = Date.now() + (options.timeoutMs ?? 60_000);
    for (;;) {
      const waitMs = Math.max(0, Math.min(this.waitStepMs, deadline - Date.now()));
      const job = await this.job(queue, id, { wait_ms: waitMs });
      if (OUTCOMES.has(job.state) || Date.now() >= deadline) return job;
    }
  }

  /** A page of the jobs in one state, in its order; pass `next_cursor` as `cursor` for the
   * next page, until it is null. */
  listJobs(queue: string, options: { state: JobState; limit?: number; cursor?: string }): Promise<JobPage> {
    return this.call("get", "/v1/queues/{queue}/jobs", { path: { queue }, query: options, idempotent: true });
  }

  /** A page of the job's children in the order they were added, each with its state and what it
   * handed the job (`result`, or `error`); pass `next_cursor` as `cursor` for the next page. */
  children(queue: string, id: string, options: { limit?: number; cursor?: string } = {}): Promise<ChildrenPage> {
    const query = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
    return this.call("get", "/v1/queues/{queue}/jobs/{id}/children", { path: { queue, id }, query, idempotent: true });
  }

  /** Every job in one state, page after page (`limit` per page). A job that moves while the
   * pages are read may be missed or seen twice, as with listJobs. */
  async *jobs(queue: string, options: { state: JobState; limit?: number }): AsyncGenerator<JobView, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.listJobs(queue, { ...options, cursor });
      yield* page.jobs;
      cursor = page.next_cursor ?? undefined;
    } while (cursor !== undefined);
  }

  /** Per-minute counts (enqueued, completed, failed, reclaimed) of the last `minutes` (1..1440,
   * default 60), oldest first, the current minute last. */
  async history(queue: string, minutes?: number): Promise<HistoryMinute[]> {
    const query = minutes === undefined ? undefined : { minutes };
    return (await this.call("get", "/v1/queues/{queue}/history", { path: { queue }, query, idempotent: true })).minutes;
  }

  /** The queue's events as they happen, for ever (break, or abort `signal`, to stop): after
   * event id `after` (0: from the oldest kept; left out: only new ones), only `types` and/or one
   * `job`. A lost or ended stream is resumed from the last event received (Last-Event-ID) after
   * a short pause. A `resync` event means events were lost (too old, or the queue was deleted):
   * read the state again. Errors other than lost connections, 503 and 429 are thrown. */
  async *events(queue: string, options: EventsOptions = {}): AsyncGenerator<FeedEvent, void, undefined> {
    const feed = new EventFeed(options);
    const { signal } = options;
    const path = `/v1/queues/${seg(queue)}/events`;
    while (!signal?.aborted) {
      const { query, headers } = feed.connect();
      let failure: unknown;
      let stream: Awaited<ReturnType<Transport["stream"]>> | undefined;
      try {
        const timing = { timeoutMs: this.timeoutMs, idleMs: Math.max(this.timeoutMs, IDLE_MS) };
        stream = await this.transport.stream(path + query, { headers, signal, ...timing });
        if (stream.status >= 400) read(stream.status, await stream.text(), stream.retryAfterMs);
        for await (const chunk of stream.chunks) yield* feed.read(chunk);
      } catch (error) {
        if (signal?.aborted || this.transport.isClosed) return;
        failure = error instanceof EchoMQError ? error : this.transport.failure("GET", path, error);
      } finally {
        stream?.close();
      }
      await pause(feed.pauseMs(failure), signal);
    }
  }

  /** A queue: its name, whether it is paused, its counts. */
  queue(queue: string): Promise<QueueView> {
    return this.call("get", "/v1/queues/{queue}", { path: { queue }, idempotent: true });
  }

  /** The number of jobs in each state. */
  async counts(queue: string): Promise<Counts> {
    return (await this.queue(queue)).counts;
  }

  /**
   * Every queue the service knows (whose name starts with `prefix`), by name: the pages of
   * `listQueues` followed to the last (the service holds at most EMQ_MAX_QUEUES).
   */
  async queues(options: { prefix?: string } = {}): Promise<QueueView[]> {
    const found: QueueView[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.listQueues({ ...options, limit: QUEUES_PER_PAGE, cursor });
      found.push(...page.queues);
      cursor = page.next_cursor ?? undefined;
    } while (cursor !== undefined);
    return found;
  }

  /** A page of the queues by name; pass `next_cursor` as `cursor` for the next (null on the last). */
  listQueues(options: { limit?: number; cursor?: string; prefix?: string } = {}): Promise<QueueList> {
    const query = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
    return this.call("get", "/v1/queues", { path: undefined, query, idempotent: true });
  }

  /** Dead-lettered jobs, newest first. */
  failed(queue: string, options: { limit?: number; offset?: number } = {}): Promise<FailedPage> {
    return this.call("get", "/v1/queues/{queue}/failed", { path: { queue }, query: options, idempotent: true });
  }

  /** Put dead-lettered jobs (these ids, or all) back in the queue; answers the ids retried. */
  async retryFailed(queue: string, ids?: string[]): Promise<string[]> {
    const answer = await this.call("post", "/v1/queues/{queue}/failed/retry", {
      path: { queue },
      body: ids === undefined ? {} : { ids },
      idempotent: ids !== undefined,
    });
    return answer.retried;
  }

  /** Delete a job that is not leased (job_active otherwise). */
  async deleteJob(queue: string, id: string): Promise<void> {
    await this.call("delete", "/v1/queues/{queue}/jobs/{id}", { path: { queue, id }, idempotent: false });
  }

  /** Delete a queue and its jobs; with `force` even while jobs are leased. */
  async deleteQueue(queue: string, options: { force?: boolean } = {}): Promise<void> {
    await this.call("delete", "/v1/queues/{queue}", {
      path: { queue },
      query: options.force ? { force: true } : undefined,
      idempotent: true,
    });
  }

  /** The jobs in flight (the ledger), oldest lease first; `worker` picks one worker's. */
  async active(
    queue: string,
    options: { worker?: string; limit?: number; offset?: number } = {},
  ): Promise<LedgerEntry[]> {
    const answer = await this.call("get", "/v1/queues/{queue}/active", { path: { queue }, query: options, idempotent: true });
    return answer.jobs;
  }

  /** Take every job a worker holds away from it (an operator's tool for a stuck worker): they
   * go back to the queue; answers their ids. */
  async releaseWorker(queue: string, worker: string): Promise<string[]> {
    const answer = await this.call("post", "/v1/queues/{queue}/workers/{worker}/release", {
      path: { queue, worker },
      idempotent: false,
    });
    return answer.released;
  }

  /** Every worker holding jobs or with a live session: the ids it holds and its session. */
  async workers(queue: string): Promise<WorkerHoldings[]> {
    const answer = await this.call("get", "/v1/queues/{queue}/workers", { path: { queue }, idempotent: true });
    return answer.workers;
  }

  /** Start or renew a worker's session: unless renewed within ttl_ms (default 30000) it lapses,
   * and every job the worker holds goes back as if its lease had expired. */
  sessionHeartbeat(
    queue: string,
    worker: string,
    body: { ttl_ms?: number; info?: Record<string, unknown> } = {},
    options: { retry?: RetryPolicy; timeoutMs?: number } = {},
  ): Promise<SessionHeartbeatResponse> {
    return this.call("post", "/v1/queues/{queue}/workers/{worker}/heartbeat", {
      path: { queue, worker },
      body,
      idempotent: true,
      ...options,
    });
  }

  /** Quiet a worker (admin): its leases lease nothing until its session ends. */
  quiet(queue: string, worker: string): Promise<QuietResponse> {
    return this.call("post", "/v1/queues/{queue}/workers/{worker}/quiet", { path: { queue, worker }, idempotent: true });
  }

  /** End a worker's session, giving back every job it holds unspent; answers their ids. */
  async endSession(queue: string, worker: string): Promise<string[]> {
    const answer = await this.call("delete", "/v1/queues/{queue}/workers/{worker}", {
      path: { queue, worker },
      idempotent: false,
    });
    return answer.released;
  }

  // --- flow control -----------------------------------------------------------------------------

  /** The queue's settings (the defaults for a queue never configured). */
  settings(queue: string): Promise<QueueSettings> {
    return this.call("get", "/v1/queues/{queue}/settings", { path: { queue }, idempotent: true });
  }

  /** Replace the queue's settings as a whole (admin): a field left out takes its default. */
  putSettings(queue: string, settings: Partial<QueueSettings>): Promise<QueueSettings> {
    return this.call("put", "/v1/queues/{queue}/settings", { path: { queue }, body: settings, idempotent: true });
  }

  /** Set a group's own cap on its jobs in flight (admin); null: the queue's group_max_in_flight. */
  setGroupLimit(queue: string, group: string, maxInFlight: number | null): Promise<GroupLimitResponse> {
    return this.call("put", "/v1/queues/{queue}/groups/{group}", {
      path: { queue, group },
      body: { max_in_flight: maxInFlight },
      idempotent: true,
    });
  }

  /** A page of the queue's groups by name: waiting, in flight and caps of each. */
  groups(queue: string, options: { limit?: number; cursor?: string } = {}): Promise<GroupPage> {
    return this.call("get", "/v1/queues/{queue}/groups", { path: { queue }, query: options, idempotent: true });
  }

  pause(queue: string): Promise<PauseResponse> {
    return this.call("post", "/v1/queues/{queue}/pause", { path: { queue }, idempotent: true });
  }

  resume(queue: string): Promise<PauseResponse> {
    return this.call("post", "/v1/queues/{queue}/resume", { path: { queue }, idempotent: true });
  }

  // --- schedules --------------------------------------------------------------------------------

  /** Create or replace a schedule: exactly one of `cron` (5 fields or a macro, read in `timezone`,
   * default UTC) or `every_ms`; each run enqueues `job` once. Replaced as a whole (a field left out
   * takes its default); the run counts stay, and the next run too when the timing is unchanged.
   * The same call again changes nothing: safe to repeat. */
  putSchedule(queue: string, schedule: string, request: ScheduleRequest): Promise<ScheduleView> {
    return this.call("put", "/v1/queues/{queue}/schedules/{schedule}", {
      path: { queue, schedule },
      body: request,
      idempotent: true,
    });
  }

  /** A schedule with its next and last run and its counts (ScheduleNotFound if there is none). */
  schedule(queue: string, schedule: string): Promise<ScheduleView> {
    return this.call("get", "/v1/queues/{queue}/schedules/{schedule}", { path: { queue, schedule }, idempotent: true });
  }

  /** Every schedule of the queue, by name. */
  async schedules(queue: string): Promise<ScheduleView[]> {
    const answer = await this.call("get", "/v1/queues/{queue}/schedules", { path: { queue }, idempotent: true });
    return answer.schedules;
  }

  /** No more runs (the jobs it made stay). A repeat answers ScheduleNotFound: not retried. */
  async deleteSchedule(queue: string, schedule: string): Promise<void> {
    await this.call("delete", "/v1/queues/{queue}/schedules/{schedule}", {
      path: { queue, schedule },
      idempotent: false,
    });
  }

  /** Enqueue the schedule's job now, outside its timetable (next run, runs and limit untouched;
   * a paused or ended schedule can be triggered). Each call makes one job: not retried. */
  triggerSchedule(queue: string, schedule: string): Promise<EnqueueResponse> {
    return this.call("post", "/v1/queues/{queue}/schedules/{schedule}/trigger", {
      path: { queue, schedule },
      idempotent: false,
    });
  }

  // --- the service ------------------------------------------------------------------------------

  /** The process is up (200), whatever Redis says. */
  healthz(): Promise<boolean> {
    return this.send("GET", "/healthz", undefined, { idempotent: true }, isOk);
  }

  /** The service can reach Redis (200; false on 503, not retried). */
  readyz(): Promise<boolean> {
    return this.send("GET", "/readyz", undefined, { idempotent: true, retry: NO_RETRIES }, isOk);
  }

  /** The Prometheus exposition, as text. */
  metrics(): Promise<string> {
    return this.send("GET", "/metrics", undefined, { idempotent: true }, readText);
  }

  /** The service's OpenAPI document. */
  openapi(): Promise<Record<string, unknown>> {
    return this.call("get", "/openapi.json", { path: undefined, idempotent: true });
  }

  // --- the one way out --------------------------------------------------------------------------

  private async call<M extends Method, P extends PathsWith<M>>(
    method: M,
    template: P,
    call: Call<Operation<P, M>>,
  ): Promise<Success<Operation<P, M>>> {
    const params = (call.path ?? {}) as Record<string, string>;
    let path: string = template.replace(/\{(\w+)\}/g, (_, name: string) => seg(String(params[name])));
    const query = Object.entries((call.query ?? {}) as Record<string, unknown>).filter(([, v]) => v != null);
    if (query.length) path += "?" + new URLSearchParams(query.map(([k, v]): [string, string] => [k, String(v)])).toString();
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    const timeoutMs = (call.timeoutMs ?? this.timeoutMs) + (call.longPollMs ?? 0);
    const options = { headers: call.headers, timeoutMs, idempotent: call.idempotent, retry: call.retry };
    const json = (answer: Answer) => read(answer.status, answer.text, answer.retryAfterMs);
    return this.send(method.toUpperCase(), path, body, options, json) as Promise<Success<Operation<P, M>>>;
  }

  /** A request, repeated as the retry policy allows; `readAnswer` throws for a problem. */
  private async send<T>(
    verb: string,
    path: string,
    body: string | undefined,
    options: { headers?: Record<string, string>; timeoutMs?: number; idempotent: boolean; retry?: RetryPolicy },
    readAnswer: (answer: Answer) => T,
  ): Promise<T> {
    const retry = options.retry ?? this.retry;
    const sent = { headers: options.headers, timeoutMs: options.timeoutMs ?? this.timeoutMs };
    for (let attempt = 0; ; attempt++) {
      try {
        return readAnswer(await this.transport.request(verb, path, body, sent));
      } catch (error) {
        if (this.transport.isClosed || !retry.shouldRetry(attempt, options.idempotent, error)) throw error;
        await sleep(retry.delayMs(attempt, error));
      }
    }
  }
}

function isOk(answer: Answer): boolean {
  return answer.status === 200;
}

function readText(answer: Answer): string {
  if (answer.status >= 400) read(answer.status, answer.text, answer.retryAfterMs);
  return answer.text;
}

function read(status: number, text: string, retryAfterMs: number | undefined): unknown {
  if (status >= 400) {
    let problem: unknown;
    try {
      problem = JSON.parse(text);
    } catch {
      problem = { detail: text.slice(0, 500) };
    }
    throw errorFor(status, problem, retryAfterMs);
  }
  if (status === 204 || text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new APIError(status, "unexpected_response", "Unexpected response", String(error));
  }
}

function traceHeaders(traceparent: string | undefined): Record<string, string> | undefined {
  return traceparent ? { traceparent } : undefined;
}

/** An ack is safe to repeat (the same ack answers as before); with lease_next only when the
 * lease has a request_id (the repeat answers the same jobs). The lease may long-poll. */
function ackRepeat(leaseNext: LeaseNext | undefined): { idempotent: boolean; longPollMs: number } {
  if (!leaseNext) return { idempotent: true, longPollMs: 0 };
  return { idempotent: leaseNext.request_id != null, longPollMs: leaseNext.wait_ms ?? 0 };
}
