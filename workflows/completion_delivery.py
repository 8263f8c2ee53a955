"""A final job's completion webhook, delivered: a small workflow of its own, the job's
workflow's abandoned child (``<job workflow id>-notify``), so the job's run closes at
once. One activity, retried with backoff until the receiver takes it, refuses it for
good, or the deadline passes (then recorded failed).

Deterministic: no I/O here; the activities' module is passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.completion_delivery import CompletionDeliveryActivities
    from hubjobs.readmodel.status import NotifyState
    from hubjobs.temporal.messages import (
        COMPLETION_DELIVERY_WORKFLOW,
        CompletionRequest,
        DeliveryGaveUp,
        DeliveryReport,
    )
    from hubjobs.webhooks.delivery import TIMEOUT_SECONDS, DeliveryFailed, DeliveryRefused

from workflows.job_lifecycle import LIFECYCLE_RETRY, LOCAL_TIMEOUT
from workflows.versioning import declare_workflow

# One try: the POST's timeout and room for the row; it heartbeats every second.
TRY_TIMEOUT = timedelta(seconds=TIMEOUT_SECONDS + 20)
TRY_HEARTBEAT = timedelta(seconds=5)


# Auto-upgrade: one activity and its retries; nothing a new build could replay wrong.
@declare_workflow(COMPLETION_DELIVERY_WORKFLOW, VersioningBehavior.AUTO_UPGRADE)
class CompletionDelivery:
    @workflow.run
    async def run(self, request: CompletionRequest) -> DeliveryReport:
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=request.retry_initial_seconds),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(
                seconds=max(request.retry_max_seconds, request.retry_initial_seconds)
            ),
            maximum_attempts=0,
            non_retryable_error_types=[DeliveryRefused.code],
        )
        try:
            report: DeliveryReport = await workflow.execute_activity_method(
                CompletionDeliveryActivities.deliver_completion,
                request,
                start_to_close_timeout=TRY_TIMEOUT,
                heartbeat_timeout=TRY_HEARTBEAT,
                schedule_to_close_timeout=timedelta(seconds=request.deadline_seconds),
                retry_policy=retry,
                summary="Deliver the completion webhook",
            )
            return report
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == DeliveryRefused.code:
                return DeliveryReport(job_id=request.job_id, state=NotifyState.refused)
        # The deadline passed with the receiver still not taking it.
        await workflow.execute_activity_method(
            CompletionDeliveryActivities.record_delivery_failed,
            DeliveryGaveUp(
                job_id=request.job_id,
                error=f"{DeliveryFailed.code}: not delivered within "
                f"{request.deadline_seconds:.0f} s",
            ),
            # A lifecycle write: retried until it lands.
            start_to_close_timeout=LOCAL_TIMEOUT,
            retry_policy=LIFECYCLE_RETRY,
            summary="Record the delivery failed",
        )
        return DeliveryReport(job_id=request.job_id, state=NotifyState.failed)
