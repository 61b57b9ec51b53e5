"""Loads the Lua scripts in lua/ and calls them: one script call per state transition.

A script's file name is its operation, with ``_`` for ``-`` (lua/ack_lease.lua is the operation
"ack-lease", the name the service calls and traces it by). Every script takes the queue's keys
(QueueKeys.script_keys; include/base.lua names them), but for those in _OTHER_KEY_COUNTS. The
loader inlines ``@include NAME`` lines from lua/include/ (each include after the ones it names in
turn, each once, with only the definitions the script uses: echomq_http.store.luatrim), fills in
``@NAME@`` placeholders from the constants below (so the Lua never spells a key suffix, limit or
result code of its own), and checks the key count on every call.
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
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from echomq_http import config
from echomq_http.core import limits
from echomq_http.core.errors import ScriptCode
from echomq_http.store import keys
from echomq_http.store.luafunctions import library, library_name
from echomq_http.store.luatrim import trimmed
from echomq_http.store.multiplex import Multiplexer, Packed

_SCRIPT_NAME = re.compile(r"^[a-z][a-z_]*\.lua$")
_INCLUDE = re.compile(r"^-- @include (?P<name>[a-z_]+)$", re.MULTILINE)
_INCLUDE_LINE = re.compile(r"^-- @include [a-z_]+\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
_KEYS_NAMED = re.compile(r"\bKEYS\[(\d+)\]")
# The include that names the queue's keys (KEYS[1..n]) for every script that takes them.
_QUEUE_KEYS_INCLUDE = "base"
QUEUE_KEY_COUNT = len(keys.QueueKeys.for_queue("").script_keys)
# The scripts that take other keys than the queue's, and how many.
_OTHER_KEY_COUNTS: Mapping[str, int] = {
    "admit-queue": 1,  # the registry of queues alone: global, no queue's slot
}


def retention_placeholders(
    completed_retention_s: int = config.DEFAULT_COMPLETED_RETENTION_S,
    failed_retention_s: int = config.DEFAULT_FAILED_RETENTION_S,
    completed_max: int = config.DEFAULT_COMPLETED_MAX,
    failed_max: int = config.DEFAULT_FAILED_MAX,
    events_maxlen: int = config.DEFAULT_EVENTS_MAXLEN,
) -> dict[str, str]:
    """The service's retention settings, as the scripts read them (include/retention.lua)."""
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
    # The scripts' result codes, defined once: include/base.lua "local LEASE_LOST = @LEASE_LOST@".
    **{code.name: str(code.value) for code in ScriptCode},
}


def operation_of(path: Path) -> str:
    """The operation a script file is for: lua/ack_lease.lua -> "ack-lease"."""
    if _SCRIPT_NAME.match(path.name) is None:
        raise ValueError(f"script file name must be <operation>.lua, lowercase with underscores: {path}")
    return path.stem.replace("_", "-")


def script_path(operation: str, directory: Path | None = None) -> Path:
    """The file of an operation's script: "ack-lease" -> lua/ack_lease.lua."""
    return (directory or lua_dir()) / f"{operation.replace('-', '_')}.lua"


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


def _include_order(names: Sequence[str], include_dir: Path) -> list[str]:
    """The includes a script names, each after the includes it names in turn, each once (an
    include's definitions are Lua locals: they are visible only below them)."""
    order: list[str] = []

    def visit(name: str, naming: tuple[str, ...]) -> None:
        if name in naming:
            raise ValueError(f"include/{name}.lua names itself: {' -> '.join((*naming, name))}")
        if name in order:
            return
        for named in _INCLUDE.finditer((include_dir / f"{name}.lua").read_text()):
            visit(named["name"], (*naming, name))
        order.append(name)

    for name in names:
        visit(name, ())
    return order


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
    if found and source[found[0].start() : found[-1].end()].count("\n") != len(found) - 1:
        raise ValueError(f"{path.name}: its @include lines must come together, before its code")
    includes: list[str] = []
    # Last include first: an include's definitions are trimmed against the script with every
    # include below it already inlined (include/lease.lua uses include/ledger.lua's).
    below = body
    for name in reversed(_include_order([match["name"] for match in found], include_dir)):
        own = _INCLUDE_LINE.sub("", (include_dir / f"{name}.lua").read_text())
        inlined = trimmed(own, below) + "\n"
        includes.insert(0, inlined)
        below = inlined + below
    return Rendered([fill(head + includes[0]), *map(fill, includes[1:])] if found else [], fill(body))


def _check_queue_keys(include_dir: Path) -> None:
    """The queue's keys as the scripts name them (KEYS[1..n] in include/base.lua) are as many as
    QueueKeys.script_keys holds, which every call of a queue's script passes."""
    base = include_dir / f"{_QUEUE_KEYS_INCLUDE}.lua"
    if not base.is_file():  # a directory of scripts that take no queue's keys
        return
    named = {int(index) for index in _KEYS_NAMED.findall(base.read_text())}
    if named != set(range(1, QUEUE_KEY_COUNT + 1)):
        raise ValueError(f"{base} names KEYS {sorted(named)}, not the queue's {QUEUE_KEY_COUNT} keys")


