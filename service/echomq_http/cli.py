"""The launcher's command line, the same for `emq-http`, `python -m echomq_http` and `emq serve`.

`emq` itself is the client package's (echomq.cli: enqueue, stats, work...); it finds `serve`
through the entry point this package declares (group ``echomq.cli``, name ``serve``), so there
is one parser and the client package needs none of the server's dependencies.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

DESCRIPTION = """\
Run EchoMQ HTTP: the job queue's REST API, its dashboard (/ui) and API docs (/docs).
Without EMQ_REDIS_URL it starts an embedded Valkey server that keeps its data in EMQ_DATA_DIR;
one instance owns a data dir, and a second one on the same dir is refused."""

SETTINGS = """\
settings (environment variables; the full list is in docs/configuration.md):
  HOST, PORT              where to listen (127.0.0.1, 8080)
  EMQ_REDIS_URL           Redis/Valkey to use (redis://, rediss://, unix://, redis+sentinel://);
                          unset: the embedded Valkey
  EMQ_DATA_DIR            the embedded Valkey's data (./.emq-data); a second instance needs its own
  EMQ_AUTH_TOKENS         ROLE:TOKEN[:PATTERN] entries, comma-separated (or EMQ_AUTH_TOKENS_FILE);
                          required to listen on a non-loopback HOST (or EMQ_ALLOW_INSECURE=1)
  EMQ_ALLOWED_HOSTS       names clients reach the service by, besides localhost and IP addresses
                          (comma-separated, * = any); any other Host header gets 421
  EMQ_WORKERS             HTTP worker processes (the CPUs this process may use)
  EMQ_LOG_FORMAT          text or json"""


def parser(prog: str) -> argparse.ArgumentParser:
    """--host and --port override HOST and PORT; anything else on the command line is refused."""
    result = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=SETTINGS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    result.add_argument("--host", help="listen on this address (default: $HOST, else 127.0.0.1)")
    result.add_argument("--port", type=int, help="listen on this port (default: $PORT, else 8080)")
    return result


def apply_arguments(argv: Sequence[str], prog: str) -> None:
    """Parse the command line into the environment the settings are read from; --help prints
    the help and exits 0, a bad argument exits 2, both before anything has started."""
    args = parser(prog).parse_args(list(argv))
    if args.host:
        os.environ["HOST"] = args.host
    if args.port is not None:
        os.environ["PORT"] = str(args.port)


def serve(argv: Sequence[str]) -> int:
    """`emq serve [--host H] [--port P]`: the service, as `python -m echomq_http` runs it."""
    from echomq_http.__main__ import main

    return main(argv, prog="emq serve")
