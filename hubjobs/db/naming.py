"""The naming convention the migrations were generated with: the models' metadata
carries it, and so does the bare metadata an upgrade runs the migrations with (Alembic
names the constraints an operation leaves unnamed by it)."""

from __future__ import annotations

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
