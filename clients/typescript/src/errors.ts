// Errors: one class per problem `code` of the API, all under EchoMQError.
//
// APIError carries the RFC 9457 problem the service sent (status, code, title, detail).
// ConnectionFailed: the service could not be reached or did not answer.
// JobError: thrown by a handler, fails the job with a retry hint.

import type { components } from "./schema.js";

export type Problem = components["schemas"]["Problem"];

/** Base of every error this package throws. */
export class EchoMQError extends Error {
  override name = "EchoMQError";
}

/** The request got no answer (connection refused or reset, timed out). `sent` is false when
 * nothing reached the service (the connection could not be opened): repeating is then safe. */
export class ConnectionFailed extends EchoMQError {
  override name = "ConnectionFailed";
  readonly sent: boolean;

  constructor(message: string, options: { cause?: unknown; sent: boolean }) {
    super(message, { cause: options.cause });
    this.sent = options.sent;
  }
}

/** The service answered with a problem (status >= 400). */
export class APIError extends EchoMQError {
  override name = "APIError";
  readonly status: number;
  readonly code: string;
  readonly title: string;
  readonly detail: string;
  /** From the Retry-After header (429, 503), in milliseconds. */
  readonly retryAfterMs: number | undefined;
  /** The problem document as sent. */
  readonly problem: Partial<Problem> & Record<string, unknown>;

  constructor(
    status: number,
    code: string,
    title = "",
    detail = "",
    options: { retryAfterMs?: number; problem?: Record<string, unknown> } = {},
  ) {
    super(`${status} ${code}: ${detail || title}`);
    this.status = status;
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.retryAfterMs = options.retryAfterMs;
    this.problem = options.problem ?? {};
  }
}

/** 400 invalid_request: malformed or out-of-range input; nothing was changed. */
export class InvalidRequest extends APIError {
  override name = "InvalidRequest";
}
/** 401 unauthorized: auth is on and the token is missing or unknown. */
export class Unauthorized extends APIError {
  override name = "Unauthorized";
}
/** 403 forbidden: the token lacks the role or the queue, or the worker name belongs to another
 * token while its leases or session last. */
export class Forbidden extends APIError {
  override name = "Forbidden";
}
/** 404 not_found: no such path (a wrong base URL?). */
export class NotFound extends APIError {
  override name = "NotFound";
}
/** 404 job_not_found: no such job in that queue. */
export class JobNotFound extends APIError {
  override name = "JobNotFound";
}
/** 404 schedule_not_found: no such schedule in that queue. */
export class ScheduleNotFound extends APIError {
  override name = "ScheduleNotFound";
}
/** 409 lease_lost: the lease id is not the job's current, unexpired lease. Whatever the worker
 * did with the job must not be reported as done: another worker may hold it now. */
export class LeaseLost extends APIError {
  override name = "LeaseLost";
}
/** 409 job_active: not allowed while the job is leased. */
export class JobActive extends APIError {
  override name = "JobActive";
}
/** 409 not_delayed: only a delayed job can be promoted; this one is in another state. */
export class NotDelayed extends APIError {
  override name = "NotDelayed";
}
/** 409 job_exists: a flow node's id names a job that is not that node of this flow; nothing made. */
export class JobExists extends APIError {
  override name = "JobExists";
}
/** 409 too_many_queues: the queue is new and the service holds EMQ_MAX_QUEUES already; nothing stored. */
export class TooManyQueues extends APIError {
  override name = "TooManyQueues";
}
/** 408 request_timeout: the request body did not arrive in time. */
export class RequestTimeout extends APIError {
  override name = "RequestTimeout";
}
/** 413 payload_too_large: the body is over the service's limit. */
export class PayloadTooLarge extends APIError {
  override name = "PayloadTooLarge";
}
/** 429 too_many_requests: too many long polls wait on that replica; see retryAfterMs. */
export class TooManyRequests extends APIError {
  override name = "TooManyRequests";
}
/** 503 backend_unavailable: the service cannot reach Redis (or is at its connection limit). */
export class BackendUnavailable extends APIError {
  override name = "BackendUnavailable";
}

type APIErrorClass = new (...args: ConstructorParameters<typeof APIError>) => APIError;

export const ERRORS_BY_CODE: Readonly<Record<string, APIErrorClass>> = {
  invalid_request: InvalidRequest,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_found: NotFound,
  job_not_found: JobNotFound,
  schedule_not_found: ScheduleNotFound,
  lease_lost: LeaseLost,
  job_active: JobActive,
  not_delayed: NotDelayed,
  job_exists: JobExists,
  too_many_queues: TooManyQueues,
  request_timeout: RequestTimeout,
  payload_too_large: PayloadTooLarge,
  too_many_requests: TooManyRequests,
  backend_unavailable: BackendUnavailable,
};

// When a body has no code (a proxy's page, uvicorn's own 503), the status decides.
const ERRORS_BY_STATUS: Readonly<Record<number, APIErrorClass>> = {
  400: InvalidRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  408: RequestTimeout,
  413: PayloadTooLarge,
  429: TooManyRequests,
  503: BackendUnavailable,
};

/** The error for an answer with this status and (parsed) body, chosen by the problem's code. */
export function errorFor(status: number, problem: unknown, retryAfterMs?: number): APIError {
  const fields: Record<string, unknown> =
    problem !== null && typeof problem === "object" && !Array.isArray(problem)
      ? (problem as Record<string, unknown>)
      : {};
  const code = typeof fields.code === "string" && fields.code ? fields.code : "";
  const Class = ERRORS_BY_CODE[code] ?? ERRORS_BY_STATUS[status] ?? APIError;
  const text = (value: unknown) => (typeof value === "string" ? value : "");
  return new Class(status, code || `http_${status}`, text(fields.title), text(fields.detail), {
    retryAfterMs,
    problem: fields,
  });
}

/** Throw from a handler to fail the job with a hint: `retry: false` sends it straight to the
 * dead letter; `retryAfterMs` sets the delay before the next attempt. Any thrown value works as
 * a failure: the worker reads the same two properties (`retry`, `retryAfterMs`) from any error
 * that has them. */
export class JobError extends Error {
  override name = "JobError";
  readonly retry: boolean;
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: { retry?: boolean; retryAfterMs?: number; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.retry = options.retry ?? true;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** The reason of a handler's `signal` when the worker aborts it: `code` is "lease_lost" (the
 * lease is gone; the outcome is discarded) or "stopped" (the worker stopped and its grace period
 * ran out; the job is released). */
export class JobAborted extends EchoMQError {
  override name = "JobAborted";
  readonly code: "lease_lost" | "stopped" | "cancel_requested";

  constructor(code: "lease_lost" | "stopped" | "cancel_requested", message: string) {
    super(message);
    this.code = code;
  }
}
