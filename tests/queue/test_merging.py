"""Merged calls answer each caller exactly as separate calls would (core/merging.py).

Each scenario runs twice on the test's backend, on two fresh queues: once with merging on, the
calls of a round that go to one merger made at once (so that they merge), one merger's after the
other's (two merged calls on a Cluster's two connections have no order between them), and once
with it off, the same calls made one after the other in that order. Every answer, error and
final job state must match.
The calls are random mixes of good and bad: enqueues of new and repeated ids, acks with the live
lease, a lost one or of a missing job, the same ack twice, leases and acks with lease_next,
repeated request ids, and worker names another token owns.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from msgspec import UNSET, Raw
from redis.asyncio import Redis

from echomq_http.api.schemas.jobs import EnqueueRequest
from echomq_http.api.schemas.working import AckItem
from echomq_http.core.leasing import LeaseAsk, Leases, LeasesNotConfirmed
from echomq_http.core.merging import Merger
from echomq_http.core.queue import JobQueues
from echomq_http.observability.telemetry import Telemetry
from echomq_http.store.keys import QUEUE_REGISTRY, queue_prefix
from tests.support.queues import job_queues
from tests.support.servers import RedisServer

SCENARIOS = 6
ROUNDS = 5
CALLS_PER_ROUND = 14
JOBS = 12
WORKERS = ("w1", "w2", "w3")
OWNERS = {"w1": "", "w2": "token-a", "w3": "token-b"}  # w3 is also tried by token-a: refused

Call = tuple[str, tuple[Any, ...]]  # kind, symbolic arguments


class Run:
    """One run of a scenario on its own queue: the leases it got, by the order they came."""

    def __init__(self, queues: JobQueues, queue: str) -> None:
        self.queues = queues
        self.queue = queue
        self.leases: list[tuple[str, str]] = []  # (job id, lease id), as leased

    def lease_of(self, index: int) -> tuple[str, str]:
        if not self.leases:
            return ("missing", "nothing")
        return self.leases[index % len(self.leases)]

    def noted(self, leases: Leases) -> list[tuple[str, int, int]]:
        self.leases += [(job.id, job.lease_id) for job in leases.jobs]
        return [(job.id, job.attempt, job.fence) for job in leases.jobs] + [leases.retry_after_ms]  # type: ignore[list-item]

    def call(self, kind: str, args: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
        queues, queue = self.queues, self.queue
        if kind == "enqueue":
            (job_id,) = args
            job = EnqueueRequest(id=job_id, payload=Raw(b'{"n":1}'))

            async def enqueue() -> Any:
                (answer,) = await queues.enqueue(queue, [job])
                return (answer.id, answer.state, answer.created)

            return enqueue
        if kind == "ack":
            index, twist = args

            job_id, lease_id = self.lease_of(index)  # of the leases before the round, in both runs

            async def ack() -> Any:
                nonlocal job_id, lease_id
                if twist == "lost":
                    lease_id = "0" * len(lease_id)
                elif twist == "missing":
                    job_id = "never-enqueued"
                await queues.ack_one(queue, job_id, lease_id, Raw(b"1") if index % 2 else UNSET)
                return "acked"

            return ack
        worker, max_jobs, request, index, twist = args
        owner = "token-a" if twist == "foreign" else OWNERS[worker]
        ask = LeaseAsk.of(worker, 60_000, max_jobs, request, owner=owner)

        if kind == "lease":

            async def lease() -> Any:
                return self.noted(await queues.lease_answer(queue, ask))

            return lease
        if kind == "ack_next":
            job_id, lease_id = self.lease_of(index)
            if twist == "lost":
                lease_id = "0" * len(lease_id)

            async def ack_next() -> Any:
                return self.noted(await queues.ack_one_and_lease(queue, job_id, lease_id, UNSET, ask))

            return ack_next

        acks = [
            AckItem(id=job_id, lease_id=lease_id)
            for job_id, lease_id in (self.lease_of(index), self.lease_of(index + 1))
        ]

        async def ack_many_next() -> Any:
            results, leases = await queues.ack_and_lease(queue, acks, ask)
            return [(result.id, result.ok, result.code) for result in results], self.noted(leases)

        return ack_many_next


def scenario(seed: int) -> list[list[Call]]:
    rng = random.Random(seed)
    rounds: list[list[Call]] = [[("enqueue", (f"j{n}",)) for n in range(JOBS)]]
    for _ in range(ROUNDS):
        calls: list[Call] = []
        for _ in range(CALLS_PER_ROUND):
            kind = rng.choice(("enqueue", "ack", "ack", "lease", "lease", "ack_next", "ack_many_next"))
            if kind == "enqueue":
                calls.append((kind, (f"j{rng.randrange(JOBS + 6)}",)))  # some ids exist already
            elif kind == "ack":
                calls.append((kind, (rng.randrange(40), rng.choice(("live", "live", "lost", "missing")))))
            else:
                worker = rng.choice(WORKERS)
                request = f"r{rng.randrange(6)}"  # repeated request ids: replays
                twist = rng.choice(("", "", "lost", "foreign"))
                calls.append((kind, (worker, rng.choice((1, 1, 2)), request, rng.randrange(40), twist)))
        rounds.append(calls)
    return rounds


def merged_groups(calls: list[Call]) -> list[list[int]]:
    """A round's calls by the merger they go to (a lease and an ack with lease_next share one),
    each group in order, the groups by first appearance."""
    group = {
        "enqueue": "enqueue",
        "ack": "ack",
        "lease": "lease",
        "ack_next": "lease",
        "ack_many_next": "lease",
    }
    kinds: list[str] = []
    for kind, _ in calls:
        if group[kind] not in kinds:
            kinds.append(group[kind])
    return [[i for i, (kind, _) in enumerate(calls) if group[kind] == g] for g in kinds]


def in_merged_order(calls: list[Call]) -> list[int]:
    """The order a merged round runs its calls in: group after group, each in order."""
    return [i for indexes in merged_groups(calls) for i in indexes]


async def outcome(attempt: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await attempt()
    except Exception as error:  # a refusal is an answer too: its kind and code
        return (type(error).__name__, getattr(error, "code", None))


async def final_states(run: Run) -> list[Any]:
    states = []
    for n in range(JOBS + 6):
        try:
            view = await run.queues.get_job(run.queue, f"j{n}")
        except Exception as error:
            states.append(type(error).__name__)
            continue
        states.append((view.id, view.state, view.attempt))
    return states


async def play(queues: JobQueues, queue: str, rounds: list[list[Call]], merged: bool) -> list[Any]:
    run = Run(queues, queue)
    answers: list[Any] = []
    for calls in rounds:
        attempts = [run.call(kind, args) for kind, args in calls]
        if merged:  # a merger's calls at once; one merger's after another's (module doc)
            got = [None] * len(calls)
            for indexes in merged_groups(calls):
                answers_of_group = await asyncio.gather(*(outcome(attempts[i]) for i in indexes))
                for i, answer in zip(indexes, answers_of_group, strict=True):
                    got[i] = answer
        else:
            got = [None] * len(calls)
            for i in in_merged_order(calls):
                got[i] = await outcome(attempts[i])
        answers.append(got)
    return [answers, await final_states(run)]


@pytest.mark.parametrize("seed", range(SCENARIOS))
async def test_merged_calls_answer_as_separate_calls_would(redis_client: Any, seed: int) -> None:
    merged, alone = job_queues(redis_client, 64), job_queues(redis_client, 64, merge_calls=False)
    script_calls = {"merged": 0, "alone": 0}

    def counting(name: str, queues: JobQueues) -> None:
        call = queues.scripts.call

        async def counted(*args: Any, **kwargs: Any) -> Any:
            script_calls[name] += 1
            return await call(*args, **kwargs)

        queues.scripts.call = counted  # type: ignore[method-assign]

    counting("merged", merged)
    counting("alone", alone)
    names = [f"t-merge-{secrets.token_hex(4)}" for _ in range(2)]
    rounds = scenario(seed)
    try:
        with_merging = await play(merged, names[0], rounds, merged=True)
        without = await play(alone, names[1], rounds, merged=False)
        assert with_merging == without
        assert script_calls["merged"] < script_calls["alone"]  # the calls did merge
    finally:
        await merged.aclose()
        await alone.aclose()
        for name in names:
            keys = [key async for key in redis_client.scan_iter(match=queue_prefix(name) + "*", count=1000)]
            if keys:
                await redis_client.delete(*keys)
            await redis_client.srem(QUEUE_REGISTRY, name)


async def test_merged_leases_no_replica_confirmed_give_each_caller_its_own_jobs(
    private_valkey: RedisServer,
) -> None:
    """Durable mode, no replica to confirm: each merged lease request raises LeasesNotConfirmed
    with the jobs it leased itself (which the route gives back), as it would alone."""
    client = Redis.from_url(private_valkey.url)
    plain = job_queues(client, 8)
    durable = JobQueues(
        client,
        completed_retention_s=3600,
        failed_retention_s=3600,
        sweep_batch=100,
        telemetry=Telemetry(),
        max_concurrent_calls=8,
        confirm_replicas=1,
        confirm_timeout_ms=10,
    )
    try:
        await plain.enqueue("durable", [EnqueueRequest(id=f"j{n}", payload=Raw(b"1")) for n in range(5)])
        asks = [LeaseAsk.of(f"w{n}", 60_000, 1 + n % 2) for n in range(4)]
        outcomes = await asyncio.gather(
            *(durable.lease_answer("durable", ask) for ask in asks), return_exceptions=True
        )
        assert all(isinstance(outcome, LeasesNotConfirmed) for outcome in outcomes)
        jobs = [[job.id for job in outcome.jobs] for outcome in outcomes]  # type: ignore[union-attr]
        assert jobs == [["j0"], ["j1", "j2"], ["j3"], ["j4"]]  # each its own, in order
        for n, ids in enumerate(jobs):
            for job_id in ids:
                assert (await plain.get_job("durable", job_id)).worker == f"w{n}"
    finally:
        await durable.aclose()
        await plain.aclose()
        await client.aclose()


async def test_a_merged_run_holds_at_most_its_weight_and_a_heavy_call_runs_alone() -> None:
    runs: list[list[int]] = []

    async def run(_: str, items: list[int]) -> list[int]:
        runs.append(items)
        return [item * 10 for item in items]

    merger: Merger[int, int] = Merger(run, max_weight=10, weigh=lambda item: item)
    answers = await asyncio.gather(*(merger("q", item) for item in (4, 4, 4, 30, 1, 2)))
    assert answers == [40, 40, 40, 300, 10, 20]  # each caller its own answer
    assert runs == [[4, 4], [4], [30], [1, 2]]  # in order, none over 10 but a heavy one alone


async def test_a_failed_run_fails_each_of_its_callers_and_no_other() -> None:
    async def run(queue: str, items: list[int]) -> list[int | Exception]:
        if queue == "down":
            raise ConnectionError("Redis went away")
        return [ValueError(item) if item < 0 else item for item in items]

    merger: Merger[int, int] = Merger(run, max_weight=8)
    outcomes = await asyncio.gather(
        merger("up", 1), merger("up", -1), merger("down", 2), merger("down", 3), return_exceptions=True
    )
    assert outcomes[0] == 1
    assert isinstance(outcomes[1], ValueError)
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes[2:])
