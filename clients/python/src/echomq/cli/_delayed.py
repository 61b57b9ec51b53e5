"""`emq promote`: run a delayed job now. (What `emq jobs --state delayed` shows of delayed jobs:
_output.delayed_cells.)"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from echomq.cli._commands import EXIT_OK
from echomq.cli._output import print_json
from echomq.client import Client


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    promote = commands.add_parser(
        "promote",
        parents=[common],
        help="run a delayed job now",
        description="A delayed job (an enqueue's --delay-ms, or a failed attempt waiting out its "
        "backoff) becomes waiting at once, at the back of its priority. A job in another state is "
        "left as it is (exit 1).",
    )
    promote.add_argument("queue")
    promote.add_argument("id")


def cmd_promote(args: argparse.Namespace, client: Client) -> int:
    answer = client.promote(args.queue, args.id)
    if args.json:
        print_json(answer.to_dict())
    else:
        print(f"job {answer.id} is waiting now")
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Client], int]] = {"promote": cmd_promote}
