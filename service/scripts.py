"""Loads the Lua scripts in lua/ and calls them: one script call per state transition.

A script's file name is ``<operation>-<numkeys>.lua``. The loader inlines ``@include NAME``
lines from lua/include/, fills in ``@NAME@`` placeholders from the constants below (so the Lua
never spells a key suffix or limit of its own), and checks the key count on every call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from service import keys, limits

_SCRIPT_NAME = re.compile(r"^(?P<operation>[a-z][a-z-]*)-(?P<numkeys>\d+)\.lua$")
_INCLUDE = re.compile(r"^-- @include (?P<name>[a-z_]+)$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")

PLACEHOLDERS: Mapping[str, str] = {
    "JOB_SUFFIX": keys.JOB_SUFFIX,
    "LOCK_SUFFIX": keys.LOCK_SUFFIX,
    "HOLDS_SUFFIX": keys.HOLDS_SUFFIX,
    "MAX_PRIORITY": str(limits.MAX_PRIORITY),
    "LEASE_ID_CHARS": str(limits.LEASE_ID_CHARS),
    "MAX_EXPONENTIAL_BACKOFF_MS": str(limits.MAX_EXPONENTIAL_BACKOFF_MS),
}


def lua_dir() -> Path:
    """The scripts ship inside the package (wheel); a source checkout has them at the top."""
    packaged = Path(__file__).parent / "lua"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "lua"


def render(path: Path) -> str:
    """A script's source with its includes inlined and its placeholders filled in."""
    include_dir = path.parent / "include"

    def include(match: re.Match[str]) -> str:
        return (include_dir / f"{match['name']}.lua").read_text()

    source = _INCLUDE.sub(include, path.read_text())

    def fill(match: re.Match[str]) -> str:
        return PLACEHOLDERS[match[1]]

    return _PLACEHOLDER.sub(fill, source)


class Scripts:
    """Every script of lua/, registered on one client, callable by operation name."""

    def __init__(self, client: Redis, directory: Path | None = None) -> None:
        self._scripts: dict[str, tuple[AsyncScript, int]] = {}
        for path in sorted((directory or lua_dir()).glob("*.lua")):
            match = _SCRIPT_NAME.match(path.name)
            if match is None:
                raise ValueError(f"script file name must be <operation>-<numkeys>.lua: {path}")
            script = client.register_script(render(path))
            self._scripts[match["operation"]] = (script, int(match["numkeys"]))

    @property
    def operations(self) -> list[str]:
        return sorted(self._scripts)

    async def call(self, operation: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script, numkeys = self._scripts[operation]
        if len(keys) != numkeys:
            raise ValueError(f"{operation} takes {numkeys} keys, got {len(keys)}")
        return await script(keys=keys, args=args)
