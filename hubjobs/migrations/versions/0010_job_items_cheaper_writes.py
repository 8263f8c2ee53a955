"""job_items: no foreign key to jobs, the (job, state, ordinal) index becomes one of the
failed items, a tagging lane's read bounded by its range

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

What the items design cost a tagging job, measured on the floor's SQL (bench_tagging
``floor:`` variants, 100,000 pages, CPU of the items' INSERT / UPDATE): 1.18 / 0.51 s,
against 0.63 / 0.32 s for a table with its primary key alone.

- ``fk_job_items_job_id_jobs`` goes: its row-by-row check was 0.49 s of the snapshot's
  INSERT (40 %). Items are written only by their job's snapshot, in its transaction and
  under its lock, and ``store.delete_jobs`` deletes them with their job.
- ``ix_job_items_job_state_ordinal`` goes (0.19 s of the INSERT, 0.07 s of the UPDATE:
  each outcome moved an entry in it) and ``ix_job_items_failed``, (job, ordinal) of the
  failed items only, takes the reads that needed it: a retry's failed items and the
  listing of failures. The other reads go by the primary key, each a range of one
  job's ordinals: a lane's pending items within its batch's range, an export's first
  pending item after the last file it recorded.
- ``job_pending_items`` bounds its scan by ``up_to`` in the index (it was a filter: a
  range with fewer pending items than asked for went on to the end of the job).

Plain ``CREATE INDEX`` (a restore migrates inside its one transaction): the partial
index's build reads the table once. The downgrade deletes items whose job is gone
before it adds the foreign key back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hubjobs.readmodel.status import ItemState

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# The largest ordinal (int4): ``up_to`` NULL reads to the end of the job, by the index.
PENDING_ITEMS = f"""
CREATE OR REPLACE FUNCTION job_pending_items(
    of_job uuid, after_ordinal int, up_to int, at_most int)
RETURNS TABLE (ordinal int, ref uuid, done_at_snapshot boolean)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT i.ordinal, i.ref, i.done_at_snapshot FROM job_items i
     WHERE i.job_id = of_job AND i.ordinal > after_ordinal
       AND i.ordinal <= coalesce(up_to, 2147483647) AND i.state = {ItemState.pending.sql}
     ORDER BY i.ordinal LIMIT at_most
$$
"""
# 0009's, for the downgrade.
PENDING_ITEMS_0009 = f"""
CREATE OR REPLACE FUNCTION job_pending_items(
    of_job uuid, after_ordinal int, up_to int, at_most int)
RETURNS TABLE (ordinal int, ref uuid, done_at_snapshot boolean)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT i.ordinal, i.ref, i.done_at_snapshot FROM job_items i
     WHERE i.job_id = of_job AND i.ordinal > after_ordinal AND i.state = {ItemState.pending.sql}
       AND (up_to IS NULL OR i.ordinal <= up_to)
     ORDER BY i.ordinal LIMIT at_most
$$
"""


def upgrade() -> None:
    op.drop_constraint(op.f("fk_job_items_job_id_jobs"), "job_items", type_="foreignkey")
    op.drop_index(op.f("ix_job_items_job_state_ordinal"), table_name="job_items")
    op.create_index(
        "ix_job_items_failed",
        "job_items",
        ["job_id", "ordinal"],
        unique=False,
        postgresql_where=sa.text(f"state = {ItemState.failed.sql}"),
    )
    op.execute(PENDING_ITEMS)


def downgrade() -> None:
    op.execute(PENDING_ITEMS_0009)
    op.drop_index(
        "ix_job_items_failed",
        table_name="job_items",
        postgresql_where=sa.text(f"state = {ItemState.failed.sql}"),
    )
    op.create_index(
        op.f("ix_job_items_job_state_ordinal"),
        "job_items",
        ["job_id", "state", "ordinal"],
        unique=False,
    )
    op.execute(
        "DELETE FROM job_items i WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = i.job_id)"
    )
    op.create_foreign_key(
        op.f("fk_job_items_job_id_jobs"),
        "job_items",
        "jobs",
        ["job_id"],
        ["id"],
        ondelete="CASCADE",
    )
