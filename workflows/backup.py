"""The Backup workflow: one activity writes the archive, heartbeating its progress; a
cancellation stops it within a heartbeat and leaves no file."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from hubjobs.temporal.messages import (
        BackupRequest,
        BackupRun,
        CancelRequest,
        JobInput,
        JobOutcome,
    )

from workflows.lifecycle import JobWorkflow, WorkResult, work_retry_policy

BACKUP_TIMEOUT = timedelta(hours=6)


@workflow.defn(name="Backup")
class BackupWorkflow(JobWorkflow):
    kind = "backup"

    @workflow.run
    async def run(self, job: dict[str, Any]) -> JobOutcome:
        return await self.run_job(job)

    async def execute(self, job: JobInput) -> WorkResult:
        if self.cancel_request is not None:
            return "cancelled"
        handle = workflow.start_activity(
            "create_backup",
            BackupRequest(job_id=job.job_id),
            result_type=BackupRun,
            start_to_close_timeout=BACKUP_TIMEOUT,
            heartbeat_timeout=timedelta(seconds=job.options.heartbeat_timeout_seconds),
            retry_policy=work_retry_policy(job.options.max_attempts),
            # The job is finished only once the activity has removed its partial file.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary="Write the backup archive",
        )
        if not await self.unless_cancelled(handle):
            return "cancelled"
        run = handle.result()
        if run.archive is None:
            self.cancel_request = self.cancel_request or CancelRequest()
            return "cancelled"
        self.output = run.archive.model_dump(mode="json")
        return "succeeded"
