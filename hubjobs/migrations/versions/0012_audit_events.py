"""audit events

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

- ``audit_events``: one row per operator action (start, cancel, retry, bulk cancel,
  schedule changes, restore): when, who, from which surface, why, and what it touched.
- Indexes: a workspace's events newest first (keyset on at, id), a job's trail (GIN on
  ``job_ids``, a bulk action's every job), and the retention sweep's (``at``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("workspace_id", sa.UUID(), nullable=False),
        sa.Column("actor_id", sa.UUID(), nullable=True),
        sa.Column("surface", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column(
            "job_ids", postgresql.ARRAY(sa.UUID()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("schedule_id", sa.Text(), nullable=True),
        sa.Column("detail", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.CheckConstraint(
            "action IN ('bulk_cancel', 'cancel', 'restore', 'retry', 'schedule_create', "
            "'schedule_delete', 'schedule_pause', 'schedule_trigger', 'schedule_unpause', "
            "'start')",
            name=op.f("ck_audit_events_action"),
        ),
        sa.CheckConstraint(
            "surface IN ('api', 'cli', 'console', 'python')", name=op.f("ck_audit_events_surface")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"], unique=False)
    op.create_index(
        "ix_audit_events_job_ids", "audit_events", ["job_ids"], unique=False, postgresql_using="gin"
    )
    op.create_index(
        "ix_audit_events_workspace_at",
        "audit_events",
        ["workspace_id", sa.literal_column("at DESC"), sa.literal_column("id DESC")],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_audit_events_workspace_at", table_name="audit_events")
    op.drop_index("ix_audit_events_job_ids", table_name="audit_events", postgresql_using="gin")
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_table("audit_events")
