// Client.events against the real service: typed and filtered, resumed by Last-Event-ID after a
// lost connection, `resync` surfaced, ended by its signal; and the SSE parser on its own.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, InvalidRequest, SSEParser, type FeedEvent } from "echomq";
import { cleanup, client, freshQueue, Proxy } from "./helpers.js";

const NEXT_TIMEOUT_MS = 10_000;

/** The feed's next event, failing the test if none comes in time. */
async function next(feed: AsyncGenerator<FeedEvent>): Promise<FeedEvent> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("no event came")), NEXT_TIMEOUT_MS);
  });
  try {
    const found = await Promise.race([feed.next(), late]);
    assert.equal(found.done, false);
    return found.value as FeedEvent;
  } finally {
    clearTimeout(timer);
  }
}

async function take(feed: AsyncGenerator<FeedEvent>, count: number): Promise<FeedEvent[]> {
  const found: FeedEvent[] = [];
  while (found.length < count) found.push(await next(feed));
  await feed.return(undefined);
  return found;
}

test("events are the queue's transitions, numbered, typed and filtered", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: 1, id: "j1" });
  const [held] = await client.lease(queue, { worker: "w1" });
  assert.ok(held);
  await client.heartbeat(queue, "j1", held.lease_id, { progress: { done: 1 } });
  await client.ack(queue, "j1", held.lease_id);
  await client.pause(queue);

  const events = await take(client.events(queue, { after: 0 }), 5);
  assert.deepEqual(
    events.map((event) => [event.type, event.event_id, event.id]),
    [
      ["enqueued", 1, "j1"],
      ["leased", 2, "j1"],
      ["progress", 3, "j1"],
      ["completed", 4, "j1"],
      ["paused", 5, undefined],
    ],
  );
  const [enqueued, leased, progress] = events as [FeedEvent, FeedEvent, FeedEvent];
  assert.deepEqual([enqueued.state, enqueued.queue], ["waiting", queue]);
  assert.deepEqual([leased.worker, leased.attempt, leased.fence], ["w1", 1, held.fence]);
  assert.deepEqual(progress.progress, { done: 1 });

  const only = await take(client.events(queue, { after: 0, types: ["completed", "paused"], job: "j1" }), 1);
  assert.deepEqual(
    only.map((event) => [event.type, event.event_id]),
    [["completed", 4]],
  );
});

test("a lost connection resumes from the last event received", async () => {
  const queue = freshQueue();
  await client.enqueueMany(queue, [{ payload: 0, id: "old" }, { payload: 0, id: "j0" }]);
  const proxy = await Proxy.start();
  const through = new Client({ url: proxy.url });
  cleanup(() => through.close());
  cleanup(() => proxy.close());

  const feed = through.events(queue, { after: 1 });
  const first = await next(feed);
  assert.deepEqual([first.id, first.event_id], ["j0", 2]);

  proxy.setCut(true); // the stream drops, and reconnecting fails for a while
  await client.enqueueMany(queue, [1, 2, 3].map((n) => ({ payload: n, id: `j${n}` })));
  setTimeout(() => proxy.setCut(false), 300);
  const later = await take(feed, 3);
  assert.deepEqual(
    later.map((event) => [event.id, event.event_id]),
    [
      ["j1", 3],
      ["j2", 4],
      ["j3", 5],
    ],
  );
});

test("a resume from an id no longer kept surfaces resync, then goes on", async () => {
  const queue = freshQueue();
  await client.enqueue(queue, { payload: 1, id: "j1" });
  await client.deleteQueue(queue); // the numbering starts over: id 5 is not there any more
  await client.enqueue(queue, { payload: 1, id: "j2" });
  const [resync, enqueued] = (await take(client.events(queue, { after: 5 }), 2)) as [FeedEvent, FeedEvent];
  assert.deepEqual([resync.type, resync.event_id, resync.after, resync.oldest], ["resync", undefined, 5, 1]);
  assert.deepEqual([enqueued.type, enqueued.id, enqueued.event_id], ["enqueued", "j2", 1]);
});

test("an abort ends the feed while it waits; a bad request is thrown, not retried", async () => {
  const queue = freshQueue();
  const stop = new AbortController();
  const feed = client.events(queue, { signal: stop.signal });
  const pending = feed.next();
  setTimeout(() => stop.abort(), 200);
  assert.deepEqual(await pending, { done: true, value: undefined });

  await assert.rejects(client.events("no spaces allowed").next(), InvalidRequest);
});

test("the SSE parser reads the whole format, in chunks of any size", () => {
  const parser = new SSEParser();
  const bytes = new TextEncoder().encode('\uFEFFretry: 1500\r\n: keep-alive\r\n\r\nid: 7\nevent: x\ndata: {"a":\ndata: 1}\r');
  const found = [...bytes].flatMap((byte) => parser.feed(Uint8Array.of(byte)));
  assert.deepEqual(found, []);
  assert.equal(parser.retryMs, 1500);
  const text = (value: string) => new TextEncoder().encode(value);
  assert.deepEqual(parser.feed(text("\n\n")), [{ id: "7", data: '{"a":\n1}' }]);
  assert.deepEqual(parser.feed(text("data\n\ndata: no id\n\n")), [
    { id: undefined, data: "" },
    { id: undefined, data: "no id" },
  ]);
  assert.deepEqual(parser.feed(text("id: 8\n\n")), []); // no data: no event
  const snowman = text("data: \u2603\n\n"); // a character cut between two chunks
  assert.deepEqual([...parser.feed(snowman.slice(0, 8)), ...parser.feed(snowman.slice(8))], [{ id: undefined, data: "\u2603" }]);
});
