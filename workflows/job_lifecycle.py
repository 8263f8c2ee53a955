"""The lifecycle every job workflow shares; a kind's workflow names its kind and work
activity (``kind_workflow``).

A job runs as attempts of the work activity, each carrying on from the last one's
cursor; only attempts without durable progress count against the kind's attempts, and
a handover costs nothing. A cancel is recorded in the read model, where the running
attempt looks between its steps and ends the job itself; the workflow finishes the row
only when no attempt can. Temporal refuses a run's signals past 10,000, so the run
counts them and continues as new past the job's ``run_signal_budget``.

Deterministic: no I/O here; activity modules are passed through the sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from temporalio import workflow
from temporalio.common import (
    Priority,
    RawValue,
    RetryPolicy,
    VersioningBehavior,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError
from temporalio.workflow import (
    ActivityCancellationType,
    ChildWorkflowCancellationType,
    ParentClosePolicy,
)

with workflow.unsafe.imports_passed_through():
    from activities.job_steps import JobStepActivities
    from activities.outages import OUT_OF_REACH
    from hubjobs.domain.text import is_key
    from hubjobs.kinds import JobKind
    from hubjobs.readmodel.status import JobStatus, status_label
    from hubjobs.readmodel.views import Counters
    from hubjobs.temporal import search_attributes as sa
    from hubjobs.temporal.failures import (
        INVALID_PAYLOAD,
        backoff_seconds,
        exhausted_code,
        judge,
        message_for,
    )
    from hubjobs.temporal.handler_args import Refused, read_argument, uuid_or_none
    from hubjobs.temporal.messages import (
        CANCEL_SIGNAL,
        COMPLETION_DELIVERY_WORKFLOW,
        PROGRESS_QUERY,
        PROGRESS_SIGNAL,
        CancelRequest,
        Checkpoint,
        CompletionRequest,
        FinishJob,
        JobInput,
        JobOptions,
        JobOutcome,
        JobProgress,
        JobProgressReport,
        RefusedStart,
        StartInput,
        WorkRequest,
        WorkResult,
        completion_workflow_id,
        job_id_from_workflow_id,
    )
    from hubjobs.webhooks.destinations import InvalidNotifyUrl
    from hubjobs.webhooks.policy import WebhooksNotConfigured

from workflows.dispatch import not_eagerly
from workflows.versioning import declare_workflow

# The read model must end up agreeing with Temporal: lifecycle writes retry until they land.
LIFECYCLE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)
LOCAL_TIMEOUT = timedelta(seconds=60)
# A lifecycle step its local activity did not land in time runs as an ordinary activity
# on any worker. Patched: recorded histories ran their steps as local activities only.
LIFECYCLE_HANDOVER = "lifecycle-steps-hand-over"
HANDED_OVER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=1.0, maximum_attempts=0
)
# The activity polls a worker keeps waiting (the SDK's default maximum): how many
# attempts in a row an idle cut-off worker may get back after it handed one over.
WORKER_POLLS = 5
# A local step whose worker found it cannot reach the database is handed over at once.
LOCAL_LIFECYCLE_RETRY = dataclasses.replace(
    LIFECYCLE_RETRY, non_retryable_error_types=[OUT_OF_REACH]
)
# One attempt per activity: the workflow, not Temporal's retry policy, decides what a
# failure costs. Liveness is the heartbeat timeout; this only bounds a runaway attempt.
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
ATTEMPT_TIMEOUT = timedelta(hours=6)
# Patches: what a run of this build does differently from recorded ones.
# A job cancelled by signal closes as Canceled in Temporal (before: Completed).
CLOSE_CANCELLED_AS_CANCELED = "close-cancelled-as-canceled"
# A small job is tried whole first, as a local activity. Recorded histories started with
# an ordinary attempt, then (SMALL_JOB_AT_ONCE) with a per-kind activity by its recorded
# name; now it is the kind's work activity, whole (SMALL_JOB_WHOLE).
SMALL_JOB_AT_ONCE = "small-job-at-once"
RECORDED_SMALL_JOB_STEP = "tag_small_course"
SMALL_JOB_WHOLE = "small-job-whole"
# A job with a notify_url starts its webhook's delivery (a child workflow) once final.
COMPLETION_WEBHOOK = "completion-webhook"
# A run past its job's run_signal_budget continues as new.
RUN_SIGNAL_BUDGET = "run-signal-budget"
# A full run continues as new without waiting for its attempt to hand the job over.
RUN_FULL_LEAVES_ATTEMPT = "run-full-leaves-attempt"
# A cancel's record held up by the database goes to any worker soon: its local activity
# holds the workflow task, on which the attempt's query for the request waits.
CANCEL_LOCAL_SECONDS = 2.0
# A run's ``JobFailedItems``, its details and its activities' summaries need no patch:
# Temporal compares neither a search attribute upsert's values nor a summary on replay.

# A job failed for its notify_url itself has no webhook to deliver.
NOT_NOTIFIED = frozenset({InvalidNotifyUrl.code, WebhooksNotConfigured.code})

W = TypeVar("W", bound="JobWorkflow")


# Pinned: a job lives across many workflow tasks, and a new build may change the
# lifecycle's commands; replaying its history there could fail it midway.
JOB_VERSIONING = VersioningBehavior.PINNED


def kind_workflow(
    kind: JobKind[Any], *, versioning: VersioningBehavior
) -> Callable[[type[W]], type[W]]:
    """Declares a kind's workflow: its Temporal type from the kind's name, its versioning
    behaviour stated here (workflows/versioning.py), and its run."""
    declare_versioned = declare_workflow(kind.workflow_type, versioning)

    def declare(cls: type[W]) -> type[W]:
        # The SDK wants the run method on the class itself, in the class's module.
        async def run(self: JobWorkflow, *job: Any) -> JobOutcome:
            return await self.run_job(job)

        run.__module__ = cls.__module__
        run.__qualname__ = f"{cls.__qualname__}.{run.__name__}"
        setattr(cls, run.__name__, workflow.run(run))
        cls.kind = kind
        return declare_versioned(cls)

    return declare


class FailJob(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(code)
        self.code = code
        self.message = message


class JobWorkflow:
    """Base of every kind's workflow: subclasses set ``work`` (the kind's work activity,
    by reference); ``kind_workflow`` gives them their run."""

    kind: ClassVar[JobKind[Any]]
    work: ClassVar[Callable[..., Any]]

    def __init__(self) -> None:
        self.job: JobInput | None = None
        self.status = JobStatus.queued
        self.counters = Counters()
        self.message: str | None = None
        self.cancel_request: CancelRequest | None = None
        self.cursor: dict[str, Any] | None = None
        self.progress_mark = 0
        self.attempts = 0
        self.attempts_failed = 0
        self.stalls = 0
        self.refused_signals = 0
        self.early_refusal: tuple[str, Refused] | None = None
        # Signals this run took, whatever they said (Temporal's limit counts them all).
        self.signals = 0
        self.outage_since: datetime | None = None
        self.handovers = 0
        # Attempts that failed since the last that did not: what the next one retries.
        self.failures_in_row = 0
        self.running: workflow.ActivityHandle[WorkResult] | None = None

    # --- signals and query ------------------------------------------------------
    # Arguments are untyped and read here, so nothing sent from outside can fail a
    # workflow task; one that does not read is refused: counted, and changes nothing.

    @workflow.signal(name=CANCEL_SIGNAL)
    async def cancel(self, *args: Any) -> None:
        """No argument, ``null``, ``{}`` or ``{"actor_id", "reason"}``; recorded in the
        read model at once. Once finished, a no-op."""
        self.signals += 1
        read = read_argument(CancelRequest, args, optional=True)
        if isinstance(read, Refused):
            self._refuse(CANCEL_SIGNAL, read)
            return
        if self.cancel_request is not None or self.status.is_final:
            return
        self.cancel_request = read.value
        await self._record_cancel(read.value)

    @workflow.signal(name=PROGRESS_SIGNAL)
    def report_progress(self, *args: Any) -> None:
        """How far the running attempt got; one behind what is known (a late one from an
        earlier attempt) is ignored."""
        self.signals += 1
        read = read_argument(JobProgressReport, args)
        if isinstance(read, Refused):
            self._refuse(PROGRESS_SIGNAL, read)
            return
        report = read.value
        behind = report.counters.processed < self.counters.processed
        if self.status == JobStatus.running and not behind:
            self.report(report.counters, report.message)

    @workflow.signal(dynamic=True)
    def unknown_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Counted, never read (the SDK would otherwise keep it for a handler)."""
        self.signals += 1
        self._refuse(name, Refused("no signal of that name"))

    @workflow.query(name=PROGRESS_QUERY)
    def progress(self, *args: Any) -> JobProgress:
        """The job's progress as of the last report; any argument is ignored."""
        return JobProgress(
            status=self.status,
            counters=self.counters,
            message=self.message,
            cancel_requested=self.cancel_request is not None,
            attempts=self.attempts,
            attempts_failed=self.attempts_failed,
            refused_signals=self.refused_signals,
        )

    def _refuse(self, name: str, refused: Refused) -> None:
        """Counted; logged at each power of two, so a flood costs no line apiece."""
        self.refused_signals += 1
        if self.job is None:
            # The count lacks the earlier runs' until the input is read: logged then.
            self.early_refusal = (name, refused)
            return
        if self.refused_signals & (self.refused_signals - 1) == 0:
            self._log_refusal(name, refused)

    def _log_early_refusal(self, before: int) -> None:
        """The refusals before the input was read, if they passed a power of two."""
        if self.early_refusal is None:
            return
        if 1 << (self.refused_signals.bit_length() - 1) > before:
            self._log_refusal(*self.early_refusal)
        self.early_refusal = None

    def _log_refusal(self, name: str, refused: Refused) -> None:
        workflow.logger.warning(
            "signal %.100s refused: %s (%d refused in all)",
            name,
            refused.reason,
            self.refused_signals,
            extra=self._log_ids(),
        )

    def _run_full(self) -> bool:
        """This run has taken its job's signal budget: time to continue as new."""
        assert self.job is not None
        if self.signals < self.job.options.run_signal_budget:
            return False
        return workflow.patched(RUN_SIGNAL_BUDGET)

    def _log_ids(self) -> dict[str, str]:
        if self.job is None:
            return {}
        return {"job_id": str(self.job.job_id), "correlation_id": self.job.correlation_id}

    # --- the lifecycle ----------------------------------------------------------------

    async def run_job(self, args: Sequence[Any]) -> JobOutcome:
        """The input is plain JSON (``StartInput``), read here: a bad one fails the
        workflow at once with ``invalid_payload``, never a workflow task for ever."""
        job = await self._read_input(args)
        self.job = job
        if job.checkpoint is not None:
            self._restore(job.checkpoint)
        self._log_early_refusal(job.checkpoint.refused_signals if job.checkpoint else 0)
        self.status = JobStatus.running
        workflow.upsert_search_attributes(
            [
                sa.JOB_KIND.value_set(job.kind),
                sa.WORKSPACE_ID.value_set(str(job.workspace_id)),
                sa.JOB_ACTOR.value_set(str(job.actor_id)),
                sa.JOB_ID.value_set(str(job.job_id)),
                sa.JOB_STATUS.value_set(JobStatus.running),
            ]
        )
        cancelled_in_temporal = False
        try:
            outcome = await self._attempt_until_done(job)
        except asyncio.CancelledError:
            cancelled_in_temporal = True
            outcome = await self._cancelled_in_temporal()
        except FailJob as failure:
            workflow.logger.warning(
                "job failed: %s",
                failure.code,
                extra={"job_id": str(job.job_id), "correlation_id": job.correlation_id},
            )
            outcome = await self._finish(JobStatus.failed, failure.code, failure.message)
        self._close(outcome)
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._notify(job, outcome)
        if outcome.status == JobStatus.cancelled:
            if cancelled_in_temporal:
                # Cancelled from Temporal: Canceled there too, now the row says so.
                raise asyncio.CancelledError()
            if workflow.patched(CLOSE_CANCELLED_AS_CANCELED):
                await self._close_as_canceled()
        if outcome.status == JobStatus.failed:
            raise ApplicationError(
                outcome.error_message or "", type=outcome.error_code, non_retryable=True
            )
        return outcome

    async def _attempt_until_done(self, job: JobInput) -> JobOutcome:
        done = await self._at_once(job)
        if done is not None:
            return done
        options = job.options
        while True:
            if self.cancel_request is not None:
                return await self._finish(JobStatus.cancelled)
            if self._run_full():
                await self._continue_as_new(job)
            self.attempts += 1
            request = WorkRequest(
                job=job,
                cursor=self.cursor,
                attempt=self.attempts,
                attempts_failed=self.attempts_failed,
                outage_since=self.outage_since,
            )
            with not_eagerly() if self.outage_since is not None else nullcontext():
                self.running = workflow.start_activity_method(
                    type(self).work,
                    request,
                    start_to_close_timeout=ATTEMPT_TIMEOUT,
                    heartbeat_timeout=timedelta(seconds=options.heartbeat_timeout_seconds),
                    retry_policy=ONE_ATTEMPT,
                    # Asked to hand over (the run is full), it does so at its next step.
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=self._attempt_summary(),
                    priority=self._priority(job),
                )
            try:
                result = await self._attempt_result(job)
            except ActivityError as err:
                self.running = None
                self.failures_in_row += 1
                await self._after_failure(err, job)
                continue
            self.running = None
            self.failures_in_row = 0
            if result.outcome is not None:
                return result.outcome
            # Handed over: carry on in a new attempt, at no cost.
            if result.beat.progress > self.progress_mark:
                self.stalls = 0
            self.progress_mark = max(self.progress_mark, result.beat.progress)
            self.cursor = result.beat.cursor
            if result.outage_since is not None:
                await self._after_handover(result.outage_since, options)
            else:
                self.outage_since = None
                self.handovers = 0
                self.report(result.counters, result.message)
            if workflow.info().is_continue_as_new_suggested() or self._run_full():
                await self._continue_as_new(job)

    def _attempt_summary(self) -> str:
        """The UI's name of an attempt: its slice, and its try after failures."""
        summary = f"{self.kind.title}, slice {self.attempts}"
        failures = self.failures_in_row
        if failures:
            after = "a failure" if failures == 1 else f"{failures} failures"
            summary += f", attempt {failures + 1} after {after}"
        return summary

    async def _attempt_result(self, job: JobInput) -> WorkResult:
        """Shielded: cancelled from Temporal, the attempt ends the job itself. A full run
        continues as new at once (waiting would let a flood fill it); the attempt finds
        its run gone at its next heartbeat, its committed work kept."""
        running = self.running
        assert running is not None
        await workflow.wait_condition(lambda: running.done() or self._run_full())
        if not running.done():
            if workflow.patched(RUN_FULL_LEAVES_ATTEMPT):
                await self._continue_as_new(job)
            running.cancel()
        result: WorkResult = await asyncio.shield(running)
        return result

    async def _continue_as_new(self, job: JobInput) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            job.model_copy(update={"checkpoint": self._checkpoint()}),
            task_timeout=timedelta(seconds=job.options.workflow_task_timeout_seconds),
        )

    async def _at_once(self, job: JobInput) -> JobOutcome | None:
        """A ``whole_when_small`` kind's first try: its work activity, local and whole, in
        one transaction. No outcome means nothing changed, and the ordinary attempts take
        the job. Bounded as a lifecycle step, shielded as an attempt."""
        if not self.kind.whole_when_small or self.attempts or self.cancel_request is not None:
            return None
        step: Any = type(self).work
        if not workflow.patched(SMALL_JOB_WHOLE):
            if not workflow.patched(SMALL_JOB_AT_ONCE):
                return None
            step = RECORDED_SMALL_JOB_STEP
        request = WorkRequest(job=job, attempt=1, attempts_failed=self.attempts_failed, whole=True)
        self.running = workflow.start_local_activity(
            step,
            request,
            result_type=WorkResult,
            # As a lifecycle step: past it the attempts take the job, on any worker.
            start_to_close_timeout=min(
                timedelta(seconds=job.options.lifecycle_local_seconds), LOCAL_TIMEOUT
            ),
            retry_policy=ONE_ATTEMPT,
            summary=f"{self.kind.title}, at once",
        )
        try:
            result: WorkResult = await asyncio.shield(self.running)
        except ActivityError:
            result = WorkResult()  # timed out: as if it had done nothing (its own bound)
        self.running = None
        if result.outcome is not None:
            self.attempts = request.attempt
        return result.outcome

    async def _after_handover(self, since: datetime, options: JobOptions) -> None:
        """The next attempt carries the outage on and starts after a pause, on any worker.
        An idle cut-off worker may get one back per poll it holds, so the pause grows
        only every ``WORKER_POLLS`` handovers, up to ``retry_max_seconds``."""
        self.outage_since = since
        self.handovers += 1
        steps = 1 + (self.handovers - 1) // WORKER_POLLS
        pause = min(options.handover_pause_seconds * steps, options.retry_max_seconds)
        workflow.logger.info("attempt %d handed over: database out of reach", self.attempts)
        await self._pause(pause)

    async def _after_failure(self, err: ActivityError, job: JobInput) -> None:
        """Raises FailJob when the job must end, else waits out the backoff."""
        judged = judge(err)
        if judged.refusal is not None:
            raise FailJob(judged.refusal, message_for(judged.refusal, judged.message))
        if judged.beat is not None and judged.beat.cursor is not None:
            self.cursor = judged.beat.cursor
        # The row, not the throttled last heartbeat, says whether the attempt moved it on.
        progress: int = await self._lifecycle(
            JobStepActivities.durable_progress, job.job_id, summary="Read how far the job got"
        )
        if progress > self.progress_mark:
            self.progress_mark = progress
            self.stalls = 0
        else:
            self.stalls += 1
            self.attempts_failed += 1
        workflow.logger.info(
            "attempt %d failed (%s progress, %d in a row without)",
            self.attempts,
            "after" if self.stalls == 0 else "without",
            self.stalls,
        )
        if self.stalls >= job.options.max_attempts:
            code = exhausted_code(judged)
            raise FailJob(code, message_for(code))
        await self._pause(backoff_seconds(self.stalls, job.options))

    async def _pause(self, seconds: float) -> None:
        """A wait between attempts, cut short by a cancel or a full run."""
        if seconds <= 0:
            return
        try:
            await workflow.wait_condition(
                lambda: self.cancel_request is not None or self._run_full(),
                timeout=timedelta(seconds=seconds),
            )
        except TimeoutError:
            pass

    async def _cancelled_in_temporal(self) -> JobOutcome:
        """Recorded where the attempt looks; the running attempt ends the job, or this."""
        if self.cancel_request is None:
            self.cancel_request = CancelRequest(reason="cancelled in Temporal")
            await self._record_cancel(self.cancel_request)
        if self.running is not None:
            try:
                result = await self.running
                if result.outcome is not None:
                    return result.outcome
            except ActivityError:
                pass
        return await self._finish(JobStatus.cancelled)

    # --- local activities and bookkeeping ------------------------------------------------

    async def _record_cancel(self, request: CancelRequest) -> None:
        await workflow.wait_condition(lambda: self.job is not None)
        assert self.job is not None
        await self._lifecycle(
            JobStepActivities.record_cancel_request,
            self.job.job_id,
            request,
            summary="Record the cancellation request",
            local_seconds=CANCEL_LOCAL_SECONDS,
        )

    async def _finish(
        self, status: JobStatus, code: str | None = None, message: str | None = None
    ) -> JobOutcome:
        assert self.job is not None
        outcome: JobOutcome = await self._lifecycle(
            JobStepActivities.finish_job,
            FinishJob(
                job_id=self.job.job_id,
                status=status,
                error_code=code,
                error_message=message,
                attempts=self.attempts,
                attempts_failed=self.attempts_failed,
            ),
            summary=f"Finish the job as {status}",
        )
        return outcome

    async def _lifecycle(
        self,
        step: Callable[..., Any],
        *args: Any,
        summary: str,
        local_seconds: float | None = None,
    ) -> Any:
        """A local activity; past ``lifecycle_local_seconds`` (or ``local_seconds``) or
        out of the database's reach, an ordinary activity on any worker, tried until it
        lands (a local one would hold the workflow here). A refusal goes straight up."""
        if not workflow.patched(LIFECYCLE_HANDOVER):
            return await workflow.execute_local_activity_method(
                step,
                args=args,
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LIFECYCLE_RETRY,
                summary=summary,
            )
        assert self.job is not None
        seconds = self.job.options.lifecycle_local_seconds
        bound = timedelta(seconds=min(seconds, local_seconds or seconds))
        try:
            return await workflow.execute_local_activity_method(
                step,
                args=args,
                start_to_close_timeout=min(bound, LOCAL_TIMEOUT),
                schedule_to_close_timeout=bound,
                retry_policy=LOCAL_LIFECYCLE_RETRY,
                summary=summary,
            )
        except (ActivityError, ApplicationError) as err:
            # A local activity's non-retryable error comes unwrapped.
            cause = err.cause if isinstance(err, ActivityError) else err
            if (
                isinstance(cause, ApplicationError)
                and cause.non_retryable
                and cause.type != OUT_OF_REACH
            ):
                raise
            workflow.logger.info("%s: handed to any worker", summary)
        with not_eagerly():
            handed = workflow.start_activity_method(
                step,
                args=args,
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=HANDED_OVER_RETRY,
                summary=f"{summary} (handed to any worker)",
            )
        return await handed

    async def _notify(self, job: JobInput, outcome: JobOutcome) -> None:
        """The completion webhook, from an abandoned child this run does not wait for,
        so the run closes at once."""
        # An input's notify_url: a direct start's, or a run recorded before the row held it.
        if not (outcome.notify or job.notify_url is not None):
            return
        if outcome.error_code in NOT_NOTIFIED:
            return
        if not workflow.patched(COMPLETION_WEBHOOK):
            return
        options = job.options
        try:
            await workflow.start_child_workflow(
                COMPLETION_DELIVERY_WORKFLOW,
                CompletionRequest(
                    job_id=job.job_id,
                    retry_initial_seconds=options.webhook_retry_initial_seconds,
                    retry_max_seconds=options.webhook_retry_max_seconds,
                    deadline_seconds=options.webhook_deadline_seconds,
                ),
                id=completion_workflow_id(job.kind, job.job_id),
                parent_close_policy=ParentClosePolicy.ABANDON,
                cancellation_type=ChildWorkflowCancellationType.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"Completion webhook of job {job.job_id} ({outcome.status})",
            )
        except WorkflowAlreadyStartedError:
            pass  # delivered (or being delivered) already: one delivery a job

    def _close(self, outcome: JobOutcome) -> None:
        self.status = outcome.status
        self.report(outcome.counters, outcome.error_message or outcome.status)
        counters = outcome.counters
        workflow.set_current_details(
            f"**{status_label(outcome.status, counters.failed)}**, {counters.processed} / "
            f"{counters.total} done: {self._counts(counters)}"
        )
        workflow.upsert_search_attributes(
            [
                sa.JOB_STATUS.value_set(outcome.status),
                sa.JOB_FAILED_ITEMS.value_set(counters.failed),
            ]
        )

    def report(self, counters: Counters, message: str | None) -> None:
        """Progress for the query and the Temporal UI's current details."""
        self.counters = counters
        self.message = message or counters.describe()
        workflow.set_current_details(
            f"**{counters.processed} / {counters.total}** done: {self._counts(counters)}"
        )

    @staticmethod
    def _counts(counters: Counters) -> str:
        return (
            f"{counters.succeeded} succeeded, {counters.skipped} skipped, {counters.failed} failed"
        )

    def _priority(self, job: JobInput) -> Priority:
        """Set on every attempt, so a direct start gets what a client's start gets."""
        return Priority(
            priority_key=self.kind.priority,
            fairness_key=str(job.workspace_id) if job.options.fairness else None,
        )

    async def _read_input(self, args: Sequence[Any]) -> JobInput:
        """The input, a direct start's gaps filled from the workflow id; refused with
        ``invalid_payload`` naming the field (and a failed row when it can have one)."""
        read = read_argument(StartInput, args)
        problem = read.reason if isinstance(read, Refused) else None
        if not isinstance(read, Refused) and read.value.kind not in (None, self.kind.name):
            problem = f"kind: this workflow runs {self.kind.name} jobs"
        if problem is not None or isinstance(read, Refused):
            message = f"The job's input is not valid: {problem}."
            await self._record_refused_start(args, message)
            raise ApplicationError(message, type=INVALID_PAYLOAD, non_retryable=True)
        start = read.value
        workflow_id = workflow.info().workflow_id
        job_id = start.job_id or job_id_from_workflow_id(workflow_id, self.kind.name)
        return JobInput(
            job_id=job_id,
            kind=self.kind.name,
            workspace_id=start.workspace_id,
            actor_id=start.actor_id,
            correlation_id=start.correlation_id or _default_correlation_id(workflow_id, job_id),
            payload=start.payload,
            options=start.options,
            checkpoint=start.checkpoint,
            notify_url=start.notify_url,
            idempotency_key=start.idempotency_key,
        )

    async def _record_refused_start(self, args: Sequence[Any], message: str) -> None:
        """A failed row, so the caller finds out why in the read model too."""
        refused = _refused_start(args, self.kind.name, workflow.info().workflow_id, message)
        if refused is None:
            return
        await workflow.execute_local_activity_method(
            JobStepActivities.record_refused_start,
            refused,
            start_to_close_timeout=LOCAL_TIMEOUT,
            retry_policy=LIFECYCLE_RETRY,
            summary="Record the refused start",
        )

    async def _close_as_canceled(self) -> None:
        """Asks Temporal to cancel this run (a workflow cannot close itself Canceled)."""
        info = workflow.info()
        await workflow.execute_local_activity_method(
            JobStepActivities.cancel_run,
            args=[info.workflow_id, info.run_id],
            start_to_close_timeout=LOCAL_TIMEOUT,
            retry_policy=LIFECYCLE_RETRY,
            summary="Close the run as cancelled",
        )
        await workflow.wait_condition(lambda: False)

    def _checkpoint(self) -> Checkpoint:
        return Checkpoint(
            cursor=self.cursor,
            progress=self.progress_mark,
            attempts=self.attempts,
            attempts_failed=self.attempts_failed,
            stalls=self.stalls,
            outage_since=self.outage_since,
            handovers=self.handovers,
            refused_signals=self.refused_signals,
            counters=self.counters,
            message=self.message,
        )

    def _restore(self, checkpoint: Checkpoint) -> None:
        self.cursor = checkpoint.cursor
        self.progress_mark = checkpoint.progress
        self.attempts = checkpoint.attempts
        self.attempts_failed = checkpoint.attempts_failed
        self.stalls = checkpoint.stalls
        self.outage_since = checkpoint.outage_since
        self.handovers = checkpoint.handovers
        # Added to: signals of this run's first task may have been counted already.
        self.refused_signals += checkpoint.refused_signals
        if checkpoint.counters is not None:
            self.report(checkpoint.counters, checkpoint.message)


def _default_correlation_id(workflow_id: str, job_id: uuid.UUID) -> str:
    return workflow_id if is_key(workflow_id) else str(job_id)


def _refused_start(
    args: Sequence[Any], kind: str, workflow_id: str, message: str
) -> RefusedStart | None:
    """What a refused input says of its job; None without a readable workspace."""
    raw = args[0] if len(args) == 1 and isinstance(args[0], dict) else {}
    workspace = uuid_or_none(raw.get("workspace_id"))
    if workspace is None:
        return None
    job_id = uuid_or_none(raw.get("job_id")) or job_id_from_workflow_id(workflow_id, kind)
    correlation = raw.get("correlation_id")
    payload = raw.get("payload")
    return RefusedStart(
        job_id=job_id,
        kind=kind,
        workspace_id=workspace,
        actor_id=uuid_or_none(raw.get("actor_id")),
        correlation_id=correlation
        if isinstance(correlation, str) and is_key(correlation)
        else _default_correlation_id(workflow_id, job_id),
        workflow_id=workflow_id,
        payload=payload if isinstance(payload, dict) else {},
        error_code=INVALID_PAYLOAD,
        error_message=message,
    )
