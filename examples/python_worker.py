"""A worker written with the Python SDK (clients/python): sums the numbers of each job.

    pip install ./clients/python
    EMQ_URL=http://127.0.0.1:8080 python examples/python_worker.py sums --concurrency 4
    emq enqueue sums '{"numbers": [1, 2, 3]}'

Payload: ``{"numbers": [...], "sleep_s"?: float}``; result: ``{"sum": ...}``. A payload without
a list of numbers is dead-lettered at once (``JobError(retry=False)``). ``sleep_s`` stands for
slow work: it waits on ``job.wait_cancelled``, so a lost lease interrupts it, and so does a
SIGTERM once the grace period is over. SIGTERM/SIGINT: take no more jobs, let the running ones
finish for up to ``--grace-s`` seconds, then release the rest.
"""

from __future__ import annotations

import argparse
import logging

from echomq import JobContext, JobError, Worker


def handle(job: JobContext) -> dict[str, float]:
    payload = job.payload
    numbers = payload.get("numbers") if isinstance(payload, dict) else None
    if not isinstance(numbers, list) or not all(isinstance(n, (int, float)) for n in numbers):
        raise JobError("the payload needs a list of numbers under 'numbers'", retry=False)
    if job.wait_cancelled(float(payload.get("sleep_s", 0))):
        # The lease was lost or the worker is stopping: whatever we return is discarded.
        return {}
    return {"sum": sum(numbers)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("queue")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--wait-ms", type=int, default=5_000)
    parser.add_argument(
        "--grace-s", type=float, default=30.0, help="time running jobs get to finish on SIGTERM"
    )
    parser.add_argument("--worker", help="worker name (default: host-pid-random)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    worker = Worker(
        args.queue,
        handle,
        concurrency=args.concurrency,
        lease_ms=args.lease_ms,
        wait_ms=args.wait_ms,
        grace_s=args.grace_s,
        worker_id=args.worker,
    )  # url and token: $EMQ_URL and $EMQ_TOKEN
    stats = worker.run()
    print(f"stopped: {stats.acked} acked, {stats.failed} failed, {stats.released} released", flush=True)


if __name__ == "__main__":
    main()
