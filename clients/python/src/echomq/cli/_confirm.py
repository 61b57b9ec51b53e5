"""The question a destructive `emq` command asks before it acts, as gh and kubectl ask theirs.

On a terminal: the command says what it will touch and goes on only on ``y`` or ``yes``.
Without a terminal on stdin (a script, a pipe, cron) nobody can answer, so it refuses unless
``--yes`` was given: a script must say it means it.
"""

from __future__ import annotations

import sys


class NotConfirmed(Exception):
    """The operator answered no (or nothing): exit status 1, nothing done."""


class CannotAsk(Exception):
    """No terminal to ask on and no --yes: exit status 2, nothing done."""


def confirm(question: str, *, yes: bool) -> None:
    """Return when the operator agrees to ``question`` (or gave --yes); raise otherwise."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CannotAsk(f"{question}: refused, stdin is not a terminal to confirm on; add --yes to do it")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if answer.strip().lower() not in ("y", "yes"):
        raise NotConfirmed("not confirmed; nothing done")
