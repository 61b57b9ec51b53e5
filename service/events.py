"""The queues' event feeds, without a Redis connection per subscriber.

Scripts write each call's events into one entry of the queue's stream (lua/include/common.lua:
events numbered 1, 2, 3... per queue, an entry's id "0-<number of its last event>"). In each
process one reader per queue with subscribers (``QueueFeed``) follows the stream with XREAD
BLOCK and hands every event, framed once as Server-Sent Events, to each subscriber of that queue
(an SSE request, or a wait on a job's outcome). A subscriber that falls more than its buffer
behind is dropped (its stream ends; it resumes from its last event id), so a slow client never
makes the process buffer without bound. A feed with nobody left stops after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import get_args

import msgspec
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from echomq_http.background import stop_task
from echomq_http.keys import keys_of
from echomq_http.longpoll import TooManyWaiters
from echomq_http.schemas import EventType

log = logging.getLogger(__name__)

EVENT_TYPES = frozenset(get_args(EventType)) - {"resync"}  # what ?types= may name
OUTCOME_TYPES = frozenset({"completed", "failed", "cancelled", "deleted"})  # a wait ends on these
READ_BLOCK_MS = 2000  # below the Redis client's socket timeout
READ_COUNT = 500  # stream entries per read (each a script call's events)
IDLE_STOP_S = 30.0  # a feed nobody uses stops after this long
RETRY_DELAY_S = 0.5
READY_TIMEOUT_S = 5.0  # a feed that cannot read its start within this: Redis is not there
BACKFILL_COUNT = 200
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
    """One consumer of a feed: events that pass its filters, buffered up to `capacity`."""

    __slots__ = ("buffer", "capacity", "dropped", "job_id", "ready", "resync", "types")

    def __init__(self, types: frozenset[str] | None, job_id: str | None, capacity: int) -> None:
        self.types = types
        self.job_id = job_id
        self.capacity = capacity
        self.buffer: deque[Event] = deque()
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
        if len(self.buffer) >= self.capacity:
            self.dropped = True  # too far behind: its stream ends, and it resumes by id
            self.buffer.clear()
        else:
            self.buffer.append(event)
        self.ready.set()

    async def next(self, timeout_s: float) -> Event | None:
        """The next event, or None after timeout_s (or once dropped: check `dropped`)."""
        if not self.buffer and not self.dropped:
            self.ready.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.ready.wait(), timeout_s)
        if self.buffer:
            return self.buffer.popleft()
        return None


class QueueFeed:
    """One queue's events in this process: a reader task and the subscribers it serves."""

    def __init__(self, hub: EventHub, queue: str) -> None:
        self._hub = hub
        self.queue = queue
        self.cluster = isinstance(hub.client, RedisCluster)
        self._keys = keys_of(queue, self.cluster)
        self.subscribers: set[Subscriber] = set()
        self.cursor = 0  # the number of the last event read
        self.ready = asyncio.Event()
        self._idle_since: float | None = None
        self.task = asyncio.create_task(self._run(), name=f"emq-events-{queue}")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._hub.stopping.is_set():
            try:
                if not self.ready.is_set():
                    self.cursor = int(await self._hub.client.hget(self._keys.meta, "event_seq") or 0)
                    self.ready.set()
                if not self.subscribers:
                    self._idle_since = self._idle_since or loop.time()
                    if loop.time() - self._idle_since >= self._hub.idle_stop_s:
                        self._hub.forget(self)
                        return
                else:
                    self._idle_since = None
                await self._read_once()
            except (RedisError, OSError) as error:
                log.warning("event feed of %s: %s; retrying", self.queue, error)
                await asyncio.sleep(RETRY_DELAY_S)

    async def _read_once(self) -> None:
        client = self._hub.client
        reply = await client.xread(
            {self._keys.events: f"0-{self.cursor}"}, count=READ_COUNT, block=self._hub.block_ms
        )
        if not reply:
            # Nothing new. A counter behind the cursor means the queue was deleted (and maybe
            # made again): numbering started over, so follow it and tell the subscribers.
            latest = int(await client.hget(self._keys.meta, "event_seq") or 0)
            if latest < self.cursor:
                self.cursor = latest
                for subscriber in self.subscribers:
                    subscriber.resync = latest
                    subscriber.ready.set()
            return
        for _, entries in reply:
            for entry_id, fields in entries:
                events = parse_entry(self.queue, entry_id, fields)
                self.cursor = events[-1].number
                for event in events:
                    for subscriber in tuple(self.subscribers):
                        subscriber.offer(event)


class EventHub:
    """The event feeds of one process, started on demand, one per queue."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        max_subscribers: int,
        buffer_events: int,
        keepalive_s: float,
        block_ms: int = READ_BLOCK_MS,
        idle_stop_s: float = IDLE_STOP_S,
    ) -> None:
        self.client = client
        self.max_subscribers = max_subscribers
        self.buffer_events = buffer_events
        self.keepalive_s = keepalive_s
        self.block_ms = block_ms
        self.idle_stop_s = idle_stop_s
        self.ready_timeout_s = READY_TIMEOUT_S
        self.stopping = asyncio.Event()
        self._feeds: dict[str, QueueFeed] = {}
        self._count = 0

    @property
    def subscribed(self) -> int:
        return self._count

    def forget(self, feed: QueueFeed) -> None:
        if self._feeds.get(feed.queue) is feed:
            del self._feeds[feed.queue]

    async def _feed(self, queue: str) -> QueueFeed:
        feed = self._feeds.get(queue)
        if feed is None or feed.task.done():
            feed = self._feeds[queue] = QueueFeed(self, queue)
        try:
            await asyncio.wait_for(feed.ready.wait(), self.ready_timeout_s)
        except TimeoutError:  # Redis does not answer: a 503 rather than a hung request
            raise RedisConnectionError(f"the event feed of {queue!r} could not start") from None
        return feed

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
        self._count += 1
        try:
            feed = await self._feed(queue)
            subscriber = Subscriber(types, job_id, self.buffer_events)
            feed.subscribers.add(subscriber)
            try:
                yield feed, subscriber
            finally:
                feed.subscribers.discard(subscriber)
        finally:
            self._count -= 1

    async def stop(self) -> None:
        """End every feed; subscribers see it at once (their streams end)."""
        self.stopping.set()
        for feed in list(self._feeds.values()):
            for subscriber in feed.subscribers:
                subscriber.dropped = True
                subscriber.ready.set()
        await asyncio.gather(*(stop_task(feed.task, self.stopping) for feed in list(self._feeds.values())))
        self._feeds.clear()

    def begin_closing(self) -> None:
        """Shutdown has begun: end the streams now, so that the server need not wait for them."""
        self.stopping.set()
        for feed in self._feeds.values():
            for subscriber in feed.subscribers:
                subscriber.dropped = True
                subscriber.ready.set()


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
    first a resync frame (number -1) when some events after it are no longer kept."""
    client, keys = feed._hub.client, keys_of(feed.queue, feed.cluster)
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
                event = subscriber.buffer.popleft() if subscriber.buffer else None
            if frames:
                yield b"".join(frames)
