"""The SDK's Worker against a real service: concurrency, heartbeats, ack/fail with hints, a lost
lease cancels (async) or flags (sync) the handler and is never acked, stop() releases."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from echomq import AsyncClient, JobContext, JobError, Worker
from tests.clients.support import await_until

FAST = {"wait_ms": 200, "grace_s": 0}


async def completed(client: AsyncClient, queue: str, count: int) -> bool:
    return (await client.queue(queue)).counts.completed >= count


async def test_handlers_run_concurrently_and_results_are_acked(asdk: AsyncClient, queue: str) -> None:
    running = peak = 0

    async def handle(job: JobContext) -> dict[str, Any]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.2)
        running -= 1
        return {"double": job.payload * 2, "attempt": job.attempt, "fence": job.fence}

    await asdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(6)])
    worker = Worker(queue, handle, client=asdk, concurrency=3, **FAST)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: completed(asdk, queue, 6))
    worker.stop()
    stats = await asyncio.wait_for(task, 5)
    assert (stats.acked, stats.failed, stats.lost, stats.released) == (6, 0, 0, 0)
    assert peak == 3
    job = await asdk.get_job(queue, "j4")
    assert job.result["double"] == 8 and job.result["attempt"] == 1 and job.result["fence"] >= 1


async def test_exceptions_fail_with_their_text_and_retry_hints(asdk: AsyncClient, queue: str) -> None:
    class Throttled(Exception):
        retry_after_ms = 60_000

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    def handle(job: JobContext) -> None:  # sync: runs in a thread
        if job.payload == "fatal":
            raise JobError("bad input", retry=False)
        if job.payload == "later":
            raise Throttled("slow down")
        if job.payload == "unprintable":
            raise Unprintable()
        raise ValueError("plain failure")

    for name in ("fatal", "later", "plain", "unprintable"):
        await asdk.enqueue(queue, name, id=name)
    worker = Worker(queue, handle, client=asdk, concurrency=4, **FAST)
    task = asyncio.create_task(worker.arun())

    async def all_failed_once() -> bool:
        return worker.stats.failed >= 4

    await await_until(all_failed_once)
    worker.stop()
    await asyncio.wait_for(task, 5)
    fatal, later, plain = [await asdk.get_job(queue, name) for name in ("fatal", "later", "plain")]
    assert fatal.state == "failed" and fatal.error == "bad input"  # the handler's words alone
    assert later.state == "delayed" and later.error.startswith("Throttled: slow down")
    assert plain.state in ("delayed", "waiting") and plain.error.startswith("ValueError: plain failure")
    assert plain.attempt == 1 and "Traceback" in plain.error and len(plain.error.encode()) <= 8192
    unprintable = await asdk.get_job(queue, "unprintable")
    assert unprintable.state in ("delayed", "waiting") and unprintable.error.startswith("Unprintable: <str")


async def test_the_worker_logs_its_start_failures_and_stop(
    asdk: AsyncClient, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    def handle(job: JobContext) -> None:
        if job.payload == "typed":
            raise JobError("no recipient", retry=False)
        raise ValueError("bad value")

    await asdk.enqueue(queue, "typed", id="typed")
    await asdk.enqueue(queue, "other", id="other", max_attempts=1)
    worker = Worker(queue, handle, client=asdk, concurrency=2, worker_id="w-log", **FAST)
    with caplog.at_level(logging.INFO, logger="echomq"):
        task = asyncio.create_task(worker.arun())

        async def both_failed() -> bool:
            return worker.stats.failed >= 2

        await await_until(both_failed)
        worker.stop()
        await asyncio.wait_for(task, 5)
    lines = [(record.name, record.levelno, record.getMessage()) for record in caplog.records]
    logged = [message for name, level, message in lines if name == "echomq.worker" and level == logging.INFO]
    assert logged[0] == f"worker w-log: working on queue {queue} at {asdk.url} (concurrency 2)"
    assert "job typed: attempt 1 failed: no recipient (now failed)" in logged
    assert "job other: attempt 1 failed: ValueError: bad value (now failed)" in logged
    assert logged[-1].startswith("worker w-log: stopped (")
    for name, error in (("typed", "no recipient"), ("other", "ValueError: bad value")):
        assert (await asdk.get_job(queue, name)).error.split("\n")[0] == error


def test_the_package_logger_has_a_null_handler() -> None:
    """A library's convention: the application decides where the log goes; nothing by default."""
    package = logging.getLogger("echomq")
    assert any(isinstance(handler, logging.NullHandler) for handler in package.handlers)


