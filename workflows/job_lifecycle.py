"""The lifecycle every job workflow shares, written once. A kind's workflow only names
its kind and its work activity (see ``kind_workflow``).

A job runs as attempts of its kind's work activity, each carrying on from the cursor
of the one before. The first opens the read-model row, and the attempt that completes
the work finishes it. A kind whose small jobs can be done whole in one transaction
(``whole_when_small``) has its first attempt run as a local activity, whole: a small
job is then one workflow task and one commit; any other job it leaves as it found it. Between
attempts the workflow judges each failure: only attempts that made no durable progress
count against the kind's attempts (see hubjobs.temporal.failures); an attempt that
handed its job over (time slice over, worker shutting down) costs nothing.

Cancellation, by the ``cancel`` signal or from Temporal (the UI), is recorded in the
read model, where the running attempt looks between its steps; the attempt then ends
the job cancelled itself, its work done kept. The workflow finishes the row through a
local activity only when no attempt can: a failure, or no attempt running.

Temporal refuses a run's signals past 10,000, and a long job's own progress reports
are signals: the run counts every signal it takes (refused ones included) and, past
the job's ``run_signal_budget``, asks its attempt to hand the job over at its next
step and continues as new, so that no job and no flood reaches the limit. A refused
signal costs the workflow a count, and a log line at each power of two.

A worker that cannot reach the database hands the job over: its attempt returns after
a bounded wait with when the outage began (``outage_since``), carried to the next
attempt, which starts after a short pause and never eagerly on the same worker. A
lifecycle step that its local activity cannot get through within the job's
``lifecycle_local_seconds`` runs again as an ordinary activity, on any worker.

Deterministic: no I/O here; activities are called by reference, their modules passed
through the sandbox.
"""

from __future__ import annotations

import asyncio
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
    from hubjobs.temporal.handler_args import Refused, read_argument
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
# A lifecycle step its local activity did not get through in time (the workflow's worker
# cannot reach the database) runs as an ordinary activity on whichever worker polls,
# tried again a second after each failure until it lands. Patched: recorded histories
# ran their steps as local activities only.
LIFECYCLE_HANDOVER = "lifecycle-steps-hand-over"
HANDED_OVER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=1.0, maximum_attempts=0
)
# The activity polls a worker keeps waiting (the SDK's default maximum): how many
# attempts in a row an idle cut-off worker may get back after it handed one over.
WORKER_POLLS = 5
# A local step whose worker found it cannot reach the database is handed over at once.
LOCAL_LIFECYCLE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
    non_retryable_error_types=[OUT_OF_REACH],
)
# One attempt per activity: the workflow, not Temporal's retry policy, decides what a
# failure costs. Liveness is the heartbeat timeout; this only bounds a runaway attempt.
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
ATTEMPT_TIMEOUT = timedelta(hours=6)
# Patches: what a run started on this build does differently from one recorded before.
# A job cancelled by signal closes as Canceled in Temporal, not Completed (the UI's list
# then tells it from a success); before, such runs completed.
CLOSE_CANCELLED_AS_CANCELED = "close-cancelled-as-canceled"
# A job whose kind does small jobs whole in one transaction tries that first, as a
# local activity: one workflow task and one commit instead of an activity task between
# two workflow tasks, open, then batch and finish. Recorded histories started with an
# ordinary attempt; later ones (SMALL_JOB_AT_ONCE) ran a small-job activity of the kind's
# own, by its recorded name; now it is the kind's work activity, whole (SMALL_JOB_WHOLE).
SMALL_JOB_AT_ONCE = "small-job-at-once"
RECORDED_SMALL_JOB_STEP = "tag_small_course"
SMALL_JOB_WHOLE = "small-job-whole"
# A job started with a notify_url starts its completion webhook's delivery (a child
# workflow, workflows/completion_delivery.py) once its row is final.
COMPLETION_WEBHOOK = "completion-webhook"
# A run past its job's run_signal_budget continues as new; recorded histories took
# their signals to the end of the run.
RUN_SIGNAL_BUDGET = "run-signal-budget"
# A full run continues as new without its attempt; recorded histories cancelled the
# attempt and waited for it to hand the job over.
RUN_FULL_LEAVES_ATTEMPT = "run-full-leaves-attempt"
# A cancellation's record held up by the database is handed to any worker soon: a local
# activity holds the workflow task, and the attempt's query for the request waits on it.
CANCEL_LOCAL_SECONDS = 2.0
# A run's ``JobFailedItems``, its details and its activities' summaries need no patch:
# Temporal compares neither a search attribute upsert's values nor a summary on replay.

# A job failed for its notify_url itself has no webhook to deliver.
NOT_NOTIFIED = frozenset({InvalidNotifyUrl.code, WebhooksNotConfigured.code})

W = TypeVar("W", bound="JobWorkflow")


