"""Concurrent single calls merged into one script call (group commit).

Most producers enqueue one job per request and most workers ack one job at a time; at 20 or 50
such calls in flight, several reach the service in the same event-loop turn, and each alone
costs Redis a script call's fixed cost (docs/PERFORMANCE.md: an enqueue of 8 jobs costs Redis
about a quarter of 8 enqueues of one). A Merger collects the calls of one kind for one queue
made during a turn of the event loop and runs them as one batch at the start of the next turn:
no timer, no added wait beyond the turn that was running anyway. The batch's run answers each
call on its own (a result or an exception per call), so a refused ack fails only its caller.

A caller that goes away (its request cancelled) does not take the batch with it: the batch runs
for the others, and the answer meant for the caller is dropped, as a reply to a cancelled call
always was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")

# What a batch's run gives each call: its answer, or the exception it raises.
Outcomes = Sequence["Answer | BaseException"]


def _one(_: object) -> int:
    return 1


class Merger(Generic[Item, Answer]):
    """Calls of one kind, merged per queue and per event-loop turn, at most max_weight of work
    in one run (a bound on the merged script call's time)."""

    def __init__(
        self,
        run: Callable[[str, list[Item]], Awaitable[Sequence[Answer | BaseException]]],
        max_weight: int,
        weigh: Callable[[Item], int] = _one,
    ) -> None:
        """run(queue, items): one outcome per item, in order; an exception it raises is every
        item's. weigh(item): the work an item adds to its run (jobs it may touch)."""
        self._run = run
        self._max_weight = max_weight
        self._weigh = weigh
        self._pending: dict[str, list[tuple[Item, asyncio.Future[Answer]]]] = {}
        self._weights: dict[str, int] = {}
        self._running: set[asyncio.Task[None]] = set()

    async def __call__(self, queue: str, item: Item) -> Answer:
        loop = asyncio.get_running_loop()
        weight = self._weigh(item)
        batch = self._pending.get(queue)
        if batch is None or self._weights[queue] + weight > self._max_weight:
            batch = self._pending[queue] = []
            self._weights[queue] = 0
            loop.call_soon(self._start, queue, batch)
        self._weights[queue] += weight
        answer: asyncio.Future[Answer] = loop.create_future()
        batch.append((item, answer))
        return await answer

    def _start(self, queue: str, batch: list[tuple[Item, asyncio.Future[Answer]]]) -> None:
        if self._pending.get(queue) is batch:
            del self._pending[queue]
            del self._weights[queue]
        task = asyncio.get_running_loop().create_task(self._answer(queue, batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _answer(self, queue: str, batch: list[tuple[Item, asyncio.Future[Answer]]]) -> None:
        try:
            outcomes = await self._run(queue, [item for item, _ in batch])
        except Exception as error:  # every caller's
            for _, answer in batch:
                if not answer.done():
                    answer.set_exception(error)
            return
        except BaseException:  # cancelled (shutdown): so are the calls
            for _, answer in batch:
                answer.cancel()
            raise
        for (_, answer), outcome in zip(batch, outcomes, strict=True):
            if answer.done():  # its caller went away
                continue
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)

    async def aclose(self) -> None:
        """Waits for the batches that are running (their callers are still owed answers)."""
        while self._running or self._pending:
            await asyncio.gather(*self._running, return_exceptions=True)
            await asyncio.sleep(0)
