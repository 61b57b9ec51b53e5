"""`python -m service`: run the service; with no EMQ_REDIS_URL, inside an embedded Valkey."""

from __future__ import annotations

import dataclasses
import logging
import sys

import uvicorn

from service.app import create_app
from service.config import ConfigError, Settings
from service.embedded import EmbeddedValkey

log = logging.getLogger("service")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    embedded = None
    if settings.redis_url is None:
        embedded = EmbeddedValkey(settings.data_dir)
        log.info("starting the embedded Valkey server in %s", settings.data_dir.resolve())
        settings = dataclasses.replace(settings, redis_url=embedded.start())
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level="info",
            loop="auto",
            http="auto",
        )
    finally:
        if embedded is not None:
            log.info("stopping the embedded Valkey server")
            embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
