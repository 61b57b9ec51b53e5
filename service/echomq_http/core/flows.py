"""Flows: jobs that wait for other jobs, across queues (docs/FLOWS-DESIGN.md).

A flow is made top-down, one script call per level of the tree and queue (lua/create_flow.lua):
every parent exists, waiting for all the children it declares, before any of them, so no parent
can run early whatever order they finish in, and a creation cut short leaves nothing that runs
too soon; the same request again makes only what is missing. Before anything is written the
same calls look (check only), so that a node whose id is another job's refuses the request whole.
A child's final transition tells its parent in the same script call (include/flows.lua) when
the parent is within reach; otherwise the outcome waits in the child queue's outbox, which the
sweep finds and this module delivers to each parent's queue (deliver.lua), then trims
(outbox_done.lua): a crash between the two delivers again, and a repeat changes nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET

from echomq_http.api.schemas.flows import ChildView, FlowJob, FlowNode
from echomq_http.core import limits
from echomq_http.core.bindings import (
    DROP_RECORD,
    PUT_OFF_RECORD,
    Children,
    CreateFlow,
    Deliver,
    FlowNodeMade,
    FlowRecord,
    OutboxDone,
    ScriptFlowNode,
    parent_prefix_of,
)
from echomq_http.core.errors import InvalidRequest, JobExists
from echomq_http.core.queue import JobQueues, new_job_id, script_job
from echomq_http.store.keys import queue_of_prefix, queue_prefix

# A finished child's status as its parent keeps it, as the state shown once the child is gone.
FINISHED_AS = {"c": "completed", "f": "failed", "x": "cancelled", "d": "deleted", "p": "deleted"}
MAX_CURSOR_POSITION = 2**53  # positions are counts of children added, far below

RECORDS_PER_SWEEP = 20  # cut-short creations made again per queue per sweep
_ENCODE = msgspec.json.Encoder().encode
_DECODE = msgspec.json.Decoder(FlowNode).decode
log = logging.getLogger(__name__)
OUTBOX_PAGE = 100  # outbox entries read and delivered per call, per queue and step
MAX_OUTBOX_PAGES = 10  # per queue per sweep: 1,000 deliveries; more go on at the next tick


@dataclass(eq=False)
class _Node:
    request: FlowNode
    id: str
    level: int
    children: list[_Node] = field(default_factory=list)
    token: str = ""  # a parent's kids_token: a new one, or the one it was made with
    link: str | None = None  # its parent's "<prefix> <id> <token>", once the parent's token is known
    made: FlowNodeMade | None = None

    @property
    def queue(self) -> str:
        return self.request.queue

    @property
    def ref(self) -> str:
        return f"{self.queue} {self.id}"

    def script_node(self) -> ScriptFlowNode:
        job = self.request
        return ScriptFlowNode(
            **msgspec.structs.asdict(script_job(job, self.id, None)),
            parent=self.link,
            on_failure="ignore" if self.link and job.on_failure == "ignore" else None,
            children=[(child.ref, child.request.on_failure) for child in self.children] or None,
            token=self.token or None,
        )


def _tree(root: FlowNode) -> list[_Node]:
    """The nodes in pre-order, each with its id (a new one when the client gave none); 400 for a
    tree over the limits or one that names a job twice."""
    nodes: list[_Node] = []

    def visit(request: FlowNode, level: int) -> _Node:
        if level > limits.MAX_FLOW_DEPTH:
            raise InvalidRequest(
                f"a flow is at most {limits.MAX_FLOW_DEPTH} levels deep (the root is level 1)"
            )
        if len(nodes) >= limits.MAX_FLOW_NODES:
            raise InvalidRequest(f"a flow has at most {limits.MAX_FLOW_NODES} jobs")
        node = _Node(request, request.id or new_job_id(), level)
        nodes.append(node)
        children = request.children if request.children is not UNSET else []
        if children:
            node.token = os.urandom(limits.FLOW_TOKEN_BYTES).hex()
        node.children = [visit(child, level + 1) for child in children]
        return node

    visit(root, 1)
    seen: set[tuple[str, str]] = set()
    for node in nodes:
        if (node.queue, node.id) in seen:
            raise InvalidRequest(f"the flow names the job {node.queue}/{node.id} twice")
        seen.add((node.queue, node.id))
    return nodes


def _steps(nodes: list[_Node]) -> Iterator[tuple[str, list[_Node]]]:
    """The calls of a pass, top-down: each level's nodes, by queue."""
    for level in range(1, max(node.level for node in nodes) + 1):
        by_queue: dict[str, list[_Node]] = {}
        for node in nodes:
            if node.level == level:
                by_queue.setdefault(node.queue, []).append(node)
        yield from by_queue.items()


