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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from echomq_http import config
from echomq_http.core import limits
from echomq_http.core.errors import ScriptCode
from echomq_http.store import keys
from echomq_http.store.luafunctions import USE_KEYS, library, library_name
from echomq_http.store.luatrim import trimmed

if TYPE_CHECKING:
    from echomq_http.store.backends import Backend

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
    "KIDS_SUFFIX": keys.KIDS_SUFFIX,
    "KIDRES_SUFFIX": keys.KIDRES_SUFFIX,
    "WAITING_CHILDREN_NAME": keys.WAITING_CHILDREN_NAME,
    "OUTBOX_NAME": keys.OUTBOX_NAME,
    "PARENTS_NAME": keys.PARENTS_NAME,
    "FLOWS_NAME": keys.FLOWS_NAME,
    "FLOW_SUFFIX": keys.FLOW_SUFFIX,
    "FLOW_REPLAY_AFTER_MS": str(limits.FLOW_REPLAY_AFTER_MS),
    "SCHEDULES_NAME": keys.SCHEDULES_NAME,
    "TIMETABLE_NAME": keys.TIMETABLE_NAME,
    "QUEUE_NAME_START": str(len(keys.queue_prefix("")) - 1),  # where the name starts in the prefix
    # A queue's script keys from its prefix (include/base.lua queue_keys), as Lua expressions.
    "SCRIPT_KEYS_OF_PREFIX": ", ".join(f"prefix .. '{name}'" for name in keys.SCRIPT_KEY_NAMES),
    "DUE_INDEX": keys.DUE_INDEX,  # a single server's due index (include/base.lua queue_keys)
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
        # An EVAL script cannot bind its values again for another queue (store/luafunctions.py).
        self.text = f"local {USE_KEYS} = nil\n" + "".join(includes) + body


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
        directory = directory or lua_dir()
        _check_queue_keys(directory / "include")
        for path in sorted(directory.glob("*.lua")):
            operation = operation_of(path)
            self._scripts[operation] = LoadedScript(
                backend.client,
                operation,
                render_parts(path, extra),
                _OTHER_KEY_COUNTS.get(operation, QUEUE_KEY_COUNT),
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
