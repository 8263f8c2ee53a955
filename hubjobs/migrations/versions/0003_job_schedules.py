"""jobs started by a schedule name it

Revision ID: 0003_job_schedules
Revises: 0002
Create Date: 2026-12-01

- ``jobs.schedule_id``: the Temporal Schedule whose firing started the job (NULL for a
  job started by hand), so that a schedule's runs can be listed and its ``keep`` can
  expire all but its newest successful ones.
- ``ix_jobs_schedule_created``: a schedule's runs, newest first (the listing and the
  keep step both read them by schedule).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_job_schedules"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("schedule_id", sa.Text(), nullable=True))
    op.create_index(
        "ix_jobs_schedule_created",
        "jobs",
        ["schedule_id", sa.text("created_at DESC")],
        postgresql_where=sa.text("schedule_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_schedule_created", table_name="jobs")
    op.drop_column("jobs", "schedule_id")
