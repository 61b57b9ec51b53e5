"""Helpers of the client tests: where things are, the environment of child processes, waiting."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2]
SDK_SRC = ROOT / "clients" / "python" / "src"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: no EMQ_* of the caller, the SDK importable."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("EMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SDK_SRC), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def stop_work(process: subprocess.Popen[str]) -> tuple[list[dict[str, Any]], str]:
    """SIGTERM to an `emq work --json`; its events (one JSON per line) and stderr, once it exited 0."""
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()], err


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting for a condition"
        time.sleep(interval)


async def await_until(
    predicate: Callable[[], Awaitable[Any]], timeout: float = 15.0, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting for a condition"
        await asyncio.sleep(interval)
