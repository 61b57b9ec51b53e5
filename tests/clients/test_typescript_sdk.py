"""The TypeScript SDK (clients/typescript) passes its own tests, `npm test` (node:test), against
the session's service: pytest provides the service and the URL, node runs the tests.

`npm ci` runs only when node_modules/ does not hold what package-lock.json names
(clients/typescript/scripts/install.mjs keeps a stamp of the lock's SHA-256; the npm cache is
.cache/npm, git-ignored). Without npm the test is skipped, except under CI=true, where it fails:
CI must run these tests. It runs under every backend of `.ci/run` (about half a minute each): the
Worker's request ids and lease_next go through the service's Cluster code paths too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.clients.support import ROOT, subprocess_env

PACKAGE = ROOT / "clients" / "typescript"
NPM_CACHE = ROOT / ".cache" / "npm"
NPM_TIMEOUT_S = 280


def run(*command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_S,
        env=env,
    )


def require_npm() -> None:
    if shutil.which("npm") and shutil.which("node"):
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true: node and npm are needed for the TypeScript SDK's tests (clients/typescript)")
    pytest.skip("needs node >= 18.17 and npm")


@pytest.mark.timeout(2 * NPM_TIMEOUT_S + 60)
def test_typescript_sdk_npm_test(service_url: str) -> None:
    require_npm()
    # npm ci: exactly the locked versions (node_modules/ is git-ignored), when they changed
    installed = run("node", "scripts/install.mjs", "--cache", str(NPM_CACHE))
    assert installed.returncode == 0, installed.stdout + installed.stderr

    tested = run("npm", "test", env=subprocess_env(EMQ_URL=service_url))
    output = tested.stdout + tested.stderr
    assert tested.returncode == 0, output[-20_000:]
    passed = re.search(r"^# pass (\d+)$", tested.stdout, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", tested.stdout, re.MULTILINE)
    assert passed and failed, output[-5000:]
    assert int(passed.group(1)) >= 25 and int(failed.group(1)) == 0, output[-20_000:]
    for name in ("skipped", "todo", "cancelled"):
        count = re.search(rf"^# {name} (\d+)$", tested.stdout, re.MULTILINE)
        assert count is None or int(count.group(1)) == 0, f"{name}: " + output[-5000:]
