"""What tests and benchmarks share (tests never import bench; bench imports only this package).

    http         the queue calls tests make over HTTP, problem+json assertions, /metrics reads
    waiting      polling a condition until it holds
    ports        free loopback ports (Cluster ports with their bus port free too)
    servers      a Redis/Valkey server on a port (RedisServer), the binaries
    cluster      a Valkey Cluster of such servers; sentinel: a Sentinel-managed pair
    service      the app served in-process by uvicorn (running_service)
    launched     the service as a process: `python -m echomq_http` of this or another checkout
    chaos_check  the chaos harness's verdict on a recorded run (its invariants)
    abuse_check  the abuse harness's verdict on its floods

Every server process starts through the service's own primitive,
echomq_http.store.server_process.ServerProcess (as the embedded Valkey does).
The names of the http and waiting modules are importable from the package itself.
"""

from tests.support.http import (
    WAITERS_METRIC,
    assert_problem,
    counts,
    enqueue,
    get_job,
    job_call,
    lease,
    lease_one,
    long_poll,
    long_polls_waiting,
    metric_value,
    wait_for_long_polls,
    wait_for_wake_subscription,
    wake_subscriptions,
    woken,
)
from tests.support.waiting import CONDITION_TIMEOUT_S, eventually, wait_until

__all__ = [
    "CONDITION_TIMEOUT_S",
    "WAITERS_METRIC",
    "assert_problem",
    "counts",
    "enqueue",
    "eventually",
    "get_job",
    "job_call",
    "lease",
    "lease_one",
    "long_poll",
    "long_polls_waiting",
    "metric_value",
    "wait_for_long_polls",
    "wait_for_wake_subscription",
    "wait_until",
    "wake_subscriptions",
    "woken",
]
