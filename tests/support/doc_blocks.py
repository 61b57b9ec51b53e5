"""The measured blocks of the docs (``<!-- report:NAME [ARGUMENT] -->`` ... ``<!-- /report:NAME -->``):
which document holds each, found and replaced. make report (bench/report/report.py) fills them;
tests check the splicing and that each document has its blocks."""

from __future__ import annotations

import re
from collections.abc import Callable

# Each block's document, relative to the repository's root.
DOCS = {
    "bench": "docs/PERFORMANCE.md",
    "against": "docs/PERFORMANCE.md",
    "bigread": "docs/PERFORMANCE.md",
    "chaos": "docs/RELIABILITY.md",
    "abuse": "docs/RELIABILITY.md",
}
_BLOCK = re.compile(
    r"(?P<open><!-- report:(?P<name>[a-z]+)(?: (?P<argument>[^ >]+))? -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /report:(?P=name) -->)",
    re.DOTALL,
)


class ReportError(Exception):
    """A block that should be in a document is not."""


def blocks(document: str) -> list[tuple[str, str | None]]:
    """The generated blocks of a document: (name, argument), in order."""
    return [(match["name"], match["argument"]) for match in _BLOCK.finditer(document)]


def splice(document: str, name: str, make: Callable[[str | None], str]) -> str:
    """The document with every block called `name` replaced by make(its argument)."""
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        if match["name"] != name:
            return match[0]
        found = True
        body = make(match["argument"]).strip("\n")
        return f"{match['open']}{body}\n{match['close']}"

    spliced = _BLOCK.sub(replace, document)
    if not found:
        raise ReportError(f"no <!-- report:{name} --> block to fill")
    return spliced
