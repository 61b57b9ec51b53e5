"""The Python SDK (clients/python) against a real service: every endpoint, typed answers, one
exception class per problem code, retries only where repeating is safe."""

from __future__ import annotations

import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from echomq import (
    AckedMany,
    AckItem,
    AsyncClient,
    BackendUnavailable,
    Backoff,
    Client,
    ConnectionFailed,
    Counts,
    Enqueued,
    Forbidden,
    HeartbeatItem,
    HeartbeatOutcome,
    InvalidRequest,
    Job,
    JobActive,
    JobNotFound,
    LeasedJob,
    LeaseLost,
    LeaseNext,
    NewJob,
    NotDelayed,
    NotFound,
    Promoted,
    RetryPolicy,
    Unauthorized,
)
from echomq_http.config import Settings
from tests.clients.support import ROOT
from tests.support.ports import free_port
from tests.support.servers import RedisServer
from tests.support.service import running_service

SDK = ROOT / "clients" / "python"
FAST_RETRIES = RetryPolicy(retries=2, base_delay_s=0.01, max_delay_s=0.05)


def test_sync_client_runs_a_job_through(sdk: Client, queue: str) -> None:
    created = sdk.enqueue(queue, {"to": "ada"}, id="j1", name="mail", priority=5, max_attempts=4)
    assert created == Enqueued(id="j1", queue=queue, state="waiting", created=True)
    again = sdk.enqueue(queue, "ignored", id="j1")
    assert (again.created, again.state) == (False, "waiting")

    (job,) = sdk.lease(queue, "w1", lease_ms=5000, wait_ms=1000)
    assert isinstance(job, LeasedJob)
    assert (job.id, job.name, job.payload, job.attempt, job.max_attempts) == (
        "j1",
        "mail",
        {"to": "ada"},
        1,
        4,
    )
    assert job.fence >= 1 and len(job.lease_id) >= 32

    beat = sdk.heartbeat(queue, job.id, job.lease_id, lease_ms=10_000)
    assert beat.lease_expires_at > job.lease_expires_at
    assert sdk.ack(queue, job.id, job.lease_id, {"sent": True}).state == "completed"
    assert sdk.ack(queue, job.id, job.lease_id, {"sent": True}).state == "completed"  # repeatable

    stored = sdk.get_job(queue, "j1")
    assert isinstance(stored, Job)
    assert (stored.state, stored.result, stored.worker, stored.priority) == (
        "completed",
        {"sent": True},
        None,
        5,
    )
    assert sdk.queue(queue).counts == Counts(waiting=0, delayed=0, active=0, completed=1, failed=0)