async def test_heartbeats_keep_a_short_lease(asdk: AsyncClient, queue: str) -> None:
    async def handle(job: JobContext) -> str:
        await asyncio.sleep(2.5)  # 2.5 shortest leases; the sweep runs every 100 ms
        return "made it"

    await asdk.enqueue(queue, None, id="long")
    worker = Worker(queue, handle, client=asdk, lease_ms=1000, **FAST)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: completed(asdk, queue, 1))
    worker.stop()
    await asyncio.wait_for(task, 5)
    job = await asdk.get_job(queue, "long")
    assert (job.state, job.attempt, job.result) == ("completed", 1, "made it")
    assert worker.stats.lost == 0


async def test_lost_lease_cancels_an_async_handler_and_nothing_is_acked(
    asdk: AsyncClient, queue: str
) -> None:
    events: list[str] = []

    async def handle(job: JobContext) -> str:
        events.append("start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append(f"cancelled lease_lost={job.lease_lost}")
            raise
        return "must not be acked"

    await asdk.enqueue(queue, None, id="j")
    worker = Worker(queue, handle, client=asdk, worker_id="w-async", lease_ms=1500, **FAST)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: asdk.ledger(queue))
    assert await asdk.release_worker(queue, "w-async") == ["j"]  # an operator takes it away

    async def noticed() -> bool:
        return "cancelled lease_lost=True" in events

    await await_until(noticed, timeout=5)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert worker.stats.lost == 1 and worker.stats.acked == 0
    job = await asdk.get_job(queue, "j")
    assert job.state == "waiting" and job.result is None  # (leased again and released at stop)


async def test_lost_lease_flags_a_sync_handler_and_its_result_is_discarded(
    asdk: AsyncClient, queue: str
) -> None:
    seen: list[bool] = []
    done = threading.Event()

    def handle(job: JobContext) -> str:
        if job.attempt > 1 or seen:
            return "second delivery"
        while not job.cancelled:
            time.sleep(0.02)
        seen.append(job.lease_lost)
        done.set()
        return "after the loss"

    await asdk.enqueue(queue, None, id="j", max_attempts=1)
    worker = Worker(queue, handle, client=asdk, worker_id="w-sync", lease_ms=1500, **FAST)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: asdk.ledger(queue))
    await asdk.pause(queue)  # so that the job is not leased again before we look
    await asdk.release_worker(queue, "w-sync")
    await asyncio.get_running_loop().run_in_executor(None, done.wait, 5)
    await asyncio.sleep(0.2)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert seen == [True]
    assert worker.stats.lost == 1 and worker.stats.acked == 0
    job = await asdk.get_job(queue, "j")
    assert (job.state, job.result) == ("waiting", None)


