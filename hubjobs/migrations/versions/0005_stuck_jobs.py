"""stuck jobs: a running job whose workflow tasks keep failing is flagged

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

- ``jobs.stuck_since`` and ``jobs.stuck_reason``: set by the reconciler when a job's
  workflow task has failed several times in a row (a handler bug, a non-determinism
  after a deploy), cleared when it runs again; a job that is stuck never looks healthy
  as ``running``.
- ``ix_jobs_stuck``: partial, on the flagged rows only, for the queue state's count
  (the metric operators alert on).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("stuck_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("stuck_reason", sa.Text(), nullable=True))
    op.create_index(
        "ix_jobs_stuck",
        "jobs",
        ["stuck_since"],
        unique=False,
        postgresql_where=sa.text("stuck_since IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_jobs_stuck", table_name="jobs", postgresql_where=sa.text("stuck_since IS NOT NULL")
    )
    op.drop_column("jobs", "stuck_reason")
    op.drop_column("jobs", "stuck_since")
