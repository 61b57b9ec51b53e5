"""The queues' event feeds, on a fixed number of Redis connections of their own.

Scripts write each call's events into one entry of the queue's stream (lua/include/events.lua:
events numbered 1, 2, 3... per queue, an entry's id "0-<number of its last event>"). In each
process a queue with subscribers (an SSE request, or a wait on a job's outcome) has one
``QueueFeed``; the feeds are shared out among a few ``FeedReader``s (per node on a Cluster),
each following all its queues' streams with one XREAD BLOCK on a connection of its own. So
followers never take a connection of the request pool or the sweep, however many they are; the
number of queues followed is capped (429 beyond it). Every event is framed once as Server-Sent
Events and handed to each subscriber of its queue. A subscriber more than its buffer (events or
bytes) behind is dropped (its stream ends; it resumes from its last event id), so a slow client
never makes the process buffer without bound. A feed with nobody left stops after a grace period
(at once while its reader cannot reach Redis); a reader that cannot read backs off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

import msgspec
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from echomq_http.api.schemas.inspection import EventType
from echomq_http.runtime.background import stop_task
from echomq_http.runtime.wakeups import TooManyWaiters
from echomq_http.store.keys import QueueKeys, keys_of

if TYPE_CHECKING:
    from echomq_http.store.backends import Backend

log = logging.getLogger(__name__)

EVENT_TYPES = frozenset(get_args(EventType)) - {"resync"}  # what ?types= may name
OUTCOME_TYPES = frozenset({"completed", "failed", "cancelled", "deleted"})  # a wait ends on these
READ_BLOCK_MS = 2000  # below the Redis client's socket timeout
# Stream entries per queue per read. An entry is one script call's events, and a call's input is
# at most one request body (EMQ_MAX_BODY_BYTES), so a read holds at most this many bodies' worth
# per queue, and only for as long as it takes to hand the events out.
READ_COUNT = 64
IDLE_STOP_S = 30.0  # a feed nobody uses stops after this long
RETRY_MIN_S = 0.2  # a reader that cannot read waits this long, doubled each failure up to
RETRY_MAX_S = 5.0
READY_TIMEOUT_S = 5.0  # a feed that cannot read its start within this: Redis is not there
BACKFILL_COUNT = 16  # stream entries per catch-up read: a page stays a few bodies' worth
SSE_RETRY_MS = 2000  # what a client's EventSource waits before reconnecting


@dataclass(frozen=True, slots=True)
class Event:
    number: int
    kind: str
    job_id: str | None
    frame: bytes  # the whole SSE event, ready to send


def parse_entry(queue: str, entry_id: bytes, fields: dict[bytes, bytes]) -> list[Event]:
    """A stream entry's events, each framed for SSE (data: type, queue, id, at, then the
    members the script wrote)."""
    last = int(entry_id.split(b"-", 1)[1])
    lines = fields[b"e"].split(b"\n")
    at = fields[b"at"]
    head_queue = b',"queue":"' + queue.encode() + b'"'
    events = []
    for number, line in enumerate(lines, start=last - len(lines) + 1):
        kind, job, members = line.split(b" ", 2)
        data = b'{"type":"' + kind + b'"' + head_queue
        if job != b"-":
            data += b',"id":"' + job + b'"'
        data += b',"at":' + at
        if members:
            data += b"," + members
        data += b"}"
        frame = b"id: %d\nevent: %s\ndata: %s\n\n" % (number, kind, data)
        events.append(Event(number, kind.decode(), None if job == b"-" else job.decode(), frame))
    return events


def resync_frame(queue: str, after: int, oldest: int) -> bytes:
    """Events between `after` and `oldest` are no longer kept (or the queue was deleted and
    started over): the subscriber should read the state again. No id: it is not in the stream."""
    data = msgspec.json.encode({"type": "resync", "queue": queue, "after": after, "oldest": oldest})
    return b"event: resync\ndata: " + data + b"\n\n"


KEEPALIVE_FRAME = b": keep-alive\n\n"


class Subscriber:
    """One consumer of a feed: events that pass its filters, buffered up to `capacity` events
    and `capacity_bytes` bytes of frames."""

    __slots__ = (
        "buffer",
        "buffered_bytes",
        "capacity",
        "capacity_bytes",
        "dropped",
        "job_id",
        "ready",
        "resync",
        "types",
    )

    def __init__(
        self, types: frozenset[str] | None, job_id: str | None, capacity: int, capacity_bytes: int
    ) -> None:
        self.types = types
        self.job_id = job_id
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self.buffer: deque[Event] = deque()
        self.buffered_bytes = 0
        self.ready = asyncio.Event()
        self.dropped = False
        self.resync: int | None = None  # the feed started over at this number (queue deleted)

    def matches(self, event: Event) -> bool:
        return (self.types is None or event.kind in self.types) and (
            self.job_id is None or event.job_id == self.job_id
        )

    def offer(self, event: Event) -> None:
        if self.dropped or not self.matches(event):
            return
        size = len(event.frame)
        if len(self.buffer) >= self.capacity or self.buffered_bytes + size > self.capacity_bytes:
            self.drop()  # too far behind: its stream ends, and it resumes by id
        else:
            self.buffer.append(event)
            self.buffered_bytes += size
        self.ready.set()

    def drop(self) -> None:
        self.dropped = True
        self.clear()
        self.ready.set()

    def clear(self) -> None:
        self.buffer.clear()
        self.buffered_bytes = 0

    def take(self) -> Event | None:
        """The oldest buffered event, if any."""
        if not self.buffer:
            return None
        event = self.buffer.popleft()
        self.buffered_bytes -= len(event.frame)
        return event

    async def next(self, timeout_s: float) -> Event | None:
        """The next event, or None after timeout_s (or once dropped: check `dropped`)."""
        if not self.buffer and not self.dropped:
            self.ready.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.ready.wait(), timeout_s)
        return self.take()


class QueueFeed:
    """One queue's events in this process: where its reader is in the stream, and the
    subscribers it serves."""

    def __init__(self, hub: EventHub, queue: str) -> None:
        self.hub = hub
        self.queue = queue
        self.cluster = hub.cluster
        self.keys: QueueKeys = keys_of(queue, self.cluster)
        self.subscribers: set[Subscriber] = set()
        self.cursor = 0  # the number of the last event read
        self.started: asyncio.Future[None] | None = None
        self.idle_since: float | None = None
        self.reader: FeedReader | None = None

    def deliver(self, entries: Iterable[tuple[bytes, dict[bytes, bytes]]]) -> None:
        for entry_id, fields in entries:
            events = parse_entry(self.queue, entry_id, fields)
            self.cursor = events[-1].number
            for event in events:
                for subscriber in tuple(self.subscribers):
                    subscriber.offer(event)

    def restart_at(self, latest: int) -> None:
        """The queue's numbering started over (deleted, maybe made again): follow it, and tell
        the subscribers."""
        self.cursor = latest
        for subscriber in self.subscribers:
            subscriber.resync = latest
            subscriber.ready.set()


ConnectionFactory = Callable[[], AbstractConnection]


def _pairs(fields: Any) -> dict[bytes, bytes]:
    """An entry's fields as a dict, whether the reply was RESP2 (a flat list) or RESP3."""
    if isinstance(fields, dict):
        return fields
    return dict(zip(fields[::2], fields[1::2], strict=True))


