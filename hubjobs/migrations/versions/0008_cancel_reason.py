"""a cancellation's reason is kept on the row

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

- ``jobs.cancel_reason``: the free text the first cancellation request gave (at most
  500 characters, cut by the signal's reader and refused longer by the client); NULL
  when it gave none. Before, the reason was read and carried, then dropped.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("cancel_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "cancel_reason")
