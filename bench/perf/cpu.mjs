// CPU seconds used so far, for the bench's Node scripts: this process's own, and each watched
// group of processes' (from /proc/<pid>/stat: utime + stime), as bench.py reports them.

import { readFileSync } from 'node:fs';

function cpuOf(pids, clkTck) {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(')').pop().trim().split(/\s+/);
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // the process is gone: nothing to add
    }
  }
  return ticks / clkTck;
}

/** `{node: s, <group>: s, ...}` now; watch maps group names to pids (spec.watch). */
export function cpuSample(watch = {}, clkTck = 100) {
  const own = process.cpuUsage();
  const sample = { node: (own.user + own.system) / 1e6 };
  for (const [name, pids] of Object.entries(watch)) sample[name] = cpuOf(pids, clkTck);
  return sample;
}
