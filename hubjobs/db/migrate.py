"""Alembic, driven from code: ``upgrade`` brings a database to the newest schema, and
the schema version (what a backup records) is Alembic's revision."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from hubjobs.db.engine import driver_url

# The migrations sit above every layer (hubjobs/migrations/: their environment sees the
# tables of the domain and of the read model); this runs them.
MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", driver_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(_migrations_only(alembic_config(url)), revision)


def upgrade_on(connection: Connection, revision: str = "head") -> None:
    """Migrates inside the caller's transaction."""
    config = _migrations_only(alembic_config("postgresql://unused"))
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _migrations_only(config: Config) -> Config:
    """Marks an upgrade: the environment then leaves the models (for comparing only)
    unimported (hubjobs/migrations/env.py)."""
    config.attributes["migrations_only"] = True
    return config


def known_revisions() -> set[str]:
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused"))
    return {rev.revision for rev in script.walk_revisions()}


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    assert head is not None
    return head


def schema_version(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()