async def test_stop_releases_running_jobs_without_spending_an_attempt(asdk: AsyncClient, queue: str) -> None:
    started = asyncio.Event()

    async def handle(job: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    await asdk.enqueue(queue, None, id="j", max_attempts=1)
    worker = Worker(queue, handle, client=asdk, **FAST)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(started.wait(), 5)
    begun = time.monotonic()
    worker.stop()
    stats = await asyncio.wait_for(task, 5)
    assert time.monotonic() - begun < 2
    assert stats.released == 1 and stats.acked == 0
    assert (await asdk.get_job(queue, "j")).state == "waiting"
    (again,) = await asdk.lease(queue, "w2")
    assert again.attempt == 1  # the release did not count as a delivery


async def test_grace_lets_running_jobs_finish(asdk: AsyncClient, queue: str) -> None:
    started = asyncio.Event()

    async def handle(job: JobContext) -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "finished"

    await asdk.enqueue(queue, None, id="j")
    worker = Worker(queue, handle, client=asdk, **FAST | {"grace_s": 5})
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(started.wait(), 5)
    worker.stop()
    stats = await asyncio.wait_for(task, 5)
    assert (stats.acked, stats.released) == (1, 0)
    assert (await asdk.get_job(queue, "j")).result == "finished"


async def test_progress_reported_reaches_the_job_view(asdk: AsyncClient, queue: str) -> None:
    release = asyncio.Event()

    async def handle(job: JobContext) -> str:
        job.report_progress({"done": 1})
        job.report_progress({"done": 2, "of": 3})  # the latest by the next heartbeat wins
        await release.wait()
        return "ok"

    await asdk.enqueue(queue, None, id="p")
    worker = Worker(queue, handle, client=asdk, heartbeat_s=0.1, **FAST)
    task = asyncio.create_task(worker.arun())

    async def reported() -> bool:
        return (await asdk.get_job(queue, "p")).progress == {"done": 2, "of": 3}

    await await_until(reported, timeout=5)
    release.set()
    await await_until(lambda: completed(asdk, queue, 1))
    worker.stop()
    await asyncio.wait_for(task, 5)
    feed = asdk.events(queue, after=0, types=["progress"])
    assert (await feed.__anext__()).progress == {"done": 2, "of": 3}  # sent once
    await feed.aclose()


async def test_a_cancel_stops_an_async_handler_and_the_job_ends_cancelled(
    asdk: AsyncClient, queue: str
) -> None:
    events: list[str] = []
    outcomes: list[tuple[str, str]] = []

    async def handle(job: JobContext) -> str:
        events.append("start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append(f"cancelled cancel_requested={job.cancel_requested}")
            raise
        return "must not be acked"

    await asdk.enqueue(queue, None, id="c", max_attempts=3)
    worker = Worker(
        queue,
        handle,
        client=asdk,
        heartbeat_s=0.1,
        on_outcome=lambda j, o, d: outcomes.append((o, d)),
        **FAST,
    )
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: asdk.ledger(queue))
    assert (await asdk.cancel(queue, "c")).cancel_requested
    job = await asdk.wait(queue, "c", timeout_s=5)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert (job.state, job.attempt) == ("cancelled", 1)
    assert events == ["start", "cancelled cancel_requested=True"]
    assert outcomes == [("failed", "cancelled")] and worker.stats.acked == 0


async def test_a_cancel_flags_a_sync_handler_whose_return_fails_the_job(
    asdk: AsyncClient, queue: str
) -> None:
    def handle(job: JobContext) -> str:
        job.wait_cancelled(30)
        return "returned after the cancel"

    await asdk.enqueue(queue, None, id="s")
    worker = Worker(queue, handle, client=asdk, heartbeat_s=0.1, **FAST)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: asdk.ledger(queue))
    await asdk.cancel(queue, "s")
    job = await asdk.wait(queue, "s", timeout_s=5)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert (job.state, job.result) == ("cancelled", None) and "cancel" in (job.error or "")
    assert (worker.stats.failed, worker.stats.acked) == (1, 0)


async def test_a_handler_done_before_the_cancel_is_noticed_is_acked(asdk: AsyncClient, queue: str) -> None:
    cancelled = asyncio.Event()

    async def handle(job: JobContext) -> str:
        await cancelled.wait()  # the cancel is requested while it runs; no heartbeat comes before the end
        return "finished"

    await asdk.enqueue(queue, None, id="d")
    worker = Worker(queue, handle, client=asdk, heartbeat_s=10, **FAST)
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: asdk.ledger(queue))
    await asdk.cancel(queue, "d")
    cancelled.set()
    job = await asdk.wait(queue, "d", timeout_s=5)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert (job.state, job.result) == ("completed", "finished")


