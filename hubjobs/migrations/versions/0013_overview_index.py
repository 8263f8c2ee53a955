"""the overview's indexes: a workspace's ended jobs by when they ended, its unfinished ones

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-06

- ``ix_jobs_workspace_finished``: partial, on the ended rows, by (workspace, finished_at
  newest first, id), carrying the kind, status and counters the overview sums: its
  window's jobs are read off the index alone (an index-only scan), and the job list's
  ``finished_*`` sorts page on it.
- ``ix_jobs_workspace_unfinished``: partial, on the unfinished rows, by (workspace,
  status, created_at), carrying the kind, id and stuck_since: the counts per kind and
  the oldest queued job, again without the table's rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

ENDED = sa.text("finished_at IS NOT NULL")
UNFINISHED = sa.text("status IN ('queued', 'running')")


def upgrade() -> None:
    op.create_index(
        "ix_jobs_workspace_finished",
        "jobs",
        ["workspace_id", sa.literal_column("finished_at DESC"), "id"],
        unique=False,
        postgresql_include=[
            "kind",
            "status",
            "total",
            "processed",
            "succeeded",
            "skipped",
            "failed",
        ],
        postgresql_where=ENDED,
    )
    op.create_index(
        "ix_jobs_workspace_unfinished",
        "jobs",
        ["workspace_id", "status", "created_at"],
        unique=False,
        postgresql_include=["kind", "id", "stuck_since"],
        postgresql_where=UNFINISHED,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_workspace_unfinished", table_name="jobs", postgresql_where=UNFINISHED)
    op.drop_index("ix_jobs_workspace_finished", table_name="jobs", postgresql_where=ENDED)
