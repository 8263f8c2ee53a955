"""A schedule's firing: its job created with the start checks of that moment, and the
schedule's ``keep`` once a run succeeded."""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity

from activities.deps import Deps
from activities.outages import with_outage_retry
from hubjobs import job_rows
from hubjobs.errors import HubJobsError
from hubjobs.readmodel.views import JobView
from hubjobs.schedules.definition import job_id_of_firing
from hubjobs.temporal.launch import job_start
from hubjobs.temporal.messages import FiringStart, KeepNewest, ScheduledJob

log = logging.getLogger(__name__)


class ScheduleActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @activity.defn
    async def open_firing(self, firing: ScheduledJob) -> FiringStart:
        """The firing's job row, admitted as a client's start is; a refused one is kept
        failed so the schedule's runs show it. Its id comes from the firing's workflow
        id, so a retry finds the row."""
        firing_id = activity.info().workflow_id
        assert firing_id is not None, "run by the ScheduledStart workflow"
        job_id = job_id_of_firing(firing_id)

        async def create(conn: AsyncConnection) -> tuple[JobView, HubJobsError | None]:
            existing = await job_rows.get_job(conn, job_id)
            if existing is not None:
                return existing, None
            row = job_rows.JobRow(
                job_id=job_id,
                kind=firing.kind,
                workspace_id=firing.workspace_id,
                actor_id=firing.actor_id,
                # The firing's workflow id: the schedule and the firing time.
                correlation_id=firing_id,
                payload=firing.payload,
                schedule_id=firing.schedule_id,
            )
            try:
                created = await job_rows.admit_unwatched(
                    conn,
                    row,
                    operators=self.deps.settings.hub_operators,
                    kept_for=self.deps.default_retention,
                )
                return created.job, None
            except HubJobsError as refused:
                job = await job_rows.get_job(conn, job_id)
                assert job is not None
                return job, refused

        job, refused = await with_outage_retry(
            self.deps.engine,
            self.deps.settings,
            create,
            transaction=True,
            on_wait=activity.heartbeat,
        )
        if refused is not None:
            log.info("scheduled job %s refused: %s", job.id, refused.code)
        return FiringStart(
            job_id=job.id,
            status=job.status,
            error_code=job.error_code,
            error_message=job.error_message,
            start=None if job.is_final else job_start(job, self.deps.settings),
        )

    @activity.defn
    async def keep_newest(self, request: KeepNewest) -> int:
        """Expires the schedule's successful runs but the newest ``keep``."""

        async def expire(conn: AsyncConnection) -> int:
            return await job_rows.expire_older_runs(conn, request.schedule_id, request.keep)

        expired = await with_outage_retry(self.deps.engine, self.deps.settings, expire)
        if expired:
            log.info(
                "schedule %s: %d older runs expired (keep %d)",
                request.schedule_id,
                expired,
                request.keep,
            )
        return expired
