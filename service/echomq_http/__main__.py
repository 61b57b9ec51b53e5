"""`python -m echomq_http` (and `emq-http`, `emq serve`): run the service; with no EMQ_REDIS_URL,
inside an embedded Valkey owned by this launcher (echomq_http.launcher)."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from types import FrameType

import uvicorn

from echomq_http.api.auth import Authenticator
from echomq_http.api.http_protocol import http_protocol
from echomq_http.cli import apply_arguments
from echomq_http.config import METRICS_DIR_VARIABLE, ConfigError, Settings
from echomq_http.launcher import CannotStart, DataDirLock, check_port, startup_line
from echomq_http.observability.telemetry import JsonLogFormatter
from echomq_http.store.embedded import EmbeddedValkey

log = logging.getLogger("echomq_http")

METRICS_DIR_PREFIX = "emq-metrics-"
EXIT_REFUSED = 1  # another instance owns the data dir, or the port is taken
EXIT_CONFIG = 2  # as argparse exits on a bad argument


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _stop_gracefully(signum: int, frame: FrameType | None) -> None:
    # uvicorn shuts down on SIGTERM/SIGINT and then re-raises the signal to the handler that was
    # there before it; this one turns it into a normal exit, so the embedded server is stopped.
    raise SystemExit(0)


def configure_logging(log_format: str) -> None:
    if log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonLogFormatter())
        logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv: Sequence[str] | None = None, prog: str = "emq-http") -> int:
    apply_arguments(sys.argv[1:] if argv is None else argv, prog)
    try:
        settings = Settings.from_env()
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_format)
    try:
        auth = Authenticator.from_entries(settings.auth_entries)
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return EXIT_CONFIG
    if not auth.enabled and not is_loopback(settings.host) and not settings.allow_insecure:
        print(
            f"refusing to serve without auth tokens on {settings.host}: set EMQ_AUTH_TOKENS "
            "(or EMQ_AUTH_TOKENS_FILE), or EMQ_ALLOW_INSECURE=1 to accept the risk",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        serve(settings, auth.enabled)
    except CannotStart as refusal:
        print(f"not starting: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def serve(settings: Settings, auth_enabled: bool) -> None:
    """Claim the data dir (embedded mode) and check the port before starting anything; the claim
    is dropped only after the embedded server it covers has stopped."""
    embedded_mode = settings.redis_url is None
    lock = DataDirLock(settings.data_dir, settings.host, settings.port) if embedded_mode else None
    with lock or contextlib.nullcontext():
        check_port(settings.host, settings.port)
        if not auth_enabled:
            log.warning(
                "auth is off (no EMQ_AUTH_TOKENS): anyone who can reach %s may use every queue", settings.host
            )
        embedded = None
        if embedded_mode:
            # Started once here; every worker process gets its URL through the environment.
            embedded = EmbeddedValkey(settings.data_dir)
            log.info("starting the embedded Valkey server in %s", settings.data_dir.resolve())
            os.environ["EMQ_REDIS_URL"] = embedded.start()
        try:
            run_uvicorn(settings)
        finally:
            if embedded is not None:
                log.info("stopping the embedded Valkey server")
                embedded.stop()


def run_uvicorn(settings: Settings) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop_gracefully)
    metrics_dir = None
    try:
        if settings.workers > 1:
            # Each worker process counts on its own; in this run's directory (0700, removed at
            # exit) they share their totals, so /metrics reports the replica whichever answers.
            metrics_dir = tempfile.mkdtemp(prefix=METRICS_DIR_PREFIX)
            os.environ[METRICS_DIR_VARIABLE] = metrics_dir
        else:
            os.environ.pop(METRICS_DIR_VARIABLE, None)  # one process: nothing to share
        log.info("%s", startup_line(settings.host, settings.port))
        uvicorn.run(
            "echomq_http.app:create_app_from_env",
            factory=True,
            workers=settings.workers,
            host=settings.host,
            port=settings.port,
            log_level="info",
            # JSON: uvicorn's loggers go through ours (no log_config of its own).
            log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
            access_log=settings.access_log,  # a line per request costs ~10% of the CPU per request
            # A response in one send(), and the connection limits: head timeout and caps, idle
            # timeout, idle connections reclaimed at EMQ_MAX_CONNECTIONS (api/http_protocol.py).
            # Not uvicorn's limit_concurrency: it counts idle connections as busy ones.
            http=http_protocol(settings),  # type: ignore[arg-type]
        )
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(prog="python -m echomq_http"))