# Job workflows are pinned: a running job finishes on the build that started it. A job
# lives for minutes or hours across many workflow tasks, and a new build may change the
# lifecycle's commands; replaying its history on that build could fail it midway. A kind
# whose workflow is one short step could auto-upgrade instead; none does today.
JOB_VERSIONING = VersioningBehavior.PINNED


def kind_workflow(
    kind: JobKind[Any], *, versioning: VersioningBehavior
) -> Callable[[type[W]], type[W]]:
    """Declares a kind's workflow: its Temporal type comes from the kind's name, and its
    versioning behaviour is stated where it is declared (pinned: stays on the build that
    started it; auto-upgrade: moves to the current build at its next workflow task). See
    workflows/versioning.py for the twin an unversioned worker runs."""
    declare_versioned = declare_workflow(kind.workflow_type, versioning)

    def declare(cls: type[W]) -> type[W]:
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
    by reference) and a ``@workflow.run`` that calls ``run_job``."""

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
    # Each takes its arguments untyped and reads them itself (hubjobs.temporal.handler_args):
    # nothing sent from outside (the Temporal CLI, the UI, another SDK) can fail a
    # workflow task. An argument that does not read, or a signal of another name, is
    # refused: counted in the progress query's ``refused_signals``, and it changes nothing.

    @workflow.signal(name=CANCEL_SIGNAL)
    async def cancel(self, *args: Any) -> None:
        """Cancellation: no argument, ``null``, ``{}`` or ``{"actor_id", "reason"}`` (who
        asked, when known). Recorded in the read model at once, where the running
        attempt looks between its steps. Once finished, a no-op."""
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
        """How far the running attempt got (sent by attempts about once a second); a
        report behind what is known already (a late one from an earlier attempt) is
        ignored."""
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
        """A signal of a name this workflow does not take: counted, its arguments never
        read (the SDK would otherwise keep it, waiting for a handler of that name)."""
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
        """Counted; logged at the 1st, 2nd, 4th, 8th... refusal of the job, so that a
        flood of them costs the workflow (and each replay of it) no line apiece."""
        self.refused_signals += 1
        if self.job is None:
            # Before the run reads its input, its count lacks the earlier runs': counted
            # from 0, it would log again what they logged. Logged once the input is read.
            self.early_refusal = (name, refused)
            return
        if self.refused_signals & (self.refused_signals - 1) == 0:
            self._log_refusal(name, refused)

    def _log_early_refusal(self, before: int) -> None:
        """One line for the refusals a run took before it read its input, if the job's
        count passed a power of two with them."""
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
        """The input arrives as plain JSON (``StartInput``, the published contract) and
        is read here: a service in another language that sends a bad one gets a workflow
        failed at once with ``invalid_payload`` naming the field (and a failed row when
        the job id and workspace can be read), never a workflow task retrying forever."""
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
                # Cancelled from Temporal (the UI, `temporal workflow cancel`): end as
                # Canceled there too, now that the read model says so.
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
                    # Asked to hand the job over (the run is full), the attempt does so at
                    # its next step, and its result says where it got.
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
        """What the UI shows of an attempt: the slice it is, and, when a failure started
        it, which try after how many failures."""
        summary = f"{self.kind.title}, slice {self.attempts}"
        failures = self.failures_in_row
        if failures:
            after = "a failure" if failures == 1 else f"{failures} failures"
            summary += f", attempt {failures + 1} after {after}"
        return summary

    async def _attempt_result(self, job: JobInput) -> WorkResult:
        """The running attempt's result. Shielded: cancelled from Temporal, the attempt
        is not cut mid-step; it sees the recorded request and ends the job itself. Once
        the run is full, it continues as new at once, leaving the attempt to find its run
        gone at its next heartbeat and stop (work it committed is kept; the next run's
        attempt carries on after it): waiting for it would let a flood fill the run."""
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
        """A new job of a kind whose small jobs are done whole (``whole_when_small``): its
        first attempt, the kind's work activity run as a local activity with ``whole``,
        does a small job in one transaction. It hands back the outcome, or none having
        changed nothing (the job was bigger than one unit, refused, failed, or out of the
        worker's reach): the ordinary attempts then take it, the first numbered 1 as ever.
        Bounded as a lifecycle step is: it must not hold the workflow on a worker that
        cannot reach the database, and a small job's one transaction runs well within it
        (the activity bounds it by the batch deadline). Shielded as an attempt is:
        cancelled from Temporal, it is let finish, and ``_cancelled_in_temporal`` takes
        its outcome or ends the job cancelled."""
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
            # The job's lifecycle_local_seconds (30 s by default), as a lifecycle step:
            # past it the attempts take the job, on any worker.
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
        """The attempt's worker could not reach the database since ``since``: the next
        attempt carries that on (the outage is measured across attempts) and starts
        after a pause (a cancellation cuts it short), on whichever worker polls. The
        task queue gives an attempt to the longest-waiting poll, so an idle cut-off
        worker may well get the next few back, one for each of its polls (it hands them
        over at once): the pause stays ``handover_pause_seconds`` for as many handovers
        in a row as a worker has polls, then grows by as much every as many, up to the
        longest wait between attempts, so that while no worker reaches the database
        the handovers cost the history little."""
        self.outage_since = since
        self.handovers += 1
        steps = 1 + (self.handovers - 1) // WORKER_POLLS
        pause = min(options.handover_pause_seconds * steps, options.retry_max_seconds)
        workflow.logger.info("attempt %d handed over: database out of reach", self.attempts)
        if pause > 0:
            try:
                await workflow.wait_condition(
                    lambda: self.cancel_request is not None or self._run_full(),
                    timeout=timedelta(seconds=pause),
                )
            except TimeoutError:
                pass

    async def _after_failure(self, err: ActivityError, job: JobInput) -> None:
        """Judges a failed attempt; raises FailJob when the job must end, otherwise
        waits out the backoff (a cancellation cuts it short)."""
        judged = judge(err)
        if judged.refusal is not None:
            raise FailJob(judged.refusal, message_for(judged.refusal, judged.message))
        if judged.beat is not None and judged.beat.cursor is not None:
            self.cursor = judged.beat.cursor
        # The row, not the last heartbeat (throttled, it may lag the last commit), says
        # whether the attempt moved the job on.
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
        wait = backoff_seconds(self.stalls, job.options)
        if wait > 0:
            try:
                await workflow.wait_condition(
                    lambda: self.cancel_request is not None or self._run_full(),
                    timeout=timedelta(seconds=wait),
                )
            except TimeoutError:
                pass

    async def _cancelled_in_temporal(self) -> JobOutcome:
        """Cancelled from Temporal: record it where the attempt looks, let the running
        attempt end the job (its work done kept), or end it here."""
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
        """A lifecycle step, as a local activity on this worker (no task queue round
        trip). Its attempts give up on a database this worker cannot reach (a retryable
        ``database_out_of_reach``), and past the job's ``lifecycle_local_seconds`` (or
        the step's shorter ``local_seconds``) the step goes to whichever worker polls,
        as an ordinary activity tried until it lands: a local activity would keep the
        workflow on this worker however long it retried. A refusal (no such job) goes
        straight up either way."""
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
            # A local activity stopped by its non-retryable types fails with its own
            # error, not one wrapped in an ActivityError.
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
        """A job started with a notify_url, now final in the read model: its completion
        webhook goes out from a child workflow this run does not wait for (abandoned,
        and never cancelled with it), so that the run closes at once, as it would
        without one; the delivery retries for up to a day on its own."""
        # An input's notify_url: a direct start's, or a run started before the row alone
        # held it (their histories replay as they ran).
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
        """The kind's priority and the workspace as fairness key, set on every attempt:
        a job started straight through Temporal, with no priority of its own, gets
        what a start through the client gets (hubjobs.temporal.launch.priority_of)."""
        return Priority(
            priority_key=self.kind.priority,
            fairness_key=str(job.workspace_id) if job.options.fairness else None,
        )

    async def _read_input(self, args: Sequence[Any]) -> JobInput:
        """The workflow's input as a JobInput, what a direct start left out filled in
        (the job id and correlation id from the workflow id); refused with
        ``invalid_payload`` naming the field, after a failed row when it can have one."""
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
        """A failed row for a refused input whose job id and workspace can be read, so
        that the caller finds out why in the read model too."""
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
        """A job cancelled by signal: ask Temporal to cancel this run, so that it closes
        as Canceled (a workflow cannot close itself so), then end when it arrives."""
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
    """What a refused input says of its job, read field by field: None unless a job id
    (given, or from the workflow id) and a workspace can be read."""
    raw = args[0] if len(args) == 1 and isinstance(args[0], dict) else {}
    workspace = _uuid_or_none(raw.get("workspace_id"))
    if workspace is None:
        return None
    job_id = _uuid_or_none(raw.get("job_id")) or job_id_from_workflow_id(workflow_id, kind)
    correlation = raw.get("correlation_id")
    payload = raw.get("payload")
    return RefusedStart(
        job_id=job_id,
        kind=kind,
        workspace_id=workspace,
        actor_id=_uuid_or_none(raw.get("actor_id")),
        correlation_id=correlation
        if isinstance(correlation, str) and is_key(correlation)
        else _default_correlation_id(workflow_id, job_id),
        workflow_id=workflow_id,
        payload=payload if isinstance(payload, dict) else {},
        error_code=INVALID_PAYLOAD,
        error_message=message,
    )


def _uuid_or_none(value: object) -> uuid.UUID | None:
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return None
    return None
