"""Redis's own work per lease and ack call, counted exactly: CPU instructions (valgrind's callgrind).

    .venv/bin/python bench/lua_cost.py                        # this checkout's lua/
    .venv/bin/python bench/lua_cost.py lua /tmp/variant/lua   # a change to the scripts, A/B

On a shared 2-core VM, time-based figures of the same code move by 10-30 % from one minute to
the next, too much to see a change of a few percent in a script. An instruction count does not
move: two runs of the same scripts agree within 0.5 %. Each lua/ directory given is run by this
checkout's JobQueues (its Python, its placeholders) against a redis-server of its own started
under callgrind with counting off. The state is made first (16,000 jobs, 14,000 of them leased
and acked in batches, past the completed-jobs cap and the events kept), then counting is on
only while each measured run of calls is made: 200 one-job leases, their 200 acks, 10 leases of
100 jobs (4 workers) and their 10 ack-manies, 200 one-job enqueues, 200 acks with lease_next one
at a time, and 200 more made 8 at once (merged into one script call: the figure is per job).
Printed: thousands of instructions per call, per job, and each directory's ratio to the
first's. Instructions are not time (a cache miss costs
more than an add), but a script that runs fewer of them costs Redis less.

Needs valgrind (Debian: apt-get install valgrind) and a redis-server on PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from msgspec import UNSET, Raw
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from bench import free_port
from echomq_http.api.schemas.jobs import EnqueueRequest
from echomq_http.api.schemas.working import AckItem
from echomq_http.core.leasing import LeaseAsk
from echomq_http.core.queue import JobQueues
from tests.support.queues import job_queues as support_job_queues

REPO = Path(__file__).resolve().parent.parent

QUEUE = "cost"
PAYLOAD = Raw(b'{"n":1,"s":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}')
JOBS, BEFORE_BATCHES = 16_000, 140  # 14,000 acked first: past the caps of 10,000
SINGLE_CALLS, BATCH_CALLS, BATCH = 200, 10, 100
MERGED = 8  # calls at once that merge into one script call (core/merging.py): c=20's usual group
RUNS = ("lease 1", "ack 1", "lease 100", "ack 100", "enqueue 1", "ack+next 1", f"ack+next x{MERGED}")
START_TIMEOUT_S = 60


class CountedRedis:
    """redis-server under callgrind, counting only between on() and off()."""

    def __init__(self, out_dir: Path) -> None:
        self.port = free_port()
        self.out_dir = out_dir
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_dir}/callgrind.%p",
            "redis-server",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.process.pid)], capture_output=True, check=False)

    def on(self) -> None:
        self._control("--zero")
        self._control("--instr=on")

    def off(self) -> int:
        """Counting off; the instructions counted since on()."""
        self._control("--instr=off")
        for old in self.out_dir.glob("callgrind.*"):
            old.unlink()
        self._control("--dump")
        counted = 0
        for dump in self.out_dir.glob("callgrind.*"):
            for line in dump.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    counted = max(counted, int(line.split()[1]))
        return counted

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


async def connected(port: int) -> Redis:
    client = Redis(port=port)
    for _ in range(START_TIMEOUT_S * 5):
        try:
            await client.ping()
            return client
        except RedisConnectionError:  # valgrind is still starting it
            await asyncio.sleep(0.2)
    raise RuntimeError("redis-server under valgrind did not start")


def job_queues(client: Redis, lua: Path) -> JobQueues:
    return support_job_queues(client, max_concurrent_calls=16, scripts_dir=lua)


async def measure(lua: Path, out_dir: Path) -> dict[str, float]:
    """Instructions per call of each run, for the scripts in lua."""
    server = CountedRedis(out_dir)
    try:
        client = await connected(server.port)
        queues = job_queues(client, lua)
        for _ in range(JOBS // 1000):
            await queues.enqueue(QUEUE, [EnqueueRequest(payload=PAYLOAD)] * 1000)
        for _ in range(BEFORE_BATCHES):
            leased = await queues.lease(QUEUE, "before", 30_000, BATCH)
            await queues.ack(QUEUE, [AckItem(id=job.id, lease_id=job.lease_id) for job in leased])
        per_call: dict[str, float] = {}

        async def counted(run: str, calls: int, work: Callable[[], Awaitable[Any]]) -> Any:
            server.on()
            result = await work()
            per_call[run] = server.off() / calls
            return result

        async def leases(count: int, max_jobs: int, workers: int) -> list[Any]:
            return [await queues.lease(QUEUE, f"w{i % workers}", 30_000, max_jobs) for i in range(count)]

        singles = await counted("lease 1", SINGLE_CALLS, lambda: leases(SINGLE_CALLS, 1, 8))

        async def ack_singles() -> None:
            for (job,) in singles:
                await queues.ack_one(QUEUE, job.id, job.lease_id, UNSET)

        await counted("ack 1", SINGLE_CALLS, ack_singles)
        batches = await counted("lease 100", BATCH_CALLS, lambda: leases(BATCH_CALLS, BATCH, 4))

        async def ack_batches() -> None:
            for batch in batches:
                await queues.ack(QUEUE, [AckItem(id=job.id, lease_id=job.lease_id) for job in batch])

        await counted("ack 100", BATCH_CALLS, ack_batches)

        async def enqueue_singles() -> None:
            for _ in range(SINGLE_CALLS):
                await queues.enqueue(QUEUE, [EnqueueRequest(payload=PAYLOAD)])

        await counted("enqueue 1", SINGLE_CALLS, enqueue_singles)
        held = [job for (job,) in await leases(MERGED, 1, MERGED)]

        async def ack_next(index: int) -> None:
            job = held[index]
            ask = LeaseAsk.of(f"w{index}", 30_000, 1)
            (held[index],) = (await queues.ack_one_and_lease(QUEUE, job.id, job.lease_id, UNSET, ask)).jobs

        async def ack_next_singles() -> None:
            for call in range(SINGLE_CALLS):
                await ack_next(call % MERGED)

        async def ack_next_merged(rounds: int = SINGLE_CALLS // MERGED) -> None:
            for _ in range(rounds):  # MERGED at once: one script call each round
                await asyncio.gather(*(ack_next(index) for index in range(MERGED)))

        # Each script's first call loads its function library (FUNCTION LOAD, ~7M instructions):
        # made before counting, so the figures are the calls' own work.
        await ack_next(0)
        await ack_next_merged(rounds=1)
        await counted("ack+next 1", SINGLE_CALLS, ack_next_singles)

        await counted(f"ack+next x{MERGED}", SINGLE_CALLS, ack_next_merged)
        await queues.aclose()
        await client.aclose()
        return per_call
    finally:
        server.stop()


def table(results: dict[str, dict[str, float]]) -> str:
    head = (
        "| scripts | "
        + " | ".join(f"{run} (k/call)" for run in RUNS)
        + " | one job: 1+1 | batched, per job |"
    )
    lines = [head, "|" + "---|" * (len(RUNS) + 3)]
    first = next(iter(results.values()))

    def per_job(result: dict[str, float]) -> tuple[float, float]:
        return result["lease 1"] + result["ack 1"], (result["lease 100"] + result["ack 100"]) / BATCH

    for name, result in results.items():
        single, batched = per_job(result)
        base_single, base_batched = per_job(first)
        cells = [f"{result[run] / 1000:,.1f}" for run in RUNS]
        ratios = (
            f"{single / 1000:,.1f}k ({single / base_single:.3f})",
            f"{batched / 1000:,.1f}k ({batched / base_batched:.3f})",
        )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratios[0]} | {ratios[1]} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "lua_dirs", nargs="*", default=[str(REPO / "lua")], help="lua/ directories (default: ours)"
    )
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "redis-server"):
        if shutil.which(tool) is None:
            print(f"{tool} not found (valgrind: apt-get install valgrind)", file=sys.stderr)
            return 2
    results = {}
    with tempfile.TemporaryDirectory(prefix="emq-lua-cost-") as out:
        for index, lua in enumerate(args.lua_dirs):
            out_dir = Path(out) / str(index)
            out_dir.mkdir()
            results[lua] = asyncio.run(measure(Path(lua).resolve(), out_dir))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
