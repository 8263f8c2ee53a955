"""A full disk is a stated failure (issue 19): on a small tmpfs of the test's own
(``mount -t tmpfs -o size=…``, as root; removed afterwards), with a real worker
process:

1. A page export that runs out of space fails at once with ``no_space`` (one attempt,
   no retries), its client reads the code and a plain message, and every file of the
   export is gone at once: the disk is empty again, not full until the job expires.
2. A backup that runs out of space fails the same way and leaves no partial archive.
3. An export whose folder is read-only fails at once with ``storage_unavailable``.

Before, the export failed ``processing_failed`` after every attempt had run out of
space in turn, its ``.partial`` file left behind, and the client never heard why.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from hubjobs.temporal.failures import ERROR_MESSAGES
from starter.client import HubJobsClient
from tests.support.archive_helpers import MB, add_attachments
from tests.support.helpers import with_kind, workflow_closed
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import seed
from tests.system.test_faults import failed_job, wait_started

DISK = "512k"
# A refusal ends the job in one attempt: well within this, where the retries it used
# to get took 12 s and more (2 s, then 10 s between the fixture's 3 attempts).
FAILS_WITHIN = 10.0


@contextmanager
def small_disk(size: str = DISK, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a fresh folder for the block."""
    folder = Path(tempfile.mkdtemp(prefix="hubjobs-disk-"))
    options = f"size={size},mode=0777" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def everything_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def used_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


async def bulk_up(engine: AsyncEngine, workspace_id: object) -> None:
    """4 KB of text a page, so that an export of a few hundred pages fills the disk."""
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE pages SET markdown = repeat('x', 4000) WHERE workspace_id = :ws"),
            {"ws": workspace_id},
        )


async def test_an_export_that_fills_its_disk_fails_no_space_and_leaves_nothing(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """400 pages of 4 KB, 50 a file (about 200 KB each) on a 512 KB tmpfs: the third
    file does not fit."""
    course = await seed(engine, 400)
    await bulk_up(engine, course.workspace_id)
    with small_disk() as disk:
        env = hubjobs_env(settings, tmp_path, export_dir=disk)
        worker = WorkerProcess("worker", env, tmp_path)
        try:
            await wait_started(worker)
            jobs = HubJobsClient(temporal, engine, settings).scope(
                course.workspace_id, course.actor_id
            )
            started = time.monotonic()
            job = await jobs.start("page_export", {"pages_per_file": 50})
            done = await jobs.wait(job.id, timeout=60, interval=0.1)
            took = time.monotonic() - started
            await workflow_closed(temporal, done.workflow_id)
            left, used = everything_in(disk), used_bytes(disk)
        finally:
            worker.kill()
    print(
        f"\nexport on a {DISK} tmpfs: {done.status} ({done.error_code}) {took:.1f} s after "
        f"its start, {done.attempts} attempt(s); left on the disk: {left}, {used} bytes used"
    )
    assert (done.status, done.error_code) == ("failed", "no_space"), failed_job(done, [worker])
    assert done.error_message == ERROR_MESSAGES["no_space"]
    assert (done.attempts, done.attempts_failed) == (1, 0), done
    assert took < FAILS_WITHIN, took
    assert left == [] and used < 64 * 1024, (left, used)


async def test_a_backup_that_fills_its_disk_fails_no_space_and_leaves_no_partial(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """2 MB of incompressible attachments into a 512 KB tmpfs."""
    course = await seed(engine, 20)
    attachments = tmp_path / "attachments"
    await add_attachments(engine, attachments, course.page_ids, [MB, MB, 1000])
    with small_disk() as disk:
        backup_settings = with_kind(
            settings.model_copy(update={"attachments_dir": attachments}), "backup", backup_dir=disk
        )
        env = hubjobs_env(backup_settings, tmp_path, backup_dir=disk, attachments_dir=attachments)
        worker = WorkerProcess("worker", env, tmp_path)
        try:
            await wait_started(worker)
            jobs = HubJobsClient(temporal, engine, backup_settings).scope(
                course.workspace_id, course.actor_id
            )
            started = time.monotonic()
            job = await jobs.start("backup", {})
            done = await jobs.wait(job.id, timeout=60, interval=0.1)
            took = time.monotonic() - started
            await workflow_closed(temporal, done.workflow_id)
            left = everything_in(disk)
        finally:
            worker.kill()
    print(f"\nbackup on a {DISK} tmpfs: {done.status} ({done.error_code}) in {took:.1f} s")
    assert (done.status, done.error_code) == ("failed", "no_space"), failed_job(done, [worker])
    assert done.error_message == ERROR_MESSAGES["no_space"]
    assert (done.attempts, done.attempts_failed) == (1, 0), done
    assert took < FAILS_WITHIN, took
    assert left == [], left


async def test_an_export_into_a_read_only_folder_fails_storage_unavailable(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    course = await seed(engine, 30)
    with small_disk(read_only=True) as disk:
        env = hubjobs_env(settings, tmp_path, export_dir=disk)
        worker = WorkerProcess("worker", env, tmp_path)
        try:
            await wait_started(worker)
            jobs = HubJobsClient(temporal, engine, settings).scope(
                course.workspace_id, course.actor_id
            )
            job = await jobs.start("page_export", {})
            done = await jobs.wait(job.id, timeout=60, interval=0.1)
            await workflow_closed(temporal, done.workflow_id)
        finally:
            worker.kill()
    assert (done.status, done.error_code) == ("failed", "storage_unavailable"), failed_job(
        done, [worker]
    )
    assert done.error_message == ERROR_MESSAGES["storage_unavailable"]
    assert done.attempts == 1, done
