"""The Backup workflow: attempts of ``write_backup``, each the whole archive or nothing;
a cancellation stops it within a second and leaves no file."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.backup import BackupActivities
    from hubjobs.kinds.backup import BACKUP

from workflows.job_lifecycle import JOB_VERSIONING, JobWorkflow, kind_workflow


@kind_workflow(BACKUP, versioning=JOB_VERSIONING)
class BackupWorkflow(JobWorkflow):
    work = BackupActivities.write_backup
