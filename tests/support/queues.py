"""The service's queue operations (JobQueues) on a client of a test's server, without the app:
for tests (and tools) that make or read state faster than HTTP would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from echomq_http.core.queue import JobQueues
from echomq_http.observability.telemetry import Telemetry

RETENTION_S = 3600  # nothing a test makes expires while it runs
SWEEP_BATCH = 100


def job_queues(
    client: Any, max_concurrent_calls: int, scripts_dir: Path | None = None, merge_calls: bool = True
) -> JobQueues:
    """JobQueues on client (a single server's or a Cluster's), an hour's retention, no metrics
    kept; scripts_dir: other scripts than the service's (bench/lua_cost.py's A/B); merge_calls:
    concurrent single calls merged (core/merging.py)."""
    return JobQueues(
        client,
        completed_retention_s=RETENTION_S,
        failed_retention_s=RETENTION_S,
        sweep_batch=SWEEP_BATCH,
        telemetry=Telemetry(),
        max_concurrent_calls=max_concurrent_calls,
        scripts_dir=scripts_dir,
        merge_calls=merge_calls,
    )
