"""What every table declaration shares: one SQLAlchemy metadata with the naming
convention the migrations were generated with, and the creation-time column. The
tables themselves live with what owns them: the hub's in ``hubjobs.domain.tables``,
the read model's in ``hubjobs.readmodel.tables``; Alembic (``hubjobs/migrations``)
sees both."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, MetaData, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hubjobs.db.naming import NAMING


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def created_now() -> Mapped[datetime]:
    """A ``timestamptz NOT NULL DEFAULT now()`` column."""
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
