"""Starting a job's workflow for a recorded read-model row: used by the starter right
after the row is inserted, and by the reconciler to repair a row whose start was
recorded but whose workflow never started (the process died in between).

Each job's workflow carries its workspace as fairness key and its kind's priority, and
its activities inherit both: one workspace's flood never starves another's job, and
interactive kinds go ahead of bulk ones when workers are busy."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.common import (
    Priority,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from hubjobs.kinds import JobKind, get_kind
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.messages import JobInput, JobOptions


def job_options(settings: Settings, kind: JobKind[Any]) -> JobOptions:
    return JobOptions(
        heartbeat_timeout_seconds=settings.heartbeat_timeout_seconds,
        max_attempts=kind.max_attempts or settings.max_activity_attempts,
        retry_initial_seconds=settings.retry_initial_seconds,
        retry_coefficient=settings.retry_coefficient,
        retry_max_seconds=settings.retry_max_seconds,
    )


def priority_of(kind: JobKind[Any], job: JobView) -> Priority:
    return Priority(priority_key=kind.priority, fairness_key=str(job.workspace_id))


async def launch(client: Client, job: JobView, settings: Settings) -> None:
    """Starts the job's workflow; a second call for the same job finds the running one
    and never runs a finished one again. Raises temporalio's RPCError when Temporal
    does not answer."""
    kind = get_kind(job.kind)
    job_input = JobInput(
        job_id=job.id,
        kind=job.kind,
        workspace_id=job.workspace_id,
        actor_id=job.actor_id,
        correlation_id=job.correlation_id,
        payload=job.payload,
        options=job_options(settings, kind),
    )
    try:
        await client.start_workflow(
            kind.workflow_type,
            job_input,
            id=job.workflow_id,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.JOB_KIND, job.kind),
                    SearchAttributePair(sa.WORKSPACE_ID, str(job.workspace_id)),
                    SearchAttributePair(sa.JOB_STATUS, JobStatus.queued.value),
                    SearchAttributePair(sa.JOB_ACTOR, str(job.actor_id)),
                    SearchAttributePair(sa.JOB_ID, str(job.id)),
                ]
            ),
            static_summary=job.summary,
            static_details=f"Job `{job.id}` · correlation id `{job.correlation_id}`",
            priority=priority_of(kind, job),
        )
    except WorkflowAlreadyStartedError:
        pass
