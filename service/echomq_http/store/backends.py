"""The one seam between the service and Redis's topologies.

A single server (or the primary behind Sentinel), a Cluster, and durable mode (a wrapper of
either) answer one interface: a script call, the node that holds a key, a connection for
reading a key's event stream, the due index, the wake-up hub, the servers to check at start.
Everything that differs by topology is decided here; no other module asks which client class
it has (it may read ``cluster``, which names the key layout: store/keys.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import NoPermissionError, NoScriptError, RedisError, ResponseError

from echomq_http.runtime.wakeups import ShardedWakeHub, WakeHub
from echomq_http.store.due_index import DueIndex, SlotDueIndex
from echomq_http.store.multiplex import Multiplexer, Packed

if TYPE_CHECKING:
    from echomq_http.store.scripts import LoadedScript

log = logging.getLogger(__name__)

Client = Redis | RedisCluster
# Writes durable mode does not wait for: admitting a queue only lists it in the registry (the
# queue's jobs are what durability is for, and the enqueue that follows waits).
NOT_WAITED = frozenset({"admit-queue"})
ConnectionFactory = Callable[[], AbstractConnection]


class WriteNotConfirmed(Exception):
    """Durable mode: the write took effect on the primary, but not on enough replicas in time.
    ``reply`` is what the script answered on the primary."""

    def __init__(self, message: str, reply: Any = None) -> None:
        super().__init__(message)
        self.reply = reply


class Backend:
    """What the service needs of Redis, whatever its topology."""

    client: Client  # plain commands: redis-py routes each to its key's node
    cluster: bool  # keys of a queue carry its hash tag in a per-slot layout (store/keys.py)
    publish_command: str  # how a script publishes a wake-up: to every node, or to its shard

    async def call(self, script: LoadedScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        raise NotImplementedError

    def node_of(self, key: str) -> Any:
        """Where key lives, as a target of execute_command (SCAN, pipelines)."""
        raise NotImplementedError

    def stream_connection(self, key: str, shard: int) -> tuple[str, ConnectionFactory]:
        """A name for the reader of key's event stream (its node and shard) and how it connects."""
        raise NotImplementedError

    async def slots_moved(self) -> bool:
        """After a reader's failure: the slot map read again when slots can move (a Cluster's
        failover or resharding); False when they cannot."""
        return False

    def due_index(self, sharing: DueIndex | None = None) -> DueIndex:
        """The due index read through this backend; sharing: another's, whose known slots this one
        learns at once (the sweep's connections and the request path's)."""
        raise NotImplementedError

    def wake_hub(self, max_waiters: int) -> WakeHub:
        raise NotImplementedError

    def primaries(self) -> list[Any]:
        """Every server that holds queue data (execute_command targets), for the start-up checks."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close what the backend opened of its own (not the client)."""


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


