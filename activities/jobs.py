"""The lifecycle activities every kind shares: open the job (creating its row when it
was started straight through Temporal), record a cancellation request, finish it."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from hubjobs.errors import HubJobsError
from hubjobs.kinds import get_kind
from hubjobs.observability.logs import bind_job
from hubjobs.observability.telemetry import JobMetrics
from hubjobs.readmodel import lifecycle as jobs
from hubjobs.readmodel import store as read_model
from hubjobs.temporal.messages import CancelRequest, FinishJob, JobInput, JobOutcome, OpenedJob

log = logging.getLogger(__name__)


class JobActivities:
    def __init__(
        self, engine: AsyncEngine, *, default_retention: timedelta, metrics: JobMetrics
    ) -> None:
        self.engine = engine
        self.default_retention = default_retention
        self.metrics = metrics

    @activity.defn(name="open_job")
    async def open_job(self, job: JobInput) -> OpenedJob:
        """Moves the job to running. A job started straight through Temporal has no row
        yet: it is created here with the checks a start through the client makes, and
        a refused one gets a failed row and fails its workflow at once."""
        info = activity.info()
        bind_job(job)
        refused: HubJobsError | None = None
        async with self.engine.begin() as conn:
            row = await read_model.get_job(conn, job.job_id)
            if row is None:
                try:
                    # A refusal rolls back whatever the creation had written.
                    async with conn.begin_nested():
                        await jobs.create_job(
                            conn,
                            get_kind(job.kind),
                            job_id=job.job_id,
                            workspace_id=job.workspace_id,
                            actor_id=job.actor_id,
                            correlation_id=job.correlation_id,
                            payload=job.payload,
                        )
                except HubJobsError as err:
                    log.info("job %s refused at open: %s", job.job_id, err.code)
                    refused = err
            if refused is None:
                row = await read_model.mark_running(conn, job.job_id, info.workflow_run_id)
        if refused is not None:
            async with self.engine.begin() as conn:
                await jobs.record_refused(
                    conn,
                    job_id=job.job_id,
                    kind=job.kind,
                    workspace_id=job.workspace_id,
                    actor_id=job.actor_id,
                    correlation_id=job.correlation_id,
                    payload=job.payload,
                    code=refused.code,
                    message=refused.message,
                    retention=self.default_retention,
                )
            raise ApplicationError(refused.message, type=refused.code, non_retryable=True)
        assert row is not None
        return OpenedJob(
            counters=row.counters, cancel_requested=row.cancel_requested_at is not None
        )

    @activity.defn(name="record_cancel_request")
    async def record_cancel_request(self, job_id: uuid.UUID, request: CancelRequest) -> None:
        async with self.engine.begin() as conn:
            await read_model.request_cancel(conn, job_id, request.actor_id)

    @activity.defn(name="finish_job")
    async def finish_job(self, finish: FinishJob) -> JobOutcome:
        """Writes the final status (see hubjobs.jobs.finish_job); a finished row stays."""
        async with self.engine.begin() as conn:
            final, changed = await jobs.finish_job(
                conn,
                finish.job_id,
                status=finish.status,
                default_retention=self.default_retention,
                error_code=finish.error_code,
                error_message=finish.error_message,
                output=finish.output,
            )
        if final is None:
            raise ApplicationError("job not found", type="job_not_found", non_retryable=True)
        bind_job(final)
        if changed:
            seconds = None
            if final.started_at is not None and final.finished_at is not None:
                seconds = (final.finished_at - final.started_at).total_seconds()
            self.metrics.job_finished(final.kind, final.status, seconds)
            log.info("job finished: %s %s", final.status, final.error_code or "")
        return JobOutcome(
            job_id=final.id,
            status=final.status,
            counters=final.counters,
            result=final.result,
            error_code=final.error_code,
            error_message=final.error_message,
        )
