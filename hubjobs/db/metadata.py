"""What every table declaration shares: one SQLAlchemy metadata with the naming
convention the migrations were generated with, and the creation-time column. The
tables themselves live with what owns them: the hub's in ``hubjobs.domain.tables``,
the read model's in ``hubjobs.readmodel.tables``; Alembic (``hubjobs/migrations``)
sees both."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, MetaData, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def created_now() -> Mapped[datetime]:
    """A ``timestamptz NOT NULL DEFAULT now()`` column."""
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
