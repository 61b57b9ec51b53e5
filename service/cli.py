"""`emq serve`: the server's one command of `emq`.

`emq` itself is the client package's (echomq.cli: enqueue, stats, work...); it finds this
command through the entry point this package declares (group ``echomq.cli``, name ``serve``),
so there is one parser and the client package needs none of the server's dependencies.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence


def serve(argv: Sequence[str]) -> int:
    """`emq serve [--host H] [--port P]`: the service, as `python -m echomq_http` runs it."""
    parser = argparse.ArgumentParser(
        prog="emq serve",
        description="Run the service (as `python -m echomq_http`; settings from EMQ_* variables).",
    )
    parser.add_argument("--host", help="listen on this address (default: $HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen on this port (default: $PORT, else 8080)")
    args = parser.parse_args(list(argv))
    if args.host:
        os.environ["HOST"] = args.host
    if args.port is not None:
        os.environ["PORT"] = str(args.port)
    from echomq_http.__main__ import main

    return main()