async def test_async_client_covers_the_api(asdk: AsyncClient, queue: str) -> None:
    made = await asdk.enqueue_many(
        queue,
        [
            NewJob(payload=1, id="a"),
            {"payload": 2, "id": "b", "backoff": {"type": "fixed", "delay_ms": 0}},
            NewJob(payload=3, id="c", backoff=Backoff(type="fixed", delay_ms=60_000)),
            NewJob(payload=4, id="d"),
        ],
    )
    assert [job.id for job in made] == ["a", "b", "c", "d"] and all(job.created for job in made)

    jobs = {job.id: job for job in await asdk.lease(queue, "w1", max_jobs=4)}
    assert set(jobs) == {"a", "b", "c", "d"}
    ledger = await asdk.ledger(queue)
    assert {entry.id for entry in ledger} == set(jobs) and {entry.worker for entry in ledger} == {"w1"}
    assert [entry.id for entry in await asdk.ledger(queue, worker="w1", limit=1)] == [ledger[0].id]
    assert [(w.worker, sorted(w.jobs)) for w in await asdk.workers(queue)] == [("w1", ["a", "b", "c", "d"])]

    outcomes = await asdk.ack_many(
        queue, [AckItem(id="a", lease_id=jobs["a"].lease_id, result="A"), {"id": "b", "lease_id": "stale"}]
    )
    assert [(o.id, o.ok, o.state, o.code) for o in outcomes] == [
        ("a", True, "completed", None),
        ("b", False, None, "lease_lost"),
    ]
    assert (await asdk.fail(queue, "b", jobs["b"].lease_id, "boom")).state == "waiting"  # fixed 0 ms
    assert (await asdk.fail(queue, "c", jobs["c"].lease_id, "later")).state == "delayed"
    dead = await asdk.fail(queue, "d", jobs["d"].lease_id, "fatal", retry=False)
    assert (dead.state, dead.attempt) == ("failed", 1)

    page = await asdk.failed(queue, limit=10)
    assert page.total == 1 and page.jobs[0].id == "d" and page.jobs[0].error == "fatal"
    listed = await asdk.list_jobs(queue, "failed", limit=1)
    assert [job.id for job in listed.jobs] == ["d"] and listed.next_cursor is None
    first = await asdk.list_jobs(queue, "completed", limit=1, cursor=None)
    assert [job.id for job in first.jobs] == ["a"] and first.next_cursor is None
    assert await asdk.retry_failed(queue, ["d", "nope"]) == ["d"]
    assert (await asdk.get_job(queue, "d")).state == "waiting"

    await asdk.pause(queue)
    assert await asdk.lease(queue, "w2") == []
    assert (await asdk.resume(queue)).paused is False
    held = await asdk.lease(queue, "w2", max_jobs=2)
    assert {job.id for job in held} == {"b", "d"}
    released = await asdk.release(queue, held[0].id, held[0].lease_id)
    assert released.state == "waiting"
    assert await asdk.release_worker(queue, "w2") == [held[1].id]

    (again,) = await asdk.lease(queue, "w3")
    with pytest.raises(JobActive):
        await asdk.delete_job(queue, again.id)
    await asdk.release(queue, again.id, again.lease_id)
    await asdk.delete_job(queue, again.id)
    with pytest.raises(JobNotFound):
        await asdk.get_job(queue, again.id)
    assert queue in {view.name for view in await asdk.queues()}
    assert await asdk.healthz() and await asdk.readyz()
    assert "emq_" in await asdk.metrics()
    assert (await asdk.openapi())["openapi"].startswith("3.1")


def test_a_delayed_job_shows_when_it_runs_and_is_promoted(sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="later", delay_ms=3_600_000)
    job = sdk.get_job(queue, "later")
    assert (job.state, job.delay_reason) == ("delayed", "delay")
    assert job.run_at == job.created_at + 3_600_000
    [listed] = sdk.list_jobs(queue, "delayed").jobs
    assert (listed.run_at, listed.delay_reason) == (job.run_at, "delay")
    assert sdk.promote(queue, "later") == Promoted(id="later", state="waiting")
    job = sdk.get_job(queue, "later")
    assert (job.state, job.run_at, job.delay_reason) == ("waiting", None, None)
    with pytest.raises(NotDelayed) as not_delayed:
        sdk.promote(queue, "later")
    assert (not_delayed.value.status, not_delayed.value.code) == (409, "not_delayed")
    with pytest.raises(JobNotFound):
        sdk.promote(queue, "missing")


async def test_async_client_promotes_a_retry_waiting_out_its_backoff(asdk: AsyncClient, queue: str) -> None:
    await asdk.enqueue(queue, 1, id="flaky")
    (job,) = await asdk.lease(queue, "w1")
    await asdk.fail(queue, "flaky", job.lease_id, "busy", retry_after_ms=3_600_000)
    assert (await asdk.get_job(queue, "flaky")).delay_reason == "retry"
    assert (await asdk.promote(queue, "flaky")).state == "waiting"
    assert [leased.attempt for leased in await asdk.lease(queue, "w1")] == [2]


def test_a_heartbeat_reports_progress_and_a_left_out_one_keeps_the_last(sdk: Client, queue: str) -> None:
    sdk.enqueue(queue, 1, id="p")
    (job,) = sdk.lease(queue, "w1")
    sdk.heartbeat(queue, "p", job.lease_id, progress={"done": 1, "of": 2})
    sdk.heartbeat(queue, "p", job.lease_id, lease_ms=60_000)
    assert sdk.get_job(queue, "p").progress == {"done": 1, "of": 2}


