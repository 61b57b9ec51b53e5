// CPU seconds used so far, for the bench's Node scripts: this process's own (all its threads,
// process.cpuUsage), and each watched group of processes' from /proc/<pid>/task/*/schedstat (ns
// on CPU per thread, summed), as bench/perf/proc_cpu.py reads them for the Python side.

import { readFileSync, readdirSync } from 'node:fs';

function cpuOf(pids) {
  let ns = 0;
  for (const pid of pids) {
    let threads = [];
    try {
      threads = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue; // the process is gone: nothing to add
    }
    for (const tid of threads) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // the thread ended meanwhile
      }
    }
  }
  return ns / 1e9;
}

/** `{node: s, <group>: s, ...}` now; watch maps group names to pids (spec.watch). */
export function cpuSample(watch = {}) {
  const own = process.cpuUsage();
  const sample = { node: (own.user + own.system) / 1e6 };
  for (const [name, pids] of Object.entries(watch)) sample[name] = cpuOf(pids);
  return sample;
}
