"""Alembic environment: migrations run on a sync psycopg connection, either their own
or one handed over in ``config.attributes["connection"]`` (restore migrates inside the
transaction that loads the data, so a failed restore leaves nothing)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from hubjobs.db.schema import Base

config = context.config
target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        run_on(given)
        return
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = create_engine(url, poolclass=pool.NullPool, hide_parameters=True)
    with engine.begin() as connection:
        run_on(connection)
    engine.dispose()


run_migrations()