class Flows:
    """Making flows (POST /v1/flows) on a JobQueues' scripts."""

    def __init__(self, queues: JobQueues) -> None:
        self._queues = queues

    async def create(self, root: FlowNode) -> tuple[bool, list[FlowJob]]:
        """The flow's jobs in pre-order, and whether this call made any; JobExists (nothing
        written) when a node's id names a job outside this flow, InvalidRequest for a bad tree."""
        nodes = _tree(root)
        for queue in dict.fromkeys(node.queue for node in nodes):
            await self._queues.register(queue)
        root = nodes[0]
        await self._pass(nodes, check_only=True)
        if not all(node.made is not None and node.made.state for node in nodes):  # else: a repeat
            # Kept until the last job is made: a creation cut short is finished by the sweep.
            record = FlowRecord.args(root.id, _ENCODE(_with_ids(root)))
            await self._queues.call_script(FlowRecord.operation, root.queue, *record)
            try:
                await self._pass(nodes, check_only=False)
            except JobExists:
                # Only a job made with a node's id between the check and this call: what this
                # request made goes again, so that no parent waits for a child never made.
                for node in reversed(nodes):
                    if node.made is not None and node.made.created:
                        await self._queues.delete(node.queue, node.id)
                await self._drop_record(root.queue, root.id)
                raise
            await self._drop_record(root.queue, root.id)
        created = any(node.made is not None and node.made.created for node in nodes)
        return created, [FlowJob(queue=node.queue, id=node.id, state=node.made.state) for node in nodes]  # type: ignore[union-attr,arg-type]

    async def _pass(self, nodes: list[_Node], check_only: bool) -> None:
        """One pass over the tree, top-down: each node's state and token as the call found or
        made them, and each child's link to its parent."""
        for queue, step in _steps(nodes):
            made = await self._step(queue, step, check_only)
            for node, found in zip(step, made, strict=True):
                node.made = found
                if found.token:
                    node.token = found.token  # the token it was made with, on a repeat
                prefix = queue_prefix(node.queue)
                for child in node.children:
                    child.link = f"{prefix} {node.id} {node.token}"

    async def _drop_record(self, queue: str, root_id: str) -> None:
        await self._queues.call_script(FlowRecord.operation, queue, *FlowRecord.args(root_id, DROP_RECORD))

    async def _step(self, queue: str, step: list[_Node], check_only: bool) -> list[FlowNodeMade]:
        args = CreateFlow.args(
            [node.script_node() for node in step], [bytes(node.request.payload) for node in step], check_only
        )
        reply = await self._queues.call_script(CreateFlow.operation, queue, *args)
        return CreateFlow.reply(reply, [node.id for node in step])

    async def finish_cut_short(self, queue: str) -> int:
        """The flows rooted in this queue whose creation records are old enough to have been cut
        short, made again from their records (a repeat makes only what is missing); how many."""
        keys = self._queues.keys(queue)
        client = self._queues.client
        now_ms = int((await client.time())[0]) * 1000
        due = await client.zrange(
            keys.flows,
            "-inf",
            now_ms - limits.FLOW_REPLAY_AFTER_MS,
            byscore=True,
            offset=0,
            num=RECORDS_PER_SWEEP,
        )
        finished = 0
        for raw_id in due:
            root_id = raw_id.decode()
            request = await client.get(keys.flow_record(root_id))
            if request is None:  # dropped meanwhile by the creation itself
                continue
            try:
                await self.create(_DECODE(request))
                # Dropped here too: a creation that died after its last job left it in place.
                await self._drop_record(queue, root_id)
                finished += 1
            except (JobExists, InvalidRequest) as error:
                log.warning("flow %s/%s cannot be finished: %s", queue, root_id, error)
                await self._queues.call_script(
                    FlowRecord.operation, queue, *FlowRecord.args(root_id, PUT_OFF_RECORD)
                )
        return finished

    async def deliver_outbox(self, queue: str) -> int:
        """The queue's outbox delivered to the parents' queues, a page at a time (at most
        MAX_OUTBOX_PAGES); how many entries were delivered."""
        outbox = self._queues.keys(queue).outbox
        delivered = 0
        for _ in range(MAX_OUTBOX_PAGES):
            entries: list[bytes] = await self._queues.client.lrange(outbox, 0, OUTBOX_PAGE - 1)
            if not entries:
                break
            by_parent_queue: dict[str, list[bytes]] = {}
            for entry in entries:
                by_parent_queue.setdefault(queue_of_prefix(parent_prefix_of(entry)), []).append(entry)
            for parent_queue, delivering in by_parent_queue.items():
                await self._queues.call_script(Deliver.operation, parent_queue, *Deliver.args(delivering))
            await self._queues.call_script(OutboxDone.operation, queue, *OutboxDone.args(entries))
            delivered += len(entries)
            if len(entries) < OUTBOX_PAGE:
                break
        return delivered

    async def children(
        self, queue: str, job_id: str, limit: int, cursor: str | None
    ) -> tuple[list[ChildView], str | None]:
        """A page of the job's children, each with its state now (read from its own queue: another
        slot, maybe) and what it handed the parent; JobNotFound for no such job."""
        after = 0 if cursor is None else _position(cursor)
        reply = await self._queues.call_script(
            Children.operation, queue, *Children.args(job_id, after, limit)
        )
        next_after, outcomes = Children.reply(reply, job_id)
        # One pipeline of reads (per node on a Cluster), at most `limit` of them.
        pipeline = self._queues.client.pipeline(transaction=False)
        for outcome in outcomes:
            pipeline.hget(self._queues.keys(outcome.queue).job(outcome.id), "state")
        states = await pipeline.execute() if outcomes else []
        page = []
        for outcome, live in zip(outcomes, states, strict=True):
            state = (
                live.decode() if live is not None and outcome.status != "d" else FINISHED_AS[outcome.status]
            )
            view = ChildView(queue=outcome.queue, id=outcome.id, state=state)  # type: ignore[arg-type]
            if outcome.status == "c":
                view.result = msgspec.Raw(outcome.detail or b"null")
            elif outcome.status != "p":
                view.error = outcome.detail.decode()
            page.append(view)
        return page, (str(next_after) if next_after else None)


def _with_ids(node: _Node) -> FlowNode:
    """The node's request with its id, and its children's, filled in: what makes it again."""
    children = [_with_ids(child) for child in node.children]
    return msgspec.structs.replace(node.request, id=node.id, children=children or UNSET)


def _position(cursor: str) -> int:
    if not cursor.isdigit() or not cursor.isascii() or len(cursor) > 16 or int(cursor) > MAX_CURSOR_POSITION:
        raise InvalidRequest(f"query parameter cursor is not a cursor this listing made: {cursor!r}")
    return int(cursor)
