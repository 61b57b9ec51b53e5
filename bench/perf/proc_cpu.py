"""CPU seconds of processes, from /proc: the standard library only, so that the load generator
and the BullMQ Python side (bench/bullmq_py_bench.py, in a virtualenv of its own) share it.

The time on CPU comes from each thread's /proc/<pid>/task/<tid>/schedstat (nanoseconds the
scheduler ran it), summed over the process's threads: exact where /proc/<pid>/stat's utime and
stime are counted in 10 ms ticks and sampled, and steady on a shared VM where throughput moves
10-30 % between runs. A thread that ended within the window takes its time with it (none of the
measured servers starts and ends threads per request)."""

from __future__ import annotations

import os


def process_cpu_s(pid: int) -> float:
    """CPU seconds pid's threads have run so far (0.0 when the process is gone)."""
    total = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total / 1e9


class ProcWatch:
    """CPU seconds of groups of other processes (schedstat, all threads)."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self._groups = groups

    def sample(self) -> dict[str, float]:
        return {name: sum(process_cpu_s(pid) for pid in pids) for name, pids in self._groups.items()}
