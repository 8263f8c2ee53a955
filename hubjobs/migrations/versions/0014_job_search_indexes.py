"""indexes for searching a workspace's jobs: by actor, by when they finished, by a
payload or result field

Revision ID: 0014
Revises: 0011
Create Date: 2026-12-06

- ``ix_jobs_workspace_actor_created``: one actor's jobs in a workspace, newest or
  oldest first, read off the index however few of the workspace's jobs are theirs.
- ``ix_jobs_payload``, ``ix_jobs_result``: GIN (``jsonb_path_ops``) for containment
  (``payload @> '{"tag": "exam"}'``): a value few jobs hold is found without walking
  the workspace's jobs. Their write cost is in docs/benchmarks.md.

Plain ``CREATE INDEX`` (a restore migrates inside its one transaction, where
``CONCURRENTLY`` cannot run): on a live hub it holds writes to ``jobs`` while the three
builds run (seconds a million rows).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_workspace_actor_created",
        "jobs",
        ["workspace_id", "actor_id", sa.literal_column("created_at DESC"), "id"],
        unique=False,
    )
    for column in ("payload", "result"):
        op.create_index(
            f"ix_jobs_{column}",
            "jobs",
            [column],
            unique=False,
            postgresql_using="gin",
            postgresql_ops={column: "jsonb_path_ops"},
        )


def downgrade() -> None:
    for name in ("ix_jobs_result", "ix_jobs_payload"):
        op.drop_index(name, table_name="jobs", postgresql_using="gin")
    op.drop_index("ix_jobs_workspace_actor_created", table_name="jobs")
