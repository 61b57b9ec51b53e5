"""The client package runs on Python 3.9 (its requires-python): vermin reads its source for
anything newer, annotations included (msgspec and typing.get_type_hints evaluate them at run
time, where `X | Y` needs 3.10). vermin cannot see a call whose signature changed (it missed
traceback.format_exception(error), 3.10+): test_client_package.py runs a worker on a real 3.9
where the machine has one."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.clients.support import ROOT, SDK_SRC


def test_the_client_package_needs_nothing_newer_than_its_requires_python() -> None:
    project = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.9"
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, vermin; sys.exit(vermin.main())",  # vermin has no __main__
            "--target=3.9-",
            "--eval-annotations",
            "--feature",  # the form with "=" is ignored
            "union-types",
            "--no-tips",
            "--violations",
            str(SDK_SRC),
        ],
        capture_output=True,
        text=True,
    )
    # --violations lists only what needs more than the target, and exits 1 if anything does.
    assert found.returncode == 0, found.stdout + found.stderr
    assert re.search(r"Minimum required versions: 3\.\d+", found.stdout), found.stdout
