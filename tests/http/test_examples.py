"""The README's curl walk-through runs as written against a live service."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

WALKTHROUGH = Path(__file__).parents[2] / "examples" / "walkthrough.sh"


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_walkthrough_script(service_url: str, queue: str) -> None:
    done = subprocess.run(
        ["bash", str(WALKTHROUGH), service_url, queue], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert json.loads(lines[lines.index("# ack") + 1])["state"] == "completed"
    triggered = json.loads(lines[lines.index("# trigger it: one job now") + 1])
    assert triggered["created"] is True and triggered["state"] == "waiting"
    counts = json.loads(lines[-1])["counts"]
    assert counts == {"waiting": 1, "delayed": 0, "active": 0, "completed": 1, "failed": 0, "cancelled": 0}
