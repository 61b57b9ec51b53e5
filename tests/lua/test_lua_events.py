"""The queue's event stream as the scripts write it (include/events.lua flush_events): how much
of it is kept, and event numbers that never go back."""

from __future__ import annotations

from tests.lua.conftest import spec

MAXLEN = 100
TRIM_EVERY = 12  # min(256, MAXLEN / 8): the stream is trimmed by the entries crossing a multiple


async def kept(q) -> tuple[int, int]:
    """(number of the oldest event the stream holds, number of its last)."""
    [(first_id, first)] = await q.redis.xrange(q.keys.events, count=1)
    [(last_id, _)] = await q.redis.xrevrange(q.keys.events, count=1)
    lines = first[b"e"].count(b"\n") + 1
    return int(first_id.split(b"-")[1]) - lines + 1, int(last_id.split(b"-")[1])


async def test_the_stream_keeps_at_least_maxlen_events_and_not_many_more(q):
    q.scripts = await q.scripts_with(EVENTS_MAXLEN=MAXLEN)
    written = 0
    for batch in [1, 7, 30, 2, 1, 13] * 40:  # entries of different sizes, across the trim marks
        await q.enqueue(*[spec() for _ in range(batch)])
        written += batch
    oldest, last = await kept(q)
    assert last == written == int(await q.redis.hget(q.keys.meta, "event_seq"))
    assert last - oldest + 1 >= MAXLEN
    # Trimmed (MINID ~) by whole stream nodes only: at most a node's events and a trim period more.
    assert last - oldest + 1 <= MAXLEN + TRIM_EVERY + 200


async def test_event_numbers_go_on_from_the_stream_when_meta_lost_its_counter(q):
    for _ in range(3):
        await q.add()
    await q.redis.delete(q.keys.meta)  # the counter is gone, the stream is not
    await q.add()
    leased = await q.lease_one()
    await q.ack((leased.id, leased.lease_id))
    _, last = await kept(q)
    assert last == 6  # enqueued 4, leased 5, completed 6: after the stream's 3, not from 1 again
    assert int(await q.redis.hget(q.keys.meta, "event_seq")) == 6
