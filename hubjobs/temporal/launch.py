"""Starting a job's workflow for a recorded row: by the starter after the insert, by the
reconciler for a row whose workflow never started, and by a schedule's firing as its
child. What is started is built once here (``job_start``), with the kind's priority and
the workspace as fairness key, which its activities inherit: one workspace's flood never
starves another's job."""

from __future__ import annotations

from datetime import timedelta
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
from hubjobs.temporal.messages import JobInput, JobOptions, JobStart


def job_options(settings: Settings, kind: JobKind[Any]) -> JobOptions:
    return JobOptions(
        heartbeat_timeout_seconds=settings.heartbeat_timeout_seconds,
        max_attempts=kind.max_attempts or settings.max_activity_attempts,
        retry_initial_seconds=settings.retry_initial_seconds,
        retry_coefficient=settings.retry_coefficient,
        retry_max_seconds=settings.retry_max_seconds,
        fairness=settings.fairness,
        handover_pause_seconds=settings.handover_pause_seconds,
        lifecycle_local_seconds=settings.lifecycle_local_seconds,
        run_signal_budget=settings.run_signal_budget,
        workflow_task_timeout_seconds=settings.workflow_task_timeout_seconds,
        webhook_retry_initial_seconds=settings.webhook_retry_initial_seconds,
        webhook_retry_max_seconds=settings.webhook_retry_max_seconds,
        webhook_deadline_seconds=settings.webhook_deadline_hours * 3600,
    )


def job_input(job: JobView, options: JobOptions | None = None) -> JobInput:
    """The workflow input a job's row stands for, with ``options`` (default: none set)."""
    return JobInput(
        job_id=job.id,
        kind=job.kind,
        workspace_id=job.workspace_id,
        actor_id=job.actor_id,
        correlation_id=job.correlation_id,
        payload=job.payload,
        options=options or JobOptions(),
    )


def job_start(job: JobView, settings: Settings) -> JobStart:
    """The workflow a job's row stands for: its type, id, input and UI metadata."""
    kind = get_kind(job.kind)
    return JobStart(
        workflow_type=kind.workflow_type,
        workflow_id=job.workflow_id,
        input=job_input(job, job_options(settings, kind)),
        summary=job.summary,
        details=f"Job `{job.id}` · correlation id `{job.correlation_id}`",
        priority_key=kind.priority,
        fairness=settings.fairness,
        schedule_id=job.schedule_id,
    )


def priority_of(start: JobStart) -> Priority:
    """The kind's priority and, unless fairness is off, the workspace as fairness key (a
    UUID's 36 characters: within the server's 64-byte limit)."""
    return Priority(
        priority_key=start.priority_key,
        fairness_key=str(start.input.workspace_id) if start.fairness else None,
    )


def task_timeout_of(start: JobStart) -> timedelta:
    return timedelta(seconds=start.input.options.workflow_task_timeout_seconds)


def search_attributes_of(start: JobStart) -> TypedSearchAttributes:
    """What finds the run in the Temporal UI from its start (the workflow keeps
    ``JobStatus`` current)."""
    job = start.input
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(sa.JOB_KIND, job.kind),
        SearchAttributePair(sa.WORKSPACE_ID, str(job.workspace_id)),
        SearchAttributePair(sa.JOB_STATUS, JobStatus.queued.value),
        SearchAttributePair(sa.JOB_ACTOR, str(job.actor_id)),
        SearchAttributePair(sa.JOB_ID, str(job.job_id)),
    ]
    if start.schedule_id is not None:
        pairs.append(SearchAttributePair(sa.JOB_SCHEDULE_ID, start.schedule_id))
    return TypedSearchAttributes(pairs)


async def launch(client: Client, job: JobView, settings: Settings) -> None:
    """Starts the job's workflow; a second call for the same job finds the running one
    and never runs a finished one again. Raises temporalio's RPCError when Temporal
    does not answer."""
    start = job_start(job, settings)
    try:
        await client.start_workflow(
            start.workflow_type,
            start.input,
            id=start.workflow_id,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=search_attributes_of(start),
            static_summary=start.summary,
            static_details=start.details,
            priority=priority_of(start),
            task_timeout=task_timeout_of(start),
        )
    except WorkflowAlreadyStartedError:
        pass
