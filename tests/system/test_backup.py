"""Backup and restore on the real servers: a backup job written by a worker restores into
an empty database row for row and byte for byte; restore refuses what it must refuse
and then leaves everything as it was; a cancelled backup, one cancelled just as it
commits its archive, and one whose worker is killed mid-stream leave no stray file; the
archive goes when its job expires; only an enabled administrator may take one."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from activities.backup import BackupActivities
from hubjobs.archive.format import (
    ATTACHMENT_INDEX,
    FORMAT,
    HUB_TABLES,
    MANIFEST,
    archive_name,
    temporary_name,
)
from hubjobs.archive.writer import AttachmentUnavailable, write_archive
from hubjobs.db.migrate import head_revision
from hubjobs.devstack.demo_data import DemoCourse, create_account, create_attachment, seed_demo
from hubjobs.devstack.embedded import StackInfo
from hubjobs.errors import Forbidden, HubJobsError, InvalidInput, NotFound
from hubjobs.kinds.backup import BACKUP, backup_folder
from hubjobs.ops.restore import RestoreReport, restore
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal.messages import CancelRequest, JobInput, SweepResult
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.archive_helpers import (
    MB,
    Databases,
    add_attachments,
    archive_being_written,
    assert_same_attachments,
    assert_sequences_continue,
    file_facts,
    files_under,
    fingerprint,
    names_in,
    snapshot_archive,
    tables_of,
    temporary_archives,
)
from tests.support.cli_errors import refusal_code
from tests.support.helpers import edit, row_of, run_endings, with_kind, workflow_closed
from tests.support.histories import record
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import TEMPLATE, running_worker
from tests.system.test_faults import identity_of, running_attempt, wait_started
from workflows.backup import BackupWorkflow

HUBJOBS = Path(sys.executable).parent / "hubjobs"
RESULT_KEYS = {
    "backupId",
    "scope",
    "createdAt",
    "sizeBytes",
    "tableCount",
    "attachmentCount",
    "schemaVersion",
    "archivePath",
}

WRITE_BACKUP = BackupActivities.write_backup.__name__


# --- fixtures ---------------------------------------------------------------------


# The backups of these tests read at most this fast, so that one of a few hundred MB
# runs for seconds, long enough to be seen, cancelled or killed mid-stream (at full
# speed, see bench/bench_restore.py, it is over in a fraction of a second).
PACE = 64 * MB


# The hub operator of these tests (HUBJOBS_HUB_OPERATORS): an account made an
# administrator of a workspace by ``operator_in``.
OPERATOR = uuid.UUID("0fe7a70f-0000-4000-8000-000000000001")


@pytest.fixture
def backup_settings(settings: Settings, tmp_path: Path) -> Settings:
    """The worker's and the starter's settings: backups and attachments under tmp_path,
    backups paced (PACE), OPERATOR a hub operator."""
    return with_kind(
        settings.model_copy(
            update={"attachments_dir": tmp_path / "attachments", "hub_operators": [OPERATOR]}
        ),
        "backup",
        backup_dir=tmp_path / "backups",
        backup_max_bytes_per_second=PACE,
    )


async def operator_in(engine: AsyncEngine, workspace: uuid.UUID) -> uuid.UUID:
    """OPERATOR, an enabled administrator of ``workspace``."""
    async with engine.begin() as conn:
        return await create_account(conn, workspace, name="Otto Operator", account_id=OPERATOR)


@pytest_asyncio.fixture
async def backup_hub(
    temporal: Client, engine: AsyncEngine, backup_settings: Settings
) -> HubJobsClient:
    return HubJobsClient(temporal, engine, backup_settings)


@pytest_asyncio.fixture
async def backup_worker(temporal: Client, backup_settings: Settings) -> AsyncIterator[None]:
    async with running_worker(temporal, backup_settings):
        yield


@pytest.fixture
def new_database(stack: StackInfo) -> Iterator[Databases]:
    databases = Databases(stack)
    yield databases
    databases.drop_all()


async def run_backup(
    jobs: WorkspaceJobs, timeout: float = 60, payload: dict[str, Any] | None = None
) -> JobView:
    job = await jobs.start("backup", payload or {})
    assert job.kind == "backup"
    done = await jobs.wait(job.id, timeout=timeout, interval=0.1)
    assert done.status == "succeeded", (done.error_code, done.error_message)
    assert done.result is not None
    return done


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    return env | {"HUBJOBS_HOME": str(home)}


async def cli_restore(
    archive: Path, url: str, folder: Path, home: Path
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [
            str(HUBJOBS),
            "restore",
            str(archive),
            "--database-url",
            url,
            "--attachments-dir",
            str(folder),
            "--json",
        ],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_one_error_line(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert refusal_code(lines[0]) == code


# --- 1. round trip --------------------------------------------------------------------

ROUND_TRIP_SIZES = (
    [0, 0, 0, 1, 2, 100, 1000, 4095, 4096, 4097, 65535, 65536, 65537, 100_000]
    + [250_000, 500_000, 750_000, 999_999]
    + [MB - 1, MB, MB + 1, MB + 12345, 2 * MB]
    + [17 * i + 3 for i in range(13)]
)


async def test_a_backup_restores_into_an_empty_database_row_for_row_and_byte_for_byte(
    backup_hub: HubJobsClient,
    engine: AsyncEngine,
    backup_settings: Settings,
    backup_worker: None,
    database_url: str,
    new_database: Databases,
    tmp_path: Path,
) -> None:
    async with engine.begin() as conn:
        course = await seed_demo(conn, 3000)
        second = await seed_demo(conn, 40, name="Second hub")
    jobs = backup_hub.scope(course.workspace_id, course.actor_id)
    # The whole hub, both workspaces: a hub operator's backup.
    operator = backup_hub.scope(course.workspace_id, await operator_in(engine, course.workspace_id))
    # More than one revision for some pages: a tagging job on a sub-course, and edits.
    tagging = await jobs.start(
        "course_tagging", {"root_page_id": course.page_ids[12], "tag": "backup"}
    )
    tagged = await jobs.wait(tagging.id, timeout=60, interval=0.1)
    assert tagged.status == "succeeded" and tagged.succeeded == 111
    for page in course.page_ids[100:110]:
        await edit(engine, page, markdown="# edited\n\nwith **unicode** é ✓ and a\ttab\\ back")
    assert len(ROUND_TRIP_SIZES) >= 30
    folder = backup_settings.resolved_attachments_dir
    created = await add_attachments(
        engine, folder, course.page_ids + second.page_ids, ROUND_TRIP_SIZES
    )

    source = await asyncio.to_thread(fingerprint, database_url)
    assert source["pages"][0] == 3040
    assert source["page_revisions"][0] == 3040 + 111 + 10
    assert source["attachments"][0] == len(created)

    done = await run_backup(operator, payload={"scope": "hub"})
    await record(backup_hub.temporal.get_workflow_handle(done.workflow_id), "backup_succeeded")
    result = done.result
    assert result is not None and set(result) == RESULT_KEYS
    assert result["scope"] == "hub"
    assert result["backupId"] == str(done.id)
    assert result["tableCount"] == len(HUB_TABLES) == 6
    assert result["attachmentCount"] == len(created)
    assert result["schemaVersion"] == head_revision() == "0016"
    archive = Path(result["archivePath"])
    backups = backup_folder(backup_settings)
    assert archive == backups / archive_name(done.id)
    assert file_facts(archive) == (0o600, result["sizeBytes"])
    assert names_in(backups) == [archive.name]  # no *.partial left over
    assert done.processed == done.total == len(HUB_TABLES) + len(created)
    with zipfile.ZipFile(archive) as zf:
        manifest = json.loads(zf.read(MANIFEST))
    assert manifest["backup_id"] == str(done.id)
    assert {t["name"]: t["rows"] for t in manifest["tables"]} == {
        t: n for t, (n, _) in source.items()
    }

    # Restored through the command line, into a database with no schema at all.
    target_url = new_database.create()
    target_dir = tmp_path / "restored-attachments"
    finished = await cli_restore(archive, target_url, target_dir, tmp_path / "cli")
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert report["backup_id"] == str(done.id)
    assert report["schema_version"] == report["archive_schema_version"] == head_revision()
    assert report["tables"] == {t: n for t, (n, _) in source.items()}
    assert report["attachments"] == len(created)
    assert report["attachment_bytes"] == sum(len(c) for c in created.values())

    assert await asyncio.to_thread(fingerprint, target_url) == source
    # The source did not change under the backup either.
    assert await asyncio.to_thread(fingerprint, database_url) == source
    assert await asyncio.to_thread(assert_same_attachments, database_url, folder, target_dir) == (
        len(created)
    )
    await asyncio.to_thread(assert_sequences_continue, target_url)
    # The restored database is at today's schema and holds no jobs (operational state).
    with psycopg.connect(target_url) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        jobs_rows = conn.execute("SELECT count(*) FROM jobs").fetchone()
    assert version == (head_revision(),) and jobs_rows == (0,)
    # One restore event on each restored workspace: a hub operator's, from the shell.
    with psycopg.connect(target_url) as conn:
        events = conn.execute(
            "SELECT workspace_id, actor_id, surface, action, detail->>'scope' "
            "FROM audit_events ORDER BY workspace_id"
        ).fetchall()
    restored = sorted([course.workspace_id, second.workspace_id])
    assert events == [(w, None, "cli", "restore", "hub") for w in restored]


FORMAT_1_ARCHIVE = Path(__file__).resolve().parents[1] / "data" / "backup-format-1.zip"


async def test_an_archive_of_the_previous_format_still_restores(
    new_database: Databases, tmp_path: Path
) -> None:
    """tests/data/backup-format-1.zip was written by the backup of commit fd705aa (format
    1: no index size in the manifest, tables in key order, every member deflated at
    level 6) from a hub of 25 pages, five attachments of 0 to 40,000 bytes and a page
    with a tab, a newline, a backslash and non-ASCII text. It restores; a backup of what
    it restored holds every table byte for byte as that archive did, and every file is
    back with its recorded checksum."""
    with zipfile.ZipFile(FORMAT_1_ARCHIVE) as zf:
        manifest = json.loads(zf.read(MANIFEST))
        index = [json.loads(line) for line in zf.read(ATTACHMENT_INDEX).splitlines()]
    assert manifest["format"] == "hubjobs-backup/1" and "attachment_index_bytes" not in manifest
    target_url, target_dir = new_database.create(), tmp_path / "restored"
    report = await asyncio.to_thread(restore, FORMAT_1_ARCHIVE, target_url, target_dir)
    assert report.tables == {t["name"]: t["rows"] for t in manifest["tables"]}
    assert report.attachments == len(index) == 5
    assert files_under(target_dir) == {e["storage_path"]: e["sha256"] for e in index}

    rewritten = await snapshot_archive(target_url, target_dir, io.BytesIO())
    assert rewritten.format == FORMAT
    assert [t.model_dump() for t in rewritten.tables] == manifest["tables"]
    assert rewritten.attachment_index_sha256 == manifest["attachment_index_sha256"]


# --- 2. refusals ------------------------------------------------------------------------


async def small_hub(engine: AsyncEngine, folder: Path) -> DemoCourse:
    async with engine.begin() as conn:
        course = await seed_demo(conn, 50)
    await add_attachments(engine, folder, course.page_ids, [0, 10, MB, MB, MB, 5000])
    return course


async def test_restore_refuses_and_then_leaves_everything_as_it_was(
    backup_hub: HubJobsClient,
    engine: AsyncEngine,
    backup_settings: Settings,
    backup_worker: None,
    database_url: str,
    new_database: Databases,
    tmp_path: Path,
) -> None:
    folder = backup_settings.resolved_attachments_dir
    course = await small_hub(engine, folder)
    done = await run_backup(backup_hub.scope(course.workspace_id, course.actor_id))
    assert done.result is not None
    archive = Path(done.result["archivePath"])
    source = await asyncio.to_thread(fingerprint, database_url)
    source_files = files_under(folder)

    # A database that is not empty: the source itself. Nothing changes.
    with pytest.raises(HubJobsError) as refused:
        await asyncio.to_thread(restore, archive, database_url, folder)
    assert refused.value.code == "database_not_empty"
    assert await asyncio.to_thread(fingerprint, database_url) == source
    assert files_under(folder) == source_files

    # A database with some other schema (no rows at all) is not empty either.
    other_url = new_database.create()
    with psycopg.connect(other_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE unrelated (x int)")
    other_dir = tmp_path / "other-attachments"
    with pytest.raises(HubJobsError) as refused:
        await asyncio.to_thread(restore, archive, other_url, other_dir)
    assert refused.value.code == "database_not_empty"
    assert tables_of(other_url) == {"public.unrelated"}
    assert files_under(other_dir) == {}

    # One byte flipped in the middle (inside an attachment's compressed bytes).
    data = bytearray(await asyncio.to_thread(archive.read_bytes))
    middle = len(data) // 2
    with zipfile.ZipFile(archive) as zf:
        members = sorted(zf.infolist(), key=lambda i: i.header_offset)
        holder = [i for i in members if i.header_offset < middle][-1]
        assert holder.filename.startswith("attachments/") and holder.file_size == MB
        assert middle < holder.header_offset + len(holder.FileHeader()) + holder.compress_size
    data[middle] ^= 0xFF
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(bytes(data))
    target_url, target_dir = new_database.create(), tmp_path / "target-attachments"
    with pytest.raises(HubJobsError) as refused:
        await asyncio.to_thread(restore, corrupt, target_url, target_dir)
    assert refused.value.code == "archive_corrupt"
    assert tables_of(target_url) == set()
    assert files_under(target_dir) == {}
    # The same through the command line: one plain line on stderr.
    by_cli = await cli_restore(corrupt, target_url, target_dir, tmp_path / "cli")
    assert_one_error_line(by_cli, "archive_corrupt")
    assert tables_of(target_url) == set()
    assert files_under(target_dir) == {}

    # A manifest naming a schema version this code does not know.
    future = tmp_path / "future.zip"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(future, "w") as dst:
        for info in src.infolist():
            content = src.read(info.filename)
            if info.filename == MANIFEST:
                manifest = json.loads(content)
                manifest["schema_version"] = "9999"
                content = json.dumps(manifest).encode()
            dst.writestr(info, content)
    with pytest.raises(HubJobsError) as refused:
        await asyncio.to_thread(restore, future, target_url, target_dir)
    assert refused.value.code == "schema_unsupported"
    assert tables_of(target_url) == set()
    assert files_under(target_dir) == {}

    # Not a zip at all.
    not_zip = tmp_path / "notes.txt"
    not_zip.write_bytes(b"this is not a backup archive\n" * 100)
    with pytest.raises(InvalidInput) as unreadable:
        await asyncio.to_thread(restore, not_zip, target_url, target_dir)
    assert unreadable.value.code == "archive_unreadable"
    by_cli = await cli_restore(not_zip, target_url, target_dir, tmp_path / "cli")
    assert_one_error_line(by_cli, "archive_unreadable")
    assert tables_of(target_url) == set()
    assert files_under(target_dir) == {}

    # After all that, the untouched archive still restores; and a database already
    # migrated to the archive's version, but without rows, counts as empty too.
    migrated_url = new_database.create(TEMPLATE)
    assert "public.pages" in tables_of(migrated_url)
    report: RestoreReport = await asyncio.to_thread(restore, archive, migrated_url, target_dir)
    assert report.attachments == 6
    assert await asyncio.to_thread(fingerprint, migrated_url) == source
    assert files_under(target_dir) == source_files


# --- 3. cancellation ------------------------------------------------------------------------


def mb_read(job: JobView) -> float:
    match = re.search(r"([\d.]+) MB read", job.progress_message or "")
    return float(match.group(1)) if match else 0.0


async def test_a_running_backup_reports_its_progress_to_its_workflow(
    temporal: Client, engine: AsyncEngine, backup_settings: Settings
) -> None:
    """The progress query and the UI's details move while the backup runs, not only at
    its end, and end on the read model's counters."""
    reporting = backup_settings.model_copy(update={"progress_report_seconds": 0.3})
    folder = reporting.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 50)
    await add_attachments(engine, folder, course.page_ids, [MB] * 200)
    jobs = HubJobsClient(temporal, engine, reporting).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, reporting):
        job = await jobs.start("backup", {})
        handle = temporal.get_workflow_handle(job.workflow_id)
        seen = None
        deadline = time.monotonic() + 60
        while seen is None and time.monotonic() < deadline:
            progress = await handle.query(BackupWorkflow.progress)
            current = await jobs.get(job.id)
            if progress.status == "running" and progress.counters.processed > 0:
                seen = (progress, current)
            elif current.is_final:
                break
            await asyncio.sleep(0.05)
        assert seen is not None, "the workflow heard of no progress while the backup ran"
        mid, row = seen
        assert 0 < mid.counters.processed <= row.processed < row.total
        assert mid.counters.total == row.total
        assert mid.message is not None and "MB read" in mid.message
        done = await jobs.wait(job.id, timeout=60)
        # The row is final before the attempt's result reaches the workflow: its final
        # counters are queried once the run has closed, the worker still up.
        await workflow_closed(temporal, done.workflow_id)
        final = await handle.query(BackupWorkflow.progress)
    assert done.status == "succeeded"
    assert final.counters == done.counters


