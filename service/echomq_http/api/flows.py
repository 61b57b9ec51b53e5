"""The Flows operation: a tree of jobs across queues, made in one request (core/flows.py)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post
from litestar.datastructures import State

from echomq_http.api.auth import Action, Authenticator
from echomq_http.api.http import (
    JOBS,
    NEW_QUEUE_ERRORS,
    flows_of,
    grant_of,
    json_response,
    operation_opt,
    read_body,
)
from echomq_http.api.schemas.flows import FlowNode, FlowRequest, FlowResponse


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
