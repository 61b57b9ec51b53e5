"""Real servers only: a session valkey-server (the embedded binary) on a free loopback port,
or the server named by EMQ_TEST_REDIS_URL. Each test gets its own random queue name."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis as AsyncRedis

from echomq_http.config import Settings
from echomq_http.core import leasing
from echomq_http.store.connect import connect
from echomq_http.store.keys import QUEUE_REGISTRY, queue_prefix
from tests.support.cluster import ValkeyCluster
from tests.support.servers import RedisServer
from tests.support.service import background_tasks, running_service

TEST_SWEEP_INTERVAL_MS = 100
HTTP_TIMEOUT_S = 60.0


CLUSTER = os.environ.get("EMQ_TEST_BACKEND") == "cluster"

# Under CI (CI=true) every collected test must run: a skip proves nothing, and a tool missing on
# the runner would turn a claim of the README into silence. .ci/run installs what tests need.
# Only a test that truly cannot run on the CI machine may skip there, listed with the reason.
SKIPS_ALLOWED_IN_CI: dict[str, str] = {
    # "tests/test_x.py::test_y": "needs Docker, which the CI machine does not run",
}


def skips_fail_the_run() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfailed: {report.wasxfail}"
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return "skipped: " + reason.removeprefix("Skipped: ")


def fail_instead_of_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skip (or xfail) into a failure that names why it would have been skipped."""
    reason = skip_reason(report)
    if hasattr(report, "wasxfail"):
        del report.wasxfail  # else pytest would still file it under xfailed
    report.outcome = "failed"
    report.longrepr = (
        f"{report.nodeid} {reason}\nUnder CI=true every test must run: install what it needs "
        "(.ci/run), or list it in tests/conftest.py SKIPS_ALLOWED_IN_CI with why it cannot run."
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    if report.skipped and skips_fail_the_run() and item.nodeid not in SKIPS_ALLOWED_IN_CI:
        fail_instead_of_skip(report)
    if report.failed and call.when == "call":
        # A test that waited for the sweep, a wake-up or an event feed: where those tasks stood.
        report.sections.append(("emq background tasks", background_tasks() or "(no service running)"))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    """A whole module skipped at import (pytest.importorskip, allow_module_level) fails too."""
    report: pytest.CollectReport = yield
    if report.skipped and skips_fail_the_run() and collector.nodeid not in SKIPS_ALLOWED_IN_CI:
        fail_instead_of_skip(report)
    return report


@pytest.fixture(scope="session", autouse=True)
def temp_files_under_pytest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The services that tests start keep their temporary files (the metrics directory a
    SIGKILLed launcher leaves behind) in pytest's temporary directory, not the machine's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
        yield


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """EMQ_TEST_REDIS_URL, or a Valkey Cluster (EMQ_TEST_BACKEND=cluster), or one valkey-server."""
    url = os.environ.get("EMQ_TEST_REDIS_URL")
    if url:
        yield url
        return
    if CLUSTER:
        cluster = ValkeyCluster(tmp_path_factory.mktemp("cluster")).start()
        try:
            yield cluster.url
        finally:
            cluster.stop()
        return
    server = RedisServer(tmp_path_factory.mktemp("valkey")).start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def private_valkey(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, for tests that stop it or must not be swept by others."""
    server = RedisServer(tmp_path / "valkey").start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def private_redis_url(private_valkey: RedisServer) -> str:
    return private_valkey.url


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[AsyncRedis]:
    """A client of the test server, of whichever kind it is (a cluster client for a cluster)."""
    client = await connect(Settings(redis_url=redis_url))
    yield client  # type: ignore[misc]
    await client.aclose()


async def remove_queue(redis_client: AsyncRedis, name: str) -> None:
    """A test queue's keys and registry entry, removed."""
    keys = [key async for key in redis_client.scan_iter(match=queue_prefix(name) + "*", count=1000)]
    if keys:
        await redis_client.delete(*keys)
    await redis_client.srem(QUEUE_REGISTRY, name)


@pytest.fixture
async def queue(redis_client: AsyncRedis) -> AsyncIterator[str]:
    """A fresh queue name; its keys and registry entry are removed afterwards."""
    name = f"t-{secrets.token_hex(6)}"
    yield name
    await remove_queue(redis_client, name)


@pytest.fixture
async def other_queue(redis_client: AsyncRedis) -> AsyncIterator[str]:
    """A second fresh queue (a flow's children elsewhere), removed afterwards like queue's."""
    name = f"t-{secrets.token_hex(6)}"
    yield name
    await remove_queue(redis_client, name)


@pytest.fixture(scope="session")
def service_url(redis_url: str) -> Iterator[str]:
    """One service for the session (tests are independent through their queue names)."""
    settings = Settings(redis_url=redis_url, sweep_interval_ms=TEST_SWEEP_INTERVAL_MS)
    with running_service(settings) as url:
        yield url


@pytest.fixture
def wake_ups_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting long poll looks again only when woken (a wake-up message, or its hub after a
    (re)subscription): its fallback poll is put off past any test's wait. A job that reaches a
    parked long poll then proves the wake-up came, with no timing to measure."""
    monkeypatch.setattr(leasing, "FALLBACK_POLL_S", 3600.0)


@pytest.fixture
async def client(service_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=service_url, timeout=HTTP_TIMEOUT_S) as http:
        yield http