async def test_a_cancelled_backup_leaves_no_file_at_all(
    backup_hub: HubJobsClient,
    engine: AsyncEngine,
    backup_settings: Settings,
    backup_worker: None,
) -> None:
    folder = backup_settings.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 200)
    await add_attachments(engine, folder, course.page_ids, [MB] * 200)
    jobs = backup_hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("backup", {})
    async for current in jobs.watch(job.id, interval=0.05):
        if mb_read(current) > 0:
            break
    else:
        raise AssertionError("the backup ended before it read anything")
    backups = backup_folder(backup_settings)
    assert any(n.endswith(".partial") for n in names_in(backups)), "no archive being written"
    asked = time.monotonic()
    requested = await jobs.cancel(job.id)
    assert requested.cancel_requested_at is not None
    done = await jobs.wait(job.id, timeout=30, interval=0.05)
    took = time.monotonic() - asked
    print(f"\ncancelled at {mb_read(current):.1f} MB read; finished {took:.2f} s after asking")
    # Within a progress beat or a heartbeat (a second each), plus the lifecycle's steps.
    assert took < 4.0
    assert done.status == "cancelled", (done.status, done.error_code, done.error_message)
    assert done.result is None and done.error_code is None
    assert done.processed < done.total, "the cancellation should land mid-stream"
    assert backups.exists() and names_in(backups) == []


