"""A lease request, from its arrival to its answer: the one owner of leasing's policy.

A request (``LeaseAsk``) always carries a request id: the client's, or one minted here. Every
try of a long poll goes under that id, so a re-sent try answers what an earlier one leased
(lua/include/lease.lua). ``Leasing`` runs the tries: one at once and, with ``wait_ms``, one more
on each wake-up of the queue (runtime/wakeups.py) until a job comes or time is up. Jobs leased
for a client that hung up meanwhile, or by a durable write no replica confirmed, are given
straight back, unspent. An ack's ``lease_next`` is the same request whose first try went with
the acks in one script call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import msgspec
from msgspec import Raw, UnsetType

from echomq_http.api.schemas.working import AckItem, AckItemResult, LeasedJob
from echomq_http.core import limits
from echomq_http.runtime.wakeups import Waiter, WakeHub
from echomq_http.store.backends import WriteNotConfirmed

if TYPE_CHECKING:
    from echomq_http.core.queue import JobQueues

# A lease request's record (what it leased, under its request id): a client's request_id is
# honoured for the contract's 5 minutes; the id minted for every other lease call only has to
# outlive a re-send of the same call (the socket timeout and one retry).
CLIENT_REQUEST_TTL_MS = 5 * 60 * 1000
INTERNAL_REQUEST_TTL_MS = 10_000
INTERNAL_REQUEST_PREFIX = "_"  # never the start of a client's request_id (a name)

FALLBACK_POLL_S = 1.0  # a waiting long poll tries again this often even when no wake-up comes

_PROCESS_TOKEN = os.urandom(limits.LEASE_ID_BYTES).hex()  # this process's calls apart from others'
_request_numbers = itertools.count()


def new_request_id() -> str:
    """The request id of a lease call that came without one: unique without a system call per
    lease (a random token per process and a counter)."""
    return f"{INTERNAL_REQUEST_PREFIX}{_PROCESS_TOKEN}{next(_request_numbers)}"


class LeaseAsk(msgspec.Struct, frozen=True):
    """What a lease request asks for. owner: the calling token's id ("" for none), to which the
    worker name must belong."""

    worker: str
    lease_ms: int
    max_jobs: int
    request_id: str
    wait_ms: int = 0
    owner: str = ""

    @classmethod
    def of(
        cls,
        worker: str,
        lease_ms: int,
        max_jobs: int,
        request_id: str | None = None,
        wait_ms: int = 0,
        owner: str = "",
    ) -> LeaseAsk:
        return cls(worker, lease_ms, max_jobs, request_id or new_request_id(), wait_ms, owner)

    @property
    def record_ttl_ms(self) -> int:
        """How long the request's record is kept: a minted id only guards a re-sent call."""
        internal = self.request_id.startswith(INTERNAL_REQUEST_PREFIX)
        return INTERNAL_REQUEST_TTL_MS if internal else CLIENT_REQUEST_TTL_MS


class Leases(msgspec.Struct, frozen=True):
    """What a lease call leased, and retry_after_ms: when the rate limit that held it back has
    room again (ms from the call; 0: no limit held it back)."""

    jobs: list[LeasedJob]
    retry_after_ms: int = 0


NO_LEASES = Leases([])


class LeasesNotConfirmed(WriteNotConfirmed):
    """A lease write no replica confirmed (durable mode), with the jobs it leased."""

    def __init__(self, unconfirmed: WriteNotConfirmed, jobs: list[LeasedJob]) -> None:
        super().__init__(str(unconfirmed), unconfirmed.reply)
        self.jobs = jobs


T = TypeVar("T")

# What waits for the client to hang up (the request's body has been read, so its disconnect is
# the next thing it can receive); None where there is no client to watch.
HangUp = Callable[[], Awaitable[None]] | None


