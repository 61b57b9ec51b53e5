"""Every handler of the API under /v1/queues, in the order of the OpenAPI document: one
module per tag (jobs, working, inspection, operations, schedules), plumbing in api/http.py."""

from __future__ import annotations

from echomq_http.api.flows import create_flow, list_children
from echomq_http.api.inspection import (
    events,
    get_ledger,
    get_queue,
    get_settings,
    history,
    list_failed,
    list_groups,
    list_jobs,
    list_queues,
    list_workers,
)
from echomq_http.api.jobs import cancel, enqueue, enqueue_many, get_job, promote
from echomq_http.api.operations import (
    delete_job,
    delete_queue,
    pause,
    put_settings,
    quiet_worker,
    redrive,
    release_worker,
    resume,
    set_group_limit,
)
from echomq_http.api.schedules import (
    delete_schedule,
    get_schedule,
    list_schedules,
    put_schedule,
    trigger_schedule,
)
from echomq_http.api.working import (
    ack,
    ack_many,
    end_session,
    fail,
    heartbeat,
    heartbeat_many,
    lease,
    release,
    session_heartbeat,
)

QUEUE_HANDLERS = [
    enqueue,
    enqueue_many,
    create_flow,
    lease,
    heartbeat,
    heartbeat_many,
    ack,
    ack_many,
    fail,
    release,
    get_job,
    list_children,
    cancel,
    promote,
    events,
    history,
    delete_job,
    list_queues,
    get_queue,
    delete_queue,
    get_ledger,
    list_workers,
    list_failed,
    list_jobs,
    release_worker,
    session_heartbeat,
    quiet_worker,
    end_session,
    pause,
    resume,
    redrive,
    get_settings,
    put_settings,
    set_group_limit,
    list_groups,
    put_schedule,
    get_schedule,
    list_schedules,
    delete_schedule,
    trigger_schedule,
]
