"""a job's pending and failed items as named functions, not text to splice

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

- ``job_pending_items(of_job, after_ordinal, up_to, at_most)``: the job's next pending
  items after a cursor, in order (``ordinal, ref, done_at_snapshot``).
- ``job_failed_items(of_job)``: the job's failed items (``ordinal, ref``).

A kind's own statements (a tagging batch's read, a retry's snapshot) name these rather
than splicing SQL the store handed out as text. Each is one SELECT in a STABLE SQL
function, which PostgreSQL inlines into the statement that calls it: the plan is the
one the spliced subquery had (by the (job, state, ordinal) index).
"""

from __future__ import annotations

from alembic import op

from hubjobs.readmodel.status import ItemState

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

PENDING_ITEMS = f"""
CREATE FUNCTION job_pending_items(of_job uuid, after_ordinal int, up_to int, at_most int)
RETURNS TABLE (ordinal int, ref uuid, done_at_snapshot boolean)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT i.ordinal, i.ref, i.done_at_snapshot FROM job_items i
     WHERE i.job_id = of_job AND i.ordinal > after_ordinal AND i.state = {ItemState.pending.sql}
       AND (up_to IS NULL OR i.ordinal <= up_to)
     ORDER BY i.ordinal LIMIT at_most
$$
"""
FAILED_ITEMS = f"""
CREATE FUNCTION job_failed_items(of_job uuid)
RETURNS TABLE (ordinal int, ref uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT i.ordinal, i.ref FROM job_items i
     WHERE i.job_id = of_job AND i.state = {ItemState.failed.sql}
$$
"""


def upgrade() -> None:
    op.execute(PENDING_ITEMS)
    op.execute(FAILED_ITEMS)


def downgrade() -> None:
    op.execute("DROP FUNCTION job_failed_items(uuid)")
    op.execute("DROP FUNCTION job_pending_items(uuid, int, int, int)")
