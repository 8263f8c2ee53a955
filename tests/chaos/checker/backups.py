"""Invariant 5: every backup that succeeded restores, into a fresh database, to the tables
it had, byte for byte by its own checksums.

For each one: the archive's members against its manifest (each table's bytes, rows and
sha256, read here); then ``hubjobs restore`` (the product's command, run as a user
runs it) into a database made for it; then each table of the restored database,
copied out with ``COPY``, holding the archive's rows (the same lines, in any order),
and each attachment file its index's sha256. A workspace's backup (every backup the
campaign starts is a workspace administrator's) holds that workspace alone."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from tests.chaos.checker.facts import Facts, Job
from tests.chaos.checker.verdict import Verdict, verdict

RESTORE_TIMEOUT = 900.0


def with_database(url: str, name: str) -> str:
    return urlsplit(url)._replace(path=f"/{name}").geturl()


async def backups_restore(facts: Facts, hubjobs: Path) -> Verdict:
    result = verdict(5)
    tables = 0
    for job in sorted(facts.jobs.values(), key=lambda j: j.id):
        if job.kind != "backup" or job.status != "succeeded":
            continue
        result.checked += 1
        problems, checked = await asyncio.to_thread(
            restore_and_compare, job, facts.addresses.database_url, hubjobs
        )
        tables += checked
        for problem in problems:
            result.violated(job.id, problem)
    result.notes["tables_compared"] = tables
    return result


def restore_and_compare(job: Job, database_url: str, hubjobs: Path) -> tuple[list[str], int]:
    archive = Path(str((job.result or {}).get("archivePath", "")))
    if not archive.is_file():
        return [f"its archive {archive} is missing"], 0
    try:
        with zipfile.ZipFile(archive) as zipped:
            manifest = json.loads(zipped.read("manifest.json"))
            members = {
                t["name"]: zipped.read(f"tables/{t['name']}.copy") for t in manifest["tables"]
            }
            index = zipped.read("attachments/index.jsonl").decode()
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        return [f"archive unreadable: {err}"], 0
    problems = list(_against_manifest(manifest, members))
    name = f"chaos_restore_{job.id.replace('-', '')[:16]}"
    scratch = Path(tempfile.mkdtemp(prefix="chaos-restore-"))
    admin = with_database(database_url, "postgres")
    target = with_database(database_url, name)
    try:
        _recreate(admin, name)
        restored = _restore(hubjobs, archive, target, scratch)
        if restored is not None:
            return [*problems, restored], 0
        problems += _against_restored(target, members)
        problems += _attachments(index, scratch / "attachments")
        problems += _scope(target, str(job.workspace_id))
    finally:
        _drop(admin, name)
        shutil.rmtree(scratch, ignore_errors=True)
    return problems, len(members)


def _against_manifest(manifest: dict[str, Any], members: dict[str, bytes]) -> list[str]:
    problems = []
    for entry in manifest["tables"]:
        data = members[entry["name"]]
        rows = data.count(b"\n")
        digest = hashlib.sha256(data).hexdigest()
        if (len(data), rows, digest) != (entry["bytes"], entry["rows"], entry["sha256"]):
            problems.append(
                f"table {entry['name']}: the archive's member disagrees with its manifest"
            )
    return problems


def _recreate(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _drop(admin: str, name: str) -> None:
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    except psycopg.Error:
        pass


def _restore(hubjobs: Path, archive: Path, target: str, scratch: Path) -> str | None:
    """``hubjobs restore`` as an operator runs it, with a state folder of its own (it
    must write nothing into the stack's); None when it succeeded, else what it said."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env["HUBJOBS_HOME"] = str(scratch / "home")
    done = subprocess.run(
        [
            str(hubjobs),
            "restore",
            str(archive),
            "--database-url",
            target,
            "--attachments-dir",
            str(scratch / "attachments"),
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RESTORE_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        return f"hubjobs restore exited {done.returncode}: {done.stderr.strip()[-300:]}"
    return None


def _against_restored(target: str, members: dict[str, bytes]) -> list[str]:
    problems = []
    with psycopg.connect(target, autocommit=True, connect_timeout=10) as conn:
        for table, data in members.items():
            copied = bytearray()
            with conn.cursor().copy(
                sql.SQL("COPY {} TO STDOUT").format(sql.Identifier(table))
            ) as copy:
                for block in copy:
                    copied += block
            restored = bytes(copied)
            if sorted(restored.splitlines()) != sorted(data.splitlines()):
                problems.append(
                    f"table {table}: restored {len(restored.splitlines())} rows, the "
                    f"archive holds {len(data.splitlines())}, or they differ"
                )
    return problems


def _attachments(index: str, folder: Path) -> list[str]:
    problems = []
    for line in index.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        path = folder / entry["storage_path"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        if digest != entry["sha256"]:
            problems.append(f"attachment {entry['id']}: restored file missing or altered")
    return problems


def _scope(target: str, workspace_id: str) -> list[str]:
    with psycopg.connect(target, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM workspaces WHERE id <> %(w)s), "
            "(SELECT count(*) FROM pages WHERE workspace_id <> %(w)s)",
            {"w": workspace_id},
        ).fetchone()
    others, pages = row if row else (0, 0)
    if others or pages:
        return [f"a workspace's backup holds {others} other workspaces and {pages} of their pages"]
    return []