async def _wait_for(check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    "how",
    [
        "cancel signal",
        "temporal cancellation",
    ],
)
async def test_a_cancellation_that_comes_as_the_archive_is_committed_leaves_no_file(
    temporal: Client,
    engine: AsyncEngine,
    backup_settings: Settings,
    backup_worker: None,
    how: str,
) -> None:
    """The activity writes the whole archive, then checks the actor again before it
    renames the file. A cancellation that arrives right then (after its last heartbeat,
    so the activity itself is never told) still ends the job cancelled; it must not leave
    an archive that no job points at and no expiry would ever remove.

    The check is held up deterministically: once the backup's snapshot has read
    workspace_memberships, an ACCESS EXCLUSIVE lock is queued on that table, so the
    activity's role check waits until the test lets it go."""
    folder = backup_settings.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 50)
    await add_attachments(engine, folder, course.page_ids, [MB] * 100)
    starter_settings = backup_settings.model_copy(update={"heartbeat_timeout_seconds": 10})
    jobs = HubJobsClient(temporal, engine, starter_settings).scope(
        course.workspace_id, course.actor_id
    )
    job = await jobs.start("backup", {})
    handle = temporal.get_workflow_handle(job.workflow_id)

    async def scalar(sql: str) -> Any:
        async with engine.connect() as conn:
            return (await conn.execute(text(sql), {"id": job.id})).scalar()

    async def snapshot_has_read_memberships() -> bool:
        """The snapshot is at its attachments (every table dumped, so it holds its
        ACCESS SHARE lock on workspace_memberships until it ends)."""
        return bool(
            await scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity a "
                "JOIN pg_locks l ON l.pid = a.pid JOIN pg_class c ON c.oid = l.relation "
                "WHERE a.query LIKE '%backup_attachments%' "
                "AND c.relname = 'workspace_memberships' AND l.granted)"
            )
        )

    async def role_check_waits() -> bool:
        return bool(
            await scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'SELECT m.role FROM workspace_memberships%')"
            )
        )

    async def cancel_recorded() -> bool:
        return bool(await scalar("SELECT cancel_requested_at IS NOT NULL FROM jobs WHERE id = :id"))

    await _wait_for(snapshot_has_read_memberships, "the snapshot to read the tables", 30)
    lock_conn = await engine.connect()
    lock_tx = await lock_conn.begin()
    lock = asyncio.create_task(
        lock_conn.execute(text("LOCK TABLE workspace_memberships IN ACCESS EXCLUSIVE MODE"))
    )
    try:
        await _wait_for(role_check_waits, "the activity's role check to wait", 30)
        backups = backup_folder(backup_settings)
        assert [n for n in names_in(backups) if n.endswith(".partial")], "no archive written"
        # Past the heartbeat throttle: the activity's last heartbeat has gone out.
        await asyncio.sleep(1.5)
        if how == "cancel signal":
            # A bare signal (the starter's cancel would wait on the lock for its own check).
            await handle.signal("cancel", CancelRequest(actor_id=course.actor_id))
        else:
            await handle.cancel()  # the Temporal UI's "Request cancellation"
        # Either way the request reaches the read model, where the attempt looks last.
        await _wait_for(cancel_recorded, "the read model to record the request", 10)
        assert not lock.done() or lock.exception() is None
    finally:
        await lock_tx.rollback()
        await lock_conn.close()
        with contextlib.suppress(Exception):
            await lock

    done = await jobs.wait(job.id, timeout=30, interval=0.05)
    assert done.status == "cancelled", (done.status, done.error_code, done.error_message)
    assert done.result is None
    assert names_in(backups) == [], "a cancelled backup left an archive nothing points at"