class Leasing:
    """Lease requests for the API's routes: the lease route, and an ack's lease_next."""

    def __init__(self, queues: JobQueues, hub: WakeHub) -> None:
        self.queues = queues
        self.hub = hub

    async def lease(self, queue: str, ask: LeaseAsk, hang_up: HangUp = None) -> Leases:
        """Once the replica is shutting down a long poll leases nothing: a job handed out now could
        not be worked on here, and its worker's calls may find the replica gone."""
        if ask.wait_ms > 0 and self.hub.closing:
            return NO_LEASES
        return await self._answer(queue, ask, lambda: self._try(queue, ask), hang_up)

    async def ack_and_lease(
        self, queue: str, job_id: str, lease_id: str, result: Raw | UnsetType, ask: LeaseAsk, hang_up: HangUp
    ) -> Leases:
        """The ack, then (only if it was taken) the lease request, its first try in the ack's
        script call; a refused ack raises and leases nothing."""

        async def first_try() -> Leases:
            return await self._given_back_unless_confirmed(
                queue, ask, self.queues.ack_one_and_lease(queue, job_id, lease_id, result, ask)
            )

        return await self._answer(queue, ask, first_try, hang_up)

    async def ack_many_and_lease(
        self, queue: str, acks: Sequence[AckItem], ask: LeaseAsk, hang_up: HangUp
    ) -> tuple[list[AckItemResult], Leases]:
        """The acks, then the lease request whatever their results, its first try in the acks'
        script call."""
        results: list[AckItemResult] = []

        async def first_try() -> Leases:
            acked, leases = await self._given_back_unless_confirmed(
                queue, ask, self.queues.ack_and_lease(queue, acks, ask)
            )
            results.extend(acked)
            return leases

        leases = await self._answer(queue, ask, first_try, hang_up)
        return results, leases

    async def _try(self, queue: str, ask: LeaseAsk) -> Leases:
        return await self._given_back_unless_confirmed(queue, ask, self.queues.lease_answer(queue, ask))

    async def _given_back_unless_confirmed(self, queue: str, ask: LeaseAsk, call: Awaitable[T]) -> T:
        """Durable mode: jobs leased by a write no replica confirmed go straight back, unspent
        (unless a retry of the request got them meanwhile), before the 503 reaches the client."""
        try:
            return await call
        except LeasesNotConfirmed as unconfirmed:
            with contextlib.suppress(WriteNotConfirmed):
                await self.queues.give_back(queue, unconfirmed.jobs, ask.worker, ask.request_id)
            raise

    async def _answer(
        self, queue: str, ask: LeaseAsk, first_try: Callable[[], Awaitable[Leases]], hang_up: HangUp
    ) -> Leases:
        """The first try's answer; with wait_ms, what the wait leases. Jobs leased just as the
        client hung up go back, unspent (a retry of the request then leases anew)."""
        if ask.wait_ms <= 0:
            return await first_try()
        loop = asyncio.get_running_loop()
        tried_at = loop.time()

        async def timed(attempt: Callable[[], Awaitable[Leases]]) -> Leases:
            nonlocal tried_at
            tried_at = loop.time()
            return await attempt()

        def try_again() -> Awaitable[Leases]:
            return self._try(queue, ask)

        gone = asyncio.Event()
        watcher = asyncio.create_task(_set_when_done(hang_up, gone)) if hang_up is not None else None
        try:
            leases = await self._wait(
                queue, ask.wait_ms, lambda: timed(first_try), lambda: timed(try_again), gone
            )
        finally:
            if watcher is not None:
                watcher.cancel()
        if leases is None:
            return NO_LEASES
        if gone.is_set() and leases.jobs:
            await self.queues.give_back(queue, leases.jobs, ask.worker, ask.request_id)
        if leases.retry_after_ms > 0:  # counted from the last try, not from the answer
            left_ms = leases.retry_after_ms - int((loop.time() - tried_at) * 1000)
            return Leases(leases.jobs, max(left_ms, 1))
        return leases

    async def _wait(
        self,
        queue: str,
        wait_ms: int,
        first_try: Callable[[], Awaitable[Leases]],
        try_again: Callable[[], Awaitable[Leases]],
        gone: asyncio.Event,
    ) -> Leases | None:
        """The first try, then one more on each wake-up (or when the rate limit said room comes
        back) until a job comes or wait_ms is up: the last try's answer, or None when no try was
        made after the first. The waiter is registered before the first try, so a wake-up during
        it is not lost and no second try is needed before the wait. No try once the replica is
        shutting down, nor once the client has hung up: a job leased for nobody would only wait
        out its lease."""
        hub = self.hub
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        answer = None
        if hub.full:  # no room to wait: the first try alone, then register's refusal (429)
            answer = await first_try()
            if answer.jobs:
                return answer
        with hub.register(queue) as waiter:
            if answer is None:
                answer = await first_try()
            if answer.jobs:
                return answer
            if hub.closing:
                return None
            await hub.ensure_subscribed(queue)
            hang_up = asyncio.create_task(_wake_when(gone, waiter))
            try:
                while True:
                    remaining_s = deadline - loop.time()
                    if remaining_s <= 0:
                        return answer
                    timeout_s = min(remaining_s, FALLBACK_POLL_S)
                    if answer.retry_after_ms > 0:  # the rate window has room again then: no message says so
                        timeout_s = min(timeout_s, answer.retry_after_ms / 1000)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter.event.wait(), timeout_s)
                    # Cleared before the try: a wake-up during it is kept for the next round.
                    waiter.event.clear()
                    if hub.closing or gone.is_set():
                        return None
                    answer = await try_again()
                    if answer.jobs:
                        return answer
            finally:
                hang_up.cancel()


async def _set_when_done(hang_up: Callable[[], Awaitable[None]], gone: asyncio.Event) -> None:
    await hang_up()
    gone.set()


async def _wake_when(gone: asyncio.Event, waiter: Waiter) -> None:
    await gone.wait()
    waiter.event.set()
