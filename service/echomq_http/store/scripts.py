"""Loads the Lua scripts in lua/ and calls them: one script call per state transition.

A script's file name is ``<operation>-<numkeys>.lua``. The loader inlines ``@include NAME``
lines from lua/include/ (only the definitions the script uses: echomq_http.store.luatrim), fills in
``@NAME@`` placeholders from the constants below (so the Lua never spells a key suffix or limit
of its own), and checks the key count on every call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from echomq_http import config
from echomq_http.core import limits
from echomq_http.store import keys
from echomq_http.store.luafunctions import library, library_name
from echomq_http.store.luatrim import trimmed

if TYPE_CHECKING:
    from echomq_http.store.backends import Backend

_SCRIPT_NAME = re.compile(r"^(?P<operation>[a-z][a-z-]*)-(?P<numkeys>\d+)\.lua$")
_INCLUDE = re.compile(r"^-- @include (?P<name>[a-z_]+)$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def retention_placeholders(
    completed_retention_s: int = config.DEFAULT_COMPLETED_RETENTION_S,
    failed_retention_s: int = config.DEFAULT_FAILED_RETENTION_S,
    completed_max: int = config.DEFAULT_COMPLETED_MAX,
    failed_max: int = config.DEFAULT_FAILED_MAX,
    events_maxlen: int = config.DEFAULT_EVENTS_MAXLEN,
) -> dict[str, str]:
    """The service's retention settings, as the scripts read them (include/common.lua)."""
    return {
        "EVENTS_MAXLEN": str(events_maxlen),
        "COMPLETED_RETENTION_MS": str(completed_retention_s * 1000),
        "FAILED_RETENTION_MS": str(failed_retention_s * 1000),
        "COMPLETED_MAX": str(completed_max),
        "FAILED_MAX": str(failed_max),
    }


PLACEHOLDERS: Mapping[str, str] = {
    "JOB_SUFFIX": keys.JOB_SUFFIX,
    "LOCK_SUFFIX": keys.LOCK_SUFFIX,
    "HELD_SUFFIX": keys.HELD_SUFFIX,
    "REQUEST_SUFFIX": keys.REQUEST_SUFFIX,
    "SESSION_SUFFIX": keys.SESSION_SUFFIX,
    "OWNER_SUFFIX": keys.OWNER_SUFFIX,
    "SESSIONS_NAME": keys.SESSIONS_NAME,
    "EVENTS_NAME": keys.EVENTS_NAME,
    "HISTORY_NAME": keys.HISTORY_NAME,
    "CANCELLED_NAME": keys.CANCELLED_NAME,
    "RATE_NAME": keys.RATE_NAME,
    "GROUP_WAIT_SUFFIX": keys.GROUP_WAIT_SUFFIX,
    "GROUP_SUFFIX": keys.GROUP_SUFFIX,
    "RING_NAME": keys.RING_NAME,
    "GROUPS_NAME": keys.GROUPS_NAME,
    "PARKED_NAME": keys.PARKED_NAME,
    "SCHEDULE_SUFFIX": keys.SCHEDULE_SUFFIX,
    "SCHEDULES_NAME": keys.SCHEDULES_NAME,
    "TIMETABLE_NAME": keys.TIMETABLE_NAME,
    "QUEUE_NAME_START": str(len(keys.queue_prefix("")) - 1),  # where the name starts in the prefix
    "MAX_PRIORITY": str(limits.MAX_PRIORITY),
    "LEASE_ID_CHARS": str(limits.LEASE_ID_CHARS),
    "WORKER_OWNER_GRACE_MS": str(limits.WORKER_OWNER_GRACE_MS),
    "MAX_EXPONENTIAL_BACKOFF_MS": str(limits.MAX_EXPONENTIAL_BACKOFF_MS),
    "DEFAULT_MAX_ATTEMPTS": str(limits.DEFAULT_MAX_ATTEMPTS),
    "DEFAULT_BACKOFF_MS": str(limits.DEFAULT_BACKOFF_MS),
    "MAX_EVENT_PROGRESS_BYTES": str(limits.MAX_EVENT_PROGRESS_BYTES),
    "PUBLISH": "PUBLISH",  # a Cluster's Scripts use SPUBLISH instead
    **retention_placeholders(),  # the defaults; Scripts takes the service's settings
}


