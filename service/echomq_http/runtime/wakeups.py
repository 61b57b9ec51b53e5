"""Wake-ups for long-poll leases, without a Redis connection per waiting request.

Each replica holds one pub/sub connection (``WakeHub``). Scripts that make jobs leasable
publish "<n>" on the queue's wake channel; the hub wakes up to n of that queue's waiters, which
retry the lease script (core/leasing.py). A waiter also retries on a coarse timer, so a missed
message (or a pub/sub reconnect) costs latency, never a lost wake-up.

The hub subscribes a queue's channel only while some request of its process waits on that queue
(and CHANNEL_LINGER_S after the last one left, so that a worker fleet going back and forth
between work and waiting does not resubscribe each time): a process with nobody waiting receives
no message, where a pattern subscription had every enqueue wake every process (about 15 µs of
CPU per enqueue per process). A channel's subscription is confirmed by Redis with a message that
wakes the queue's waiters, so a job made leasable between their first try and the subscription
is found at once, not at the fallback poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import RedisError

from echomq_http.runtime.background import cancel_within, stop_task
from echomq_http.store.keys import KEY_ROOT, keys_of, queue_of_wake_channel

log = logging.getLogger(__name__)

# What a sharded subscriber takes over from its node's connection settings (no read timeout).
_SUBSCRIBER_OPTIONS = frozenset(
    {
        "username",
        "password",
        "credential_provider",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
    }
)
RECONNECT_DELAY_S = 0.5
# Cluster: a queue's wake channel stays subscribed this long after its last long poll (a new
# channel rebuilds every listener of the process, so they are kept longer).
CHANNEL_IDLE_S = 300.0
# Single server: a queue's wake channel stays subscribed this long after its last waiter left.
CHANNEL_LINGER_S = 2.0
# A channel no script publishes on, which keeps the hub's connection subscribed (and so in
# pub/sub mode, where it only reads) while no queue has a waiter.
HUB_CHANNEL = f"{KEY_ROOT}:wake-hub"
LISTENER_STOP_S = 1.0  # how long a rebuild waits for a round's listeners to stop


class TooManyWaiters(Exception):
    """The replica already holds its maximum number of long-poll requests."""


class Waiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = asyncio.Event()


class WakeHub:
    """Single server (or Sentinel): one connection, SUBSCRIBEd to the wake channel of each queue
    that has waiters here (module doc)."""

    def __init__(self, client: Redis, max_waiters: int) -> None:
        self._client = client
        self._max_waiters = max_waiters
        self._waiters: dict[str, list[Waiter]] = {}
        self._count = 0
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._channels: dict[str, float] = {}  # channel -> when a waiter last waited on it or left
        self._pubsub: PubSub | None = None  # the listener's, once its channels are subscribed

    @property
    def waiting(self) -> int:
        return self._count

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def full(self) -> bool:
        """No room for another long poll: register would refuse it."""
        return self._count >= self._max_waiters

    @property
    def channels(self) -> int:
        """Wake channels subscribed (or to be, once the connection is back)."""
        return len(self._channels)

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="emq-wake-hub")

    def begin_closing(self) -> None:
        """Shutdown has begun: waiting lease requests answer now with what they have (usually
        nothing), and new ones take no jobs."""
        self._closing = True
        self._wake_all()

    async def stop(self) -> None:
        """Answer every waiter and close the subscription."""
        self.begin_closing()
        await stop_task(self._task, self._stopping)

    @contextlib.contextmanager
    def register(self, queue: str) -> Iterator[Waiter]:
        if self.full:
            raise TooManyWaiters(f"{self._count} long-poll requests are waiting already")
        waiter = Waiter()
        waiters = self._waiters.setdefault(queue, [])
        waiters.append(waiter)
        self._count += 1
        try:
            yield waiter
        finally:
            self._count -= 1
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[queue]
                self._last_waiter_left(queue)

    def wake(self, queue: str, count: int) -> None:
        """Wake up to count waiters of a queue, oldest first, skipping ones already woken."""
        for waiter in self._waiters.get(queue, ()):
            if count <= 0:
                return
            if not waiter.event.is_set():
                waiter.event.set()
                count -= 1

    async def ensure_subscribed(self, queue: str) -> None:
        """Make sure this queue's wake-ups reach the hub: called once a request waits on it."""
        channel = keys_of(queue).wake
        fresh = channel not in self._channels
        self._channels[channel] = asyncio.get_running_loop().time()
        if fresh and self._pubsub is not None:
            # Its confirmation wakes the queue's waiters (_listen). Lost with the connection, it
            # is made again by the listener's next round, which subscribes every channel.
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.subscribe(channel)

    def _last_waiter_left(self, queue: str) -> None:
        channel = keys_of(queue).wake
        if channel in self._channels:
            self._channels[channel] = asyncio.get_running_loop().time()

    def _on_message(self, channel: bytes, data: bytes) -> None:
        try:
            count = int(data)
        except ValueError:
            log.debug("ignored a wake message that is not a count: %r", data)
            return
        self.wake(queue_of_wake_channel(channel.decode()), count)

    def _wake_queue(self, queue: str) -> None:
        for waiter in self._waiters.get(queue, ()):
            waiter.event.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.event.set()

    def _idle_channels(self, idle_s: float) -> list[str]:
        """Channels of queues with no waiter here, none for idle_s: forgotten, returned."""
        cutoff = asyncio.get_running_loop().time() - idle_s
        idle = [
            channel
            for channel, at in self._channels.items()
            if at < cutoff and queue_of_wake_channel(channel) not in self._waiters
        ]
        for channel in idle:
            del self._channels[channel]
        return idle

    async def _listen(self) -> None:
        while not self._stopping.is_set():
            pubsub = self._client.pubsub()
            forgetting = None
            try:
                channels = set(self._channels)
                await pubsub.subscribe(HUB_CHANNEL, *channels)
                self._pubsub = pubsub
                added = set(self._channels) - channels  # while the round subscribed
                if added:
                    await pubsub.subscribe(*added)
                # Anything published while we were not subscribed was missed: let everyone look.
                self._wake_all()
                forgetting = asyncio.create_task(self._unsubscribe_idle(pubsub), name="emq-wake-hub-idle")
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is None:
                        continue
                    kind, channel = message["type"], message["channel"]
                    if kind == "message":
                        self._on_message(channel, message["data"])
                    elif kind == "subscribe" and channel != HUB_CHANNEL.encode():
                        self._wake_queue(queue_of_wake_channel(channel.decode()))
            except (RedisError, OSError) as error:
                log.warning("wake subscription lost (%s); reconnecting", error)
                await asyncio.sleep(RECONNECT_DELAY_S)
            except Exception:
                # The hub must outlive any surprise: without it, waiters only have the slow poll.
                log.exception("wake subscription failed; reconnecting")
                await asyncio.sleep(RECONNECT_DELAY_S)
            finally:
                self._pubsub = None
                if forgetting is not None:
                    forgetting.cancel()
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()

    async def _unsubscribe_idle(self, pubsub: PubSub) -> None:
        """Every CHANNEL_LINGER_S, the channels no waiter has used for that long are left."""
        while True:
            await asyncio.sleep(CHANNEL_LINGER_S / 2)
            idle = self._idle_channels(CHANNEL_LINGER_S)
            if idle:
                with contextlib.suppress(RedisError, OSError):  # the listener reconnects
                    await pubsub.unsubscribe(*idle)


