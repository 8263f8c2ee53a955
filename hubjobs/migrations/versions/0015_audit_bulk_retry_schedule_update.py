"""audit actions: a bulk retry of failed items, a schedule's edit

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

``ck_audit_events_action`` admits ``bulk_retry`` and ``schedule_update``, the console's
two new operator actions; the rows already kept are untouched.
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

BEFORE = (
    "'bulk_cancel', 'cancel', 'restore', 'retry', 'schedule_create', 'schedule_delete', "
    "'schedule_pause', 'schedule_trigger', 'schedule_unpause', 'start'"
)
AFTER = (
    "'bulk_cancel', 'bulk_retry', 'cancel', 'restore', 'retry', 'schedule_create', "
    "'schedule_delete', 'schedule_pause', 'schedule_trigger', 'schedule_unpause', "
    "'schedule_update', 'start'"
)


def allow(actions: str) -> None:
    name = op.f("ck_audit_events_action")
    op.drop_constraint(name, "audit_events", type_="check")
    op.create_check_constraint(name, "audit_events", f"action IN ({actions})")


def upgrade() -> None:
    allow(AFTER)


def downgrade() -> None:
    # The two new actions' rows cannot stand under the old rule: they go with it.
    op.execute("DELETE FROM audit_events WHERE action IN ('bulk_retry', 'schedule_update')")
    allow(BEFORE)
