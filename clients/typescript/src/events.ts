// A queue's event feed (GET .../events, Server-Sent Events): the parts of Client.events that do
// not move bytes. SSEParser reads the text/event-stream format (any line ending, comments,
// multi-line data, retry). EventFeed is one events() iteration: what each connection asks for
// (the last event id received, as Last-Event-ID), the events read from its chunks, and how long
// to wait before the next connection. The Python SDK's _events.py decides the same way.

import { BackendUnavailable, ConnectionFailed, TooManyRequests, APIError } from "./errors.js";
import type { components } from "./schema.js";

/** One event of a queue's feed. `event_id` is its SSE id (absent on a `resync`, which says the
 * events after `after` up to `oldest` are lost: read the state again). */
export type FeedEvent = components["schemas"]["StreamEvent"] & { event_id?: number };
export type EventType = FeedEvent["type"];

export interface EventsOptions {
  /** Resume after this event id (0: from the oldest kept); left out: only new events. */
  after?: number;
  /** Only events of these types. */
  types?: readonly EventType[];
  /** Only the events of this job. */
  job?: string;
  /** Ends the iteration, a connection or a pause in progress included. */
  signal?: AbortSignal;
}

// The service sends a keep-alive comment every 15 s at most: a stream silent for this long is
// taken for dead and resumed.
export const IDLE_MS = 45_000;
const FIRST_PAUSE_MS = 100;
const DEFAULT_RETRY_MS = 2000; // until the service's `retry:` says otherwise
const LINE_END = /\r\n|\r|\n/;

export interface SSEMessage {
  id: string | undefined;
  data: string;
}

/** Text/event-stream as the HTML standard reads it: `feed` bytes as they come, get the complete
 * messages. A byte order mark opening the stream is dropped by the decoder. */
export class SSEParser {
  retryMs: number | undefined;
  private readonly decoder = new TextDecoder();
  private rest = "";
  private data: string[] = [];
  private id: string | undefined;

  feed(chunk: Uint8Array): SSEMessage[] {
    let text = this.rest + this.decoder.decode(chunk, { stream: true });
    // A chunk ending in \r may be half of a \r\n: keep it for the next chunk.
    const held = text.endsWith("\r");
    if (held) text = text.slice(0, -1);
    const lines = text.split(LINE_END);
    this.rest = (lines.pop() ?? "") + (held ? "\r" : "");
    const found: SSEMessage[] = [];
    for (const line of lines) {
      const message = this.line(line);
      if (message) found.push(message);
    }
    return found;
  }

  private line(line: string): SSEMessage | undefined {
    if (line === "") {
      // a blank line ends the message
      const message = this.data.length ? { id: this.id, data: this.data.join("\n") } : undefined;
      this.data = [];
      this.id = undefined;
      return message;
    }
    if (line.startsWith(":")) return undefined; // a comment (keep-alive)
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") this.data.push(value);
    else if (name === "id" && !value.includes("\0")) this.id = value;
    else if (name === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value);
    return undefined; // "event" is in the data too (its type); unknown fields are ignored
  }
}

/** One events() iteration across its connections. */
export class EventFeed {
  private lastId: number | undefined;
  private resumed = false;
  private parser = new SSEParser();
  private delivered = false;
  private failures = 0;
  private retryMs = DEFAULT_RETRY_MS;
  private readonly filters: URLSearchParams;

  constructor(options: EventsOptions) {
    this.lastId = options.after;
    this.filters = new URLSearchParams();
    if (options.types !== undefined) this.filters.set("types", options.types.join(","));
    if (options.job !== undefined) this.filters.set("job", options.job);
  }

  /** The next connection's query string and headers: after the last event received. */
  connect(): { query: string; headers: Record<string, string> } {
    this.parser = new SSEParser();
    this.delivered = false;
    const query = new URLSearchParams(this.filters);
    const headers: Record<string, string> = { accept: "text/event-stream" };
    if (this.lastId !== undefined && this.resumed) headers["last-event-id"] = String(this.lastId);
    else if (this.lastId !== undefined) query.set("after", String(this.lastId));
    this.resumed = true;
    const text = query.toString();
    return { query: text ? `?${text}` : "", headers };
  }

  read(chunk: Uint8Array): FeedEvent[] {
    const events: FeedEvent[] = [];
    for (const { id, data } of this.parser.feed(chunk)) {
      if (!data) continue; // not one of the service's: each event has its JSON
      const event = JSON.parse(data) as FeedEvent;
      if (id !== undefined && /^\d+$/.test(id)) {
        this.lastId = Number(id);
        event.event_id = this.lastId;
      } else if (event.type === "resync" && event.oldest !== undefined) {
        this.lastId = event.oldest - 1; // where the service goes on from
      }
      events.push(event);
    }
    if (this.parser.retryMs !== undefined) this.retryMs = this.parser.retryMs;
    this.delivered ||= events.length > 0;
    return events;
  }

  /** How long to wait before connecting again after the stream ended (with `error`, or
   * cleanly): none after a connection that delivered events (say one the service dropped for
   * falling behind), else growing up to the service's `retry`. Errors other than lost
   * connections, 503 and 429 are thrown: connecting again cannot help. */
  pauseMs(error: unknown): number {
    const passing = error instanceof ConnectionFailed || error instanceof BackendUnavailable || error instanceof TooManyRequests;
    if (error !== undefined && !passing) throw error;
    if (this.delivered) {
      this.failures = 0;
      return 0;
    }
    this.failures += 1;
    const pause = Math.min(this.retryMs, FIRST_PAUSE_MS * 2 ** (this.failures - 1)) * (0.5 + Math.random() / 2);
    const hinted = error instanceof APIError ? (error.retryAfterMs ?? 0) : 0;
    return Math.max(pause, hinted);
  }
}
