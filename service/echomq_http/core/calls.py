"""How the queue operations call a queue's scripts: through the backend, at most
max_concurrent_calls at once, each traced when tracing is on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from echomq_http import config
from echomq_http.core.bindings import READ_ONLY_OPERATIONS
from echomq_http.core.errors import ScriptCode, raise_for_code
from echomq_http.observability.telemetry import Telemetry
from echomq_http.store.backends import backend_for
from echomq_http.store.keys import QUEUE_REGISTRY, QueueKeys, keys_of
from echomq_http.store.scripts import Scripts, retention_placeholders


def _outcome(reply: Any) -> dict[str, Any]:
    """What a script call did, as span attributes: ok, or the refusal's code."""
    if isinstance(reply, int):
        return {"emq.outcome": "ok" if reply >= 0 else ScriptCode(reply).name.lower()}
    if isinstance(reply, list):
        if reply and isinstance(reply[0], int) and reply[0] < 0:
            return {"emq.outcome": ScriptCode(reply[0]).name.lower()}
        return {"emq.outcome": "ok", "emq.reply_items": len(reply)}
    return {"emq.outcome": "ok"}


class QueueCalls:
    """The scripts of one Redis (its backend), called for a queue."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        completed_retention_s: int,
        failed_retention_s: int,
        sweep_batch: int,
        telemetry: Telemetry,
        max_concurrent_calls: int,
        confirm_replicas: int = 0,
        confirm_timeout_ms: int = 0,
        completed_max: int = config.DEFAULT_COMPLETED_MAX,
        failed_max: int = config.DEFAULT_FAILED_MAX,
        events_maxlen: int = config.DEFAULT_EVENTS_MAXLEN,
        max_queues: int = config.DEFAULT_MAX_QUEUES,
        scripts_dir: Path | None = None,
        merge_calls: bool = True,
    ) -> None:
        """scripts_dir: where the Lua scripts are (default: the service's own; bench/lua_cost.py
        runs others). merge_calls: concurrent single calls of a queue merged into one script call
        (core/merging.py); never while tracing is on, so that each call keeps its own span."""
        self.client = client
        self.backend = backend_for(client, confirm_replicas, confirm_timeout_ms)
        self.cluster = self.backend.cluster
        self.telemetry = telemetry
        self.merging = merge_calls and not telemetry.tracing
        # At most this many Redis calls at once: requests beyond wait for a turn instead of
        # opening connections without bound (a cluster client's pools do not wait by themselves).
        self._gate = asyncio.Semaphore(max_concurrent_calls)
        self.scripts = Scripts(
            self.backend,
            directory=scripts_dir,
            placeholders=retention_placeholders(
                completed_retention_s, failed_retention_s, completed_max, failed_max, events_maxlen
            ),
            read_only=READ_ONLY_OPERATIONS,
        )
        self.sweep_batch = sweep_batch
        self.events_maxlen = events_maxlen
        self.max_queues = max_queues
        self.due_index = self.backend.due_index()

    async def aclose(self) -> None:
        await self.scripts.aclose()

    async def _call(self, operation: str, queue: str, *args: object, job_id: str | None = None) -> Any:
        """One script call, traced as a child span of the request with what it did (when
        tracing is on: even a no-op span costs about a tenth of a request's CPU)."""
        if not self.telemetry.tracing:
            return await self._run(operation, queue, args)
        attributes = {"emq.queue": queue, "emq.operation": operation}
        if job_id is not None:
            attributes["emq.job_id"] = job_id
        with self.telemetry.tracer.start_as_current_span(
            f"emq {operation}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            reply = await self._run(operation, queue, args)
            span.set_attributes(_outcome(reply))
            return reply

    def keys(self, queue: str) -> QueueKeys:
        return keys_of(queue, self.cluster)

    async def _run(self, operation: str, queue: str, args: tuple[object, ...]) -> Any:
        queue_keys = self.keys(queue)
        if self.cluster:
            self.due_index.note(queue_keys.due)
        async with self._gate:
            return await self.scripts.call(operation, queue_keys.script_keys, (queue_keys.prefix, *args))

    async def call_script(self, operation: str, queue: str, *args: object) -> Any:
        """One script call, for the modules that own operations of their own (schedules)."""
        return await self._call(operation, queue, *args)

    async def register(self, queue: str) -> None:
        """List the queue in the registry (a queue configured before its first job is listed);
        TooManyQueues when it is not listed and the registry is full (EMQ_MAX_QUEUES)."""
        await self._admit(queue)

    async def _admit(self, queue: str) -> None:
        # The registry is global (another cluster slot), so it has a script of its own, which
        # checks the cap and lists the queue in one step: concurrent new queues cannot overshoot.
        async with self._gate:
            admitted = await self.scripts.call("admit-queue", (QUEUE_REGISTRY,), (queue, self.max_queues))
        raise_for_code(admitted, queue)

    async def _register(self, queue: str) -> None:
        """List a queue that has keys again (after a deletion raced with its first job): it was
        admitted when it was started, so the cap is not checked again."""
        async with self._gate:
            await self.client.sadd(QUEUE_REGISTRY, queue)
