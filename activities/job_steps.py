"""The lifecycle's local activities, retried until they land so the read model ends
agreeing with Temporal. Out of the database's reach, a step gives up after
HUBJOBS_OUTAGE_HANDOVER_SECONDS (``handing_over``) and the workflow hands it to any
worker."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from activities.deps import Deps
from activities.endings import finish, job_not_found
from activities.outages import handing_over, with_outage_retry
from hubjobs import job_rows
from hubjobs.errors import HubJobsError
from hubjobs.kinds import REGISTRY
from hubjobs.observability.logs import bind_job
from hubjobs.readmodel.views import JobView
from hubjobs.temporal.messages import CancelRequest, FinishJob, JobOutcome, RefusedStart


class JobStepActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @activity.defn
    async def finish_job(self, request: FinishJob) -> JobOutcome:
        """Writes the final status; a finished row stays as it is and is returned."""
        with handing_over(self.deps.reach):
            job = await self._job(request.job_id)
            if job is None:
                raise job_not_found()
            bind_job(job)
            ending = job_rows.Ending(
                request.status,
                error_code=request.error_code,
                error_message=request.error_message,
                attempts=request.attempts,
                attempts_failed=request.attempts_failed,
            )
            return await finish(self.deps, job, ending)

    @activity.defn
    async def durable_progress(self, job_id: uuid.UUID) -> int:
        """How far the job durably got, as its row shows it."""
        with handing_over(self.deps.reach):
            job = await self._job(job_id)
        if job is None:
            raise job_not_found()
        kind = REGISTRY.find(job.kind)
        return kind.durable_progress(job) if kind is not None else job.processed

    @activity.defn
    async def record_cancel_request(self, job_id: uuid.UUID, request: CancelRequest) -> None:
        async def record(conn: AsyncConnection) -> None:
            await job_rows.request_cancel(conn, job_id, request.actor_id, request.reason)

        with handing_over(self.deps.reach):
            await with_outage_retry(self.deps.engine, self.deps.settings, record)

    @activity.defn
    async def record_refused_start(self, refused: RefusedStart) -> None:
        """A failed row for a direct start whose input did not validate; a row that is
        there already (this job's, or another job's under the same id) is kept."""

        async def record(conn: AsyncConnection) -> None:
            row = job_rows.JobRow(
                job_id=refused.job_id,
                kind=refused.kind,
                workspace_id=refused.workspace_id,
                actor_id=refused.actor_id or job_rows.UNKNOWN_ACTOR,
                correlation_id=refused.correlation_id,
                payload=refused.payload,
                workflow_id=refused.workflow_id,
            )
            refusal = HubJobsError(refused.error_message, code=refused.error_code)
            await job_rows.keep_refused(conn, row, refusal, self.deps.default_retention)

        await with_outage_retry(self.deps.engine, self.deps.settings, record, transaction=True)

    @activity.defn
    async def cancel_run(self, workflow_id: str, run_id: str) -> None:
        """How a job cancelled by signal closes as Canceled; a closed run is fine."""
        assert self.deps.client is not None, "the worker's activities have a client"
        handle = self.deps.client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            await handle.cancel()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    async def _job(self, job_id: uuid.UUID) -> JobView | None:
        return await with_outage_retry(
            self.deps.engine, self.deps.settings, lambda conn: job_rows.get_job(conn, job_id)
        )