# --- 4. a worker killed mid-stream -------------------------------------------------------------


async def test_a_worker_killed_mid_stream_leaves_no_archive_and_the_retry_writes_a_whole_one(
    temporal: Client,
    engine: AsyncEngine,
    backup_settings: Settings,
    database_url: str,
    new_database: Databases,
    tmp_path: Path,
) -> None:
    folder = backup_settings.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 1000)
    created = await add_attachments(engine, folder, course.page_ids, [MB] * 120 + [0, 7, 70_000])
    source = await asyncio.to_thread(fingerprint, database_url)
    # The lease comes from the starter: JobOptions carry the heartbeat timeout.
    starter_settings = backup_settings.model_copy(update={"heartbeat_timeout_seconds": 3})
    jobs = HubJobsClient(temporal, engine, starter_settings).scope(
        course.workspace_id, course.actor_id
    )
    backups = backup_folder(backup_settings)
    final = partial = backups / "unknown"
    env = hubjobs_env(
        backup_settings,
        backup_settings.home,
        backup_dir=backup_folder(backup_settings),
        attachments_dir=backup_settings.resolved_attachments_dir,
        heartbeat_timeout_seconds=3,
        backup_max_bytes_per_second=PACE,
    )
    workers: list[WorkerProcess] = []
    try:
        first = WorkerProcess("worker-1", env, tmp_path)
        workers.append(first)
        job = await jobs.start("backup", {})
        final = backups / archive_name(job.id)
        partial = await archive_being_written(backups, first)
        assert file_facts(final) is None, "the backup finished before the kill"
        assert first.kill() == -signal.SIGKILL
        at_kill = file_facts(partial)
        assert at_kill is not None
        print(f"\nkilled worker-1 with {at_kill[1] / MB:.1f} MB of the archive written")
        assert file_facts(final) is None, "a killed backup must not leave an archive"
        assert names_in(backups) == [partial.name]
        assert (await jobs.get(job.id)).status == "running"

        second = WorkerProcess("worker-2", env, tmp_path)
        workers.append(second)
        done = await jobs.wait(job.id, timeout=60, interval=0.2)
        assert done.status == "succeeded", (
            f"{done.status} ({done.error_code}: {done.error_message})\n"
            f"--- worker-1\n{first.tail()}\n--- worker-2\n{second.tail()}"
        )
        # The row is final as the attempt returns: its completion reaches the history a
        # moment later, while worker-2 still runs.
        await workflow_closed(temporal, done.workflow_id)
    except BaseException:
        for w in workers:
            print(f"\n--- {w.name} ({w.log_path}):\n{w.tail()}")
        raise
    finally:
        for w in workers:
            w.kill()

    # The second attempt came from the lease running out on the killed one; a backup cut
    # mid-stream made no durable progress, so that death counted as one failed attempt.
    endings = await run_endings(temporal, done.workflow_id, WRITE_BACKUP)
    assert endings == ["timed_out:heartbeat", "completed"], endings
    assert (done.attempts, done.attempts_failed) == (2, 1)

    assert done.result is not None and Path(done.result["archivePath"]) == final
    assert file_facts(partial) is None
    assert names_in(backups) == [final.name]
    assert file_facts(final) == (0o600, done.result["sizeBytes"])
    assert done.result["attachmentCount"] == len(created)

    target_url, target_dir = new_database.create(), tmp_path / "restored"
    report = await asyncio.to_thread(restore, final, target_url, target_dir)
    assert report.tables == {t: n for t, (n, _) in source.items()}
    assert await asyncio.to_thread(fingerprint, target_url) == source
    assert await asyncio.to_thread(assert_same_attachments, database_url, folder, target_dir) == (
        len(created)
    )


