"""The lifecycle every job workflow shares, written once: open the read-model row, run
the kind's work, honour the ``cancel`` signal and Temporal cancellation alike, answer
the ``progress`` query, keep the search attributes and the UI's details current, and
finish the row with the status Temporal ends with.

Deterministic: no I/O here, everything goes through activities named by string so
that no database code is imported into the sandbox.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, ClassVar, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from hubjobs.temporal import search_attributes as sa
    from hubjobs.temporal.messages import (
        ERROR_MESSAGES,
        CancelRequest,
        Counters,
        FinishJob,
        JobInput,
        JobOutcome,
        JobProgress,
        JobProgressReport,
        JobStatus,
        OpenedJob,
    )

WorkResult = Literal["succeeded", "cancelled"]

# The read model must end up agreeing with Temporal: its writes retry until they land.
LIFECYCLE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)
LIFECYCLE_TIMEOUT = timedelta(seconds=60)


def work_retry_policy(max_attempts: int) -> RetryPolicy:
    """Transient failures retry after 2 s, 10 s, 30 s, 30 s… (seed 000), boundedly."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=5.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=max_attempts,
    )


def failure_code(err: ActivityError) -> str:
    """The stable code a failed activity ends its job with."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.non_retryable and cause.type:
        return cause.type
    if isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT:
        return "abandoned"
    return "processing_failed"


def failure_message(err: ActivityError, code: str) -> str:
    cause = err.cause
    if code in ERROR_MESSAGES:
        return ERROR_MESSAGES[code]
    # Our own refusals (typed HubJobsError raised non-retryable) carry a plain message.
    if isinstance(cause, ApplicationError):
        return cause.message
    return ERROR_MESSAGES["processing_failed"]


async def settle(handle: workflow.ActivityHandle[object]) -> bool:
    """Waits for a cancelled activity to stop; its cancellation is expected, not an error.
    True when it finished its work before the cancellation reached it."""
    try:
        await handle
    except ActivityError as err:
        if not is_cancelled_exception(err):
            raise
        return False
    return True


class JobWorkflow:
    """Base of every kind's workflow; a kind implements ``execute``."""

    kind: ClassVar[str]

    def __init__(self) -> None:
        self.job: JobInput | None = None
        self.status: JobStatus = "queued"
        self.counters = Counters()
        self.message: str | None = None
        self.cancel_request: CancelRequest | None = None
        # What the kind's work produced, handed to its result builder at the finish.
        self.output: dict[str, Any] | None = None
        # Cancelled from Temporal (the UI) while an activity was finishing anyway.
        self.cancelled_in_temporal = False

    # --- signal and query -------------------------------------------------------

    @workflow.signal(name="cancel")
    async def cancel(self, request: CancelRequest) -> None:
        """Cancellation, carrying who asked. Recorded in the read model at once; the
        running work stops at its next heartbeat or batch. Once finished, a no-op."""
        if self.cancel_request is not None or self.status in ("succeeded", "failed", "cancelled"):
            return
        self.cancel_request = request
        await self.record_cancel_request(request)

    async def record_cancel_request(self, request: CancelRequest) -> None:
        await workflow.wait_condition(lambda: self.job is not None)
        assert self.job is not None
        await workflow.execute_activity(
            "record_cancel_request",
            args=[self.job.job_id, request],
            start_to_close_timeout=LIFECYCLE_TIMEOUT,
            retry_policy=LIFECYCLE_RETRY,
            summary="Record the cancellation request",
        )

    @workflow.signal(name="report_progress")
    def report_progress(self, report: JobProgressReport) -> None:
        if self.status == "running":
            self.report(report.counters, report.message)

    @workflow.query(name="progress")
    def progress(self) -> JobProgress:
        return JobProgress(
            status=self.status,
            counters=self.counters,
            message=self.message,
            cancel_requested=self.cancel_request is not None,
        )

    # --- the lifecycle ------------------------------------------------------------

    async def execute(self, job: JobInput) -> WorkResult:
        raise NotImplementedError

    async def unless_cancelled(self, handle: workflow.ActivityHandle[Any]) -> bool:
        """Waits for a running activity unless a cancellation comes first. True when it
        finished (its result or error is in the handle), also when it did so while the
        cancellation was on its way: work completed stands (a backup's archive is kept
        and reported, never left behind unowned). False when the ``cancel`` signal
        stopped it. Cancelled from Temporal and stopped: CancelledError goes on."""
        try:
            await workflow.wait_condition(lambda: handle.done() or self.cancel_request is not None)
        except asyncio.CancelledError:
            self.cancelled_in_temporal = True
            handle.cancel()
            # Into the read model too, where an activity about to commit looks last.
            # (Patched: runs cancelled before this existed replay without it.)
            if workflow.patched("record-temporal-cancellation"):
                await self.record_cancel_request(CancelRequest())
            if await settle(handle):
                return True
            raise
        if handle.done():
            return True
        handle.cancel()
        return await settle(handle)

    def report(self, counters: Counters, message: str) -> None:
        """Progress for the query and the Temporal UI's current details."""
        self.counters = counters
        self.message = message
        workflow.set_current_details(
            f"**{counters.processed} / {counters.total}** done: {counters.succeeded} succeeded, "
            f"{counters.skipped} skipped, {counters.failed} failed"
        )

    async def run_job(self, raw: dict[str, Any]) -> JobOutcome:
        """The input arrives as plain JSON and is validated here: a service in another
        language that sends a bad one gets a workflow failed at once with
        ``invalid_payload``, never a workflow task retrying forever on decoding."""
        try:
            job = JobInput.model_validate(raw)
        except ValidationError:
            raise ApplicationError(
                ERROR_MESSAGES["invalid_payload"], type="invalid_payload", non_retryable=True
            ) from None
        if job.kind != self.kind:
            raise ApplicationError(
                f"this workflow runs {self.kind} jobs, not {job.kind}",
                type="invalid_payload",
                non_retryable=True,
            )
        self.job = job
        workflow.upsert_search_attributes(
            [
                sa.JOB_KIND.value_set(job.kind),
                sa.WORKSPACE_ID.value_set(str(job.workspace_id)),
                sa.JOB_ACTOR.value_set(str(job.actor_id)),
                sa.JOB_ID.value_set(str(job.job_id)),
                sa.JOB_STATUS.value_set("running"),
            ]
        )
        log_extra = {"job_id": str(job.job_id), "correlation_id": job.correlation_id}
        workflow_cancelled = False
        try:
            opened = await workflow.execute_activity(
                "open_job",
                job,
                result_type=OpenedJob,
                start_to_close_timeout=LIFECYCLE_TIMEOUT,
                retry_policy=work_retry_policy(job.options.max_attempts),
                summary="Open the job",
            )
            self.status = "running"
            self.report(opened.counters, "Running")
            if opened.cancel_requested and self.cancel_request is None:
                self.cancel_request = CancelRequest()
            result = await self.execute(job)
        except asyncio.CancelledError:
            workflow_cancelled, result = True, "cancelled"
        except ActivityError as err:
            if not is_cancelled_exception(err):
                code = failure_code(err)
                workflow.logger.warning("job failed: %s", code, extra=log_extra)
                return await self.finish("failed", code, failure_message(err, code))
            workflow_cancelled = self.cancel_request is None
            result = "cancelled"
        workflow_cancelled = workflow_cancelled or (
            self.cancelled_in_temporal and result == "cancelled"
        )
        outcome = await self.finish(result)
        if workflow_cancelled:
            # Cancelled from Temporal (the UI, `temporal workflow cancel`): end as
            # Cancelled there too, now that the read model says so.
            raise asyncio.CancelledError()
        return outcome

    async def finish(
        self, status: JobStatus, code: str | None = None, message: str | None = None
    ) -> JobOutcome:
        assert self.job is not None
        outcome: JobOutcome = await workflow.execute_activity(
            "finish_job",
            FinishJob(
                job_id=self.job.job_id,
                status=status,
                error_code=code,
                error_message=message,
                output=self.output,
            ),
            result_type=JobOutcome,
            start_to_close_timeout=LIFECYCLE_TIMEOUT,
            retry_policy=LIFECYCLE_RETRY,
            summary=f"Finish the job as {status}",
        )
        self.status = outcome.status
        self.report(outcome.counters, outcome.error_message or outcome.status)
        workflow.upsert_search_attributes([sa.JOB_STATUS.value_set(outcome.status)])
        if outcome.status == "failed":
            raise ApplicationError(
                outcome.error_message or "", type=outcome.error_code, non_retryable=True
            )
        return outcome
