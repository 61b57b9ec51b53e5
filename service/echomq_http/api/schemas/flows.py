"""The bodies of the Flows operations (api/flows.py): a tree of jobs across queues."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from echomq_http.api.schemas.common import JobId, JobState, Name, QueueName
from echomq_http.api.schemas.jobs import EnqueueRequest

OnFailure = Literal["fail", "ignore"]


class FlowNode(EnqueueRequest, kw_only=True):
    """A job of a flow: an enqueue request, the queue it goes to, and the children that must
    finish before it can run (a node with children starts waiting_children)."""

    queue: Annotated[Name, Meta(description="the queue the job goes to (any queue of the service)")]
    children: Annotated[
        list[FlowNode] | UnsetType,
        Meta(
            description="jobs (in any queues) that must all finish before this one becomes waiting, or "
            "delayed by its delay_ms, which starts then; each may have children of its own. [] or none: "
            "a job like any other"
        ),
    ] = UNSET
    on_failure: Annotated[
        OnFailure,
        Meta(
            description="what this job's dead letter (attempts spent, cancelled, deleted before it "
            "finished) does to its parent: fail makes the parent failed at once (child_failed), ignore "
            "counts it as finished, its error kept among the parent's children; ignored on the root"
        ),
    ] = "fail"


class FlowRequest(Struct, forbid_unknown_fields=True, kw_only=True):
    """A flow: a tree of at most 1000 jobs across queues, at most 10 levels deep (the root is
    level 1). Client ids make it idempotent; a node whose id is another job's refuses it whole."""

    job: Annotated[FlowNode, Meta(description="the root: the job that runs last")]


class FlowJob(Struct):
    """One job of a flow, as the request made or found it."""

    queue: QueueName
    id: JobId
    state: Annotated[JobState, Meta(description="its state now: waiting_children for a job with children")]


class FlowResponse(Struct):
    """The jobs of a flow, in depth-first order, root first, children in the order given."""

    jobs: Annotated[list[FlowJob], Meta(description="every node, root first")]


ChildState = Literal[
    "waiting", "delayed", "active", "completed", "failed", "cancelled", "waiting_children", "deleted"
]


class ChildView(Struct, omit_defaults=True):
    """One child of a job, with what it handed its parent."""

    queue: QueueName
    id: JobId
    state: Annotated[
        ChildState,
        Meta(
            description="the child's state now; once it is gone (its retention, a deletion), the state it "
            "finished in; deleted when it was deleted before it finished"
        ),
    ]
    result: Annotated[
        Raw | UnsetType,
        Meta(description="completed: its result (null when its ack sent none), kept with the parent"),
    ] = UNSET
    error: Annotated[
        str | UnsetType,
        Meta(description="dead-lettered, cancelled or deleted: the error handed to the parent"),
    ] = UNSET


class ChildrenPage(Struct):
    """A page of a job's children, in the order they were added."""

    children: Annotated[list[ChildView], Meta(description="each child once, in the order added")]
    next_cursor: Annotated[
        str | None,
        Meta(description="opaque: pass it as cursor for the next page; null on the last page"),
    ]