async def test_an_attempt_presumed_dead_leaves_its_successor_s_archive_alone(
    temporal: Client,
    engine: AsyncEngine,
    backup_settings: Settings,
    database_url: str,
    new_database: Databases,
    tmp_path: Path,
) -> None:
    """Found by the chaos campaign (seed 101, its worker_stop fault at +523 s during a
    backup): worker A's attempt stopped (SIGSTOP) past its heartbeat timeout, the
    next attempt writing on worker B, then A continued. A's attempt, told it was
    cancelled, removed its temporary archive on its way out, which was B's, under the
    same name: B's commit found no file, and the backup failed ``storage_unavailable``
    though its disk was fine. Each attempt now writes a temporary file of its own, and
    the one that commits removes the others'."""
    folder = backup_settings.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 1000)
    await add_attachments(engine, folder, course.page_ids, [MB] * 60)
    source = await asyncio.to_thread(fingerprint, database_url)
    starter_settings = backup_settings.model_copy(update={"heartbeat_timeout_seconds": 3})
    jobs = HubJobsClient(temporal, engine, starter_settings).scope(
        course.workspace_id, course.actor_id
    )
    backups = backup_folder(backup_settings)
    # 4 MB a second: the 60 MB of files take B some 15 s, while A wakes up.
    env = hubjobs_env(
        backup_settings,
        backup_settings.home,
        backup_dir=backups,
        attachments_dir=folder,
        heartbeat_timeout_seconds=3,
        backup_max_bytes_per_second=4 * MB,
    )
    workers: list[WorkerProcess] = []
    a = WorkerProcess("worker-a", env, tmp_path)
    workers.append(a)
    try:
        await wait_started(a)
        job = await jobs.start("backup", {})
        held_by_a = await archive_being_written(backups, a)
        os.kill(a.pid, signal.SIGSTOP)
        b = WorkerProcess("worker-b", env, tmp_path)
        workers.append(b)
        held_by_b = await archive_being_written(backups, b, temporary_archives(backups))
        attempt = await running_attempt(temporal, job.workflow_id, WRITE_BACKUP)
        assert attempt is not None and attempt.identity == identity_of(b), attempt
        os.kill(a.pid, signal.SIGCONT)
        done = await jobs.wait(job.id, timeout=90, interval=0.2)
        print(
            f"\nA wrote {held_by_a.name}, stopped; B wrote {held_by_b.name}; A continued: the job "
            f"{done.status} ({done.error_code}), {done.attempts} attempts"
        )
        assert done.status == "succeeded", (
            f"{done.status} ({done.error_code}: {done.error_message})\n"
            f"--- worker-a\n{a.tail()}\n--- worker-b\n{b.tail()}"
        )
        await workflow_closed(temporal, done.workflow_id)
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGCONT)
            w.kill()
    assert done.result is not None
    final = Path(done.result["archivePath"])
    assert final == backups / archive_name(job.id)
    assert names_in(backups) == [final.name]
    target_url, target_dir = new_database.create(), tmp_path / "restored"
    report = await asyncio.to_thread(restore, final, target_url, target_dir)
    assert report.tables == {t: n for t, (n, _) in source.items()}
    assert await asyncio.to_thread(fingerprint, target_url) == source


