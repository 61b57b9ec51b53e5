"""Loads the Lua scripts in lua/ and calls them: one script call per state transition.

A script's file name is ``<operation>-<numkeys>.lua``. The loader inlines ``@include NAME``
lines from lua/include/ (only the definitions the script uses: echomq_http.luatrim), fills in
``@NAME@`` placeholders from the constants below (so the Lua never spells a key suffix or limit
of its own), and checks the key count on every call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

from echomq_http import config, keys, limits
from echomq_http.luatrim import trimmed
from echomq_http.multiplex import Multiplexer, Packed

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
    "MAX_EXPONENTIAL_BACKOFF_MS": str(limits.MAX_EXPONENTIAL_BACKOFF_MS),
    "DEFAULT_MAX_ATTEMPTS": str(limits.DEFAULT_MAX_ATTEMPTS),
    "DEFAULT_BACKOFF_MS": str(limits.DEFAULT_BACKOFF_MS),
    "PUBLISH": "PUBLISH",  # a Cluster's Scripts use SPUBLISH instead
    **retention_placeholders(),  # the defaults; Scripts takes the service's settings
}


def lua_dir() -> Path:
    """The scripts ship inside the package (wheel); a source checkout has them at the top."""
    packaged = Path(__file__).parent / "lua"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "lua"


def render(path: Path, extra: Mapping[str, str] | None = None) -> str:
    """A script's source with its includes inlined and its placeholders filled in."""
    placeholders = {**PLACEHOLDERS, **(extra or {})}
    include_dir = path.parent / "include"

    source = path.read_text()
    # Last include first: an include's definitions are trimmed against the script with every
    # include below it already inlined (include/lease.lua uses include/common.lua's).
    for match in reversed(list(_INCLUDE.finditer(source))):
        below = source[: match.start()] + source[match.end() :]
        inlined = trimmed((include_dir / f"{match['name']}.lua").read_text(), below)
        source = source[: match.start()] + inlined + source[match.end() :]

    def fill(match: re.Match[str]) -> str:
        return placeholders[match[1]]

    return _PLACEHOLDER.sub(fill, source)


async def _pipelined(
    client: Redis | RedisCluster, commands: Sequence[tuple[Any, ...]], key: str
) -> list[Any]:
    """Commands sent together on one connection: the connection of the node that owns key."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)
        queued = [PipelineCommand(position, *command) for position, command in enumerate(commands)]
        await node.execute_pipeline(queued)
        return [command.result for command in queued]
    async with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=False)


@lru_cache(maxsize=4096)
def _evalsha_head(sha: str, numkeys: int, keys: tuple[str, ...]) -> Packed:
    """EVALSHA, the script and a queue's keys: the same for every call of it on that queue."""
    return Packed(("EVALSHA", sha, numkeys, *keys))


class WriteNotConfirmed(Exception):
    """Durable mode: the write took effect on the primary, but not on enough replicas in time.
    ``reply`` is what the script answered on the primary."""

    def __init__(self, message: str, reply: Any = None) -> None:
        super().__init__(message)
        self.reply = reply


class Scripts:
    """Every script of lua/, registered on one client, callable by operation name."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        directory: Path | None = None,
        placeholders: Mapping[str, str] | None = None,
    ) -> None:
        """placeholders: the service's settings the scripts read (retention_placeholders)."""
        self._client = client
        # One pipelined connection for a single server's calls (echomq_http.multiplex); a Cluster's
        # calls go through its client, which routes each to its slot's node.
        self._multiplexer = None if isinstance(client, RedisCluster) else Multiplexer(client.connection_pool)
        # On a Cluster, wake-ups go by sharded pub/sub to the queue's shard only (echomq_http.longpoll).
        extra = {
            **(placeholders or {}),
            "PUBLISH": "SPUBLISH" if isinstance(client, RedisCluster) else "PUBLISH",
        }
        self._scripts: dict[str, tuple[AsyncScript, int]] = {}
        for path in sorted((directory or lua_dir()).glob("*.lua")):
            match = _SCRIPT_NAME.match(path.name)
            if match is None:
                raise ValueError(f"script file name must be <operation>-<numkeys>.lua: {path}")
            script = client.register_script(render(path, extra))
            self._scripts[match["operation"]] = (script, int(match["numkeys"]))

    async def _with_wait(self, evalsha: tuple[Any, ...], wait: tuple[Any, ...], key: str) -> list[Any]:
        """EVALSHA then WAIT on the same connection, which is what WAIT's count refers to."""
        reply, confirmed = await _pipelined(self._client, (evalsha, wait), key)
        if isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK")):
            await self._client.nodes_manager.initialize()  # type: ignore[union-attr]  # the slot moved
            reply, confirmed = await _pipelined(self._client, (evalsha, wait), key)
        return [reply, confirmed]

    @property
    def multiplexer(self) -> Multiplexer | None:
        """The shared connection script calls go through, when there is one (not on a Cluster)."""
        return self._multiplexer

    async def aclose(self) -> None:
        if self._multiplexer is not None:
            await self._multiplexer.aclose()

    @property
    def operations(self) -> list[str]:
        return sorted(self._scripts)

    async def call(
        self,
        operation: str,
        keys: Sequence[str],
        args: Sequence[Any],
        *,
        replicas: int = 0,
        timeout_ms: int = 0,
    ) -> Any:
        """Run a script; with replicas > 0, answer only once WAIT saw that many replicas take
        its writes (sent right after it, on the same connection), else raise WriteNotConfirmed."""
        script, numkeys = self._scripts[operation]
        if len(keys) != numkeys:
            raise ValueError(f"{operation} takes {numkeys} keys, got {len(keys)}")
        if replicas <= 0 and self._multiplexer is not None:
            head = _evalsha_head(script.sha, numkeys, tuple(keys))
            try:
                return await self._multiplexer.execute_packed(head, args)
            except NoScriptError:  # the server lost its scripts (a restart, SCRIPT FLUSH)
                await self._multiplexer.execute("SCRIPT", "LOAD", script.script)
                return await self._multiplexer.execute_packed(head, args)
        if replicas <= 0:
            return await script(keys=keys, args=args)
        evalsha = ("EVALSHA", script.sha, numkeys, *keys, *args)
        wait = ("WAIT", replicas, timeout_ms)
        for _ in range(2):  # a second round only after loading a script the server had forgotten
            reply, confirmed = await self._with_wait(evalsha, wait, keys[0])
            if isinstance(reply, NoScriptError):
                await self._client.script_load(script.script)
                continue
            if isinstance(reply, Exception):
                raise reply
            if isinstance(confirmed, Exception):  # the write happened; whether it is replicated is unknown
                raise WriteNotConfirmed(f"{operation}: WAIT failed: {confirmed}", reply)
            if confirmed < replicas:
                raise WriteNotConfirmed(
                    f"{operation} reached {confirmed} of {replicas} replicas within {timeout_ms} ms", reply
                )
            return reply
        raise NoScriptError(f"{operation}: the server keeps forgetting the script")
