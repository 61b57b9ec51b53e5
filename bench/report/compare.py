"""Throughput of this checkout against another commit's, on the same machine, in alternating runs.

    .venv/bin/python bench/report/compare.py --against e49a09c             # 3 rounds of cycle_50,batch
    .venv/bin/python bench/report/compare.py --against e49a09c --rounds 5 --markdown out.md

Each round runs ``bench.py --only WORKLOADS --no-bullmq`` first on the other commit (a
``git archive`` of it in a temporary directory, with its own bench.py, service and scripts),
then on this checkout, so that a machine that gets busier or quieter moves both sides. A
2-core VM is noisy: compare the medians, and read each run's figures beside them. Prints a
markdown table (``--markdown`` also writes it to a file).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.support, when run as a script

from tests.support.launched import service_process  # noqa: E402 - after the path

DEFAULT_WORKLOADS = "cycle_50,batch"
RUN_TIMEOUT_S = 900
RUN_ATTEMPTS = 2


def checkout(commit: str, into: Path) -> Path:
    """The commit's tree, as files (no .git): its bench.py runs its own service."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run_bench(tree: Path, workloads: str, out: Path) -> dict[str, dict[str, object]]:
    """One bench.py run in `tree`, with this interpreter (this checkout's venv): rows by key.

    A run that fails is run once more (an older commit's bench.py can fail now and then reading
    its load generators' output), after printing the end of what it said.
    """
    command = [sys.executable, "bench/bench.py", "--only", workloads, "--no-bullmq", "--json", str(out)]
    # Another tree's service, not this checkout's: the editable install maps echomq_http here, so
    # the tree's own package goes first on PYTHONPATH (its bench.py and the services it starts
    # inherit it).
    env = None if tree == ROOT else service_process(tree, dict(os.environ))[1]
    for attempt in range(RUN_ATTEMPTS):
        run = subprocess.run(
            command,
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        if run.returncode == 0:
            break
        print(f"bench.py failed in {tree} (exit {run.returncode}):\n{run.stderr[-2000:]}", file=sys.stderr)
        if attempt == RUN_ATTEMPTS - 1:
            raise SystemExit(f"bench.py failed {RUN_ATTEMPTS} times in {tree}")
    return {row["key"]: row for row in json.loads(out.read_text())["rows"]}


def markdown(against: str, here: str, runs: dict[str, list[dict[str, dict[str, object]]]]) -> str:
    keys = list(runs["here"][0])
    lines = [
        f"| workload | {against}: median (each run) | {here}: median (each run) | ratio of medians |",
        "|---|---|---|---|",
    ]
    for key in keys:
        title = runs["here"][0][key]["title"]
        unit = runs["here"][0][key]["unit"]
        medians = []
        cells = []
        for side in ("against", "here"):
            values = [float(run[key]["echomq"]) for run in runs[side] if run.get(key, {}).get("echomq")]
            median = statistics.median(values) if values else None
            medians.append(median)
            each = " / ".join(f"{value:,.0f}" for value in values)
            cells.append(f"{median:,.0f} {unit} ({each})" if median is not None else "-")
        ratio = f"{medians[1] / medians[0]:.2f}x" if all(medians) else "-"
        lines.append(f"| {title} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


def head_commit() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the other commit (anything git archive takes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=DEFAULT_WORKLOADS, help="bench.py workloads, comma-separated")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table to this file")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="emq-compare-"))
    try:
        other = checkout(args.against, workdir / "tree")
        runs: dict[str, list[dict[str, dict[str, object]]]] = {"against": [], "here": []}
        for round_number in range(1, args.rounds + 1):
            for side, tree in (("against", other), ("here", ROOT)):
                rows = run_bench(tree, args.only, workdir / f"{side}-{round_number}.json")
                runs[side].append(rows)
                figures = ", ".join(f"{key} {float(row['echomq'] or 0):,.0f}" for key, row in rows.items())
                print(f"round {round_number} {side}: {figures}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    here = head_commit() + (" + uncommitted changes" if _dirty() else "")
    table = markdown(args.against, here, runs)
    footer = (
        f"{args.rounds} alternating rounds of `bench.py --only {args.only} --no-bullmq`, "
        f"{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.2f}"
    )
    print(f"{table}\n\n{footer}")
    if args.markdown:
        Path(args.markdown).write_text(f"{table}\n\n{footer}\n")
    return 0


def _dirty() -> bool:
    status = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "service", "lua"],
        capture_output=True,
        text=True,
        check=True,
    )
    return bool(status.stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
