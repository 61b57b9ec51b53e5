// What the tests share: the service's URL (EMQ_URL, required: these tests run against a real
// service, see tests/clients/test_typescript_sdk.py), fresh queue names, waiting, a cuttable proxy,
// a client whose calls can be held.

import { randomBytes } from "node:crypto";
import net from "node:net";
import { after, afterEach } from "node:test";
import { Client, Worker, type WorkerOptions } from "echomq";

const url = process.env.EMQ_URL;
if (!url) {
  throw new Error("EMQ_URL is not set: these tests need a running EchoMQ HTTP service (pytest runs them with one)");
}
export const SERVICE_URL: string = url;

const queues: string[] = [];
export const client = new Client({ url: SERVICE_URL });

/** A fresh queue, deleted when the file's tests are over. */
export function freshQueue(): string {
  const name = `ts-${randomBytes(6).toString("hex")}`;
  queues.push(name);
  return name;
}

after(async () => {
  for (const queue of queues) await client.deleteQueue(queue, { force: true });
  await client.close();
});

const cleanups: Array<() => Promise<unknown>> = [];

/** Undone after each test, passed or failed: a failing test must not leave the run hanging on a
 * worker or a client it did not get to close. */
export function cleanup(undo: () => Promise<unknown>): void {
  cleanups.push(undo);
}

afterEach(async () => {
  for (const undo of cleanups.splice(0).reverse()) await undo().catch(() => undefined);
});

/** A Worker that keeps its log to itself, stopped (no grace) after the test. */
export function testWorker(options: WorkerOptions): Worker {
  const worker = new Worker({ logger: memoryLogger(), ...options });
  cleanup(async () => {
    worker.graceMs = 0;
    await worker.stop();
  });
  return worker;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function waitFor<T>(check: () => T | Promise<T>, timeoutMs = 15_000, what = "a condition"): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A promise with its resolve at hand. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((done) => (resolve = done));
  return { promise, resolve };
}

/** A TCP proxy to the service that can be cut (connections refused, open ones dropped). */
export class Proxy {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private cut = false;

  private constructor(target: URL) {
    this.server = net.createServer((inbound) => {
      if (this.cut) return void inbound.destroy();
      const outbound = net.connect(Number(target.port), target.hostname);
      for (const socket of [inbound, outbound]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => {
          inbound.destroy();
          outbound.destroy();
        });
      }
      inbound.pipe(outbound).pipe(inbound);
    });
  }

  static async start(): Promise<Proxy> {
    const proxy = new Proxy(new URL(SERVICE_URL));
    await new Promise<void>((resolve) => proxy.server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    const address = this.server.address() as net.AddressInfo;
    return `http://127.0.0.1:${address.port}`;
  }

  setCut(cut: boolean): void {
    this.cut = cut;
    if (cut) for (const socket of this.sockets) socket.destroy();
  }

  async close(): Promise<void> {
    this.setCut(true);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A logger that keeps what the worker says. */
export function memoryLogger(): { lines: string[]; info(m: string): void; warn(m: string): void; error(m: string): void } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`info ${m}`),
    warn: (m) => lines.push(`warn ${m}`),
    error: (m) => lines.push(`error ${m}`),
  };
}

export type Hooked = "lease" | "ackMany" | "heartbeatMany";
export type When = "before" | "after";

export class Hold {
  readonly reached = deferred();
  private readonly gate = deferred();
  constructor(readonly when: When) {}
  go(): void {
    this.gate.resolve();
  }
  async pass(): Promise<void> {
    this.reached.resolve();
    await this.gate.promise;
  }
}

/** The real Client, whose lease, ackMany and heartbeatMany calls are counted and recorded, and
 * can be held until the test lets them go. */
export class HookedClient extends Client {
  readonly calls = new Map<Hooked, number>();
  readonly sent = new Map<Hooked, unknown[][]>(); // the arguments of each call
  private readonly holds = new Map<string, Hold>();

  constructor(...args: ConstructorParameters<typeof Client>) {
    super(...args);
    cleanup(() => this.close());
  }

  /** Holds the next call of `name`: before it is sent, or after its answer came. */
  /** Holds the nth call of `name` from now (default: the next one). */
  hold(name: Hooked, when: When, nth = 1): Hold {
    const hold = new Hold(when);
    this.holds.set(`${name}#${(this.calls.get(name) ?? 0) + nth}`, hold);
    return hold;
  }

  private async through<T>(name: Hooked, args: unknown[], send: () => Promise<T>): Promise<T> {
    const nth = (this.calls.get(name) ?? 0) + 1;
    this.calls.set(name, nth);
    this.sent.set(name, [...(this.sent.get(name) ?? []), args]);
    const hold = this.holds.get(`${name}#${nth}`);
    this.holds.delete(`${name}#${nth}`);
    if (hold?.when === "before") await hold.pass();
    const answer = await send();
    if (hold?.when === "after") await hold.pass();
    return answer;
  }

  override lease(...args: Parameters<Client["lease"]>) {
    return this.through("lease", args, () => super.lease(...args));
  }
  override ackMany(...args: Parameters<Client["ackMany"]>) {
    return this.through("ackMany", args, () => super.ackMany(...args));
  }
  override heartbeatMany(...args: Parameters<Client["heartbeatMany"]>) {
    return this.through("heartbeatMany", args, () => super.heartbeatMany(...args));
  }
}