class ShardedWakeHub(WakeHub):
    """Redis Cluster: scripts SPUBLISH on their queue's shard, so a wake-up travels to that
    shard's subscribers only instead of every node. The hub SSUBSCRIBEs a queue's channel the
    first time one of its requests waits, on the primary that owns the channel's slot, with one
    listener per primary. A slot that moves (failover, resharding) breaks that listener, and
    the next round subscribes again where the slot now lives."""

    def __init__(self, client: RedisCluster, max_waiters: int) -> None:
        super().__init__(client, max_waiters)  # type: ignore[arg-type]
        self._cluster = client
        self._changed = asyncio.Event()  # a new channel: listeners are rebuilt
        self._pools: dict[asyncio.Task[None], ConnectionPool] = {}  # each listener's connection

    async def ensure_subscribed(self, queue: str) -> None:
        channel = keys_of(queue).wake
        fresh = channel not in self._channels
        self._channels[channel] = asyncio.get_running_loop().time()
        if fresh:
            self._changed.set()
            await asyncio.sleep(0)  # let the listeners start over with it before the first lease try

    def _last_waiter_left(self, queue: str) -> None:
        """Idle from when it was last waited on (ensure_subscribed), as the rebuild counts it."""

    async def _listen(self) -> None:
        while not self._stopping.is_set():
            self._changed.clear()
            # Channels no long poll has waited on for CHANNEL_IDLE_S leave at a rebuild: without
            # this every queue ever long-polled stays subscribed, and each rebuild (one per queue
            # newly waited on) subscribes them all again, one command each.
            self._idle_channels(CHANNEL_IDLE_S)
            by_node: dict[tuple[str, int], list[str]] = {}
            for channel in sorted(self._channels):
                node = self._cluster.get_node_from_key(channel)
                by_node.setdefault((node.host, node.port), []).append(channel)
            listeners = [
                asyncio.create_task(
                    self._listen_node(host, port, channels), name=f"emq-wake-hub-{host}:{port}"
                )
                for (host, port), channels in by_node.items()
            ]
            rebuild = asyncio.create_task(self._changed.wait())
            try:
                done, _ = await asyncio.wait({rebuild, *listeners}, return_when=asyncio.FIRST_COMPLETED)
                if rebuild not in done:  # a listener broke: the slot map may have changed
                    with contextlib.suppress(RedisError, OSError):
                        await self._cluster.nodes_manager.initialize()
                    await asyncio.sleep(RECONNECT_DELAY_S)
            finally:
                rebuild.cancel()
                await self._stop_listeners(listeners)
            self._wake_all()  # anything published while (re)subscribing was missed

    async def _stop_listeners(self, listeners: list[asyncio.Task[None]]) -> None:
        """Stop a round's listeners without ever waiting on one for long: redis-py can swallow a
        cancellation that lands in a read, and a rebuild that waited on that listener would never
        subscribe another channel. Such a listener's connection is closed under it."""
        stuck = await cancel_within(listeners, LISTENER_STOP_S)
        for task in stuck:
            pool = self._pools.get(task)
            if pool is not None:
                with contextlib.suppress(RedisError, OSError):
                    await pool.disconnect()
        for task in await cancel_within(stuck, LISTENER_STOP_S):
            log.warning("wake listener %s did not stop; left behind", task.get_name())

    async def _listen_node(self, host: str, port: int, channels: list[str]) -> None:
        node = self._cluster.get_node(host=host, port=port)
        # The node's credentials and TLS settings; no read timeout: a subscriber waits for ever.
        options = {
            key: value
            for key, value in (node.connection_kwargs if node is not None else {}).items()
            if key in _SUBSCRIBER_OPTIONS or key.startswith("ssl")
        }
        pool = ConnectionPool(
            connection_class=node.connection_class if node is not None else Connection,
            host=host,
            port=port,
            **options,
        )
        client = Redis.from_pool(pool)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        task = asyncio.current_task()
        if task is not None:
            self._pools[task] = pool
        try:
            # One SSUBSCRIBE per channel: a node refuses channels of several slots in one.
            for channel in channels:
                await pubsub.execute_command("SSUBSCRIBE", channel)
            while True:
                message = await pubsub.parse_response(block=True)
                if not message:
                    continue
                if message[0] in (b"smessage", "smessage"):
                    self._on_message(message[1], message[2])
                elif message[0] in (b"ssubscribe", "ssubscribe"):
                    # Subscribed from now on: a wake-up published while this round of listeners
                    # was being set up was missed, so the channel's waiters look again now
                    # rather than at their fallback poll.
                    self._wake_queue(queue_of_wake_channel(_text(message[1])))
        except (RedisError, OSError) as error:
            log.warning("sharded wake subscription on %s:%s lost (%s)", host, port, error)
        except Exception:
            log.exception("sharded wake subscription on %s:%s failed", host, port)
        finally:
            if task is not None:
                self._pools.pop(task, None)
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()
                await client.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