def _streams(reply: Any) -> Iterator[tuple[str, list[Any]]]:
    """XREAD's reply as (key, entries), RESP2 (a list of pairs) or RESP3 (a map)."""
    items = reply.items() if isinstance(reply, dict) else reply or ()
    for key, entries in items:
        yield (key.decode() if isinstance(key, bytes) else key), entries


class FeedReader:
    """One connection of its own following many queues' streams: one XREAD BLOCK over all of
    them. A feed added while it blocks breaks the read off (the connection is opened again),
    so the new queue's events are not held up until the block times out."""

    def __init__(self, hub: EventHub, name: str, make_connection: ConnectionFactory) -> None:
        self._hub = hub
        self.name = name
        self._make_connection = make_connection
        self._connection: AbstractConnection | None = None
        self.feeds: dict[str, QueueFeed] = {}  # by events key
        self.changed = asyncio.Event()
        self.failing = False
        self._checked_at = 0.0
        self.task = asyncio.create_task(self._run(), name=f"emq-events-{name}")

    def add(self, feed: QueueFeed) -> None:
        self.feeds[feed.keys.events] = feed
        feed.reader = self
        self.changed.set()

    def remove(self, feed: QueueFeed) -> None:
        if self.feeds.get(feed.keys.events) is feed:
            del self.feeds[feed.keys.events]
            feed.reader = None

    async def _run(self) -> None:
        delay_s = RETRY_MIN_S
        stopping = self._hub.stopping
        while not stopping.is_set():
            self._stop_idle_feeds()
            if not self.feeds:
                await self._disconnect()  # nothing to follow: hold no connection
                self.changed.clear()
                await self.changed.wait()
                continue
            try:
                await self._read_once()
                self.failing, delay_s = False, RETRY_MIN_S
            except (RedisError, OSError) as error:
                self.failing = True
                await self._disconnect()
                log.warning("event reader %s: %s; retrying in %.1f s", self.name, error, delay_s)
                self._stop_idle_feeds()  # a feed nobody follows stops now, not after the backoff
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay_s)
                delay_s = min(delay_s * 2, RETRY_MAX_S)
                await self._hub.reader_failed(self)
        await self._disconnect()

    def _stop_idle_feeds(self) -> None:
        """Feeds without subscribers stop after the grace period (at once while failing)."""
        now = asyncio.get_running_loop().time()
        for feed in list(self.feeds.values()):
            if feed.subscribers:
                feed.idle_since = None
                continue
            feed.idle_since = feed.idle_since or now
            if self.failing or now - feed.idle_since >= self._hub.idle_stop_s:
                self.remove(feed)
                self._hub.forget(feed)

    async def _connect(self) -> AbstractConnection:
        if self._connection is None:
            connection = self._make_connection()
            await connection.connect()
            self._connection = connection
        return self._connection

    async def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)

    async def _read_once(self) -> None:
        connection = await self._connect()
        loop = asyncio.get_running_loop()
        if loop.time() - self._checked_at >= self._hub.block_ms / 1000:
            await self._check_restarts(connection)
            self._checked_at = loop.time()
        self.changed.clear()  # from here, a feed added breaks the read off
        feeds = list(self.feeds.values())
        await connection.send_command(
            "XREAD",
            "COUNT",
            READ_COUNT,
            "BLOCK",
            self._hub.block_ms,
            "STREAMS",
            *(feed.keys.events for feed in feeds),
            *(f"0-{feed.cursor}" for feed in feeds),
        )
        timeout_s = self._hub.block_ms / 1000 + (connection.socket_timeout or READY_TIMEOUT_S)
        read = asyncio.ensure_future(connection.read_response(timeout=timeout_s))
        changed = asyncio.ensure_future(self.changed.wait())
        try:
            done, _ = await asyncio.wait({read, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not read.done():  # a feed was added: the connection still owes this reply
                read.cancel()
                await asyncio.gather(read, return_exceptions=True)
                await self._disconnect()
        if read not in done:
            return
        for key, entries in _streams(read.result()):
            feed = self.feeds.get(key)
            if feed is not None and entries:
                feed.deliver((entry_id, _pairs(fields)) for entry_id, fields in entries)

    async def _check_restarts(self, connection: AbstractConnection) -> None:
        """A counter behind a feed's cursor means its queue was deleted (and maybe made again):
        numbering started over. One pipelined HGET per feed, once per block period."""
        feeds = list(self.feeds.values())
        if not feeds:
            return
        commands = [("HGET", feed.keys.meta, "event_seq") for feed in feeds]
        await connection.send_packed_command(connection.pack_commands(commands))
        for feed in feeds:
            latest = int(await connection.read_response() or 0)
            if latest < feed.cursor:
                feed.restart_at(latest)


class EventHub:
    """The event feeds of one process: one per queue followed, started on demand, read by
    `readers` connections (per node on a Cluster) apart from the request pool."""

    def __init__(
        self,
        backend: Backend,
        max_subscribers: int,
        buffer_events: int,
        keepalive_s: float,
        buffer_bytes: int,
        max_queues: int,
        readers: int,
        block_ms: int = READ_BLOCK_MS,
        idle_stop_s: float = IDLE_STOP_S,
    ) -> None:
        self.backend = backend
        self.client = backend.client
        self.cluster = backend.cluster
        self.max_subscribers = max_subscribers
        self.buffer_events = buffer_events
        self.buffer_bytes = buffer_bytes
        self.keepalive_s = keepalive_s
        self.max_queues = max_queues
        self.reader_count = readers
        self.block_ms = block_ms
        self.idle_stop_s = idle_stop_s
        self.ready_timeout_s = READY_TIMEOUT_S
        self.stopping = asyncio.Event()
        self._feeds: dict[str, QueueFeed] = {}
        self._readers: dict[str, FeedReader] = {}
        self._count = 0

    @property
    def subscribed(self) -> int:
        return self._count

    @property
    def followed(self) -> int:
        """Queues followed now (the feeds, idle ones in their grace period included)."""
        return len(self._feeds)

    def forget(self, feed: QueueFeed) -> None:
        if self._feeds.get(feed.queue) is feed:
            del self._feeds[feed.queue]

    def _reader_for(self, feed: QueueFeed) -> FeedReader:
        """The reader of the feed's queue: by a hash of its name, among the readers of the node
        that owns its slot on a Cluster (all a queue's keys share one)."""
        shard = zlib.crc32(feed.queue.encode()) % self.reader_count
        name, make_connection = self.backend.stream_connection(feed.keys.events, shard)
        reader = self._readers.get(name)
        if reader is None or reader.task.done():
            reader = self._readers[name] = FeedReader(self, name, make_connection)
        return reader

    async def reader_failed(self, reader: FeedReader) -> None:
        """On a Cluster a slot may have moved (failover, resharding): ask for the slot map
        again and hand the reader's feeds to the readers of the nodes now owning them."""
        if not reader.feeds or not await self.backend.slots_moved():
            return
        for feed in list(reader.feeds.values()):
            target = self._reader_for(feed)
            if target is not reader:
                reader.remove(feed)
                target.add(feed)

    def _make_room(self) -> None:
        """At the cap of queues followed: stop a feed nobody uses, else refuse (429)."""
        if len(self._feeds) < self.max_queues:
            return
        for feed in self._feeds.values():
            if not feed.subscribers and feed.started is not None and feed.started.done():
                self._stop_feed(feed)
                return
        raise TooManyWaiters(f"{len(self._feeds)} queues are followed already (EMQ_MAX_FOLLOWED_QUEUES)")

    def _stop_feed(self, feed: QueueFeed) -> None:
        self.forget(feed)
        if feed.reader is not None:
            feed.reader.remove(feed)

    async def _start(self, feed: QueueFeed) -> None:
        """The feed's cursor (the last event written so far, read on the request path, one
        quick command), then its reader follows it from there."""
        try:
            seq = await asyncio.wait_for(self.client.hget(feed.keys.meta, "event_seq"), self.ready_timeout_s)
        except TimeoutError:  # Redis does not answer: a 503 rather than a hung request
            self.forget(feed)
            raise RedisConnectionError(f"the event feed of {feed.queue!r} could not start") from None
        except BaseException:
            self.forget(feed)
            raise
        feed.cursor = int(seq or 0)
        if self._feeds.get(feed.queue) is feed:
            self._reader_for(feed).add(feed)

    @contextlib.asynccontextmanager
    async def subscribe(
        self, queue: str, types: frozenset[str] | None = None, job_id: str | None = None
    ) -> AsyncIterator[tuple[QueueFeed, Subscriber]]:
        """A subscriber of the queue's feed; every event the feed reads from now on reaches it.
        The feed's cursor is already known: events numbered after it are not missed."""
        if self.stopping.is_set():
            raise TooManyWaiters("the service is shutting down")
        if self._count >= self.max_subscribers:
            raise TooManyWaiters(f"{self._count} event subscribers and outcome waits are open already")
        feed = self._feeds.get(queue)
        if feed is None:
            self._make_room()
            feed = self._feeds[queue] = QueueFeed(self, queue)
            feed.started = asyncio.ensure_future(self._start(feed))
        subscriber = Subscriber(types, job_id, self.buffer_events, self.buffer_bytes)
        self._count += 1
        feed.subscribers.add(subscriber)  # before the start: an idle check never stops it
        try:
            assert feed.started is not None
            await asyncio.shield(feed.started)
            yield feed, subscriber
        finally:
            feed.subscribers.discard(subscriber)
            self._count -= 1
            if not feed.subscribers and feed.reader is not None and feed.reader.failing:
                self._stop_feed(feed)  # its reader cannot read: no retrying for nobody

    async def stop(self) -> None:
        """End every feed; subscribers see it at once (their streams end)."""
        self.begin_closing()
        for reader in self._readers.values():
            reader.changed.set()
        await asyncio.gather(*(stop_task(reader.task, self.stopping) for reader in self._readers.values()))
        self._readers.clear()
        self._feeds.clear()

    def begin_closing(self) -> None:
        """Shutdown has begun: end the streams now, so that the server need not wait for them."""
        self.stopping.set()
        for feed in self._feeds.values():
            for subscriber in feed.subscribers:
                subscriber.drop()


def entry_events(queue: str, entries: Iterable[tuple[bytes, dict[bytes, bytes]]]) -> Iterator[Event]:
    for entry_id, fields in entries:
        yield from parse_entry(queue, entry_id, fields)


async def oldest_retained(client: Redis | RedisCluster, events_key: str) -> int | None:
    """The number of the oldest event the queue's stream still holds (None: it holds none)."""
    entries = await client.xrange(events_key, "-", "+", count=1)
    if not entries:
        return None
    entry_id, fields = entries[0]
    return int(entry_id.split(b"-", 1)[1]) - fields[b"e"].count(b"\n")


async def _backfill(feed: QueueFeed, subscriber: Subscriber, after: int) -> AsyncIterator[tuple[int, bytes]]:
    """The kept events after `after` that pass the subscriber's filters, as (number, frame), and
    first a resync frame (number -1) when some events after it are no longer kept. Read a few
    entries at a time: the response sends each page before the next is read."""
    client, keys = feed.hub.client, feed.keys
    latest = int(await client.hget(keys.meta, "event_seq") or 0)
    oldest = await oldest_retained(client, keys.events)
    if oldest is None:
        oldest = latest + 1
    start = after
    if after > latest or (after != 0 and after < oldest - 1):
        yield -1, resync_frame(feed.queue, after, oldest)
        start = oldest - 1
    yield start, b""  # where the live events take over, even when nothing is sent here
    while True:
        entries = await client.xrange(keys.events, f"(0-{start}", "+", count=BACKFILL_COUNT)
        if not entries:
            return
        for event in entry_events(feed.queue, entries):
            if event.number > start:
                start = event.number
                if subscriber.matches(event):
                    yield event.number, event.frame
        yield start, b""


async def event_stream(
    hub: EventHub, queue: str, after: int | None, types: frozenset[str] | None, job_id: str | None
) -> AsyncIterator[bytes]:
    """An SSE response's body: the kept events after `after` (none: only new ones), then every
    new event as the feed reads it, with a keep-alive comment when nothing happens."""
    async with hub.subscribe(queue, types, job_id) as (feed, subscriber):
        yield b"retry: %d\n\n" % SSE_RETRY_MS
        sent = feed.cursor
        if after is not None:
            async for number, frame in _backfill(feed, subscriber, after):
                if frame:
                    yield frame
                if number >= 0:
                    sent = number
        while True:
            event = await subscriber.next(hub.keepalive_s)
            if subscriber.dropped:
                return
            if subscriber.resync is not None:
                yield resync_frame(queue, sent, subscriber.resync + 1)
                sent, subscriber.resync = subscriber.resync, None
                continue
            if event is None:
                yield KEEPALIVE_FRAME
                continue
            # Whatever else is buffered goes out in the same write: one send per burst, not per
            # event, so a busy feed costs each subscriber less.
            frames = []
            while event is not None:
                if event.number > sent:
                    sent = event.number
                    frames.append(event.frame)
                event = subscriber.take()
            if frames:
                yield b"".join(frames)
