"""Body-read timeouts (echomq_http.api.body_timeouts): late reads time out, nothing else is touched."""

import asyncio

import pytest

from echomq_http.api import body_timeouts as body_timeouts_module
from echomq_http.api.body_timeouts import BodyReadTimeouts


@pytest.fixture
async def body_timeouts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(body_timeouts_module, "CHECK_INTERVAL_S", 0.02)
    watcher = BodyReadTimeouts(timeout_s=0.1)
    watcher.start()
    yield watcher
    await watcher.stop()


async def test_a_late_block_raises_timeout_error(body_timeouts: BodyReadTimeouts) -> None:
    with pytest.raises(TimeoutError), body_timeouts.watch():
        await asyncio.sleep(5)
    assert asyncio.current_task().cancelling() == 0  # the cancellation was taken back
    await asyncio.sleep(0.1)  # and the task goes on normally afterwards


async def test_a_block_in_time_is_left_alone_and_so_is_what_follows(body_timeouts: BodyReadTimeouts) -> None:
    with body_timeouts.watch():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # past the deadline the block had: nothing cancels the task now
    assert asyncio.current_task().cancelling() == 0


async def test_a_cancellation_from_elsewhere_stays_a_cancellation(body_timeouts: BodyReadTimeouts) -> None:
    async def read() -> None:
        with body_timeouts.watch():
            await asyncio.sleep(5)

    task = asyncio.create_task(read())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_reads_each_get_their_own_verdict(body_timeouts: BodyReadTimeouts) -> None:
    async def read(seconds: float) -> str:
        try:
            with body_timeouts.watch():
                await asyncio.sleep(seconds)
        except TimeoutError:
            return "late"
        return "in time"

    verdicts = await asyncio.gather(*(read(0.01 if i % 2 else 2) for i in range(20)))
    assert verdicts == ["late", "in time"] * 10
