"""The lifecycle activities every kind shares: open the job (creating its row when it
was started straight through Temporal), record a cancellation request, finish it."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from hubjobs import read_model
from hubjobs.errors import HubJobsError
from hubjobs.jobs import create_job
from hubjobs.kinds import get_kind
from hubjobs.models import CancelRequest, Counters, FinishJob, JobInput, JobOutcome, OpenedJob

log = logging.getLogger(__name__)


class JobActivities:
    def __init__(self, engine: AsyncEngine, *, default_retention: timedelta) -> None:
        self.engine = engine
        self.default_retention = default_retention

    @activity.defn(name="open_job")
    async def open_job(self, job: JobInput) -> OpenedJob:
        """Moves the job to running. A job started straight through Temporal has no row
        yet: it is created here, with the same checks a start through the client makes."""
        info = activity.info()
        async with self.engine.begin() as conn:
            row = await read_model.get_job(conn, job.job_id)
            if row is None:
                try:
                    await create_job(
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
                    raise ApplicationError(err.message, type=err.code, non_retryable=True) from None
            row = await read_model.mark_running(conn, job.job_id, info.workflow_run_id)
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
        """Writes the final status. Counters are recounted from the items (the truth),
        the kind builds the result of a success. A finished row is left as it is."""
        async with self.engine.begin() as conn:
            job = await read_model.get_job(conn, finish.job_id)
            if job is None:
                raise ApplicationError("job not found", type="job_not_found", non_retryable=True)
            kind = get_kind(job.kind)
            counters = await recount(conn, finish.job_id) or job.counters
            result = None
            if finish.status == "succeeded":
                payload = kind.payload_model.model_validate(job.payload)
                result = kind.build_result(payload, counters)
            final = await read_model.finish(
                conn,
                finish.job_id,
                status=finish.status,
                retention=kind.retention or self.default_retention,
                result=result,
                result_content_type=kind.result_content_type if result is not None else None,
                error_code=finish.error_code,
                error_message=finish.error_message,
            )
        assert final is not None
        return JobOutcome(
            job_id=final.id,
            status=final.status,
            counters=final.counters,
            result=final.result,
            error_code=final.error_code,
            error_message=final.error_message,
        )


async def recount(conn: AsyncConnection, job_id: uuid.UUID) -> Counters | None:
    """Sets the job's counters from its items' states; None for a kind without items."""
    row = (
        (
            await conn.execute(
                text(
                    """
                WITH counted AS (
                    SELECT count(*) AS total,
                           count(*) FILTER (WHERE state <> 'pending') AS processed,
                           count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
                           count(*) FILTER (WHERE state = 'skipped') AS skipped,
                           count(*) FILTER (WHERE state = 'failed') AS failed
                      FROM job_items WHERE job_id = :id
                )
                UPDATE jobs j SET total = c.total, processed = c.processed,
                       succeeded = c.succeeded, skipped = c.skipped, failed = c.failed
                  FROM counted c
                 WHERE j.id = :id AND c.total > 0 AND j.status IN ('queued', 'running')
             RETURNING c.total, c.processed, c.succeeded, c.skipped, c.failed
                """
                ),
                {"id": job_id},
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else Counters.model_validate(dict(row))
