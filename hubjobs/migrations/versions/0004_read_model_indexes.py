"""read-model indexes for 1,000,000 jobs: a workspace's jobs by status, recent failures,
the queue's counts from unfinished rows only

Revision ID: 0004
Revises: 0003_job_schedules
Create Date: 2026-11-30

- ``ix_jobs_workspace_status_created``: a workspace's jobs in one status, newest first
  (``hubjobs list --status running``, ``GET …/jobs?status=``), read straight from the
  index instead of walking the workspace's jobs of every status.
- ``ix_jobs_failed_finished``: the jobs that failed lately (the queue state's ``failed``
  counts the last hour, not every failure still within retention).
- ``ix_jobs_status_created`` becomes ``ix_jobs_unfinished_status_created``, partial on
  the unfinished rows: the queue state's queued and running counts and its oldest
  queued job read a few thousand entries, and finished rows (nearly all of them) no
  longer carry an entry each.

Plain ``CREATE INDEX`` (a restore migrates inside its one transaction, where
``CONCURRENTLY`` cannot run): on a live hub it holds writes to ``jobs`` while the three
builds run (some seconds a million rows).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003_job_schedules"
branch_labels = None
depends_on = None

UNFINISHED = "status IN ('queued', 'running')"


def upgrade() -> None:
    op.create_index(
        "ix_jobs_workspace_status_created",
        "jobs",
        ["workspace_id", "status", sa.literal_column("created_at DESC"), "id"],
        unique=False,
    )
    op.create_index(
        "ix_jobs_failed_finished",
        "jobs",
        ["finished_at"],
        unique=False,
        postgresql_where=sa.text("status = 'failed'"),
    )
    op.create_index(
        "ix_jobs_unfinished_status_created",
        "jobs",
        ["status", "created_at"],
        unique=False,
        postgresql_where=sa.text(UNFINISHED),
    )
    op.drop_index("ix_jobs_status_created", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_status_created", "jobs", ["status", "created_at"], unique=False)
    op.drop_index("ix_jobs_unfinished_status_created", table_name="jobs")
    op.drop_index("ix_jobs_failed_finished", table_name="jobs")
    op.drop_index("ix_jobs_workspace_status_created", table_name="jobs")