# --- 5. expiry ------------------------------------------------------------------------------------


async def test_an_expired_backup_takes_its_archive_with_it(
    backup_hub: HubJobsClient,
    engine: AsyncEngine,
    backup_settings: Settings,
    backup_worker: None,
    temporal: Client,
) -> None:
    folder = backup_settings.resolved_attachments_dir
    course = await small_hub(engine, folder)
    jobs = backup_hub.scope(course.workspace_id, course.actor_id)
    done = await run_backup(jobs)
    kept = await run_backup(jobs)  # not expired: stays, with its archive
    assert done.result is not None and kept.result is not None
    archive, kept_archive = Path(done.result["archivePath"]), Path(kept.result["archivePath"])
    assert archive != kept_archive
    assert file_facts(archive) is not None and file_facts(kept_archive) is not None
    assert done.expires_at is not None
    # What an attempt killed midway left behind goes with the job too.
    (backup_folder(backup_settings) / temporary_name(done.id, "killed")).write_bytes(b"x")

    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE jobs SET expires_at = now() - interval '1 minute' WHERE id = :id"),
            {"id": done.id},
        )
    swept = await temporal.execute_workflow(
        "RetentionSweep",
        100,
        id=f"sweep-{uuid.uuid4().hex[:8]}",
        task_queue=backup_settings.task_queue,
        result_type=SweepResult,
    )
    assert (swept.removed, swept.kept) == (1, 0)
    assert file_facts(archive) is None
    assert file_facts(kept_archive) is not None
    assert names_in(backup_folder(backup_settings)) == [kept_archive.name]
    async with engine.connect() as conn:
        remaining = set(
            (await conn.execute(text("SELECT id FROM jobs WHERE kind = 'backup'"))).scalars()
        )
    assert remaining == {kept.id}


