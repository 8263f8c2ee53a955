"""The migrations as files, without a database: one line of history (two branches
merged side by side would leave two heads, and ``upgrade head`` would refuse), numbered
revisions, and the repository's alembic.ini (``make migration``, the ``alembic``
command) pointing at the folder the code migrates from. That the migrations build
exactly the tables is test_migrations', on a real database."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory

from hubjobs.db.migrate import MIGRATIONS, alembic_config, head_revision
from hubjobs.devstack.migration import ALEMBIC_INI, next_revision_id, revision_number

ROOT = Path(__file__).resolve().parents[2]


def test_the_migrations_have_one_head_and_numbered_revisions() -> None:
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused"))
    assert script.get_heads() == [head_revision()]
    revisions = list(script.walk_revisions())
    numbers = sorted(revision_number(r.revision) or 0 for r in revisions)
    assert numbers == list(range(1, len(revisions) + 1)), "revisions are numbered 0001, 0002…"
    for revision in revisions:
        assert Path(revision.path).name.startswith(f"{revision_number(revision.revision):04d}_")


def test_alembic_ini_points_at_the_migrations_the_code_runs() -> None:
    assert ALEMBIC_INI == ROOT / "alembic.ini"
    script = ScriptDirectory.from_config(Config(str(ALEMBIC_INI)))
    assert Path(script.dir).resolve() == MIGRATIONS.resolve()
    assert script.get_heads() == [head_revision()]


def test_the_next_revision_is_numbered_after_the_last() -> None:
    assert next_revision_id([]) == "0001"
    assert next_revision_id(["0001", "0002"]) == "0003"
    assert next_revision_id(["0002", "0009", "ae10f3"]) == "0010"
    # A revision id may name more than its number.
    assert next_revision_id(["0001", "0002", "0003_job_schedules"]) == "0004"
