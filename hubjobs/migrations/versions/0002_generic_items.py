"""generic job items, attempts, one definition of tag equality, reconciler index

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

- ``tag_key(tag)``: the one definition of "the same tag" (NFKC, full Unicode case
  folding with the builtin pg_unicode_fast collation, NFKC again), independent of the
  database's locale; ``tags_distinct(tags)`` enforces it on every page.
- ``job_items`` become kind-neutral: ``page_id`` is ``ref``, ``initially_tagged`` is
  ``done_at_snapshot``; ``label`` and ``detail`` are new.
- ``jobs`` count attempts, name the job a retry came from, and index the reconciler's
  selection.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TAG_KEY = """
CREATE FUNCTION tag_key(tag text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN normalize(casefold(normalize(tag, NFKC) COLLATE pg_unicode_fast), NFKC)
"""
TAGS_DISTINCT = """
CREATE FUNCTION tags_distinct(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT count(DISTINCT tag_key(t)) = count(*) FROM unnest(tags) AS t)
"""


def upgrade() -> None:
    op.execute(TAG_KEY)
    op.execute(TAGS_DISTINCT)
    op.create_check_constraint("tags_distinct", "pages", "tags_distinct(tags)")

    op.alter_column("job_items", "page_id", new_column_name="ref", nullable=True)
    op.alter_column(
        "job_items",
        "initially_tagged",
        new_column_name="done_at_snapshot",
        server_default=sa.text("false"),
    )
    op.add_column("job_items", sa.Column("label", sa.Text(), nullable=True))
    op.add_column(
        "job_items",
        sa.Column("detail", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.create_index("ix_job_items_job_state_ordinal", "job_items", ["job_id", "state", "ordinal"])

    op.add_column("jobs", sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
    op.add_column(
        "jobs", sa.Column("attempts_failed", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column("jobs", sa.Column("source_job_id", sa.UUID(), nullable=True))
    op.create_index(
        "ix_jobs_unfinished_updated",
        "jobs",
        ["updated_at"],
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_unfinished_updated", table_name="jobs")
    op.drop_column("jobs", "source_job_id")
    op.drop_column("jobs", "attempts_failed")
    op.drop_column("jobs", "attempts")
    op.drop_index("ix_job_items_job_state_ordinal", table_name="job_items")
    op.drop_column("job_items", "detail")
    op.drop_column("job_items", "label")
    op.alter_column(
        "job_items", "done_at_snapshot", new_column_name="initially_tagged", server_default=None
    )
    op.execute(
        "UPDATE job_items SET ref = '00000000-0000-0000-0000-000000000000' WHERE ref IS NULL"
    )
    op.alter_column("job_items", "ref", new_column_name="page_id", nullable=False)
    op.drop_constraint("ck_pages_tags_distinct", "pages", type_="check")
    op.execute("DROP FUNCTION tags_distinct(text[])")
    op.execute("DROP FUNCTION tag_key(text)")
