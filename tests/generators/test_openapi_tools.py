"""openapi/openapi.json through the tools people point at it: `redocly lint` finds no error, and
the TypeScript clients orval and @hey-api/openapi-ts generate with their defaults (orval: axios,
one file; hey-api: its fetch client) compile under `tsc --strict`. And the document's version is
the package's.

The tools are pinned in tests/generators/package-lock.json and installed by the TypeScript SDK's
installer (clients/typescript/scripts/install.mjs: `npm ci` only when the lock changed; the npm
cache is .cache/npm, git-ignored; tests/generators/.npmrc turns install scripts off, so no
telemetry postinstall runs). Each tool is at the newest version that supports Node 20, the
oldest Node CI runs: orval 8 and hey-api 0.96 on want Node 22; axios stays at 1.18 because the
types of 1.19 on no longer fit orval 7's output (orval 8 fits them; with orval 8.38 and axios
1.21 on Node 20 this document compiles too); typescript 6, not 7, whose native compiler has no
JavaScript API for hey-api. Without node and npm the tests skip, which under CI=true fails the
run (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCUMENT = ROOT / "openapi" / "openapi.json"
TOOLS = Path(__file__).parent  # package.json, package-lock.json, node_modules/
BIN = TOOLS / "node_modules" / ".bin"
INSTALLER = ROOT / "clients" / "typescript" / "scripts" / "install.mjs"
NPM_CACHE = ROOT / ".cache" / "npm"
TIMEOUT_S = 280  # a cold npm cache downloads about 40 MB

# What `redocly lint` may still warn of, each with why it stays. Any other warning fails the test.
EXPLAINED_WARNINGS = {
    # operation-4xx-response: every operation should document a 4xx answer. The probes and the
    # document itself need no token, take no parameter and no body, so nothing a client sends can
    # make them answer 4xx: a 4xx listed there would be a lie.
    ("operation-4xx-response", "#/paths/~1healthz/get/responses"),
    ("operation-4xx-response", "#/paths/~1readyz/get/responses"),
    ("operation-4xx-response", "#/paths/~1openapi.json/get/responses"),
}

# tsc over a generated client: as strict as a careful user's project; the libraries' own .d.ts
# files are theirs to check.
TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "ESNext",
        "moduleResolution": "Bundler",
        "lib": ["ES2022", "DOM"],
        "types": [],
        "strict": True,
        "noEmit": True,
        "skipLibCheck": True,
    },
    "include": ["generated/**/*.ts"],
}


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "REDOCLY_TELEMETRY": "off",  # no usage report to Redocly from a test run
        "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )


@pytest.fixture(scope="module")
def tools() -> Path:
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("needs node >= 20 and npm")
    installed = run("node", INSTALLER, "--dir", TOOLS, "--cache", NPM_CACHE, cwd=TOOLS)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return BIN


def compile_generated(workdir: Path) -> None:
    """tsc over workdir/generated, resolving imports (axios) from the tools' node_modules."""
    (workdir / "node_modules").symlink_to(TOOLS / "node_modules", target_is_directory=True)
    (workdir / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    compiled = run(BIN / "tsc", "-p", "tsconfig.json", cwd=workdir)
    assert compiled.returncode == 0, compiled.stdout[-20_000:] + compiled.stderr


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_redocly_lint_finds_no_error_and_only_explained_warnings(tools: Path, tmp_path: Path) -> None:
    # From an empty folder: no redocly.yaml can change the rules; the built-in recommended ones.
    linted = run(tools / "redocly", "lint", "--format=json", "--extends=recommended", DOCUMENT, cwd=tmp_path)
    report = json.loads(linted.stdout)
    problems = {(found["ruleId"], found["location"][0]["pointer"]): found for found in report["problems"]}
    errors = [key for key, problem in problems.items() if problem["severity"] == "error"]
    assert errors == [], linted.stdout
    assert set(problems) == EXPLAINED_WARNINGS, linted.stdout
    assert report["totals"] == {"errors": 0, "warnings": len(EXPLAINED_WARNINGS), "ignored": 0}
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_orval_default_axios_client_compiles(tools: Path, tmp_path: Path) -> None:
    output = tmp_path / "generated" / "api.ts"
    generated = run(tools / "orval", "--input", DOCUMENT, "--output", output, cwd=tmp_path)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    code = output.read_text()
    # axios, as orval's default client is; one function per operation, named by its operationId
    assert "from 'axios'" in code and "export const ackMany = " in code, code[:2000]
    compile_generated(tmp_path)


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_hey_api_default_client_compiles(tools: Path, tmp_path: Path) -> None:
    output = tmp_path / "generated"
    generated = run(
        tools / "openapi-ts", "--input", DOCUMENT, "--output", output, "--no-log-file", cwd=tmp_path
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "export const ackMany = " in (output / "sdk.gen.ts").read_text()
    compile_generated(tmp_path)


def test_document_version_is_the_package_version() -> None:
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert json.loads(DOCUMENT.read_text())["info"]["version"] == package["version"]


def test_no_schema_takes_a_name_orval_gives_an_operation() -> None:
    # orval names each operation's answer type `<OperationId>Result` next to the schemas (the
    # orval test above catches it too, but only where node runs).
    doc = json.loads(DOCUMENT.read_text())
    operation_ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    taken = {operation_id[0].upper() + operation_id[1:] + "Result" for operation_id in operation_ids}
    assert taken & set(doc["components"]["schemas"]) == set()
