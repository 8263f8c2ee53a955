"""Starting a job's workflow for a recorded read-model row: used by the starter right
after the row is inserted, and by the reconciler to repair a row whose start was
recorded but whose workflow never started (the process died in between)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from hubjobs.kinds import get_kind
from hubjobs.readmodel.store import JobView
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.messages import JobInput, JobOptions


def job_options(settings: Settings, kind: str) -> JobOptions:
    return JobOptions(
        heartbeat_timeout_seconds=settings.heartbeat_timeout_seconds,
        max_attempts=get_kind(kind).max_attempts or settings.max_activity_attempts,
        chunk_size=settings.tagging_chunk_size,
    )


async def launch(client: Client, job: JobView, settings: Settings) -> None:
    """Starts the job's workflow; a second call for the same job finds the running one
    and never runs a finished one again. Raises temporalio's RPCError when Temporal
    does not answer."""
    job_input = JobInput(
        job_id=job.id,
        kind=job.kind,
        workspace_id=job.workspace_id,
        actor_id=job.actor_id,
        correlation_id=job.correlation_id,
        payload=job.payload,
        options=job_options(settings, job.kind),
    )
    try:
        await client.start_workflow(
            get_kind(job.kind).workflow,
            job_input,
            id=job.workflow_id,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.JOB_KIND, job.kind),
                    SearchAttributePair(sa.WORKSPACE_ID, str(job.workspace_id)),
                    SearchAttributePair(sa.JOB_STATUS, "queued"),
                    SearchAttributePair(sa.JOB_ACTOR, str(job.actor_id)),
                    SearchAttributePair(sa.JOB_ID, str(job.id)),
                ]
            ),
            static_summary=job.summary,
            static_details=f"Job `{job.id}` · correlation id `{job.correlation_id}`",
        )
    except WorkflowAlreadyStartedError:
        pass
