"""A small CPU-time sampling profiler for the service, for machines without py-spy.

    .venv/bin/python bench/perf/sample_profile.py PREFIX -m echomq_http

Runs the module like ``python -m`` would. A CPU-time interval timer (ITIMER_PROF, every
``EMQ_SAMPLE_INTERVAL_MS``, default 1 ms of CPU used by the process) raises SIGPROF; the handler
records the Python stack of the main thread. Only CPU time is sampled, so a loop waiting for I/O
costs no samples; a long C call (a socket write, a JSON encode) is charged to the Python function
that made it. Only the main thread is sampled, from the frame the signal interrupted (walking
every thread's frames with sys._current_frames() inside a signal handler can deadlock), with a
guard against a tick arriving while one is recorded. Sampling is off until SIGUSR1 (reset and
start) and stops at SIGUSR2, so bench.py samples exactly its measured window; without those
signals it samples the whole run.

On exit it writes
  PREFIX.txt        the functions with the most samples: own (leaf) and total (on the stack)
  PREFIX.collapsed  one line per distinct stack, "thread;frame;frame;... count" (flamegraph.pl)

A sample whose main-thread leaf is the event loop's run() means CPU spent in C inside uvloop
(socket reads and writes, callbacks' glue) or in another thread. cProfile misattributes time in
asyncio code (a suspended coroutine keeps counting); this does not.
"""

from __future__ import annotations

import atexit
import collections
import os
import runpy
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

TOP = 45
# Where a request's CPU goes, coarsely: a sample counts for the first group any of whose frame
# markers is on its stack (so the order matters: the more specific first). A signal is handled
# between two bytecodes, so C time (a socket write, a JSON encode) is charged to the Python
# code that runs next: read the groups as a map, not to the microsecond.
GROUPS = (
    ("access log (uvicorn -> logging)", ("logging/__init__.py",)),
    ("telemetry (request metric, spans)", ("echomq_http/observability/", "opentelemetry/")),
    (
        "Redis client (multiplexer, scripts, redis-py)",
        ("echomq_http/store/", "redis/"),
    ),
    ("wake hub (pub/sub)", ("echomq_http/runtime/wakeups.py",)),
    ("queue core (merging, bindings, leasing)", ("echomq_http/core/",)),
    ("request body (read_body, its timeout)", ("echomq_http/api/http.py:read_body", "api/body_timeouts.py")),
    (
        "response (encode, send, joined write)",
        (
            "api/fastpath.py:_send",
            "httptools_impl.py:send",
            "api/http_protocol.py:write",
            "api/http_protocol.py:_flush",
        ),
    ),
    ("handlers, schemas, auth", ("echomq_http/api/",)),
    ("HTTP parsing (httptools, the protocol)", ("httptools_impl.py", "api/http_protocol.py")),
    ("framework (litestar, uvicorn ASGI)", ("litestar/", "uvicorn/")),
)


class Sampler:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.samples = 0
        self.active = False
        self._recording = False

    def install(self, start_now: bool) -> None:
        signal.signal(signal.SIGPROF, self._on_tick)
        signal.signal(signal.SIGUSR1, self._on_start)
        signal.signal(signal.SIGUSR2, self._on_stop)
        signal.setitimer(signal.ITIMER_PROF, self.interval_s, self.interval_s)
        self.active = start_now

    def _on_start(self, signum: int, frame: FrameType | None) -> None:
        self.stacks.clear()
        self.samples = 0
        self.active = True

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.active = False

    def _on_tick(self, signum: int, frame: FrameType | None) -> None:
        # The main thread only, from the frame the signal interrupted: sys._current_frames()
        # takes the interpreter's thread lock and could deadlock inside a handler. A tick that
        # arrives while one is being recorded is dropped (the guard), never nested.
        if not self.active or self._recording:
            return
        self._recording = True
        try:
            self.samples += 1
            self.stacks[("main", *_stack(frame))] += 1
        finally:
            self._recording = False

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        self.active = False

    def report(self, prefix: str) -> None:
        own: collections.Counter[str] = collections.Counter()
        total: collections.Counter[str] = collections.Counter()
        for stack, count in self.stacks.items():
            own[stack[-1] if len(stack) > 1 else "?"] += count
            for name in set(stack[1:]):
                total[name] += count
        base = max(1, self.samples)
        lines = [
            f"{self.samples} samples of the main thread, one per {self.interval_s * 1000:g} ms of the "
            "process's CPU; percentages are of the samples",
            "",
            f"own (leaf) samples, top {TOP}:",
        ]
        lines += [f"  {100 * count / base:5.1f}%  {name}" for name, count in own.most_common(TOP)]
        groups: collections.Counter[str] = collections.Counter()
        for stack, count in self.stacks.items():
            if stack[0] != "main":
                continue
            groups[_group(stack)] += count
        lines += ["", "main thread by group (first match wins):"]
        lines += [f"  {100 * count / base:5.1f}%  {name}" for name, count in groups.most_common()]
        lines += ["", f"total (anywhere on the stack) samples, top {TOP}:"]
        lines += [f"  {100 * count / base:5.1f}%  {name}" for name, count in total.most_common(TOP)]
        Path(f"{prefix}.txt").write_text("\n".join(lines) + "\n")
        with open(f"{prefix}.collapsed", "w") as out:
            for stack, count in self.stacks.most_common():
                out.write(";".join(stack) + f" {count}\n")


def _group(stack: tuple[str, ...]) -> str:
    for name, markers in GROUPS:
        if any(marker in frame for frame in stack for marker in markers):
            return name
    return "event loop and the rest (uvloop in C, the sweep, the wake hub)"


def _stack(frame: FrameType | None) -> tuple[str, ...]:
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{_short(code.co_filename)}:{code.co_name}")
        frame = frame.f_back
    names.reverse()
    return tuple(names)


_SHORT: dict[str, str] = {}


def _short(filename: str) -> str:
    short = _SHORT.get(filename)
    if short is None:
        short = filename
        for marker in ("site-packages/", "/lib/python3.11/", "/lib/python3.12/", "/lib/python3.13/"):
            if marker in filename:
                short = filename.split(marker, 1)[1]
                break
        else:
            if filename.startswith("/"):
                short = os.path.relpath(filename)
        _SHORT[filename] = short
    return short


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit(__doc__)
    prefix, module = sys.argv[1], sys.argv[3]
    interval_s = float(os.environ.get("EMQ_SAMPLE_INTERVAL_MS", "1")) / 1000
    sampler = Sampler(interval_s)

    def finish(*_: Any) -> None:
        sampler.stop()
        sampler.report(prefix)

    atexit.register(finish)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's packages
    sys.argv = [module, *sys.argv[4:]]
    sampler.install(start_now=os.environ.get("EMQ_SAMPLE_WAIT_FOR_SIGNAL") != "1")
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
