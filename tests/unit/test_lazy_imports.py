"""The read commands stay light: ``hubjobs status``, ``list`` and ``watch`` read the
read model on a plain psycopg connection and never import the Temporal SDK or
SQLAlchemy (a second of a command line's start-up on a loaded machine). Each runs in a
fresh interpreter against a database that refuses connections (nothing answers on port
1): the command fails as ``unavailable``, and what it had imported by then is checked.
A start and a cancel that the stack's worker makes (starter/warm) import neither too;
``hubjobs restore`` needs SQLAlchemy but neither the SDK, FastAPI nor the ORM."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

HEAVY = ("temporalio", "sqlalchemy")
IDS = ["--workspace", str(uuid.uuid4()), "--actor", str(uuid.uuid4())]
HEAVY_SET = '{"temporalio", "sqlalchemy"}'
WARM_HEAVY_SET = '{"temporalio", "sqlalchemy", "psycopg"}'
PROBE = """
import json, sys
from starter.cli import run_cli
code = run_cli(sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"temporalio", "sqlalchemy"})
print(json.dumps({"code": code, "heavy": heavy}))
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
    done = probed(PROBE, [*command, "--json"], env)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["code"] == 1, done.stderr  # unavailable: nothing answers there
    assert "unavailable" in done.stderr
    assert answer["heavy"] == [], f"{command[0]} imported {answer['heavy']}"


# A job as the stack's worker answers it (starter/warm): what the CLI then prints.
SERVED_JOB = {
    "id": str(uuid.uuid4()),
    "workflow_id": "course_tagging-x",
    "kind": "course_tagging",
    "status": "queued",
    "workspace_id": IDS[1],
    "actor_id": IDS[3],
    "correlation_id": "c",
    "idempotency_key": None,
    "payload": {"tag": "t"},
    "summary": "Tag course C with t, 1 pages",
    "total": 1,
    "processed": 0,
    "succeeded": 0,
    "skipped": 0,
    "failed": 0,
    "progress_message": None,
    "result": None,
    "result_content_type": None,
    "error_code": None,
    "error_message": None,
    "cancel_requested_at": None,
    "cancel_requested_by": None,
    "attempts": 0,
    "attempts_failed": 0,
    "source_job_id": None,
    "schedule_id": None,
    "created_at": "2026-12-01T00:00:00Z",
    "started_at": None,
    "finished_at": None,
    "expires_at": None,
}


def _serve_one_call(path: str, requests: list[dict[str, object]]) -> threading.Thread:
    """A stand-in for the stack's worker on ``path``: records the request and answers it
    with SERVED_JOB (a list of it, for ``list``)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    listener.settimeout(60)

    def answer() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn, conn.makefile("rwb") as stream:
                requests.append(json.loads(stream.readline()))
                answer = {"jobs": [SERVED_JOB]} if requests[-1]["call"] == "list" else {}
                stream.write(json.dumps(answer or {"job": SERVED_JOB}).encode() + b"\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    "command",
    [
        ["tag-course", "--root-page", str(uuid.uuid4()), "--tag", "t", *IDS],
        ["cancel", str(uuid.uuid4()), *IDS],
        ["status", str(uuid.uuid4()), *IDS],
        ["list", *IDS],
    ],
    ids=["tag-course", "cancel", "status", "list"],
)
def test_a_call_the_stacks_worker_makes_imports_neither_nor_psycopg(
    command: list[str], tmp_path: Path
) -> None:
    """With the embedded stack's worker serving HUBJOBS_HOME/starts.sock, the CLI sends
    it the call and prints its answer: it loads neither the SDK nor SQLAlchemy, nor even
    psycopg."""
    home = tmp_path / "h"  # short: a unix socket's path has at most 107 bytes
    home.mkdir()
    requests: list[dict[str, object]] = []
    server = _serve_one_call(str(home / "starts.sock"), requests)
    env = {
        "HUBJOBS_HOME": str(home),
        "HUBJOBS_DATABASE_URL": "postgresql://hubjobs@127.0.0.1:1/hubjobs",
        "HUBJOBS_TEMPORAL_ADDRESS": "127.0.0.1:1",
        "PATH": "/usr/bin:/bin",
    }
    done = probed(PROBE.replace(HEAVY_SET, WARM_HEAVY_SET), [*command, "--json"], env)
    server.join(5)
    *printed, probe = done.stdout.strip().splitlines()
    answer = json.loads(probe)
    assert answer["code"] == 0, done.stderr
    assert answer["heavy"] == [], f"{command[0]} imported {answer['heavy']}"
    shown = json.loads("\n".join(printed))
    assert (shown[0] if command[0] == "list" else shown)["id"] == SERVED_JOB["id"]
    (request,) = requests
    call = {"tag-course": "start_course_tagging", "status": "get"}.get(command[0], command[0])
    assert request["call"] == call
    assert request["workspace_id"] == {"$uuid": IDS[1]}


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
