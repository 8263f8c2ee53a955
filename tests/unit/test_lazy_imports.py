"""The job commands stay light: each calls the HTTP API and imports neither the Temporal
SDK, SQLAlchemy, psycopg nor pydantic (a second of a command line's start-up on a loaded
machine; pydantic alone ~30 ms, which typer 0.29 brought back). Each runs in a fresh
interpreter against an API address where nothing listens (port 1): the command fails as
``unavailable``, and what it had imported by then is checked. ``hubjobs restore`` needs
SQLAlchemy but neither the SDK, FastAPI nor the ORM."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.cli_imports import HEAVY

IDS = ["--workspace", str(uuid.uuid4()), "--actor", str(uuid.uuid4())]
PROBE = f"""
import json, sys
from starter.cli import run_cli
code = run_cli(sys.argv[1:])
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print(json.dumps({{"code": code, "heavy": heavy}}))
"""


def probed(script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``script`` run with ``args`` in a fresh interpreter (its last line: the probe's)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


JOB = str(uuid.uuid4())
JOB_COMMANDS = {
    "status": ["status", JOB],
    "list": ["list"],
    "watch": ["watch", JOB],
    "items": ["items", JOB],
    "cancel": ["cancel", JOB],
    "retry": ["retry", JOB],
    "tag-course": ["tag-course", "--tag", "t", "--root-page", str(uuid.uuid4())],
    "backup": ["backup"],
    "export": ["export"],
    "schedule": ["schedule", "list"],
}


@pytest.mark.parametrize("command", list(JOB_COMMANDS.values()), ids=list(JOB_COMMANDS))
def test_a_job_command_calls_the_api_and_imports_no_sdk_orm_or_driver(
    command: list[str], tmp_path: Path
) -> None:
    """Every job command is a client of the HTTP API: with nothing listening at its
    address it fails at once as ``unavailable``, naming the address, having imported
    neither the Temporal SDK, SQLAlchemy, psycopg nor pydantic."""
    env = {
        "HUBJOBS_HOME": str(tmp_path),
        "HUBJOBS_API_URL": "http://127.0.0.1:1",
        "HUBJOBS_API_JWT_SECRET": "s" * 40,
        "PATH": "/usr/bin:/bin",
    }
    done = probed(PROBE, [*command, *IDS, "--json"], env)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["code"] == 1, done.stderr
    assert "unavailable" in done.stderr and "http://127.0.0.1:1" in done.stderr, done.stderr
    assert answer["heavy"] == [], f"{command[0]} imported {answer['heavy']}"


RESTORE_PROBE = """
import json, sys
from starter.cli import run_cli
code = run_cli(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"temporalio", "fastapi"}
               or m.startswith(("sqlalchemy.orm", "hubjobs.domain.tables")))
print(json.dumps({"code": code, "heavy": heavy, "restore": "hubjobs.ops.restore" in sys.modules}))
"""


def test_restore_imports_neither_the_sdk_nor_the_api_nor_the_orm(tmp_path: Path) -> None:
    """``hubjobs restore`` loads what a restore needs (SQLAlchemy's core, Alembic,
    psycopg), not the Temporal SDK, FastAPI or the ORM models: their imports would come
    before its COPY starts. Here it refuses a file that is not an archive, once its
    module is loaded."""
    not_an_archive = tmp_path / "not.zip"
    not_an_archive.write_bytes(b"no")
    env = {"HUBJOBS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    command = ["restore", str(not_an_archive), "--attachments-dir", str(tmp_path / "files")]
    command += ["--database-url", "postgresql://hubjobs@127.0.0.1:1/hubjobs", "--json"]
    done = probed(RESTORE_PROBE, command, env)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["code"] == 1 and "archive_unreadable" in done.stderr, done.stderr
    assert answer["restore"]
    assert answer["heavy"] == []
