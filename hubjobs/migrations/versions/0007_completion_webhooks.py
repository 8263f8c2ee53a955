"""completion webhooks: a job's notify_url and its delivery's outcome

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

- ``jobs.notify_url``: where the job's completion webhook goes (NULL: none).
- ``jobs.notify_state`` (pending, delivered, failed, refused; NULL without a webhook),
  ``notify_attempts``, ``notify_last_error`` (our code and message, never the
  receiver's body) and ``notified_at``: the delivery as ``hubjobs status`` and the API
  show it. Written by the delivery's activity through the store only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("notify_url", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("notify_state", sa.Text(), nullable=True))
    op.add_column(
        "jobs",
        sa.Column("notify_attempts", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column("jobs", sa.Column("notify_last_error", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(
        op.f("ck_jobs_notify_state"),
        "jobs",
        "notify_state IN ('delivered', 'failed', 'pending', 'refused')",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_jobs_notify_state"), "jobs", type_="check")
    op.drop_column("jobs", "notified_at")
    op.drop_column("jobs", "notify_last_error")
    op.drop_column("jobs", "notify_attempts")
    op.drop_column("jobs", "notify_state")
    op.drop_column("jobs", "notify_url")