def render(path: Path, extra: Mapping[str, str] | None = None) -> str:
    """A script's source with its includes inlined and its placeholders filled in."""
    return render_parts(path, extra).text


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


@lru_cache(maxsize=4096)
def _fcall_head(function: str, numkeys: int, keys: tuple[str, ...]) -> Packed:
    """FCALL, the script's function and a queue's keys, packed once like _evalsha_head."""
    return Packed(("FCALL", function, numkeys, *keys))


def _function_missing(error: ResponseError) -> bool:
    """The server has not (or no longer: a restart, FUNCTION FLUSH) got the function."""
    return "function not found" in str(error).lower()


def _functions_unknown(error: ResponseError) -> bool:
    """A server without functions (Redis < 7.0), or whose ACL user may not call them."""
    return isinstance(error, NoPermissionError) or "unknown command" in str(error).lower()


class _Script:
    """One script: as EVAL runs it (redis-py's Script: EVALSHA, loaded when missing) and as a
    function library (echomq_http.store.luafunctions), which single-server calls use where the
    server has functions."""

    __slots__ = ("eval", "function", "library", "numkeys")

    def __init__(
        self,
        client: Redis | RedisCluster,
        operation: str,
        rendered: Rendered,
        numkeys: int,
        *,
        read_only: bool,
    ) -> None:
        self.eval: AsyncScript = client.register_script(rendered.text)
        self.function = library_name(operation, self.eval.sha)
        self.library = library(self.function, rendered.includes, rendered.body, read_only=read_only)
        self.numkeys = numkeys


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
        read_only: frozenset[str] = frozenset(),
    ) -> None:
        """placeholders: the service's settings the scripts read (retention_placeholders);
        read_only: the operations whose scripts write nothing (their functions say so, so
        Redis runs them even when it is out of memory, as it does such EVAL scripts)."""
        self._client = client
        # One pipelined connection for a single server's calls (echomq_http.store.multiplex); a Cluster's
        # calls go through its client, which routes each to its slot's node.
        self._multiplexer = None if isinstance(client, RedisCluster) else Multiplexer(client.connection_pool)
        # On a Cluster, wake-ups go by sharded pub/sub to the queue's shard only (runtime.wakeups).
        extra = {
            **(placeholders or {}),
            "PUBLISH": "SPUBLISH" if isinstance(client, RedisCluster) else "PUBLISH",
        }
        self._scripts: dict[str, _Script] = {}
        directory = directory or lua_dir()
        _check_queue_keys(directory / "include")
        for path in sorted(directory.glob("*.lua")):
            operation = operation_of(path)
            self._scripts[operation] = _Script(
                client,
                operation,
                render_parts(path, extra),
                _OTHER_KEY_COUNTS.get(operation, QUEUE_KEY_COUNT),
                read_only=operation in read_only,
            )
        # Whether the server takes FCALL: unknown until the first call says (Redis >= 7.0 and
        # Valkey do; Redis 6.2 answers "unknown command", and then EVALSHA serves every call).
        self._functions: bool | None = None

    async def _with_wait(self, evalsha: tuple[Any, ...], wait: tuple[Any, ...], key: str) -> list[Any]:
        """EVALSHA then WAIT on the same connection, which is what WAIT's count refers to."""
        reply, confirmed = await _pipelined(self._client, (evalsha, wait), key)
        if isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK")):
            await self._client.nodes_manager.initialize()  # type: ignore[union-attr]  # the slot moved
            reply, confirmed = await _pipelined(self._client, (evalsha, wait), key)
        return [reply, confirmed]

    async def _fcall(
        self, multiplexer: Multiplexer, entry: _Script, keys: Sequence[str], args: Sequence[Any]
    ) -> tuple[bool, Any]:
        """The script's function called: (True, its reply), or (False, None) when the server
        has no functions (from then on this Scripts uses EVALSHA). A server that lost the
        function (a restart, FUNCTION FLUSH) gets its library again, once per call; no attempt
        ran anything, so nothing is done twice."""
        head = _fcall_head(entry.function, entry.numkeys, tuple(keys))
        try:
            try:
                reply = await multiplexer.execute_packed(head, args)
            except ResponseError as error:
                if not _function_missing(error):
                    raise
                await multiplexer.execute("FUNCTION", "LOAD", "REPLACE", entry.library)
                reply = await multiplexer.execute_packed(head, args)
        except ResponseError as error:
            if not _functions_unknown(error):
                raise
            self._functions = False
            return False, None
        self._functions = True
        return True, reply

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
        entry = self._scripts[operation]
        script, numkeys = entry.eval, entry.numkeys
        if len(keys) != numkeys:
            raise ValueError(f"{operation} takes {numkeys} keys, got {len(keys)}")
        if replicas <= 0 and self._multiplexer is not None:
            if self._functions is not False:
                done, reply = await self._fcall(self._multiplexer, entry, keys, args)
                if done:
                    return reply
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
