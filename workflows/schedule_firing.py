"""A job schedule's firing: the same input, started by a Temporal Schedule, made one new
job each time. ``open_firing`` creates the row (its id from this workflow's id; a
refused start fails the firing); the kind's workflow runs as an abandoned child the
firing waits for, so the schedule's overlap policy holds; a successful run with
``keep`` then expires the older runs.

Deterministic: no I/O here; the activities' module is passed through the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.schedule_firing import ScheduleActivities
    from hubjobs.readmodel.status import JobStatus
    from hubjobs.schedules.definition import SCHEDULED_START_WORKFLOW
    from hubjobs.temporal.failures import PROCESSING_FAILED, invalid_input, message_for
    from hubjobs.temporal.handler_args import Refused, read_argument
    from hubjobs.temporal.launch import priority_of, search_attributes_of, task_timeout_of
    from hubjobs.temporal.messages import (
        FiringOutcome,
        FiringStart,
        JobOutcome,
        JobStart,
        KeepNewest,
        ScheduledJob,
    )

from workflows.job_lifecycle import LIFECYCLE_RETRY, LOCAL_TIMEOUT
from workflows.versioning import declare_workflow

# Outages are ridden out inside; anything else fails the firing after a few tries
# rather than blocking the schedule's next firings for good.
OPEN_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=5,
)
OPEN_TIMEOUT = timedelta(minutes=10)


# Auto-upgrade: a firing only opens its job and waits for it (the job's own workflow is
# pinned); moving to a new build at its next task keeps no old build alive for it.
@declare_workflow(SCHEDULED_START_WORKFLOW, VersioningBehavior.AUTO_UPGRADE)
class ScheduledStartWorkflow:
    @workflow.run
    async def run(self, *args: Any) -> FiringOutcome:
        # Read here: a bad input by hand fails the firing, not its workflow tasks.
        read = read_argument(ScheduledJob, args)
        if isinstance(read, Refused):
            raise invalid_input("firing's", read.reason)
        firing = read.value
        opened: FiringStart = await workflow.execute_activity_method(
            ScheduleActivities.open_firing,
            firing,
            start_to_close_timeout=OPEN_TIMEOUT,
            retry_policy=OPEN_RETRY,
            summary="Create the job, checking the start as of now",
        )
        if opened.start is None:
            if opened.status == JobStatus.failed:
                code = opened.error_code or PROCESSING_FAILED
                raise ApplicationError(
                    message_for(code, opened.error_message), type=code, non_retryable=True
                )
            return FiringOutcome(job_id=opened.job_id, status=opened.status)
        # Shielded, to tell this firing's cancellation (passed on to its job) from its
        # job ending cancelled on its own (reported as the job's end).
        child = asyncio.create_task(self._run_job(opened.start))
        try:
            outcome = await asyncio.shield(child)
        except asyncio.CancelledError:
            child.cancel()
            with contextlib.suppress(ChildWorkflowError):
                await child
            raise
        except WorkflowAlreadyStartedError:
            # Started meanwhile (by the reconciler): it runs on its own, and the next
            # successful run applies the keep.
            workflow.logger.warning("the job's workflow runs already: not waiting for it")
            return FiringOutcome(job_id=opened.job_id, status=JobStatus.running)
        except ChildWorkflowError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                return FiringOutcome(job_id=opened.job_id, status=JobStatus.cancelled)
            refusal = cause if isinstance(cause, ApplicationError) and cause.type else None
            code = refusal.type if refusal is not None and refusal.type else PROCESSING_FAILED
            message = message_for(code, refusal.message if refusal is not None else None)
            raise ApplicationError(message, type=code, non_retryable=True) from None
        expired = 0
        if outcome.status == JobStatus.succeeded and firing.keep:
            expired = await workflow.execute_local_activity_method(
                ScheduleActivities.keep_newest,
                KeepNewest(schedule_id=firing.schedule_id, keep=firing.keep),
                # A lifecycle write: it retries until it lands.
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LIFECYCLE_RETRY,
                summary=f"Keep the newest {firing.keep} successful runs",
            )
        return FiringOutcome(job_id=opened.job_id, status=outcome.status, expired=expired)

    async def _run_job(self, start: JobStart) -> JobOutcome:
        """The kind's workflow as this firing's child, ``<kind>-<job id>`` like any job."""
        outcome: JobOutcome = await workflow.execute_child_workflow(
            start.workflow_type,
            start.input,
            id=start.workflow_id,
            task_queue=workflow.info().task_queue,
            result_type=JobOutcome,
            parent_close_policy=ParentClosePolicy.ABANDON,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=search_attributes_of(start),
            static_summary=start.summary,
            static_details=start.details,
            priority=priority_of(start),
            task_timeout=task_timeout_of(start),
        )
        return outcome