async def test_async_heartbeat_reports_progress(asdk: AsyncClient, queue: str) -> None:
    await asdk.enqueue(queue, 1, id="p")
    (job,) = await asdk.lease(queue, "w1")
    await asdk.heartbeat(queue, "p", job.lease_id, progress=[1, 2])
    assert (await asdk.get_job(queue, "p")).progress == [1, 2]


def test_problem_codes_become_exceptions(sdk: Client, queue: str, service_url: str) -> None:
    with pytest.raises(InvalidRequest) as invalid:
        sdk.enqueue("no spaces allowed", 1)
    assert (invalid.value.status, invalid.value.code) == (400, "invalid_request") and invalid.value.detail
    with pytest.raises(InvalidRequest):
        sdk.lease(queue, "w1", lease_ms=10)
    with pytest.raises(JobNotFound):
        sdk.ack(queue, "missing", "x")
    sdk.enqueue(queue, 1, id="j")
    assert len(sdk.lease(queue, "w1")) == 1
    with pytest.raises(LeaseLost) as lost:
        sdk.heartbeat(queue, "j", "not-the-lease")
    assert lost.value.problem["code"] == "lease_lost" and lost.value.status == 409
    with Client(service_url + "/nowhere") as lost_path, pytest.raises(NotFound):
        lost_path.queues()


@pytest.fixture(scope="module")
def auth_url(redis_url: str) -> Iterator[str]:
    entries = ("admin:Adm1n-secret", "worker:w-secret:only-*", "producer:p-secret")
    with running_service(Settings(redis_url=redis_url, sweep_interval_ms=100, auth_entries=entries)) as url:
        yield url


