"""Maintenance, run by Temporal Schedules: the retention sweep (seed 004's expired-job
sweep) and the reconciler that brings the read model into line with Temporal."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.base import Deps, finish, with_outage_retry
from hubjobs.kinds import REGISTRY
from hubjobs.readmodel import store
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.temporal.failures import (
    ABANDONED,
    PROCESSING_FAILED,
    TERMINATED,
    TIMED_OUT,
    message_for,
)
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

Verdict = tuple[JobStatus, str | None, str | None]


class MaintenanceActivities:
    def __init__(self, deps: Deps) -> None:
        assert deps.client is not None, "maintenance talks to Temporal"
        self.deps = deps
        self.client = deps.client

    @activity.defn
    async def sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Removes expired jobs (their items go with them) in batches of ``batch``, each
        after its kind's expire hook, until none is left (or ``limit`` went); a hook
        that fails keeps its row for a later sweep."""
        removed = kept = 0
        while removed + kept < request.limit:
            batch_removed, batch_kept = await with_outage_retry(
                self.deps.engine,
                self.deps.settings,
                lambda conn: self._sweep_batch(conn, request),
                transaction=True,
                on_wait=activity.heartbeat,
            )
            activity.heartbeat(removed)
            removed += batch_removed
            kept += batch_kept
            if batch_removed + batch_kept < request.batch:
                break
        if removed or kept:
            log.info("retention sweep removed %d jobs, kept %d", removed, kept)
        return SweepResult(removed=removed, kept=kept, more=removed + kept >= request.limit)

    async def _sweep_batch(self, conn: AsyncConnection, request: SweepRequest) -> tuple[int, int]:
        removed: list[uuid.UUID] = []
        kept: list[uuid.UUID] = []
        for job in await store.lock_expired(conn, request.cutoff, request.batch):
            kind = REGISTRY.find(job.kind)
            if kind is not None and kind.expire is not None:
                try:
                    await kind.expire(job, self.deps.settings)
                except Exception:
                    log.exception("expire hook of job %s (%s) failed", job.id, job.kind)
                    kept.append(job.id)
                    continue
            removed.append(job.id)
        await store.delete_jobs(conn, removed)
        await store.postpone_expiry(conn, kept, request.cutoff + HOOK_RETRY_AFTER)
        return len(removed), len(kept)

    @activity.defn
    async def reconcile(self, request: ReconcileRequest) -> ReconcileResult:
        """Unfinished rows whose workflow has closed (terminated, timed out, or finished
        while its final write failed) get the status Temporal ended with; queued rows
        whose workflow never started are started."""

        async def select(conn: AsyncConnection) -> list[JobView]:
            return await store.unfinished_jobs(
                conn, older_than=timedelta(seconds=request.grace_seconds), limit=request.limit
            )

        unfinished = await with_outage_retry(self.deps.engine, self.deps.settings, select)
        finished = restarted = 0
        for job in unfinished:
            activity.heartbeat()
            try:
                verdict = await self._closed_status(job)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                if job.status == JobStatus.queued:
                    log.warning("job %s had no workflow; starting it", job.id)
                    await launch(self.client, job, self.deps.settings)
                    restarted += 1
                    continue
                verdict = (JobStatus.failed, ABANDONED, message_for(ABANDONED))
            if verdict is None:
                continue
            status, code, message = verdict
            outcome = await finish(self.deps, job, status, error_code=code, error_message=message)
            if outcome.status == status and outcome.error_code == code:
                log.warning("job %s brought into line with Temporal: %s (%s)", job.id, status, code)
                finished += 1
        return ReconcileResult(checked=len(unfinished), finished=finished, restarted=restarted)

    async def _closed_status(self, job: JobView) -> Verdict | None:
        """How the job's workflow ended, or None while it runs."""
        handle = self.client.get_workflow_handle(job.workflow_id, result_type=JobOutcome)
        status = (await handle.describe()).status
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
        try:
            outcome = await handle.result()
        except WorkflowFailureError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type:
                return JobStatus.failed, cause.type, message_for(cause.type, cause.message)
            return JobStatus.failed, PROCESSING_FAILED, message_for(PROCESSING_FAILED)
        return outcome.status, outcome.error_code, outcome.error_message
