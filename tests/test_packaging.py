"""The built wheel carries the Lua scripts, and the installed package finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.timeout(180)
def test_wheel_ships_the_lua_scripts(tmp_path: Path) -> None:
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("echomq_http-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    scripts = {path.relative_to(ROOT).as_posix() for path in (ROOT / "lua").rglob("*.lua")}
    assert {f"service/{script}" for script in scripts} <= names
    # Installed from the wheel (unpacked here), the loader reads the packaged copy.
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    probe = "from service.scripts import lua_dir; print(lua_dir())"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == str(tmp_path / "site" / "service" / "lua"), found.stderr
