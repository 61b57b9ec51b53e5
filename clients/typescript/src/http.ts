// The HTTP transport: an undici Pool (keep-alive connections to one origin), a request in, the
// status, Retry-After and body text out (or the body as it comes, for an event stream). Errors
// without an answer become ConnectionFailed.

import { Pool } from "undici";
import { ConnectionFailed } from "./errors.js";

export interface Answer {
  status: number;
  retryAfterMs: number | undefined;
  text: string;
}

/** An answer whose body is read as it comes (an event stream). */
export interface StreamAnswer {
  status: number;
  retryAfterMs: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
  text(): Promise<string>;
  /** Drops the connection: a stream is never read to its end. */
  close(): void;
}

export interface TransportOptions {
  /** Connections kept to the service at most (default 64); requests beyond wait for one. */
  connections?: number;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

// Errors of a request that never left: repeating it cannot do anything twice.
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

export class Transport {
  readonly origin: string;
  readonly basePath: string;
  private readonly pool: Pool;
  private readonly headers: Record<string, string>;
  private closed = false;

  constructor(url: string, options: TransportOptions = {}) {
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError(`not an http(s) URL: ${url}`);
    }
    this.origin = parsed.origin;
    this.basePath = parsed.pathname.replace(/\/+$/, "");
    this.headers = { ...(options.headers ?? {}) };
    this.pool = new Pool(this.origin, { connections: options.connections ?? 64 });
  }

  async request(
    method: string,
    path: string,
    body: string | undefined,
    options: { headers?: Record<string, string>; timeoutMs: number },
  ): Promise<Answer> {
    if (this.closed) throw new ConnectionFailed(`${method} ${path}: the client is closed`, { sent: false });
    const headers: Record<string, string> = { ...this.headers, ...(options.headers ?? {}) };
    if (body !== undefined) headers["content-type"] = "application/json";
    try {
      const answer = await this.pool.request({
        method: method as "GET",
        path: this.basePath + path,
        headers,
        body,
        headersTimeout: options.timeoutMs,
        bodyTimeout: options.timeoutMs,
      });
      const text = await answer.body.text();
      return { status: answer.statusCode, retryAfterMs: retryAfterMs(answer.headers), text };
    } catch (error) {
      throw this.failure(method, path, error);
    }
  }

  /** A GET whose body is handed over as it comes. `timeoutMs` bounds the wait for the headers,
   * `idleMs` the silence between two chunks; `signal` aborts it. */
  async stream(
    path: string,
    options: { headers?: Record<string, string>; timeoutMs: number; idleMs: number; signal?: AbortSignal },
  ): Promise<StreamAnswer> {
    if (this.closed) throw new ConnectionFailed(`GET ${path}: the client is closed`, { sent: false });
    try {
      const answer = await this.pool.request({
        method: "GET",
        path: this.basePath + path,
        headers: { ...this.headers, ...(options.headers ?? {}) },
        headersTimeout: options.timeoutMs,
        bodyTimeout: options.idleMs,
        signal: options.signal,
      });
      return {
        status: answer.statusCode,
        retryAfterMs: retryAfterMs(answer.headers),
        chunks: answer.body,
        text: () => answer.body.text(),
        close: () => answer.body.destroy(),
      };
    } catch (error) {
      throw this.failure("GET", path, error);
    }
  }

  /** A request that got no answer, as ConnectionFailed (`sent`: it may have reached the service). */
  failure(method: string, path: string, error: unknown): ConnectionFailed {
    const code = (error as { code?: unknown }).code;
    const sent = !(typeof code === "string" && NOT_SENT.has(code)) && !this.closed;
    return new ConnectionFailed(`${method} ${path}: ${String((error as Error)?.message ?? error)}`, {
      cause: error,
      sent,
    });
  }

  get isClosed(): boolean {
    return this.closed;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.close();
  }
}

function retryAfterMs(headers: Record<string, string | string[] | undefined>): number | undefined {
  const retryAfter = headers["retry-after"];
  const seconds = Number(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter);
  return retryAfter !== undefined && Number.isFinite(seconds) ? seconds * 1000 : undefined;
}
