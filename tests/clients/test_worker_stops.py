"""The Worker stopped at every point of a job's life, against a real service: every job ends
exactly once. A job whose handler returned is completed once (never released, never left
active); a job that never ran, or whose handler did not finish within the grace, is back in
waiting with its attempt unspent; nothing is left in the ledger.

The points are reached with deterministic hooks, not sleeps: handlers wait on events, and
``HookedClient`` (the real client) can hold its next call of a kind before it is sent or after
the service answered, until the test lets it go: a request in flight, seen from the worker.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from echomq import AsyncClient, JobContext, Worker
from tests.clients.support import await_until, subprocess_env
from tests.faultproxy import FaultProxy

DEADLINE_S = 30.0  # generous: a stopped worker must be done long before this
LONG_WAIT_MS = 20_000  # the longest long poll: an in-flight lease does not end by itself


class Hold:
    """One call held: ``reached`` once it is there, it goes on after ``go()``."""

    def __init__(self, when: str) -> None:
        self.when = when  # "before" it is sent, or "after" its answer came
        self.reached = asyncio.Event()
        self._gate = asyncio.Event()

    def go(self) -> None:
        self._gate.set()

    async def pass_(self) -> None:
        self.reached.set()
        await self._gate.wait()


class HookedClient(AsyncClient):
    """The real client; ``hold(name, when, nth)`` holds a call of that method: the next one, or
    the nth since the client was made."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._holds: dict[tuple[str, int], Hold] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.sent: dict[str, list[tuple[Any, ...]]] = collections.defaultdict(list)  # arguments

    def hold(self, name: str, when: str, nth: int | None = None) -> Hold:
        hold = self._holds[name, nth or self.calls[name] + 1] = Hold(when)
        return hold

    async def _through(self, name: str, *args: Any, method: str | None = None, **kwargs: Any) -> Any:
        self.calls[name] += 1
        self.sent[name].append((*args, kwargs))
        hold = self._holds.pop((name, self.calls[name]), None)
        if hold is not None and hold.when == "before":
            await hold.pass_()
        answer = await getattr(AsyncClient, method or name)(self, *args, **kwargs)
        if hold is not None and hold.when == "after":
            await hold.pass_()
        return answer

    async def lease(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._through("lease", *args, **kwargs)

    async def lease_answer(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._through("lease", *args, method="lease_answer", **kwargs)  # the Worker's lease

    async def ack_many(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._through("ack_many", *args, **kwargs)

    async def heartbeat_many(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._through("heartbeat_many", *args, **kwargs)

    async def fail(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._through("fail", *args, **kwargs)


class Runs:
    """What handlers did: how often each job ran, and events tests wait on."""

    def __init__(self) -> None:
        self.count: collections.Counter[str] = collections.Counter()
        self.started: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    def start(self, job: JobContext) -> None:
        self.count[job.id] += 1
        self.started[job.id].set()

    async def all_started(self, *ids: str) -> None:
        await asyncio.wait_for(asyncio.gather(*(self.started[i].wait() for i in ids)), DEADLINE_S)


@pytest.fixture
async def hooked(service_url: str) -> Any:
    async with HookedClient(service_url) as client:
        yield client


async def enqueue(client: AsyncClient, queue: str, *ids: str) -> None:
    # One attempt: a job whose handler raised is failed for good, so it cannot come back unseen.
    await client.enqueue_many(queue, [{"payload": job_id, "id": job_id, "max_attempts": 1} for job_id in ids])


async def stopped(worker: Worker, task: asyncio.Task[Any]) -> None:
    worker.stop()
    await asyncio.wait_for(task, DEADLINE_S)


async def assert_ended_once(
    client: AsyncClient,
    queue: str,
    runs: Runs,
    *,
    completed: set[str],
    back: set[str],
    ran: set[str] | None = None,
    failed: frozenset[str] = frozenset(),
) -> None:
    """completed: done once, by one run of the handler, the result that run returned; failed:
    failed once, by one run that raised (its error recorded); back: waiting again with the
    attempt unspent (ran: of those, the ones whose handler had started and did not finish within
    the grace); nothing in the ledger."""
    for job_id in completed:
        job = await client.get_job(queue, job_id)
        assert (job.state, job.result, runs.count[job_id]) == ("completed", f"done {job_id}", 1), job_id
    for job_id in failed:
        job = await client.get_job(queue, job_id)
        assert (job.state, runs.count[job_id]) == ("failed", 1), job_id
        assert job.error is not None and f"broken {job_id}" in job.error, job_id
    for job_id in back:
        job = await client.get_job(queue, job_id)
        assert (job.state, job.result) == ("waiting", None), job_id
        assert runs.count[job_id] == (1 if job_id in (ran or set()) else 0), job_id
    assert await client.ledger(queue) == []
    counts = (await client.queue(queue)).counts
    assert (counts.active, counts.completed, counts.waiting, counts.failed) == (
        0,
        len(completed),
        len(back),
        len(failed),
    )
    again: list[Any] = []  # the release did not count as a delivery: the next lease is attempt 1
    while len(again) < len(back):
        again += await client.lease(queue, "checker", max_jobs=100)
    assert {(job.id, job.attempt) for job in again} == {(job_id, 1) for job_id in back}


def test_a_worker_whose_loop_shuts_down_settles_and_ends(service_url: str, queue: str) -> None:
    """asyncio.run cancels every task left when its main coroutine returns, the worker's own
    wind-down task among them: the worker still gives its jobs back and ends (it used to wait
    for that task for ever, and so did the loop)."""
    started = threading.Event()

    async def handle(job: JobContext) -> None:
        started.set()
        await asyncio.Event().wait()  # never returns by itself

    async def main() -> None:
        async with AsyncClient(service_url) as client:
            await client.enqueue(queue, "held", id="held")
        worker = Worker(queue, handle, url=service_url, lease_ms=60_000)
        running = asyncio.ensure_future(worker.arun())
        await asyncio.get_running_loop().run_in_executor(None, started.wait, DEADLINE_S)
        assert not running.done()
        # main returns with the worker running: asyncio.run cancels it, and waits for it

    runner = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    runner.start()
    runner.join(DEADLINE_S)
    assert not runner.is_alive(), "the loop never finished shutting down"

    async def check() -> None:
        async with AsyncClient(service_url) as client:
            job = await client.get_job(queue, "held")
            assert job.state == "waiting" and job.attempt == 1  # given back, not left to expire

    asyncio.run(check())


# --- how the worker batches its requests -----------------------------------------------------------


async def test_one_lease_for_the_free_slots_one_heartbeat_for_all_acks_with_lease_next(
    asdk: AsyncClient, hooked: HookedClient, queue: str
) -> None:
    ids = [f"j{n}" for n in range(8)]
    runs = Runs()
    finish = asyncio.Event()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        await finish.wait()
        return f"done {job.id}"

    await enqueue(asdk, queue, *ids)
    beat = hooked.hold("heartbeat_many", "before")
    worker = Worker(queue, handle, client=hooked, concurrency=5, heartbeat_s=0.2, wait_ms=200)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(beat.reached.wait(), DEADLINE_S)
    ((*_, lease),) = hooked.sent["lease"]
    assert lease["max_jobs"] == 5 and lease["request_id"]  # every free slot; safe to repeat
    (*_, renewals, _) = hooked.sent["heartbeat_many"][0]
    assert sorted(item.id for item in renewals) == ids[:5]  # every lease held, in one call
    beat.go()
    finish.set()
    await await_until(lambda: completed(asdk, queue, len(ids)))
    await stopped(worker, task)
    # The five finished together: a share of the slots (3 of 5) per request, two requests in
    # flight at once, whose lease_next ask for the five freed slots between them.
    first, second = hooked.sent["ack_many"][:2]
    assert [len(first[1]), len(second[1])] == [3, 2]
    nexts = [first[2]["lease_next"], second[2]["lease_next"]]
    assert sum(next_lease.max_jobs for next_lease in nexts) == 5
    assert len({lease["request_id"], *(next_lease.request_id for next_lease in nexts)}) == 3
    assert hooked.calls["ack_many"] <= 4
    await assert_ended_once(asdk, queue, runs, completed=set(ids), back=set())


# --- before the lease answer ---------------------------------------------------------------------


async def test_stop_while_the_lease_waits_releases_what_it_then_brings(
    asdk: AsyncClient, hooked: HookedClient, queue: str
) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return f"done {job.id}"

    sent = hooked.hold("lease", "before")
    worker = Worker(queue, handle, client=hooked, wait_ms=LONG_WAIT_MS, grace_s=30)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(sent.reached.wait(), DEADLINE_S)
    worker.stop()  # the lease is on its way and will wait for a job
    sent.go()
    await enqueue(asdk, queue, "late")  # the waiting lease takes it
    await asyncio.wait_for(task, DEADLINE_S)
    assert (worker.stats.released, worker.stats.acked) == (1, 0)
    await assert_ended_once(asdk, queue, runs, completed=set(), back={"late"})


async def test_jobs_leased_but_not_started_at_stop_are_released_never_run(
    asdk: AsyncClient, hooked: HookedClient, queue: str
) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return f"done {job.id}"

    await enqueue(asdk, queue, "a", "b", "c")
    answered = hooked.hold("lease", "after")  # leased by the service, not yet seen by the worker
    worker = Worker(queue, handle, client=hooked, concurrency=5, grace_s=30)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(answered.reached.wait(), DEADLINE_S)
    assert len(await asdk.ledger(queue)) == 3
    worker.stop()
    answered.go()
    await asyncio.wait_for(task, DEADLINE_S)
    assert (worker.stats.released, worker.stats.acked) == (3, 0)
    await assert_ended_once(asdk, queue, runs, completed=set(), back={"a", "b", "c"})


# --- while handlers run --------------------------------------------------------------------------


async def test_running_handlers_finish_within_the_grace_and_are_acked(asdk: AsyncClient, queue: str) -> None:
    runs = Runs()
    finish = asyncio.Event()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        await finish.wait()
        return f"done {job.id}"

    await enqueue(asdk, queue, "a", "b")
    worker = Worker(queue, handle, client=asdk, concurrency=2)  # the default grace: 30 s
    task = asyncio.create_task(worker.arun())
    await runs.all_started("a", "b")
    worker.stop()
    finish.set()
    await asyncio.wait_for(task, DEADLINE_S)
    assert (worker.stats.acked, worker.stats.released) == (2, 0)
    await assert_ended_once(asdk, queue, runs, completed={"a", "b"}, back=set())


async def test_handlers_past_the_grace_are_cancelled_and_released_the_others_acked(
    asdk: AsyncClient, queue: str
) -> None:
    runs = Runs()
    cancelled: list[str] = []

    async def handle(job: JobContext) -> str:
        runs.start(job)
        if job.id.startswith("stuck"):
            try:
                await asyncio.Event().wait()  # never ends by itself
            except asyncio.CancelledError:
                cancelled.append(job.id)
                raise
        return f"done {job.id}"

    await enqueue(asdk, queue, "stuck", "quick")
    worker = Worker(queue, handle, client=asdk, concurrency=2, grace_s=1)
    task = asyncio.create_task(worker.arun())
    await runs.all_started("stuck", "quick")
    await stopped(worker, task)
    assert cancelled == ["stuck"]
    assert (worker.stats.acked, worker.stats.released) == (1, 1)
    await assert_ended_once(asdk, queue, runs, completed={"quick"}, back={"stuck"}, ran={"stuck"})


async def test_a_sync_handler_past_the_grace_is_flagged_and_its_late_result_discarded(
    asdk: AsyncClient, queue: str
) -> None:
    runs = Runs()
    loop = asyncio.get_running_loop()
    flagged = threading.Event()

    def handle(job: JobContext) -> str:
        loop.call_soon_threadsafe(runs.start, job)
        job.wait_cancelled()  # until the grace is over
        flagged.set()
        return f"done {job.id}"  # too late: the job was released

    await enqueue(asdk, queue, "slow")
    worker = Worker(queue, handle, client=asdk, grace_s=1)
    task = asyncio.create_task(worker.arun())
    await runs.all_started("slow")
    await stopped(worker, task)
    assert flagged.wait(DEADLINE_S)
    assert (worker.stats.acked, worker.stats.released) == (0, 1)
    await assert_ended_once(asdk, queue, runs, completed=set(), back={"slow"}, ran={"slow"})


async def test_a_second_stop_skips_the_grace(asdk: AsyncClient, queue: str) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        await asyncio.Event().wait()
        return "never"

    await enqueue(asdk, queue, "a")
    worker = Worker(queue, handle, client=asdk, grace_s=3600)
    task = asyncio.create_task(worker.arun())
    await runs.all_started("a")
    worker.stop()
    await stopped(worker, task)  # the second stop: well before the hour
    await assert_ended_once(asdk, queue, runs, completed=set(), back={"a"}, ran={"a"})


# --- as handlers return ----------------------------------------------------------------------------


def outcome(job: JobContext) -> str:
    """A handler's end: "bad…" jobs raise (failed), the others return (acked)."""
    if job.id.startswith("bad"):
        raise RuntimeError(f"broken {job.id}")
    return f"done {job.id}"


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_stop_as_the_handlers_return_or_raise_acks_or_fails_every_one(
    asdk: AsyncClient, service_url: str, queue: str, kind: str
) -> None:
    """The issue's case: stop() called as the last handlers return (or raise). Once all have
    started, one of them calls it just before they all end."""
    good, bad = [f"j{n}" for n in range(6)], [f"bad{n}" for n in range(4)]
    ids = good + bad
    runs = Runs()
    all_in = threading.Barrier(len(ids))
    loop = asyncio.get_running_loop()

    def handle_sync(job: JobContext) -> str:
        loop.call_soon_threadsafe(runs.start, job)
        if all_in.wait(DEADLINE_S) == 0:
            worker.stop()
        return outcome(job)

    async def handle_async(job: JobContext) -> str:
        runs.start(job)
        await runs.all_started(*ids)
        if job.id == "j0":
            worker.stop()
        return outcome(job)

    await enqueue(asdk, queue, *ids)
    handler = handle_async if kind == "async" else handle_sync
    # A client of its own, closed when the worker returns: nothing may still be on its way.
    worker = Worker(queue, handler, url=service_url, concurrency=len(ids), grace_s=30)
    await asyncio.wait_for(worker.arun(), DEADLINE_S)
    stats = worker.stats
    assert (stats.acked, stats.failed, stats.released, stats.lost) == (len(good), len(bad), 0, 0)
    await assert_ended_once(asdk, queue, runs, completed=set(good), back=set(), failed=frozenset(bad))


@pytest.mark.parametrize("stop_at", [150, 300], ids=["mid-stream", "as-the-last-return"])
async def test_stop_in_a_stream_of_jobs(
    service_url: str, asdk: AsyncClient, queue: str, stop_at: int
) -> None:
    """Stopped at full speed (handlers returning, acks gathered and on their way, leases
    bringing more), or as the last jobs of the queue return (a lease waits on the empty queue).
    Every job ends once: done (or failed: one in ten raises) by one run, or back untouched."""
    ids = [f"bad{n:03}" if n % 10 == 3 else f"j{n:03}" for n in range(300)]
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        if sum(runs.count.values()) == stop_at:
            worker.stop()
        return outcome(job)

    await enqueue(asdk, queue, *ids)
    worker = Worker(queue, handle, url=service_url, concurrency=20)
    await asyncio.wait_for(worker.arun(), DEADLINE_S)
    ran = {job_id for job_id in ids if runs.count[job_id]}
    bad = {job_id for job_id in ran if job_id.startswith("bad")}
    assert len(ran) >= stop_at and worker.stats.lost == 0
    assert (worker.stats.acked, worker.stats.failed) == (len(ran - bad), len(bad))
    await assert_ended_once(
        asdk, queue, runs, completed=ran - bad, back=set(ids) - ran, failed=frozenset(bad)
    )


async def test_an_ack_gathered_but_not_sent_is_sent_before_stop_returns(
    asdk: AsyncClient, hooked: HookedClient, queue: str
) -> None:
    runs = Runs()
    finish = asyncio.Event()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        if job.id == "later":
            await finish.wait()
        return f"done {job.id}"

    await enqueue(asdk, queue, "first", "later")
    # Acks wait an hour for company while a handler runs (and a share of the slots, 2 of 4, is
    # not done yet): "first"'s stays gathered.
    worker = Worker(queue, handle, client=hooked, concurrency=4, ack_batch_s=3600)
    task = asyncio.create_task(worker.arun())
    await runs.all_started("first", "later")

    async def gathered() -> bool:  # "first" returned and its ack waits in the worker
        return bool(worker._outbox)

    await await_until(gathered)
    assert hooked.calls["ack_many"] == 0
    worker.stop()
    finish.set()
    await asyncio.wait_for(task, DEADLINE_S)
    assert (worker.stats.acked, worker.stats.released) == (2, 0)
    await assert_ended_once(asdk, queue, runs, completed={"first", "later"}, back=set())


# --- while the ack is in flight, and after ------------------------------------------------------


async def test_stop_while_an_ack_is_on_its_way(asdk: AsyncClient, hooked: HookedClient, queue: str) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return f"done {job.id}"

    await enqueue(asdk, queue, "a")
    sending = hooked.hold("ack_many", "before")
    worker = Worker(queue, handle, client=hooked, grace_s=30)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(sending.reached.wait(), DEADLINE_S)
    worker.stop()
    sending.go()
    await asyncio.wait_for(task, DEADLINE_S)
    await assert_ended_once(asdk, queue, runs, completed={"a"}, back=set())


async def test_stop_while_an_ack_answer_is_on_its_way_releases_what_its_lease_next_took(
    asdk: AsyncClient, hooked: HookedClient, queue: str
) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return f"done {job.id}"

    await enqueue(asdk, queue, "a", "b", "c")
    # One slot: "a" runs; its ack's lease_next takes "b" for the slot it frees.
    answered = hooked.hold("ack_many", "after")
    worker = Worker(queue, handle, client=hooked, concurrency=1, grace_s=30)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(answered.reached.wait(), DEADLINE_S)
    assert [entry.id for entry in await asdk.ledger(queue)] == ["b"]
    worker.stop()
    answered.go()
    await asyncio.wait_for(task, DEADLINE_S)
    assert (worker.stats.acked, worker.stats.released) == (1, 1)
    await assert_ended_once(asdk, queue, runs, completed={"a"}, back={"b", "c"})


@pytest.mark.parametrize("when", ["before", "after"], ids=["fail-on-its-way", "fail-answer-on-its-way"])
async def test_stop_while_a_fail_is_in_flight_fails_the_job_once(
    asdk: AsyncClient, hooked: HookedClient, queue: str, when: str
) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return outcome(job)

    await enqueue(asdk, queue, "bad", "j1")
    failing = hooked.hold("fail", when)
    worker = Worker(queue, handle, client=hooked, concurrency=2, grace_s=30)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(failing.reached.wait(), DEADLINE_S)
    worker.stop()
    failing.go()
    await asyncio.wait_for(task, DEADLINE_S)
    assert (worker.stats.failed, worker.stats.acked, worker.stats.released) == (1, 1, 0)
    await assert_ended_once(asdk, queue, runs, completed={"j1"}, back=set(), failed=frozenset({"bad"}))


async def test_stop_after_the_ack(asdk: AsyncClient, hooked: HookedClient, queue: str) -> None:
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return f"done {job.id}"

    await enqueue(asdk, queue, "a")
    # The first lease takes "a"; its ack's lease_next finds nothing; the second lease waits.
    idle = hooked.hold("lease", "before", nth=2)
    worker = Worker(queue, handle, client=hooked, wait_ms=1000)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(idle.reached.wait(), DEADLINE_S)
    assert await completed(asdk, queue, 1)
    worker.stop()
    idle.go()
    await asyncio.wait_for(task, DEADLINE_S)  # once the long poll answered (nothing)
    assert (worker.stats.acked, worker.stats.released) == (1, 0)
    await assert_ended_once(asdk, queue, runs, completed={"a"}, back=set())


async def completed(client: AsyncClient, queue: str, count: int) -> bool:
    return (await client.queue(queue)).counts.completed >= count


# --- SIGTERM under run() -------------------------------------------------------------------------

WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    from pathlib import Path
    from echomq import Worker

    go_on = Path(sys.argv[2])

    async def handle(job):
        print(f"started {job.id}", flush=True)
        while not go_on.exists():  # the test lets it finish after sending SIGTERM
            await asyncio.sleep(0.02)
        return f"done {job.id}"

    stats = Worker(sys.argv[1], handle, concurrency=2, wait_ms=500).run()
    print(f"stopped {stats.acked} acked {stats.released} released", flush=True)
    """
)


def test_sigterm_under_run_finishes_running_jobs_then_exits(
    service_url: str, sdk: Any, queue: str, tmp_path: Path
) -> None:
    sdk.enqueue_many(queue, [{"payload": n, "id": f"s{n}"} for n in range(2)])
    script, go_on = tmp_path / "worker.py", tmp_path / "go-on"
    script.write_text(WORKER_SCRIPT)
    worker = subprocess.Popen(
        [sys.executable, str(script), queue, str(go_on)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(EMQ_URL=service_url),
    )
    try:
        started = {worker.stdout.readline().strip() for _ in range(2)}  # type: ignore[union-attr]
        assert started == {"started s0", "started s1"}
        worker.send_signal(signal.SIGTERM)
        sdk.enqueue(queue, "after the signal", id="after")  # not taken any more
        go_on.touch()
        out, err = worker.communicate(timeout=DEADLINE_S)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    assert out.splitlines()[-1] == "stopped 2 acked 0 released"
    assert [sdk.get_job(queue, f"s{n}").result for n in range(2)] == ["done s0", "done s1"]
    after = sdk.get_job(queue, "after")
    assert (after.state, after.result) == ("waiting", None)
    assert sdk.ledger(queue) == [] and sdk.queue(queue).counts.active == 0


# --- answers lost on the way -------------------------------------------------------------------


@pytest.mark.parametrize("lost", [b"/lease", b"/ack"], ids=["lease", "ack-many"])
async def test_a_lost_answer_is_asked_for_again_and_nothing_happens_twice(
    service_proxy: FaultProxy, asdk: AsyncClient, queue: str, lost: bytes
) -> None:
    """The service did the call and its answer was lost: the repeat (the same request_id, the
    same lease ids) answers what the first did, so no job is leased twice or left held."""
    ids = [f"j{n:02}" for n in range(30)]
    runs = Runs()

    async def handle(job: JobContext) -> str:
        runs.start(job)
        return f"done {job.id}"

    await enqueue(asdk, queue, *ids)
    service_proxy.lose_reply_to(lost)
    worker = Worker(queue, handle, url=f"http://{service_proxy.host_port}", concurrency=5, wait_ms=200)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: completed(asdk, queue, len(ids)))
    await stopped(worker, task)
    assert service_proxy.dropped == 1
    assert (worker.stats.acked, worker.stats.lost, worker.stats.errors) == (len(ids), 0, [])
    await assert_ended_once(asdk, queue, runs, completed=set(ids), back=set())