def test_bearer_tokens(auth_url: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(auth_url) as anonymous, pytest.raises(Unauthorized):
        anonymous.queue(queue)
    with Client(auth_url, token="wrong") as unknown, pytest.raises(Unauthorized):
        unknown.queue(queue)
    with Client(auth_url, token="p-secret") as producer:
        producer.enqueue(queue, 1)
        with pytest.raises(Forbidden) as forbidden:
            producer.lease(queue, "w1")
        assert forbidden.value.code == "forbidden"
    with Client(auth_url, token="w-secret") as scoped, pytest.raises(Forbidden):
        scoped.lease(queue, "w1")  # the token covers only-* queues
    monkeypatch.setenv("EMQ_TOKEN", "Adm1n-secret")
    monkeypatch.setenv("EMQ_URL", auth_url)
    with Client() as from_env:
        assert len(from_env.lease(queue, "w1")) == 1
        assert from_env.pause(queue).paused


class CountingTransport(httpx.HTTPTransport):
    """The real transport, counting the requests that go through it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(f"{request.method} {request.url.path}")
        return super().handle_request(request)


def test_retries_only_what_is_safe_to_repeat(private_valkey: RedisServer, queue: str) -> None:
    settings = Settings(redis_url=private_valkey.url, sweep_interval_ms=100, redis_timeout_s=1.0)
    with running_service(settings) as url:
        transport = CountingTransport()
        with Client(url, retry=FAST_RETRIES, transport=transport) as client:
            client.enqueue(queue, 1, id="held")
            (job,) = client.lease(queue, "w1")
            private_valkey.kill()

            def attempts(call: object) -> int:
                transport.sent.clear()
                with pytest.raises(BackendUnavailable) as down:
                    call()  # type: ignore[operator]
                assert down.value.status == 503 and down.value.retry_after_s
                return len(transport.sent)

            assert attempts(lambda: client.queue(queue)) == 3
            assert attempts(lambda: client.enqueue(queue, 1, id="mine")) == 3
            assert attempts(lambda: client.heartbeat(queue, job.id, job.lease_id)) == 3
            assert attempts(lambda: client.ack(queue, job.id, job.lease_id, "r")) == 3
            assert (
                attempts(lambda: client.heartbeat_many(queue, [{"id": job.id, "lease_id": job.lease_id}]))
                == 3
            )
            # With lease_next, an ack is as safe to repeat as a lease call: with a request_id.
            safe_next = LeaseNext(worker="w1", request_id="next-1")
            assert attempts(lambda: client.ack(queue, job.id, job.lease_id, "r", lease_next=safe_next)) == 3
            assert (
                attempts(lambda: client.ack(queue, job.id, job.lease_id, "r", lease_next={"worker": "w1"}))
                == 1
            )
            acks = [{"id": job.id, "lease_id": job.lease_id}]
            assert attempts(lambda: client.ack_many(queue, acks, lease_next={"worker": "w1"})) == 1
            assert attempts(lambda: client.enqueue(queue, 1)) == 1  # no id: a repeat could duplicate
            assert attempts(lambda: client.lease(queue, "w1")) == 1
            assert attempts(lambda: client.fail(queue, job.id, job.lease_id, "e")) == 1
            assert (
                attempts(lambda: client.enqueue_many(queue, [{"payload": 1, "id": "x"}, {"payload": 2}])) == 1
            )
            # The same PUT again keeps the schedule's next run: safe. A trigger makes one more
            # job and a repeated delete answers schedule_not_found: not repeated.
            assert attempts(lambda: client.put_schedule(queue, "s", {"payload": 1}, every_ms=1000)) == 3
            assert attempts(lambda: client.get_schedule(queue, "s")) == 3
            assert attempts(lambda: client.list_schedules(queue)) == 3
            assert attempts(lambda: client.trigger_schedule(queue, "s")) == 1
            assert attempts(lambda: client.delete_schedule(queue, "s")) == 1

        # Redis comes back while an idempotent call is retrying: the call succeeds.
        patient = RetryPolicy(retries=30, base_delay_s=0.1, max_delay_s=0.5)
        with Client(url, retry=patient) as client:
            threading.Timer(0.5, private_valkey.start).start()
            assert client.enqueue(queue, "after", id="after").id == "after"


def test_unreachable_service_is_retried_then_reported() -> None:
    transport = CountingTransport()
    client = Client(f"http://127.0.0.1:{free_port()}", retry=FAST_RETRIES, transport=transport)
    with client, pytest.raises(ConnectionFailed):
        client.lease("q", "w1")  # nothing was sent: even a lease is tried again
    assert len(transport.sent) == 3


@pytest.mark.timeout(180)
def test_sdk_wheel(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path, SDK],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("echomq_client-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    assert {"echomq/__init__.py", "echomq/client.py", "echomq/worker.py", "echomq/py.typed"} <= names
    (metadata,) = [name for name in names if name.endswith("/METADATA")]
    requires = [
        line for line in archive.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")
    ]
    assert sorted(line.split()[1].split(">")[0] for line in requires) == ["aiohttp", "httpx", "msgspec"]


def test_a_lease_with_a_request_id_repeats_safely_and_a_queue_can_be_deleted(sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": n} for n in range(3)])
    first = sdk.lease(queue, "w1", max_jobs=2, request_id="poll-1")
    assert sdk.lease(queue, "w1", max_jobs=2, request_id="poll-1") == first
    with pytest.raises(JobActive):
        sdk.delete_queue(queue)
    sdk.delete_queue(queue, force=True)
    assert sdk.queue(queue).counts.waiting == 0 and sdk.queue(queue).counts.active == 0


def test_an_ack_leases_the_next_jobs_and_leases_are_renewed_in_one_call(sdk: Client, queue: str) -> None:
    sdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(5)])
    (first,) = sdk.lease(queue, "w1", lease_ms=5000)
    assert sdk.ack(queue, first.id, first.lease_id).jobs is None  # no lease_next: no jobs

    (second,) = sdk.lease(queue, "w1")
    acked = sdk.ack(queue, second.id, second.lease_id, "done", lease_next=LeaseNext(worker="w1", max_jobs=2))
    assert (acked.id, acked.state) == (second.id, "completed")
    assert [job.id for job in acked.jobs or []] == ["j2", "j3"]
    assert all(isinstance(job, LeasedJob) for job in acked.jobs or [])
    with pytest.raises(LeaseLost):  # a failed ack leases nothing
        sdk.ack(queue, second.id, "not-the-lease", lease_next={"worker": "w1"})
    assert sdk.queue(queue).counts.waiting == 1

    held = acked.jobs or []
    outcomes = sdk.heartbeat_many(
        queue,
        [
            HeartbeatItem(id=held[0].id, lease_id=held[0].lease_id, lease_ms=60_000),
            {"id": held[1].id, "lease_id": "not-the-lease"},
            {"id": "nope", "lease_id": "x"},
        ],
    )
    assert all(isinstance(outcome, HeartbeatOutcome) for outcome in outcomes)
    assert [(o.id, o.ok, o.code, o.cancel_requested) for o in outcomes] == [
        ("j2", True, None, False),
        ("j3", False, "lease_lost", False),
        ("nope", False, "job_not_found", False),
    ]
    assert outcomes[0].lease_expires_at and outcomes[0].lease_expires_at > held[0].lease_expires_at

    both = sdk.ack_many(
        queue,
        [{"id": job.id, "lease_id": job.lease_id} for job in held],
        lease_next={"worker": "w1", "wait_ms": 1000, "request_id": "after-batch"},
    )
    assert isinstance(both, AckedMany)
    assert [outcome.ok for outcome in both.results] == [True, True]
    assert [job.id for job in both.jobs] == ["j4"]
    assert sdk.ack_many(queue, [{"id": "j4", "lease_id": both.jobs[0].lease_id}])[0].ok


async def test_async_ack_with_lease_next_and_heartbeat_many(asdk: AsyncClient, queue: str) -> None:
    await asdk.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(3)])
    (first,) = await asdk.lease(queue, "w1")
    acked = await asdk.ack(queue, first.id, first.lease_id, lease_next={"worker": "w1", "max_jobs": 2})
    assert [job.id for job in acked.jobs or []] == ["j1", "j2"]
    outcomes = await asdk.heartbeat_many(
        queue, [{"id": job.id, "lease_id": job.lease_id} for job in acked.jobs or []]
    )
    assert [(o.id, o.ok) for o in outcomes] == [("j1", True), ("j2", True)]
    both = await asdk.ack_many(
        queue,
        [{"id": job.id, "lease_id": job.lease_id} for job in acked.jobs or []],
        lease_next={"worker": "w1"},
    )
    assert [o.state for o in both.results] == ["completed", "completed"] and both.jobs == []
    assert [o.ok for o in await asdk.ack_many(queue, [{"id": "j1", "lease_id": "x"}])] == [False]


def test_settings_get_and_put(service_url: str, queue: str) -> None:
    from echomq import QueueSettings, RateLimit

    with Client(service_url) as client:
        assert client.get_settings(queue) == QueueSettings()
        stored = client.put_settings(queue, max_in_flight=3, rate_limit=(10, 1000), events=False)
        assert stored == QueueSettings(
            max_in_flight=3, rate_limit=RateLimit(max=10, per_ms=1000), events=False
        )
        assert client.get_settings(queue) == stored
        assert client.put_settings(queue, rate_limit={"max": 1, "per_ms": 2000}).rate_limit == RateLimit(
            max=1, per_ms=2000
        )
        assert client.get_settings(queue).max_in_flight is None  # the whole object: left out is default


async def test_async_settings_get_and_put(service_url: str, queue: str) -> None:
    from echomq import AsyncClient

    async with AsyncClient(service_url) as client:
        assert (await client.put_settings(queue, completed_retention_s=5)).completed_retention_s == 5
        assert (await client.get_settings(queue)).completed_retention_s == 5


def test_groups(sdk: Client, queue: str) -> None:
    assert sdk.enqueue(queue, 1, id="a1", group="a").created
    sdk.enqueue_many(
        queue, [{"payload": 2, "id": "a2", "group": "a"}, {"payload": 3, "id": "b1", "group": "b"}]
    )
    assert sdk.get_job(queue, "a1").group == "a"
    assert sdk.set_group_limit(queue, "a", 1).max_in_flight == 1
    leased = sdk.lease(queue, "w1", max_jobs=10)
    assert sorted(job.id for job in leased) == ["a1", "b1"]  # a at its own cap of 1
    page = sdk.list_groups(queue, limit=1)
    assert [(g.group, g.waiting, g.active, g.max_in_flight) for g in page.groups] == [("a", 1, 1, 1)]
    assert [g.group for g in sdk.list_groups(queue, cursor=page.next_cursor).groups] == ["b"]
    assert sdk.set_group_limit(queue, "a", None).max_in_flight is None
