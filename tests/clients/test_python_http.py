"""The AsyncClient's HTTP (aiohttp, through echomq._http) against the real service, through a TCP
proxy that loses or holds answers: a broken connection is never used again, calls that are safe
to repeat are repeated on a new one, others report ConnectionFailed; deadlines."""

from __future__ import annotations

import socket

import pytest

from echomq import NO_RETRIES, AsyncClient, ConnectionFailed, RetryPolicy
from tests.faultproxy import FaultProxy

FAST_RETRIES = RetryPolicy(retries=2, base_delay_s=0.01, max_delay_s=0.05)


async def test_a_lost_answer_is_asked_again_when_safe_and_reported_when_not(
    service_proxy: FaultProxy, queue: str
) -> None:
    async with AsyncClient(f"http://{service_proxy.host_port}", retry=FAST_RETRIES) as client:
        await client.enqueue_many(queue, [{"payload": n, "id": f"j{n}"} for n in range(2)])
        first, second = await client.lease(queue, "w1", max_jobs=2, request_id="r1")

        service_proxy.lose_reply_to(b"/heartbeat")  # renewed, then the answer is lost: asked again
        renewed = await client.heartbeat(queue, first.id, first.lease_id)
        assert renewed.lease_expires_at >= first.lease_expires_at and service_proxy.dropped == 1

        service_proxy.lose_reply_to(b"/fail")  # a fail is not repeated by the client
        with pytest.raises(ConnectionFailed) as lost:
            await client.fail(queue, second.id, second.lease_id, "boom")
        assert lost.value.sent and service_proxy.dropped == 2
        assert (await client.get_job(queue, second.id)).state in ("delayed", "waiting")
        assert (await client.ack(queue, first.id, first.lease_id, "ok")).state == "completed"


async def test_nothing_sent_when_the_service_cannot_be_reached() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    async with AsyncClient(f"http://127.0.0.1:{port}", retry=NO_RETRIES) as client:
        with pytest.raises(ConnectionFailed) as refused:
            await client.lease("q", "w1")
    assert refused.value.sent is False  # so that even a lease may be tried again


async def test_an_answer_past_the_deadline_fails_the_call_not_the_client(
    service_proxy: FaultProxy, queue: str
) -> None:
    async with AsyncClient(f"http://{service_proxy.host_port}", timeout=0.5, retry=NO_RETRIES) as client:
        await client.enqueue(queue, 1, id="a")
        service_proxy.hold_reply_holding(b'"counts"')  # the answer to GET /v1/queues/{queue}
        with pytest.raises(ConnectionFailed, match="no answer within"):
            await client.queue(queue)
        service_proxy.let_replies_through()
        assert (await client.queue(queue)).counts.waiting == 1