class SingleServer(Backend):
    """One server (or Sentinel's primary): every script call pipelined on one shared connection
    (store/multiplex.py), as a Redis function where the server has them, else by EVALSHA."""

    cluster = False
    publish_command = "PUBLISH"

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._multiplexer = Multiplexer(client.connection_pool)
        # Whether the server takes FCALL: unknown until the first call says (Redis >= 7.0 and
        # Valkey do; Redis 6.2 answers "unknown command", and then EVALSHA serves every call).
        self._functions: bool | None = None

    async def call(self, script: LoadedScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if self._functions is not False:
            done, reply = await self._fcall(script, keys, args)
            if done:
                return reply
        head = _evalsha_head(script.eval.sha, script.numkeys, tuple(keys))
        try:
            return await self._multiplexer.execute_packed(head, args)
        except NoScriptError:  # the server lost its scripts (a restart, SCRIPT FLUSH)
            await self._multiplexer.execute("SCRIPT", "LOAD", script.eval.script)
            return await self._multiplexer.execute_packed(head, args)

    async def _fcall(
        self, script: LoadedScript, keys: Sequence[str], args: Sequence[Any]
    ) -> tuple[bool, Any]:
        """The script's function called: (True, its reply), or (False, None) when the server
        has no functions (from then on EVALSHA serves). A server that lost the function (a
        restart, FUNCTION FLUSH) gets its library again, once per call; no attempt ran anything,
        so nothing is done twice."""
        head = _fcall_head(script.function, script.numkeys, tuple(keys))
        try:
            try:
                reply = await self._multiplexer.execute_packed(head, args)
            except ResponseError as error:
                if not _function_missing(error):
                    raise
                await self._multiplexer.execute("FUNCTION", "LOAD", "REPLACE", script.library)
                reply = await self._multiplexer.execute_packed(head, args)
        except ResponseError as error:
            if not _functions_unknown(error):
                raise
            self._functions = False
            return False, None
        self._functions = True
        return True, reply

    def node_of(self, key: str) -> Any:
        return self.client

    def stream_connection(self, key: str, shard: int) -> tuple[str, ConnectionFactory]:
        return str(shard), self.client.connection_pool.make_connection

    def due_index(self, sharing: DueIndex | None = None) -> DueIndex:
        return DueIndex(self.client)

    def wake_hub(self, max_waiters: int) -> WakeHub:
        return WakeHub(self.client, max_waiters)

    def primaries(self) -> list[Any]:
        return [self.client]

    async def aclose(self) -> None:
        await self._multiplexer.aclose()


class Cluster(Backend):
    """A Redis Cluster: each script call routed to its queue's slot by redis-py (EVALSHA, loaded
    where missing); wake-ups by sharded pub/sub; a due index per slot."""

    cluster = True
    publish_command = "SPUBLISH"

    def __init__(self, client: RedisCluster) -> None:
        self.client = client

    async def call(self, script: LoadedScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await script.eval(keys=keys, args=args)

    def node_of(self, key: str) -> Any:
        return self.client.get_node_from_key(key)

    def stream_connection(self, key: str, shard: int) -> tuple[str, ConnectionFactory]:
        node = self.client.get_node_from_key(key)

        def connect() -> AbstractConnection:
            return node.connection_class(**node.connection_kwargs)  # type: ignore[no-any-return]

        return f"{node.name}/{shard}", connect

    async def slots_moved(self) -> bool:
        try:
            await self.client.nodes_manager.initialize()
        except (RedisError, OSError) as error:
            log.debug("the slot map could not be read again (%s)", error)
        return True

    def due_index(self, sharing: DueIndex | None = None) -> DueIndex:
        return SlotDueIndex(self.client, sharing)

    def wake_hub(self, max_waiters: int) -> WakeHub:
        return ShardedWakeHub(self.client, max_waiters)

    def primaries(self) -> list[Any]:
        return self.client.get_primaries()  # a ClusterNode answers execute_command like a client


class Durable(Backend):
    """Durable mode (EMQ_WAIT_REPLICAS): a write is answered only once WAIT saw that many replicas
    take it, else WriteNotConfirmed; reads and everything else are the wrapped backend's."""

    def __init__(self, inner: Backend, replicas: int, timeout_ms: int) -> None:
        self.inner = inner
        self.client = inner.client
        self.cluster = inner.cluster
        self.publish_command = inner.publish_command
        self.replicas = replicas
        self.timeout_ms = timeout_ms

    async def call(self, script: LoadedScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if script.read_only or script.operation in NOT_WAITED:
            return await self.inner.call(script, keys, args)
        evalsha = ("EVALSHA", script.eval.sha, script.numkeys, *keys, *args)
        wait = ("WAIT", self.replicas, self.timeout_ms)
        for _ in range(2):  # a second round only after loading a script the server had forgotten
            reply, confirmed = await self._with_wait(evalsha, wait, keys[0])
            if isinstance(reply, NoScriptError):
                await self.client.script_load(script.eval.script)
                continue
            if isinstance(reply, Exception):
                raise reply
            if isinstance(confirmed, Exception):  # the write happened; whether it is replicated is unknown
                raise WriteNotConfirmed(f"{script.operation}: WAIT failed: {confirmed}", reply)
            if confirmed < self.replicas:
                raise WriteNotConfirmed(
                    f"{script.operation} reached {confirmed} of {self.replicas} replicas within "
                    f"{self.timeout_ms} ms",
                    reply,
                )
            return reply
        raise NoScriptError(f"{script.operation}: the server keeps forgetting the script")

    async def _with_wait(self, evalsha: tuple[Any, ...], wait: tuple[Any, ...], key: str) -> list[Any]:
        """EVALSHA then WAIT on the same connection (the node of key), which is what WAIT's
        count refers to."""
        reply, confirmed = await self._pipelined((evalsha, wait), key)
        if isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK")):
            await self.inner.slots_moved()
            reply, confirmed = await self._pipelined((evalsha, wait), key)
        return [reply, confirmed]

    async def _pipelined(self, commands: Sequence[tuple[Any, ...]], key: str) -> list[Any]:
        if self.cluster:
            node = self.inner.node_of(key)
            queued = [PipelineCommand(position, *command) for position, command in enumerate(commands)]
            await node.execute_pipeline(queued)
            return [command.result for command in queued]
        async with self.client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    def node_of(self, key: str) -> Any:
        return self.inner.node_of(key)

    def stream_connection(self, key: str, shard: int) -> tuple[str, ConnectionFactory]:
        return self.inner.stream_connection(key, shard)

    async def slots_moved(self) -> bool:
        return await self.inner.slots_moved()

    def due_index(self, sharing: DueIndex | None = None) -> DueIndex:
        return self.inner.due_index(sharing)

    def wake_hub(self, max_waiters: int) -> WakeHub:
        return self.inner.wake_hub(max_waiters)

    def primaries(self) -> list[Any]:
        return self.inner.primaries()

    async def aclose(self) -> None:
        await self.inner.aclose()


def backend_for(client: Client, confirm_replicas: int = 0, confirm_timeout_ms: int = 0) -> Backend:
    """The backend of a client from store/connect.py (or a test's): the only place that tells a
    Cluster's client from a single server's."""
    inner: Backend = Cluster(client) if isinstance(client, RedisCluster) else SingleServer(client)
    if confirm_replicas > 0:
        return Durable(inner, confirm_replicas, confirm_timeout_ms)
    return inner
