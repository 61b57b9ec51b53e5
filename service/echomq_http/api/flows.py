"""The Flows operations: a tree of jobs across queues made in one request, and a job's children
with what they handed it (core/flows.py)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.datastructures import State

from echomq_http.api.auth import Action, Authenticator
from echomq_http.api.http import (
    JOB,
    JOBS,
    NEW_QUEUE_ERRORS,
    flows_of,
    grant_of,
    json_response,
    operation_opt,
    path_job_id,
    path_queue,
    query_int,
    read_body,
)
from echomq_http.api.schemas.flows import ChildrenPage, FlowNode, FlowRequest, FlowResponse
from echomq_http.core import limits


def _queues_of(node: FlowNode) -> set[str]:
    found, todo = set(), [node]
    while todo:
        node = todo.pop()
        found.add(node.queue)
        todo += node.children or []
    return found


@post(
    "/v1/flows",
    operation_id="createFlow",
    summary="Create a flow: jobs that wait for other jobs",
    description="Makes a tree of up to 1000 jobs across queues, at most 10 levels deep, in one "
    "request. A job with children starts waiting_children and becomes waiting (or delayed by its "
    "delay_ms, which starts then) once every child has completed, or failed under on_failure "
    "ignore; a child dead-lettered under on_failure fail makes it failed at once (child_failed). "
    "A completed child's result is kept with its parent. The token needs the producer or admin "
    "role on every queue named (403 and nothing made otherwise). Client ids make it idempotent: "
    "the same tree again answers 200 with the same jobs and makes nothing twice (a request cut "
    "short is finished by repeating it); a node whose id names a job outside this flow is 409 "
    "job_exists, and nothing is made. A root without an id makes a new flow every time.",
    opt=operation_opt(
        Action.ENQUEUE,
        JOBS,
        FlowRequest,
        {
            201: (FlowResponse, "Made now (some or all of its jobs)"),
            200: (FlowResponse, "Every job of this flow was made before: nothing changed"),
        },
        ("job_exists", *NEW_QUEUE_ERRORS),
    ),
)
async def create_flow(request: Request[Any, Any, State]) -> Response[bytes]:
    body = await read_body(request, FlowRequest)
    grant = grant_of(request)
    if grant is not None:  # the guard checked the role; every queue of the tree is checked here
        for queue in sorted(_queues_of(body.job)):
            Authenticator.authorize(grant, Action.ENQUEUE, queue)
    created, jobs = await flows_of(request).create(body.job)
    return json_response(FlowResponse(jobs=jobs), 201 if created else 200)


CHILDREN_QUERY = (
    ("limit", "integer", f"at most this many children (default {limits.DEFAULT_PAGE})", limits.MAX_PAGE),
    ("cursor", "cursor", "the next_cursor of the previous page; none for the first page", None),
)


@get(
    JOB + "/children",
    operation_id="listChildren",
    summary="A job's children, with their results",
    description="A page of the job's children (a flow's, or added while it ran) in the order they were "
    "added, each once: its queue, id and state (its live state; once it is gone, the state it "
    "finished in, or deleted), and the result a completed child handed the parent or the error of "
    "one that failed, was cancelled or deleted. Results are kept with the parent, whatever the "
    "children's own retention. Pass next_cursor as cursor for the next page, until it is null.",
    opt=operation_opt(Action.READ, JOBS, None, {200: ChildrenPage}, ("job_not_found",), CHILDREN_QUERY),
)
async def list_children(request: Request[Any, Any, State]) -> Response[bytes]:
    queue, job_id = path_queue(request), path_job_id(request)
    limit = query_int(request, "limit", limits.DEFAULT_PAGE, 1, limits.MAX_PAGE)
    children, next_cursor = await flows_of(request).children(
        queue, job_id, limit, request.query_params.get("cursor")
    )
    return json_response(ChildrenPage(children=children, next_cursor=next_cursor))