# --- 6. who may take a backup ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "enabled", "code"),
    [
        ("reader", True, "actor_not_administrator"),
        ("editor", True, "actor_not_administrator"),
        ("administrator", False, "workspace_not_found"),  # disabled: as if none
    ],
)
async def test_only_an_enabled_administrator_may_start_a_backup(
    backup_hub: HubJobsClient,
    engine: AsyncEngine,
    backup_settings: Settings,
    role: str,
    enabled: bool,
    code: str,
) -> None:
    async with engine.begin() as conn:
        course = await seed_demo(conn, 5)
        actor = await create_account(conn, course.workspace_id, role=role, enabled=enabled)
    with pytest.raises((Forbidden, NotFound)) as refused:
        await backup_hub.scope(course.workspace_id, actor).start("backup", {})
    assert refused.value.code == code
    async with engine.connect() as conn:
        count = (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one()
    assert count == 0
    assert names_in(backup_folder(backup_settings)) == []


async def test_a_workspace_administrator_gets_no_hub_backup_from_the_client_or_temporal(
    backup_hub: HubJobsClient,
    engine: AsyncEngine,
    backup_settings: Settings,
    backup_worker: None,
    temporal: Client,
) -> None:
    """The whole hub is a hub operator's on the start paths beside the API's and the
    CLI's: the Python client refuses it with nothing written, and a start straight
    through Temporal (another service's) ends failed with the code, no archive made."""
    async with engine.begin() as conn:
        course = await seed_demo(conn, 5)
    jobs = backup_hub.scope(course.workspace_id, course.actor_id)
    with pytest.raises(Forbidden) as refused:
        await jobs.start("backup", {"scope": "hub"})
    assert refused.value.code == "hub_operator_required"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one() == 0

    job_id = uuid.uuid4()
    direct = JobInput(
        job_id=job_id,
        kind="backup",
        workspace_id=course.workspace_id,
        actor_id=course.actor_id,
        correlation_id="other-service",
        payload={"scope": "hub"},
    ).model_dump(mode="json")
    handle = await temporal.start_workflow(
        BACKUP.workflow_type, direct, id=f"backup-{job_id}", task_queue=backup_settings.task_queue
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "hub_operator_required"
    row = await row_of(engine, job_id)
    assert row is not None and (row.status, row.error_code) == ("failed", "hub_operator_required")
    assert names_in(backup_folder(backup_settings)) == []


# --- 7. what the backup reads ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["the file", "its folder"])
async def test_the_backup_never_reads_an_attachment_through_a_link(
    engine: AsyncEngine, backup_settings: Settings, database_url: str, tmp_path: Path, where: str
) -> None:
    """An attachment file (or its folder) replaced by a link to a file outside the
    attachments folder, with the very bytes the row records: the backup refuses it as
    missing rather than copy what lies outside into the archive."""
    folder = backup_settings.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 3)
        content = b"outside the attachments folder\n"
        attachment = await create_attachment(conn, folder, course.page_ids[0], "a.txt", content)
        storage_path = (
            await conn.execute(
                text("SELECT storage_path FROM attachments WHERE id = :id"), {"id": attachment}
            )
        ).scalar_one()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / Path(storage_path).name).write_bytes(content)
    file = folder / storage_path
    if where == "the file":
        file.unlink()
        file.symlink_to(outside / file.name)
    else:
        file.unlink()
        file.parent.rmdir()
        file.parent.symlink_to(outside, target_is_directory=True)

    with pytest.raises(AttachmentUnavailable) as refused:
        await snapshot_archive(database_url, folder, io.BytesIO())
    assert refused.value.code == "attachment_missing"


