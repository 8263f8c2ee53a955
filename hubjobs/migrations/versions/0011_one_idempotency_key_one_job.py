"""an idempotency key names one job in a workspace, whatever its kind

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

- ``uq_jobs_idempotency`` becomes (workspace_id, idempotency_key): the same key with
  another kind was a second job; it is now the same request's key, refused
  (``idempotency_key_reused``) when the request differs.
- Rows that share a key today (one job a kind) would fail the new index: the oldest
  of each (by created_at, then id) keeps the key, the newer ones lose it (NULL, as a
  released key is). Every job stays as it is; a start with the key names the oldest.

Plain ``CREATE INDEX`` (a restore migrates inside its one transaction). The downgrade
puts the wider index back; a key released here stays released.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# Every key but the oldest job's of each (workspace, key) let go.
RELEASE_SHARED_KEYS = """
UPDATE jobs SET idempotency_key = NULL, updated_at = now()
 WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (
                   PARTITION BY workspace_id, idempotency_key ORDER BY created_at, id) AS n
          FROM jobs WHERE idempotency_key IS NOT NULL) AS ranked
     WHERE n > 1)
"""


def upgrade() -> None:
    op.drop_index(
        op.f("uq_jobs_idempotency"),
        table_name="jobs",
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.execute(RELEASE_SHARED_KEYS)
    op.create_index(
        "uq_jobs_idempotency",
        "jobs",
        ["workspace_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_jobs_idempotency",
        table_name="jobs",
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "uq_jobs_idempotency",
        "jobs",
        ["workspace_id", "kind", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
