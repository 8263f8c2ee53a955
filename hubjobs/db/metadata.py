"""What every table declaration shares: one metadata with the migrations' naming
convention, and the creation-time column. The tables live with their owners
(``hubjobs.domain.tables``, ``hubjobs.readmodel.tables``)."""

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