def lua_dir() -> Path:
    """The scripts ship inside the package (wheel); a source checkout has them at the top."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "lua"
    return packaged if packaged.is_dir() else package.parents[1] / "lua"


class Rendered:
    """A script with its includes inlined and its placeholders filled in: the whole text (what
    EVAL runs), and its parts (what a function library is made of: echomq_http.store.luafunctions)."""

    def __init__(self, includes: list[str], body: str) -> None:
        self.includes = includes  # each include as inlined (trimmed), in order
        self.body = body  # the script's own text, its include lines taken out
        self.text = "".join(includes) + body


def render_parts(path: Path, extra: Mapping[str, str] | None = None) -> Rendered:
    placeholders = {**PLACEHOLDERS, **(extra or {})}
    include_dir = path.parent / "include"

    def fill(text: str) -> str:
        return _PLACEHOLDER.sub(lambda match: placeholders[match[1]], text)

    source = path.read_text()
    found = list(_INCLUDE.finditer(source))
    # Includes come first (the script's code uses them): its header, its includes, its code.
    head = source[: found[0].start()] if found else ""
    body = source[found[-1].end() :] if found else source
    includes: list[str] = []
    # Last include first: an include's definitions are trimmed against the script with every
    # include below it already inlined (include/lease.lua uses include/common.lua's).
    below = body
    for index in reversed(range(len(found))):
        match = found[index]
        after = source[match.end() : found[index + 1].start()] if index + 1 < len(found) else ""
        if after.strip():
            raise ValueError(f"{path.name}: its @include lines must come together, before its code")
        inlined = trimmed((include_dir / f"{match['name']}.lua").read_text(), below) + after
        includes.insert(0, inlined)
        below = inlined + below
    return Rendered([fill(head + includes[0]), *map(fill, includes[1:])] if found else [], fill(body))


def render(path: Path, extra: Mapping[str, str] | None = None) -> str:
    """A script's source with its includes inlined and its placeholders filled in."""
    return render_parts(path, extra).text


class LoadedScript:
    """One script, as each backend calls it (store/backends.py): by EVAL (redis-py's Script:
    EVALSHA, loaded when missing) and as a function library (echomq_http.store.luafunctions),
    which single-server calls use where the server has functions."""

    __slots__ = ("eval", "function", "library", "numkeys", "operation", "read_only")

    def __init__(
        self,
        client: Redis | RedisCluster,
        operation: str,
        rendered: Rendered,
        numkeys: int,
        *,
        read_only: bool,
    ) -> None:
        self.operation = operation
        self.eval: AsyncScript = client.register_script(rendered.text)
        self.function = library_name(operation, self.eval.sha)
        self.library = library(self.function, rendered.includes, rendered.body, read_only=read_only)
        self.numkeys = numkeys
        self.read_only = read_only


class Scripts:
    """Every script of lua/, rendered for one backend, callable by operation name."""

    def __init__(
        self,
        backend: Backend,
        directory: Path | None = None,
        placeholders: Mapping[str, str] | None = None,
        read_only: frozenset[str] = frozenset(),
    ) -> None:
        """placeholders: the service's settings the scripts read (retention_placeholders);
        read_only: the operations whose scripts write nothing (their functions say so, so
        Redis runs them even when it is out of memory, as it does such EVAL scripts; durable
        mode does not wait for replicas after them)."""
        self._backend = backend
        # On a Cluster, wake-ups go by sharded pub/sub to the queue's shard only (runtime.wakeups).
        extra = {**(placeholders or {}), "PUBLISH": backend.publish_command}
        self._scripts: dict[str, LoadedScript] = {}
        for path in sorted((directory or lua_dir()).glob("*.lua")):
            match = _SCRIPT_NAME.match(path.name)
            if match is None:
                raise ValueError(f"script file name must be <operation>-<numkeys>.lua: {path}")
            operation = match["operation"]
            self._scripts[operation] = LoadedScript(
                backend.client,
                operation,
                render_parts(path, extra),
                int(match["numkeys"]),
                read_only=operation in read_only,
            )

    async def aclose(self) -> None:
        await self._backend.aclose()

    @property
    def operations(self) -> list[str]:
        return sorted(self._scripts)

    async def call(self, operation: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a script; in durable mode WriteNotConfirmed when too few replicas took its writes."""
        script = self._scripts[operation]
        if len(keys) != script.numkeys:
            raise ValueError(f"{operation} takes {script.numkeys} keys, got {len(keys)}")
        return await self._backend.call(script, keys, args)
