"""Start-up checks of the Redis server: one too old or that may evict keys is refused, one that
persists nothing is warned about, one that denies CONFIG is used with a warning.

No Redis older than 6.2 is at hand, and a fake server would test the fake: a real server is put
behind the fault proxy, which rewrites its INFO reply as an older Redis would write it."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis
from uvicorn.config import STARTUP_FAILURE

from echomq_http.config import Settings
from echomq_http.store.backends import backend_for
from echomq_http.store.connect import CONFIG_DENIED, UnsuitableServer, check_server, redis_client
from tests.faultproxy import FaultProxy, fault_proxy
from tests.support.launched import launched_service
from tests.support.servers import RedisServer

NO_PERSISTENCE = "Redis persists nothing (no AOF, no RDB snapshots): a restart of Redis loses every job"
NO_CONFIG_USER, NO_CONFIG_PASSWORD = "emq-no-config", "no-config-pass"


def too_old(version: str) -> str:
    return f"Redis {version} is too old: EchoMQ needs 6.2 or newer"


@pytest.fixture
def proxy(private_valkey: RedisServer) -> Iterator[FaultProxy]:
    with fault_proxy(private_valkey.port) as proxy:
        yield proxy


@pytest.fixture
async def no_config_url(private_valkey: RedisServer) -> str:
    """The URL of an ACL user that may do everything but CONFIG."""
    admin = Redis.from_url(private_valkey.url)
    await admin.execute_command(
        "ACL", "SETUSER", NO_CONFIG_USER, "on", f">{NO_CONFIG_PASSWORD}", "~*", "&*", "+@all", "-config"
    )
    await admin.aclose()
    return f"redis://{NO_CONFIG_USER}:{NO_CONFIG_PASSWORD}@127.0.0.1:{private_valkey.port}/0"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [
        r.getMessage()
        for r in caplog.records
        if r.name == "echomq_http.store.connect" and r.levelno == logging.WARNING
    ]
    caplog.clear()
    return found


async def test_a_server_that_may_evict_keys_is_refused(private_valkey: RedisServer) -> None:
    client = redis_client(Settings(redis_url=private_valkey.url))
    try:
        await check_server(backend_for(client))  # noeviction: accepted
        await client.config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(UnsuitableServer, match="noeviction"):
            await check_server(backend_for(client))
    finally:
        await client.aclose()


async def test_an_unreachable_server_is_not_fatal_at_start_up(
    private_valkey: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    private_valkey.kill()
    client: Redis = redis_client(Settings(redis_url=private_valkey.url, redis_timeout_s=0.5))
    try:
        with caplog.at_level(logging.WARNING, logger="echomq_http.store.connect"):
            await check_server(backend_for(client))  # no exception: the service starts anyway
    finally:
        await client.aclose()
    # ...and says why it will answer 503 for now, once.
    warnings = [r.getMessage() for r in caplog.records if r.name == "echomq_http.store.connect"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("Redis is not reachable at start-up") and "serving 503" in warnings[0]


async def test_servers_older_than_6_2_are_refused(proxy: FaultProxy) -> None:
    client = redis_client(Settings(redis_url=proxy.url))
    try:
        for old in ("5.0.14", "6.0.20"):
            proxy.pose_as_redis(old)
            with pytest.raises(UnsuitableServer, match=f"^{re.escape(too_old(old))}$"):
                await check_server(backend_for(client))
        for recent in ("6.2.0", "7.0.15"):
            proxy.pose_as_redis(recent)
            await check_server(backend_for(client))
    finally:
        await client.aclose()


@pytest.mark.timeout(120)
def test_the_service_refuses_to_start_on_redis_6_0(proxy: FaultProxy, tmp_path: Path) -> None:
    proxy.pose_as_redis("6.0.16")
    with launched_service(proxy.url, tmp_path / "service.log") as service:
        assert service.exit_status() == STARTUP_FAILURE
        log = service.log()
    assert f"echomq_http.store.connect.UnsuitableServer: {too_old('6.0.16')}\n" in log
    assert f" ERROR echomq_http.store.connect: refusing to start: {too_old('6.0.16')}\n" in log
    assert "ERROR:    Application startup failed. Exiting.\n" in log


async def test_a_server_that_persists_nothing_is_warned_about(
    private_valkey: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis_client(Settings(redis_url=private_valkey.url))
    try:
        with caplog.at_level(logging.WARNING, logger="echomq_http.store.connect"):
            await check_server(backend_for(client))  # the test servers keep no AOF and take no snapshots
            assert warnings_of(caplog) == [NO_PERSISTENCE]
            await client.config_set("appendonly", "yes")
            await check_server(backend_for(client))
            assert warnings_of(caplog) == []
            await client.config_set("appendonly", "no")
            await client.config_set("save", "3600 1")
            await check_server(backend_for(client))
            assert warnings_of(caplog) == []
    finally:
        await client.aclose()


@pytest.mark.timeout(120)
def test_the_service_says_at_start_up_that_redis_persists_nothing(
    private_valkey: RedisServer, tmp_path: Path
) -> None:
    with launched_service(private_valkey.url, tmp_path / "service.log") as service:
        service.wait_ready()
        assert service.stop() == 0
    assert f" WARNING echomq_http.store.connect: {NO_PERSISTENCE}\n" in service.log()


async def test_a_user_denied_config_is_warned_about_and_accepted(
    no_config_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis_client(Settings(redis_url=no_config_url))
    try:
        with caplog.at_level(logging.WARNING, logger="echomq_http.store.connect"):
            await check_server(backend_for(client))
            # It cannot read the snapshot schedule, so it says so instead of "persists nothing".
            assert warnings_of(caplog) == [CONFIG_DENIED]
    finally:
        await client.aclose()


async def test_a_user_denied_config_is_still_refused_a_server_that_may_evict(
    private_valkey: RedisServer, no_config_url: str
) -> None:
    # The eviction policy comes from INFO, which any user may read.
    admin = Redis.from_url(private_valkey.url)
    await admin.config_set("maxmemory-policy", "allkeys-lru")
    client = redis_client(Settings(redis_url=no_config_url))
    try:
        with pytest.raises(UnsuitableServer, match="maxmemory-policy is 'allkeys-lru'"):
            await check_server(backend_for(client))
    finally:
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.aclose()
        await client.aclose()


@pytest.mark.timeout(120)
def test_the_service_runs_as_a_user_denied_config(no_config_url: str, tmp_path: Path) -> None:
    with launched_service(no_config_url, tmp_path / "service.log") as service:
        service.wait_ready()
        base = f"{service.url}/v1/queues/no-config"
        created = httpx.post(f"{base}/jobs", json={"payload": "works"})
        assert created.status_code == 201, created.text
        [job] = httpx.post(f"{base}/lease", json={"worker": "w", "wait_ms": 1000}).json()["jobs"]
        acked = httpx.post(f"{base}/jobs/{job['id']}/ack", json={"lease_id": job["lease_id"]})
        assert acked.status_code == 200, acked.text
        assert service.stop() == 0
    log = service.log()
    assert f" WARNING echomq_http.store.connect: {CONFIG_DENIED}\n" in log
    assert NO_PERSISTENCE not in log
