"""job minutes: the jobs that ended, counted per workspace, minute, kind and status

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

- ``job_minutes``: per (workspace, minute, kind, final status), the jobs that ended and
  their pages summed, counted by the statement that ends a job; the overview reads its
  ended counts and throughput here.
- Backfilled from the jobs that ended within the last day, the overview's longest
  window: an older minute is never read, and the retention sweep would delete it at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

BACKFILL = """
INSERT INTO job_minutes (workspace_id, minute, kind, status, jobs, pages_total,
                         pages_processed, pages_succeeded, pages_skipped, pages_failed)
SELECT workspace_id, date_bin('1 minute', finished_at, TIMESTAMPTZ 'epoch'), kind, status,
       count(*), sum(total), sum(processed), sum(succeeded), sum(skipped), sum(failed)
  FROM jobs
 WHERE status IN ('cancelled', 'failed', 'succeeded') AND finished_at >= now() - interval '1 day'
 GROUP BY 1, 2, 3, 4
"""


def upgrade() -> None:
    op.create_table(
        "job_minutes",
        sa.Column("workspace_id", sa.UUID(), nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("pages_total", sa.Integer(), nullable=False),
        sa.Column("pages_processed", sa.Integer(), nullable=False),
        sa.Column("pages_succeeded", sa.Integer(), nullable=False),
        sa.Column("pages_skipped", sa.Integer(), nullable=False),
        sa.Column("pages_failed", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "status IN ('cancelled', 'failed', 'succeeded')", name=op.f("ck_job_minutes_status")
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "minute", "kind", "status", name=op.f("pk_job_minutes")
        ),
    )
    op.create_index("ix_job_minutes_minute", "job_minutes", ["minute"], unique=False)
    op.execute(BACKFILL)


def downgrade() -> None:
    op.drop_index("ix_job_minutes_minute", table_name="job_minutes")
    op.drop_table("job_minutes")
