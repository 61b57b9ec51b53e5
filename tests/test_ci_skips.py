"""Under CI=true a skipped test fails the run (tests/conftest.py): proven on a throwaway test
file run by pytest with this suite's conftest as a plugin, once with CI=true and once without."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PROBE = """
import pytest

def test_runs():
    pass

def test_skips():
    pytest.skip("a tool is missing")

@pytest.mark.xfail(reason="expected to fail")
def test_xfails():
    raise AssertionError
"""
MODULE_SKIP = 'import pytest\npytest.importorskip("no_such_module_anywhere")\n'


def run_probe(directory: Path, ci: str | None, *files: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "--rootdir",
            str(directory),
            "-c",
            os.devnull,
            *files,
        ],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def probes(tmp_path: Path) -> Path:
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    return tmp_path


def test_skips_pass_outside_ci(probes: Path) -> None:
    done = run_probe(probes, None, "test_probe.py", "test_module_skip.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 2 skipped, 1 xfailed" in done.stdout, done.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_skipped_or_xfailed_test_fails_under_ci(probes: Path, ci: str) -> None:
    done = run_probe(probes, ci, "test_probe.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("2 failed, 1 passed"), done.stdout
    # Each failure names why it would not have run.
    assert "test_probe.py::test_skips skipped: a tool is missing" in done.stdout, done.stdout
    assert "test_probe.py::test_xfails xfailed: expected to fail" in done.stdout, done.stdout


def test_a_module_skipped_at_import_fails_under_ci(probes: Path) -> None:
    done = run_probe(probes, "true", "test_module_skip.py")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "test_module_skip.py skipped: could not import 'no_such_module_anywhere'" in done.stdout, (
        done.stdout
    )
