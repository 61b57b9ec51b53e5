"""CPU seconds of processes, from /proc: the standard library only, so that the load generator
and the BullMQ Python side (bench/bullmq_py_bench.py, in a virtualenv of its own) share it."""

from __future__ import annotations

import os


class ProcWatch:
    """CPU seconds (user + system) of other processes, from /proc/<pid>/stat."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self._groups = groups
        self._ticks_per_s = os.sysconf("SC_CLK_TCK")

    def sample(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for name, pids in self._groups.items():
            total = 0
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                    total += int(fields[11]) + int(fields[12])  # utime, stime
                except (OSError, IndexError, ValueError):
                    continue
            totals[name] = total / self._ticks_per_s
        return totals
