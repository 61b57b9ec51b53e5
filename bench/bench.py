"""`make bench`: EchoMQ HTTP against BullMQ (bench/perf/bench_main.py; its pieces are
bench/perf/bench_*.py). It stays at this path: bench/report/compare.py runs `bench/bench.py` in
another commit's tree too, and bench/lua_cost.py takes free_port from here.

    .venv/bin/python bench/bench.py [--quick] [--json out.json] ...
"""

import sys
from pathlib import Path

PERF = Path(__file__).resolve().parent / "perf"
REPO = PERF.parents[1]
# bench/perf for its flat modules, the repository for tests.support; not bench/ itself (run as a
# script, it comes first on sys.path, where `bench` would be this file).
sys.path[:0] = [str(PERF), str(REPO)]

from tests.support.ports import free_port  # noqa: E402

__all__ = ["free_port"]

if __name__ == "__main__":
    from bench_main import main

    raise SystemExit(main())
