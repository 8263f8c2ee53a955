"""Maintenance: the retention sweep and the reconciler that brings the read model into
line with Temporal."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Literal, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.deps import Deps
from activities.endings import finish
from activities.outages import with_outage_retry
from hubjobs import job_rows
from hubjobs.job_rows import audit, minutes
from hubjobs.kinds import REGISTRY
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.failures import (
    ABANDONED,
    PROCESSING_FAILED,
    TERMINATED,
    TIMED_OUT,
    message_for,
)
from hubjobs.temporal.handler_args import uuid_or_none
from hubjobs.temporal.launch import launch
from hubjobs.temporal.messages import (
    JobOutcome,
    ReconcileRequest,
    ReconcileResult,
    SweepRequest,
    SweepResult,
)

log = logging.getLogger(__name__)

# A row whose expire hook failed waits this long before the next try, so that it
# neither blocks the sweep's batch nor is hammered.
HOOK_RETRY_AFTER = timedelta(hours=1)
# Past its deadline a delivery's last try may still run, then records its failure.
DELIVERY_MARGIN = timedelta(hours=1)
# Rows the reconciler selects a statement (up to its request's limit a run).
RECONCILE_BATCH = 100
# A pending workflow task at this attempt or later: stuck, not a passing hiccup.
STUCK_ATTEMPTS = 3

# Where the reconciler looks for runs that can no longer close: every open job run.
OPEN_JOB_RUNS = f'ExecutionStatus = "Running" AND {sa.JOB_ID.name} IS NOT NULL'

Verdict = tuple[JobStatus, str | None, str | None]
T = TypeVar("T")


def task_attempt(description: WorkflowExecutionDescription) -> int:
    """The attempt of the run's pending workflow task (0: none pending): past the first,
    its task failed or timed out that many times in a row."""
    raw = description.raw_description
    return raw.pending_workflow_task.attempt if raw.HasField("pending_workflow_task") else 0


class MaintenanceActivities:
    def __init__(self, deps: Deps) -> None:
        assert deps.client is not None, "maintenance talks to Temporal"
        self.deps = deps
        self.client = deps.client

    @activity.defn
    async def sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Removes expired jobs in batches, each after its kind's expire hook (a failed
        hook keeps its row for later), up to ``limit``; one sweep at a time."""
        removed = kept = 0
        while removed + kept < request.limit:
            batch = await with_outage_retry(
                self.deps.engine,
                self.deps.settings,
                lambda conn: self._sweep_batch(conn, request),
                transaction=True,
                on_wait=activity.heartbeat,
            )
            activity.heartbeat(removed)
            if batch is None:
                log.info("retention sweep: another sweep is running")
                break
            removed += batch[0]
            kept += batch[1]
            if sum(batch) < request.batch:
                break
        audit_removed = await self._sweep_older(
            audit.delete_older, request.cutoff - self._audit_retention(), request
        )
        # The overview's ended counts: a minute goes once no window reads it.
        minutes_removed = await self._sweep_older(
            minutes.delete_older, request.cutoff - minutes.KEPT, request
        )
        if removed or kept or audit_removed or minutes_removed:
            log.info(
                "retention sweep removed %d jobs, kept %d, removed %d audit events, %d job minutes",
                removed,
                kept,
                audit_removed,
                minutes_removed,
            )
        return SweepResult(
            removed=removed,
            kept=kept,
            audit_removed=audit_removed,
            minutes_removed=minutes_removed,
            more=removed + kept >= request.limit,
        )

    async def _sweep_older(
        self,
        delete: Callable[[AsyncConnection, datetime, int], Awaitable[int]],
        before: datetime,
        request: SweepRequest,
    ) -> int:
        """Rows from before ``before`` (``delete`` takes a batch), a batch a transaction,
        up to ``limit``."""
        removed = 0
        while removed < request.limit:
            batch = await with_outage_retry(
                self.deps.engine,
                self.deps.settings,
                lambda conn: delete(conn, before, request.batch),
                transaction=True,
                on_wait=activity.heartbeat,
            )
            activity.heartbeat(removed)
            removed += batch
            if batch < request.batch:
                break
        return removed

    def _audit_retention(self) -> timedelta:
        """The longest a job is kept (the default, or a kind's own): no event of a job
        goes before the job does."""
        kept = [kind.retention for kind in REGISTRY if kind.retention is not None]
        return max([self.deps.default_retention, *kept])

    async def _sweep_batch(
        self, conn: AsyncConnection, request: SweepRequest
    ) -> tuple[int, int] | None:
        """One batch in one transaction: (removed, kept), or None when another sweep
        holds the retention lock. Rows are read whole only for kinds with a hook."""
        if not await job_rows.claim_retention(conn):
            return None
        # A job's row stays while its completion webhook may still be trying.
        delivering = timedelta(hours=self.deps.settings.webhook_deadline_hours)
        expired = await job_rows.expired_jobs(
            conn,
            request.cutoff,
            request.batch,
            deliveries_since=request.cutoff - delivering - DELIVERY_MARGIN,
        )
        hooks = {
            job.kind: kind.expire
            for job in expired
            if (kind := REGISTRY.find(job.kind)) is not None and kind.expire is not None
        }
        hooked = await job_rows.get_jobs(conn, [job.id for job in expired if job.kind in hooks])
        removed = [job.id for job in expired if job.kind not in hooks]
        kept: list[uuid.UUID] = []
        for job in hooked:
            try:
                await hooks[job.kind](job, self.deps.settings)
            except Exception:
                log.exception("expire hook of job %s (%s) failed", job.id, job.kind)
                kept.append(job.id)
                continue
            removed.append(job.id)
        await job_rows.delete_jobs(conn, removed)
        await job_rows.postpone_expiry(conn, kept, request.cutoff + HOOK_RETRY_AFTER)
        return len(removed), len(kept)

    @activity.defn
    async def reconcile(self, request: ReconcileRequest) -> ReconcileResult:
        """Unfinished rows whose workflow closed get the status Temporal ended with;
        queued rows whose workflow never started are started."""
        checked = finished = restarted = 0
        after: job_rows.UnfinishedJob | None = None
        while checked < request.limit:
            unfinished = await self._unfinished(request, after, checked)
            for row in unfinished:
                activity.heartbeat()
                outcome = await self._reconcile(row)
                finished += outcome == "finished"
                restarted += outcome == "restarted"
            checked += len(unfinished)
            if len(unfinished) < RECONCILE_BATCH:
                break
            after = unfinished[-1]
        ended = await self._end_stuck_runs(request)
        return ReconcileResult(checked=checked, finished=finished, restarted=restarted, ended=ended)

    async def _end_stuck_runs(self, request: ReconcileRequest) -> int:
        """Open runs whose job is final or asked to stop, past the grace, with failing
        workflow tasks: nothing inside can end them, so they are terminated, the job
        cancelled if not yet final (an accepted cancel is never only recorded)."""
        open_runs: dict[uuid.UUID, str] = {}
        ended = 0
        async for run in self.client.list_workflows(OPEN_JOB_RUNS, limit=request.limit):
            # None where a direct start, not hubjobs, set the job id.
            job_id = uuid_or_none(run.typed_search_attributes.get(sa.JOB_ID))
            if job_id is not None:
                open_runs[job_id] = run.id
            if len(open_runs) == RECONCILE_BATCH:
                ended += await self._end_stuck_among(open_runs, request)
                open_runs.clear()
        return ended + await self._end_stuck_among(open_runs, request)

    async def _end_stuck_among(
        self, open_runs: dict[uuid.UUID, str], request: ReconcileRequest
    ) -> int:
        if not open_runs:
            return 0
        grace = timedelta(seconds=request.grace_seconds)
        settled = await self._db(
            lambda conn: job_rows.settled_among(conn, list(open_runs), older_than=grace)
        )
        ended = 0
        for job in settled:
            activity.heartbeat()
            handle = self.client.get_workflow_handle(open_runs[job.id])
            description = await handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                continue
            if task_attempt(description) < STUCK_ATTEMPTS:
                continue
            failure = await self._last_task_failure(handle.id, description.run_id)
            status = job.status
            if not status.is_final:
                row = await self._job(job.id)
                if row is None:
                    continue
                ending = job_rows.Ending(JobStatus.cancelled)
                status = (await finish(self.deps, row, ending)).status
            await handle.terminate(reason=f"job {status}; its workflow was stuck ({failure})")
            log.warning("job %s: its stuck run terminated, the job %s", job.id, status)
            ended += 1
        return ended

    async def _unfinished(
        self, request: ReconcileRequest, after: job_rows.UnfinishedJob | None, checked: int
    ) -> list[job_rows.UnfinishedJob]:
        """The next page of the selection."""
        return await self._db(
            lambda conn: job_rows.unfinished_jobs(
                conn,
                older_than=timedelta(seconds=request.grace_seconds),
                limit=min(RECONCILE_BATCH, request.limit - checked),
                after=after,
            )
        )

    async def _reconcile(
        self, row: job_rows.UnfinishedJob
    ) -> Literal["finished", "restarted"] | None:
        """Brings one row into line: "finished", "restarted", or None (left as it is,
        flagged stuck or cleared as its workflow tasks say)."""
        try:
            description = await self.client.get_workflow_handle(row.workflow_id).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            if row.status == JobStatus.queued:
                job = await self._job(row.id)
                if job is None or job.status != JobStatus.queued:
                    return None  # removed or started meanwhile
                log.warning("job %s had no workflow; starting it", job.id)
                await launch(self.client, job, self.deps.settings)
                return "restarted"
            verdict: Verdict | None = (JobStatus.failed, ABANDONED, message_for(ABANDONED))
        else:
            verdict = await self._closed_status(row.workflow_id, description.status)
            if verdict is None:
                await self._check_stuck(row, description)
                return None
        job = await self._job(row.id)
        if job is None or verdict is None:
            return None
        status, code, message = verdict
        ending = job_rows.Ending(status, error_code=code, error_message=message)
        outcome = await finish(self.deps, job, ending)
        if outcome.status == status and outcome.error_code == code:
            log.warning("job %s brought into line with Temporal: %s (%s)", job.id, status, code)
            return "finished"
        return None

    async def _check_stuck(
        self, row: job_rows.UnfinishedJob, description: WorkflowExecutionDescription
    ) -> None:
        """A workflow whose task keeps failing is flagged stuck with the failure's type;
        cleared once it runs again."""
        attempt = task_attempt(description)
        if attempt < STUCK_ATTEMPTS:
            if row.stuck:
                await self._db(lambda conn: job_rows.clear_stuck(conn, row.id))
                log.info("job %s runs again: no longer stuck", row.id)
            return
        if row.stuck:
            return
        failure = await self._last_task_failure(row.workflow_id, description.run_id)
        reason = f"workflow task failing ({failure}), attempt {attempt}"
        if await self._db(lambda conn: job_rows.mark_stuck(conn, row.id, reason)):
            log.error(
                "job %s is stuck: its workflow task keeps failing (%s, attempt %d)",
                row.id,
                failure,
                attempt,
                extra={"job_id": str(row.id), "failure_type": failure},
            )

    async def _last_task_failure(self, workflow_id: str, run_id: str | None) -> str:
        """The last workflow task failure's type, never its message (it may quote input)."""
        history = await self.client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=self.client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id or ""),
                maximum_page_size=50,
            )
        )
        for event in history.history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attributes = event.workflow_task_failed_event_attributes
                cause = WorkflowTaskFailedCause.Name(attributes.cause)
                cause = cause.removeprefix("WORKFLOW_TASK_FAILED_CAUSE_").lower()
                kind = attributes.failure.application_failure_info.type
                return f"{kind}, {cause}" if kind else cause
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                return "timed out"
        return "unknown"

    async def _db(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        return await with_outage_retry(self.deps.engine, self.deps.settings, work)

    async def _job(self, job_id: uuid.UUID) -> JobView | None:
        """The whole row, for the few the reconciler changes."""
        return await self._db(lambda conn: job_rows.get_job(conn, job_id))

    async def _closed_status(
        self, workflow_id: str, status: WorkflowExecutionStatus | None
    ) -> Verdict | None:
        """How the job's workflow ended, or None while it runs."""
        if status in (
            None,
            WorkflowExecutionStatus.RUNNING,
            WorkflowExecutionStatus.CONTINUED_AS_NEW,
        ):
            return None
        if status == WorkflowExecutionStatus.TERMINATED:
            return JobStatus.failed, TERMINATED, message_for(TERMINATED)
        if status == WorkflowExecutionStatus.TIMED_OUT:
            return JobStatus.failed, TIMED_OUT, message_for(TIMED_OUT)
        if status == WorkflowExecutionStatus.CANCELED:
            return JobStatus.cancelled, None, None
        handle = self.client.get_workflow_handle(workflow_id, result_type=JobOutcome)
        try:
            outcome = await handle.result()
        except WorkflowFailureError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type:
                return JobStatus.failed, cause.type, message_for(cause.type, cause.message)
            return JobStatus.failed, PROCESSING_FAILED, message_for(PROCESSING_FAILED)
        return outcome.status, outcome.error_code, outcome.error_message
