// `npm ci` unless node_modules/ already holds what package-lock.json names. The stamp is keyed
// by the lock's SHA-256, not mtimes (a checkout changes those). Extra arguments go to npm ci
// (the tests pass --cache). Used by tests/clients/test_typescript_sdk.py and bench/bench.py for
// this package, and with `--dir DIR` first for another one (tests/generators: the OpenAPI tools).

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

const extra = process.argv.slice(2);
const root = extra[0] === "--dir" ? resolve(extra.splice(0, 2)[1]) : fileURLToPath(new URL("..", import.meta.url));
const digest = createHash("sha256").update(readFileSync(`${root}/package-lock.json`)).digest("hex");
const stamp = `${root}/node_modules/.lock-sha256`;

let current = "";
try {
  current = readFileSync(stamp, "utf8").trim();
} catch {
  // no stamp: never installed by this script
}
if (current !== digest) {
  const args = ["ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", ...extra];
  const done = spawnSync("npm", args, { cwd: root, stdio: "inherit" });
  if (done.status !== 0) process.exit(done.status ?? 1);
  writeFileSync(stamp, digest + "\n");
}
