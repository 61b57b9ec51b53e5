// echomq: the TypeScript client and worker of EchoMQ HTTP.
export * from "./client.js";
export * from "./errors.js";
export { SSEParser, type EventType, type EventsOptions, type FeedEvent, type SSEMessage } from "./events.js";
export * from "./worker.js";
export type { components, operations, paths } from "./schema.js";