class Stop(Exception):
    pass


async def test_a_backup_stopped_mid_table_leaves_its_connection_usable(
    engine: AsyncEngine, backup_settings: Settings, database_url: str
) -> None:
    """The writer reads COPY output from libpq itself; stopped in the middle of a table
    (the progress callback raises, as a cancellation request does), it has the server
    stop sending, and the connection rolls back and works on, within a moment."""
    async with engine.begin() as conn:
        await seed_demo(conn, 3000)
        await conn.execute(text("UPDATE pages SET markdown = repeat(md5(id::text), 40)"))
    seen = 0

    async def progress(nbytes: int, step_done: bool, stage: str) -> None:
        nonlocal seen
        seen += nbytes
        if stage == "pages" and seen > MB:
            raise Stop()

    async with await psycopg.AsyncConnection.connect(database_url) as snapshot:
        await snapshot.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await snapshot.set_read_only(True)
        started = time.monotonic()
        with pytest.raises(Stop):
            async with snapshot.transaction():
                await write_archive(
                    snapshot,
                    backup_settings.resolved_attachments_dir,
                    io.BytesIO(),
                    progress,
                    backup_id=uuid.uuid4(),
                )
        assert time.monotonic() - started < 10
        row = await (await snapshot.execute("SELECT count(*) FROM pages")).fetchone()
    assert row == (3000,)


# --- 8. a paced backup ----------------------------------------------------------------------

THROTTLE = 60_000


async def test_a_backup_throttled_to_60000_bytes_a_second_beats_through_its_waits(
    temporal: Client,
    engine: AsyncEngine,
    backup_settings: Settings,
    tmp_path: Path,
) -> None:
    """A worker process with HUBJOBS_BACKUP_MAX_BYTES_PER_SECOND=60000 and a lease of
    2 s: one attachment of 400 kB makes the throttle wait about 7 s in one go, three
    leases and more. The wait beats all along (activities/pauses.py): one attempt,
    completed, and the archive took at least as long as the pace says."""
    folder = backup_settings.resolved_attachments_dir
    async with engine.begin() as conn:
        course = await seed_demo(conn, 20)
    created = await add_attachments(engine, folder, course.page_ids, [400_000, 10, 20_000])
    lease = {"heartbeat_timeout_seconds": 2, "max_activity_attempts": 2}
    starter_settings = backup_settings.model_copy(update=lease)
    jobs = HubJobsClient(temporal, engine, starter_settings).scope(
        course.workspace_id, course.actor_id
    )
    env = hubjobs_env(
        backup_settings,
        backup_settings.home,
        backup_dir=backup_folder(backup_settings),
        attachments_dir=folder,
        backup_max_bytes_per_second=THROTTLE,
        **lease,
    )
    worker = WorkerProcess("paced-worker", env, tmp_path)
    try:
        started = time.monotonic()
        job = await jobs.start("backup", {})
        done = await jobs.wait(job.id, timeout=120, interval=0.2)
        took = time.monotonic() - started
        # The row is final as the attempt returns; its completion reaches the history
        # a moment later, the worker still up.
        await workflow_closed(temporal, done.workflow_id)
        endings = await run_endings(temporal, done.workflow_id, WRITE_BACKUP)
    except BaseException:
        print(f"\n--- {worker.name}:\n{worker.tail()}")
        raise
    finally:
        worker.kill()
    print(f"\npaced backup: {took:.1f} s, attempts {endings}")
    assert done.status == "succeeded", (done.status, done.error_code, done.error_message, endings)
    assert endings == ["completed"], endings
    assert done.result is not None and done.result["attachmentCount"] == len(created)
    assert took >= sum(len(c) for c in created.values()) / THROTTLE
