"""a job's items are snapshotted by its first attempt, not by its start

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

- ``jobs.snapshot_at``: when the job's items were taken (the moment of "had the tag at
  snapshot"); NULL while the snapshot is still to be taken. A start only inserts the
  row (a start returns within a second whatever the course's size); the
  job's first attempt takes the snapshot in the transaction that opens it.
- Jobs unfinished at the upgrade were snapshotted by their start: they get their
  creation time, so that no attempt takes their snapshot again. Finished ones are
  never opened again and keep NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("snapshot_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE jobs SET snapshot_at = created_at WHERE status IN ('queued', 'running')")


def downgrade() -> None:
    op.drop_column("jobs", "snapshot_at")
