"""BullMQ Python's side of bench/bench.py's sdk_worker workload, in a virtualenv of its own.

    ~/.cache/echomq-bench/python/bin/python bench/bullmq_py_bench.py '<json spec>'

bench.py installs the pinned ``bullmq`` from PyPI into that cache folder (outside the
repository and the project's dependencies) and runs this script with its Python. Workload:
a Worker (concurrency spec["concurrency"], a no-op async processor) drains spec["prefill"] jobs
added beforehand (addBulk of 1000, not measured); the window ends when the last one is
completed. Prints one JSON object in the form bench.py reads from bench/loadgen.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_cpu import ProcWatch

BATCH = 1000


async def prefill(queue: Any, count: int, payload: Any) -> None:
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        await queue.addBulk([{"name": "job", "data": payload} for _ in range(size)])


async def worker_drain(spec: dict[str, Any]) -> dict[str, Any]:
    from bullmq import Queue, Worker

    connection = f"redis://{spec['host']}:{spec['port']}"
    queue = Queue(spec["queue"], {"connection": connection})
    await prefill(queue, spec["prefill"], spec["payload"])
    watch = ProcWatch({name: list(pids) for name, pids in spec.get("watch", {}).items()})
    drained = asyncio.Event()
    done = errors = 0

    async def process(job: Any, token: str) -> None:
        return None

    def completed(*_: Any) -> None:
        nonlocal done
        done += 1
        if done == spec["prefill"]:
            drained.set()

    def failed(*_: Any) -> None:
        nonlocal errors
        errors += 1

    started, cpu_start, others_start = time.time(), time.process_time(), watch.sample()
    worker = Worker(spec["queue"], process, {"connection": connection, "concurrency": spec["concurrency"]})
    worker.on("completed", completed)
    worker.on("failed", failed)
    worker.on("error", failed)
    with contextlib.suppress(TimeoutError):  # the window ends at the deadline: done says how far it got
        await asyncio.wait_for(drained.wait(), spec["deadline_s"])
    ended, cpu_end, others_end = time.time(), time.process_time(), watch.sample()
    await worker.close(force=True)
    await queue.close()
    window_s = max(1e-9, ended - started)
    return {
        "jobs": done,
        "requests": done,
        "errors": errors,
        "empty": int(drained.is_set()),
        "window_s": window_s,
        "planned_window_s": window_s,
        "latencies_ms": [],
        "cpu_s": {"bullmq-python": cpu_end - cpu_start}
        | {name: others_end[name] - others_start[name] for name in others_end},
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = asyncio.run(worker_drain(spec))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
