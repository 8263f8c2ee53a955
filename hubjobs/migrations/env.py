"""Alembic environment: migrations run on a sync psycopg connection, either their own
or one handed over in ``config.attributes["connection"]`` (restore migrates inside the
transaction that loads the data, so a failed restore leaves nothing). Without a URL in
the config (the ``alembic`` command with alembic.ini), the database is the settings'
(HUBJOBS_DATABASE_URL, or the stack of ``hubjobs up``).

The models (the tables' declarations) are for comparing only: autogenerate and
``alembic check``. An upgrade from code (hubjobs.db.migrate, which marks it
``MIGRATIONS_ONLY``) runs the migrations alone, without importing them or the ORM
(a cost on every restore); its metadata carries just the naming convention,
the one thing operations take from it."""

from __future__ import annotations

from alembic import context
from sqlalchemy import MetaData, create_engine, pool
from sqlalchemy.engine import Connection

from hubjobs.db.engine import driver_url
from hubjobs.db.naming import NAMING
from hubjobs.settings import Settings

config = context.config
# The attribute hubjobs.db.migrate sets on an upgrade's config.
MIGRATIONS_ONLY = "migrations_only"


def target_metadata() -> MetaData:
    """Every table the schema holds, the hub's and the read model's (each module
    declares its own on the one metadata), or for an upgrade a bare metadata with
    their naming convention."""
    if config.attributes.get(MIGRATIONS_ONLY):
        return MetaData(naming_convention=NAMING)
    import hubjobs.domain.tables  # each declares its tables on Base.metadata
    import hubjobs.readmodel.tables  # noqa: F401
    from hubjobs.db.metadata import Base

    return Base.metadata


def run_on(connection: Connection) -> None:
    # Server defaults are compared too: a changed default is a change of the schema.
    context.configure(
        connection=connection, target_metadata=target_metadata(), compare_server_default=True
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
