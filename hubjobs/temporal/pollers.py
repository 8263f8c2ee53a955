"""Who works the job task queue, as Temporal knows it: the pollers of its workflow and
activity tasks (DescribeTaskQueue) and, where the server keeps them, the workers'
heartbeats (ListWorkers: status and slots in use). A worker is known by its identity."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingActivityState, TaskQueueType, WorkerStatus
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.worker.v1 import WorkerHeartbeat, WorkerSlotsInfo
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeWorkflowExecutionRequest,
    ListWorkersRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

log = logging.getLogger(__name__)

TASK_TYPES = {
    "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}
# A worker's heartbeats once it has begun to stop: it polls no more.
STOPPING = (WorkerStatus.WORKER_STATUS_SHUTTING_DOWN, WorkerStatus.WORKER_STATUS_SHUTDOWN)
# Workflows described at once, to tell which worker runs a job's activity.
DESCRIBES_AT_ONCE = 8


class WorkerState(StrEnum):
    live = "live"
    gone = "gone"


class Slots(BaseModel):
    used: int = Field(description="Slots in use")
    available: int = Field(description="Slots free")


class WorkerView(BaseModel):
    identity: str = Field(description="The worker's identity (its process and host)")
    state: WorkerState = Field(
        description="`gone` once it stopped (its last heartbeat said so) or was not seen "
        "within `gone_after_seconds`"
    )
    last_seen: datetime = Field(description="Its latest poll or heartbeat")
    build_id: str | None = Field(description="The build it reports, where it does")
    polls: list[str] = Field(description="The task types it polls: workflow, activity")
    rate_per_second: float | None = Field(description="Its poll rate limit, as the server has it")
    host: str | None = Field(None, description="Its host, from its heartbeat")
    workflow_slots: Slots | None = Field(None, description="Workflow task slots, when reported")
    activity_slots: Slots | None = Field(None, description="Activity slots, when reported")
    running: list[uuid.UUID] = Field(
        default_factory=list,
        description="The jobs of this workspace whose work it runs now (others' not shown)",
    )


class Sighting:
    """What the server said of one identity, merged from its polls and heartbeats."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.last_seen = datetime.min.replace(tzinfo=UTC)
        self.polls: set[str] = set()
        self.build_id: str | None = None
        self.rate: float | None = None
        self.heartbeat: WorkerHeartbeat | None = None

    def polled(self, task_type: str, poller: PollerInfo) -> None:
        self.polls.add(task_type)
        self.last_seen = max(self.last_seen, poller.last_access_time.ToDatetime(UTC))
        self.build_id = (
            poller.deployment_options.build_id
            or poller.worker_version_capabilities.build_id
            or self.build_id
        )
        self.rate = poller.rate_per_second or self.rate

    def beat(self, heartbeat: WorkerHeartbeat) -> None:
        at = heartbeat.heartbeat_time.ToDatetime(UTC)
        if self.heartbeat is None or at >= self.heartbeat.heartbeat_time.ToDatetime(UTC):
            self.heartbeat = heartbeat
        self.last_seen = max(self.last_seen, at)
        self.build_id = self.build_id or heartbeat.deployment_version.build_id or None

    def view(self, now: datetime, gone_after: timedelta) -> WorkerView:
        beat = self.heartbeat
        stopped = beat is not None and beat.status in STOPPING
        return WorkerView(
            identity=self.identity,
            state=WorkerState.gone
            if stopped or now - self.last_seen > gone_after
            else WorkerState.live,
            last_seen=self.last_seen,
            build_id=self.build_id,
            polls=sorted(self.polls),
            rate_per_second=self.rate,
            host=beat.host_info.host_name or None if beat is not None else None,
            workflow_slots=_slots(beat.workflow_task_slots_info) if beat is not None else None,
            activity_slots=_slots(beat.activity_task_slots_info) if beat is not None else None,
        )


def _slots(info: WorkerSlotsInfo) -> Slots:
    return Slots(used=info.current_used_slots, available=info.current_available_slots)


async def task_queue_workers(
    client: Client, task_queue: str, gone_after: timedelta
) -> tuple[list[WorkerView], bool]:
    """The workers of ``task_queue`` by identity, and whether the server reports their
    heartbeats (a server without them lists pollers only: no slots, no stop seen)."""
    seen: dict[str, Sighting] = {}

    def sighting(identity: str) -> Sighting:
        return seen.setdefault(identity, Sighting(identity))

    for task_type, queue_type in TASK_TYPES.items():
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=queue_type,
            )
        )
        for poller in described.pollers:
            sighting(poller.identity).polled(task_type, poller)
    heartbeats = await _heartbeats(client, task_queue)
    for heartbeat in heartbeats or ():
        sighting(heartbeat.worker_identity).beat(heartbeat)
    now = datetime.now(UTC)
    views = [seen[identity].view(now, gone_after) for identity in sorted(seen)]
    return views, heartbeats is not None


async def _heartbeats(client: Client, task_queue: str) -> list[WorkerHeartbeat] | None:
    """The heartbeats of the queue's workers; None when the server keeps none."""
    try:
        answer = await client.workflow_service.list_workers(
            ListWorkersRequest(
                namespace=client.namespace, page_size=1000, query=f"TaskQueue = '{task_queue}'"
            )
        )
    except RPCError as err:
        log.info("worker heartbeats not listed: %s", err.status.name)
        return None
    return [info.worker_heartbeat for info in answer.workers_info]


async def running_on(client: Client, workflow_ids: Sequence[str]) -> dict[str, list[str]]:
    """The identities of the workers running each workflow's activities now (those
    started and not ended), by workflow id; a workflow Temporal cannot describe is left
    out."""
    gate = asyncio.Semaphore(DESCRIBES_AT_ONCE)

    async def describe(workflow_id: str) -> tuple[str, Iterable[str]]:
        async with gate:
            try:
                found = await client.workflow_service.describe_workflow_execution(
                    DescribeWorkflowExecutionRequest(
                        namespace=client.namespace,
                        execution=WorkflowExecution(workflow_id=workflow_id),
                    )
                )
            except RPCError:
                return workflow_id, ()
        return workflow_id, {
            activity.last_worker_identity
            for activity in found.pending_activities
            if activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        }

    found = await asyncio.gather(*(describe(workflow_id) for workflow_id in workflow_ids))
    return {workflow_id: sorted(ids) for workflow_id, ids in found if ids}


class Workers(BaseModel):
    """Who works the job task queue: shared by every workspace."""

    task_queue: str = Field(description="The job task queue")
    heartbeats: bool = Field(
        description="Whether the server reports worker heartbeats (slots, a stop seen at "
        "once); without them, a worker is gone once its polls stop for `gone_after_seconds`"
    )
    gone_after_seconds: float = Field(description="Unseen this long, a worker is gone")
    workers: list[WorkerView] = Field(description="By identity, gone ones included")