async def test_a_rate_limited_worker_waits_retry_after_ms_instead_of_asking_again(
    asdk: AsyncClient, queue: str
) -> None:
    await asdk.put_settings(queue, rate_limit=(2, 1500))
    await asdk.enqueue_many(queue, [{"payload": n} for n in range(4)])

    async def handle(job: JobContext) -> None:
        return None

    # No long poll (wait_ms 0): without the hint, an empty lease would be asked again at once.
    worker = Worker(queue, handle, client=asdk, concurrency=4, wait_ms=0, grace_s=0)
    sent = 0
    send_lease = worker._send_lease

    def counted(*args: Any) -> Any:
        nonlocal sent
        sent += 1
        return send_lease(*args)

    worker._send_lease = counted  # type: ignore[method-assign]
    started = time.monotonic()
    task = asyncio.create_task(worker.arun())
    await await_until(lambda: completed(asdk, queue, 4))
    took_s = time.monotonic() - started
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert took_s >= 1.4  # two windows: the rate held
    assert sent <= 12, f"{sent} lease requests in {took_s:.1f} s"


# --- sessions ------------------------------------------------------------------------------------


async def listed(client: AsyncClient, queue: str) -> dict[str, Any]:
    return {holding.worker: holding for holding in await client.workers(queue)}


async def test_a_worker_opens_a_session_with_info_and_ends_it_on_stop(asdk: AsyncClient, queue: str) -> None:
    started = asyncio.Event()

    async def handle(job: JobContext) -> None:
        started.set()
        await asyncio.sleep(0.3)

    await asdk.enqueue(queue, 1, id="a")
    worker = Worker(queue, handle, client=asdk, session_ttl_ms=3000, session_info={"role": "test"}, **FAST)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(started.wait(), 5)
    session = (await listed(asdk, queue))[worker.worker_id].session
    assert session is not None and session.state == "running" and worker.session_state == "running"
    assert session.info["role"] == "test" and session.info["pid"] > 0 and "echomq" in session.info["sdk"]
    await await_until(lambda: completed(asdk, queue, 1))
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert await asdk.workers(queue) == []  # the session ended with the worker


async def test_a_worker_renews_its_session_on_the_heartbeat_timer(asdk: AsyncClient, queue: str) -> None:
    release = asyncio.Event()

    async def handle(job: JobContext) -> None:
        await release.wait()

    await asdk.enqueue(queue, 1, id="a")
    worker = Worker(queue, handle, client=asdk, session_ttl_ms=1000, lease_ms=60_000, **FAST)
    task = asyncio.create_task(worker.arun())
    await asyncio.sleep(2.5)  # past ttl + sweep interval + 1 s: a session not renewed would have lapsed
    view = await asdk.get_job(queue, "a")
    assert view.state == "active" and view.stalls == 0
    release.set()
    await await_until(lambda: completed(asdk, queue, 1))
    worker.stop()
    await asyncio.wait_for(task, 5)


async def test_without_sessions_the_worker_opens_none(asdk: AsyncClient, queue: str) -> None:
    started = asyncio.Event()

    async def handle(job: JobContext) -> None:
        started.set()
        await asyncio.sleep(0.3)

    await asdk.enqueue(queue, 1, id="a")
    worker = Worker(queue, handle, client=asdk, session=False, **FAST)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(started.wait(), 5)
    assert (await listed(asdk, queue))[worker.worker_id].session is None
    worker.stop()
    await asyncio.wait_for(task, 5)


async def test_a_quieted_worker_finishes_its_job_and_leases_no_more(asdk: AsyncClient, queue: str) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def handle(job: JobContext) -> str:
        started.set()
        await release.wait()
        return job.id

    await asdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(3)])
    worker = Worker(queue, handle, client=asdk, session_ttl_ms=1500, **FAST)
    task = asyncio.create_task(worker.arun())
    await asyncio.wait_for(started.wait(), 5)
    assert (await asdk.quiet(queue, worker.worker_id)).state == "quiet"

    async def told() -> bool:
        return worker.session_state == "quiet"

    await await_until(told)
    release.set()
    await await_until(lambda: completed(asdk, queue, 1))
    await asyncio.sleep(0.5)  # a worker that still leased would have taken the next job by now
    counts = (await asdk.queue(queue)).counts
    assert (counts.completed, counts.waiting, counts.active) == (1, 2, 0)
    worker.stop()
    stats = await asyncio.wait_for(task, 5)
    assert stats.acked == 1
    assert await asdk.workers(queue) == []
