"""Maintenance, run by Temporal Schedules: the retention sweep (seed 004's expired-job
sweep) and the reconciler that brings the read model into line with Temporal."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.kinds import REGISTRY
from hubjobs.observability.telemetry import JobMetrics
from hubjobs.readmodel import lifecycle as jobs
from hubjobs.readmodel.store import JOB_COLUMNS, JobView
from hubjobs.settings import Settings
from hubjobs.temporal.launch import launch
from hubjobs.temporal.messages import (
    ERROR_MESSAGES,
    JobOutcome,
    JobStatus,
    ReconcileRequest,
    ReconcileResult,
    SweepRequest,
    SweepResult,
)

log = logging.getLogger(__name__)

# A row whose expire hook failed waits this long before the next try, so that it
# neither blocks the sweep's batch nor is hammered.
HOOK_RETRY_AFTER = timedelta(hours=1)


class MaintenanceActivities:
    def __init__(
        self, engine: AsyncEngine, client: Client, settings: Settings, metrics: JobMetrics
    ) -> None:
        self.engine = engine
        self.client = client
        self.settings = settings
        self.metrics = metrics

    @activity.defn(name="sweep_expired")
    async def sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Removes up to ``limit`` expired jobs (their items go with them), each after
        its kind's expire hook; a hook that fails keeps its row for a later sweep."""
        removed: list[object] = []
        kept: list[object] = []
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(
                    text(
                        f"SELECT {JOB_COLUMNS} FROM jobs WHERE expires_at <= :cutoff "
                        "ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED"
                    ),
                    {"cutoff": request.cutoff, "limit": request.limit},
                )
            ).mappings()
            for job in [JobView.model_validate(dict(row)) for row in rows]:
                kind = REGISTRY.get(job.kind)
                if kind is not None and kind.expire is not None:
                    try:
                        await kind.expire(job)
                    except Exception:
                        log.exception("expire hook of job %s (%s) failed", job.id, job.kind)
                        kept.append(job.id)
                        continue
                removed.append(job.id)
            await conn.execute(text("DELETE FROM jobs WHERE id = ANY(:ids)"), {"ids": removed})
            await conn.execute(
                text("UPDATE jobs SET expires_at = :later WHERE id = ANY(:ids)"),
                {"ids": kept, "later": request.cutoff + HOOK_RETRY_AFTER},
            )
        if removed or kept:
            log.info("retention sweep removed %d jobs, kept %d", len(removed), len(kept))
        return SweepResult(removed=len(removed), kept=len(kept))

    @activity.defn(name="reconcile")
    async def reconcile(self, request: ReconcileRequest) -> ReconcileResult:
        """Unfinished rows whose workflow has closed (terminated, timed out, or finished
        while its final write failed) get the status Temporal ended with; queued rows
        whose workflow never started are started."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        f"SELECT {JOB_COLUMNS} FROM jobs WHERE status IN ('queued', 'running') "
                        "AND created_at < now() - make_interval(secs => :grace) "
                        "ORDER BY updated_at LIMIT :limit"
                    ),
                    {"grace": request.grace_seconds, "limit": request.limit},
                )
            ).mappings()
            unfinished = [JobView.model_validate(dict(row)) for row in rows]
        finished = restarted = 0
        for job in unfinished:
            activity.heartbeat()
            try:
                verdict = await self._closed_status(job)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                if job.status == "queued":
                    log.warning("job %s had no workflow; starting it", job.id)
                    await launch(self.client, job, self.settings)
                    restarted += 1
                    continue
                verdict = ("failed", "abandoned", ERROR_MESSAGES["abandoned"])
            if verdict is None:
                continue
            status, code, message = verdict
            async with self.engine.begin() as conn:
                final, changed = await jobs.finish_job(
                    conn,
                    job.id,
                    status=status,
                    error_code=code,
                    error_message=message,
                    default_retention=timedelta(hours=self.settings.retention_hours),
                )
            if final is not None and changed:
                log.warning("job %s brought into line with Temporal: %s (%s)", job.id, status, code)
                self.metrics.job_finished(final.kind, final.status, None)
                finished += 1
        return ReconcileResult(checked=len(unfinished), finished=finished, restarted=restarted)

    async def _closed_status(self, job: JobView) -> tuple[JobStatus, str | None, str | None] | None:
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
            return "failed", "terminated", ERROR_MESSAGES["terminated"]
        if status == WorkflowExecutionStatus.TIMED_OUT:
            return "failed", "timed_out", ERROR_MESSAGES["timed_out"]
        if status == WorkflowExecutionStatus.CANCELED:
            return "cancelled", None, None
        try:
            outcome = await handle.result()
        except WorkflowFailureError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type:
                return "failed", cause.type, ERROR_MESSAGES.get(cause.type, cause.message)
            return "failed", "processing_failed", ERROR_MESSAGES["processing_failed"]
        return outcome.status, outcome.error_code, outcome.error_message
