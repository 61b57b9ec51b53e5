"""Redis over TLS (rediss://) with an ACL user and password from the URL, as the README says."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from echomq_http.config import Settings
from tests.support.ports import free_port
from tests.support.service import running_service

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("openssl") is None,
    reason="needs Debian's redis-server (built with TLS) and openssl",
)
USER, PASSWORD = "emq-service", "s3cret-acl-pass"


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_cert),
        "-days",
        "2",
        "-subj",
        "/CN=emq-test-ca",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=127.0.0.1",
    )
    extensions = directory / "san.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(extensions),
    )
    return ca_cert, cert, key


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    ca_cert, cert, key = make_certificates(tmp_path)
    port = free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(ca_cert),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
            "--user",
            "default",
            "off",
            "--user",
            USER,
            "on",
            f">{PASSWORD}",
            "~*",
            "&*",
            "+@all",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"rediss://{USER}:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={ca_cert}"
    deadline = time.monotonic() + 15
    while True:
        try:
            redis.Redis.from_url(url).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                pytest.fail("redis-server with TLS did not start")
            time.sleep(0.05)
    try:
        yield port, ca_cert
    finally:
        process.kill()
        process.wait()


async def test_the_service_works_over_tls_with_an_acl_user(tls_redis: tuple[int, Path], queue: str) -> None:
    port, ca_cert = tls_redis
    url = f"rediss://{USER}:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={ca_cert}"
    with running_service(Settings(redis_url=url)) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/readyz")).status_code == 200
            created = await http.post(f"/v1/queues/{queue}/jobs", json={"payload": "over tls"})
            assert created.status_code == 201
            waiter = http.post(f"/v1/queues/{queue}/lease", json={"worker": "w", "wait_ms": 5000})
            jobs = (await waiter).json()["jobs"]
            assert [job["payload"] for job in jobs] == ["over tls"]
    # The default user is off: the password really was needed.
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca_cert}").ping()
