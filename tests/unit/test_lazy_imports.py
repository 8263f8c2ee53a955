"""The read commands stay light: ``hubjobs status``, ``list`` and ``watch`` read the
read model on a plain psycopg connection and never import the Temporal SDK or
SQLAlchemy (a second of a command line's start-up on a loaded machine). Each runs in a
fresh interpreter against a database that refuses connections (nothing answers on port
1): the command fails as ``unavailable``, and what it had imported by then is checked."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

HEAVY = ("temporalio", "sqlalchemy")
IDS = ["--workspace", str(uuid.uuid4()), "--actor", str(uuid.uuid4())]
PROBE = """
import json, sys
from starter.cli import run_cli
code = run_cli(sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"temporalio", "sqlalchemy"})
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize(
    "command",
    [["status", str(uuid.uuid4()), *IDS], ["list", *IDS], ["watch", str(uuid.uuid4()), *IDS]],
    ids=["status", "list", "watch"],
)
def test_a_read_command_imports_neither_the_sdk_nor_sqlalchemy(
    command: list[str], tmp_path: object
) -> None:
    env = {
        "HUBJOBS_HOME": str(tmp_path),
        "HUBJOBS_DATABASE_URL": "postgresql://hubjobs@127.0.0.1:1/hubjobs",
        "HUBJOBS_TEMPORAL_ADDRESS": "127.0.0.1:1",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *command, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["code"] == 1, done.stderr  # unavailable: nothing answers there
    assert "unavailable" in done.stderr
    assert answer["heavy"] == [], f"{command[0]} imported {answer['heavy']}"
