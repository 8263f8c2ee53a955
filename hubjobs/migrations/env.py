"""Alembic environment: migrations run on a sync psycopg connection, either their own
or one handed over in ``config.attributes["connection"]`` (restore migrates inside the
transaction that loads the data, so a failed restore leaves nothing). Without a URL in
the config (the ``alembic`` command with alembic.ini), the database is the settings'
(HUBJOBS_DATABASE_URL, or the stack of ``hubjobs up``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

import hubjobs.domain.tables
import hubjobs.readmodel.tables
from hubjobs.db.engine import driver_url
from hubjobs.db.metadata import Base
from hubjobs.settings import Settings

# Every table the schema holds: the hub's and the read model's, each module declaring
# its own on the one metadata.
TABLE_MODULES = (hubjobs.domain.tables, hubjobs.readmodel.tables)
config = context.config
target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    # Server defaults are compared too: a changed default is a change of the schema.
    context.configure(
        connection=connection, target_metadata=target_metadata, compare_server_default=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        run_on(given)
        return
    url = config.get_main_option("sqlalchemy.url") or driver_url(Settings().resolved_database_url())
    engine = create_engine(url, poolclass=pool.NullPool, hide_parameters=True)
    with engine.begin() as connection:
        run_on(connection)
    engine.dispose()


run_migrations()
