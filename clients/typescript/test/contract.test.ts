// The Client against the contract, openapi/openapi.json: every operation has its method. The
// table is typed by the generated `operations`, so an operation the document gains fails to
// compile until it is listed here with a method the Client has; the test then checks the table
// against the document itself (tests/clients/test_python_contract.py is the Python SDK's twin).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { Client, type operations } from "echomq";

type MethodName = {
  [K in keyof Client]: Client[K] extends (...args: never[]) => unknown ? K : never;
}[keyof Client];

const METHOD_OF_OPERATION: { [Id in keyof operations]: MethodName } = {
  enqueue: "enqueue",
  enqueueMany: "enqueueMany",
  createFlow: "createFlow",
  listChildren: "children",
  lease: "lease",
  heartbeat: "heartbeat",
  heartbeatMany: "heartbeatMany",
  ack: "ack",
  ackMany: "ackMany",
  fail: "fail",
  release: "release",
  getJob: "job",
  deleteJob: "deleteJob",
  cancel: "cancel",
  promote: "promote",
  listJobs: "listJobs",
  events: "events",
  history: "history",
  listQueues: "listQueues",
  getQueue: "queue",
  deleteQueue: "deleteQueue",
  getLedger: "active",
  listWorkers: "workers",
  listFailed: "failed",
  redriveFailed: "retryFailed",
  releaseWorker: "releaseWorker",
  sessionHeartbeat: "sessionHeartbeat",
  quietWorker: "quiet",
  endSession: "endSession",
  pauseQueue: "pause",
  resumeQueue: "resume",
  getSettings: "settings",
  putSettings: "putSettings",
  setGroupLimit: "setGroupLimit",
  listGroups: "groups",
  putSchedule: "putSchedule",
  getSchedule: "schedule",
  listSchedules: "schedules",
  deleteSchedule: "deleteSchedule",
  triggerSchedule: "triggerSchedule",
  healthz: "healthz",
  readyz: "readyz",
  metrics: "metrics",
  openapi: "openapi",
};
// Methods built on an operation's method: counts reads getQueue, wait loops over getJob's
// wait_ms, jobs reads every page of listJobs, queues every page of listQueues.
const HELPERS = ["counts", "wait", "jobs", "queues"];
// Private methods, on the prototype all the same: every call goes through them.
const PLUMBING = ["call", "send"];

const DOCUMENT = new URL("../../../openapi/openapi.json", import.meta.url);
const VERBS = new Set(["get", "put", "post", "delete", "patch"]);

function operationIds(): string[] {
  const document = JSON.parse(readFileSync(DOCUMENT, "utf8")) as {
    paths: Record<string, Record<string, { operationId?: string }>>;
  };
  return Object.values(document.paths).flatMap((path) =>
    Object.entries(path)
      .filter(([verb]) => VERBS.has(verb))
      .map(([, operation]) => operation.operationId ?? "(no operationId)"),
  );
}

function publicMethods(): string[] {
  return Object.getOwnPropertyNames(Client.prototype).filter(
    (name) => name !== "constructor" && name !== "close" && typeof Client.prototype[name as keyof Client] === "function",
  );
}

test("every operation of openapi.json has a Client method, and no method is left over", () => {
  assert.deepEqual(operationIds().sort(), Object.keys(METHOD_OF_OPERATION).sort());
  const methods = new Set(publicMethods());
  for (const [operation, method] of Object.entries(METHOD_OF_OPERATION)) {
    assert.ok(methods.has(method), `${operation}: Client.${method} is missing`);
  }
  const called = new Set<string>([...Object.values(METHOD_OF_OPERATION), ...HELPERS, ...PLUMBING]);
  assert.deepEqual([...methods].filter((name) => !called.has(name)), []);
});
