"""Maintenance, run by Temporal Schedules: the retention sweep (seed 004's expired-job
sweep) and the reconciler that brings the read model into line with Temporal."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Literal

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
# Rows the reconciler selects a statement (up to its request's limit a run).
RECONCILE_BATCH = 100

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
        that fails keeps its row for a later sweep. One sweep at a time: a run that finds
        another one's batch under way leaves the rest to it."""
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
        if removed or kept:
            log.info("retention sweep removed %d jobs, kept %d", removed, kept)
        return SweepResult(removed=removed, kept=kept, more=removed + kept >= request.limit)

    async def _sweep_batch(
        self, conn: AsyncConnection, request: SweepRequest
    ) -> tuple[int, int] | None:
        """One batch in one transaction: (removed, kept), or None when another sweep
        holds the retention lock. Rows are read whole only for kinds with a hook."""
        if not await store.claim_retention(conn):
            return None
        expired = await store.expired_jobs(conn, request.cutoff, request.batch)
        hooks = {
            job.kind: kind.expire
            for job in expired
            if (kind := REGISTRY.find(job.kind)) is not None and kind.expire is not None
        }
        hooked = await store.get_jobs(conn, [job.id for job in expired if job.kind in hooks])
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
        await store.delete_jobs(conn, removed)
        await store.postpone_expiry(conn, kept, request.cutoff + HOOK_RETRY_AFTER)
        return len(removed), len(kept)

    @activity.defn
    async def reconcile(self, request: ReconcileRequest) -> ReconcileResult:
        """Unfinished rows whose workflow has closed (terminated, timed out, or finished
        while its final write failed) get the status Temporal ended with; queued rows
        whose workflow never started are started. A page of rows a statement."""
        checked = finished = restarted = 0
        after: store.UnfinishedJob | None = None
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
        return ReconcileResult(checked=checked, finished=finished, restarted=restarted)

    async def _unfinished(
        self, request: ReconcileRequest, after: store.UnfinishedJob | None, checked: int
    ) -> list[store.UnfinishedJob]:
        """The next page of the selection (a page a statement: 100 rows, not 500)."""

        async def select(conn: AsyncConnection) -> list[store.UnfinishedJob]:
            return await store.unfinished_jobs(
                conn,
                older_than=timedelta(seconds=request.grace_seconds),
                limit=min(RECONCILE_BATCH, request.limit - checked),
                after=after,
            )

        return await with_outage_retry(self.deps.engine, self.deps.settings, select)

    async def _reconcile(self, row: store.UnfinishedJob) -> Literal["finished", "restarted"] | None:
        """Brings one row into line: "finished", "restarted", or None (left as it is)."""
        try:
            verdict = await self._closed_status(row.workflow_id)
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
            verdict = (JobStatus.failed, ABANDONED, message_for(ABANDONED))
        if verdict is None:
            return None
        job = await self._job(row.id)
        if job is None:
            return None
        status, code, message = verdict
        outcome = await finish(self.deps, job, status, error_code=code, error_message=message)
        if outcome.status == status and outcome.error_code == code:
            log.warning("job %s brought into line with Temporal: %s (%s)", job.id, status, code)
            return "finished"
        return None

    async def _job(self, job_id: uuid.UUID) -> JobView | None:
        """The whole row, for the few the reconciler changes."""

        async def read(conn: AsyncConnection) -> JobView | None:
            return await store.get_job(conn, job_id)

        return await with_outage_retry(self.deps.engine, self.deps.settings, read)

    async def _closed_status(self, workflow_id: str) -> Verdict | None:
        """How the job's workflow ended, or None while it runs."""
        handle = self.client.get_workflow_handle(workflow_id, result_type=JobOutcome)
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
