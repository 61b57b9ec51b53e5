// echomq: the TypeScript client and worker of EchoMQ HTTP.
export * from "./client.js";
export * from "./errors.js";
export * from "./worker.js";
export type { components, operations, paths } from "./schema.js";
