"""The dashboard's tests: a service with tokens configured, HTTP clients signed in as each role,
and for the browser tests Debian's chromium driven by Playwright, axe-core (from npm, installed
once into .cache/) and a folder for the screenshots CI keeps."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from echomq_http.config import Settings
from tests.conftest import TEST_SWEEP_INTERVAL_MS, skips_fail_the_run
from tests.support.service import running_service

ROOT = Path(__file__).parents[2]
CHROMIUM = os.environ.get("EMQ_TEST_CHROMIUM", "/usr/bin/chromium")
AXE_DIR = ROOT / ".cache" / "axe"
AXE_VERSION = "4"
NPM_TIMEOUT_S = 180
# Screenshots of every page the browser tests visit (CI keeps the folder as an artifact).
SHOTS = Path(os.environ.get("EMQ_UI_SCREENSHOTS", ROOT / "artifacts" / "ui"))

ADMIN, WORKER, PRODUCER, ONLY_OURS = "admin-secret", "worker-secret", "producer-secret", "scoped-secret"
AUTH_ENTRIES = (
    f"admin:{ADMIN}",
    f"worker:{WORKER}",
    f"producer:{PRODUCER}",
    f"admin:{ONLY_OURS}:ours-*",  # an admin of the queues named ours-* only
)


@pytest.fixture(scope="session")
def ui_url(redis_url: str) -> Iterator[str]:
    """A service with tokens configured, as an operator would run it."""
    settings = Settings(
        redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS, auth_entries=AUTH_ENTRIES
    )
    with running_service(settings) as url:
        yield url


@pytest.fixture(scope="session")
def api(ui_url: str) -> Iterator[httpx.Client]:
    """The API, as an admin: the state the dashboard shows is made through it."""
    with httpx.Client(base_url=ui_url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as client:
        yield client


@contextlib.contextmanager
def signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    """A browser-like client of the dashboard, signed in with the token through the form."""
    with httpx.Client(base_url=url, timeout=30, headers={"Origin": url}) as client:
        page = client.get("/ui/sign-in")
        answer = client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf_of(page.text)})
        assert answer.status_code == 303, answer.text
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert found, "the page holds no CSRF token"
    return found.group(1)


def require_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    if skips_fail_the_run():
        pytest.fail(f"CI=true: the browser tests need chromium at {CHROMIUM} (.ci/run installs it)")
    pytest.skip(f"needs chromium at {CHROMIUM} (apt-get install chromium)")


@pytest.fixture(scope="session")
def axe_script() -> Path:
    """axe-core's browser build, from its npm package (installed once; nothing committed)."""
    script = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
    if script.exists():
        return script
    if shutil.which("npm") is None:
        if skips_fail_the_run():
            pytest.fail("CI=true: the accessibility checks need npm to install axe-core")
        pytest.skip("needs npm to install axe-core")
    AXE_DIR.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            "npm",
            "install",
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(AXE_DIR),
            f"axe-core@{AXE_VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_S,
        env={**os.environ, "npm_config_cache": str(ROOT / ".cache" / "npm")},
    )
    assert done.returncode == 0, done.stderr
    return script
