"""The backup activity: one consistent snapshot of every hub table and attachment,
streamed into one archive (see hubjobs.archive.format).

One REPEATABLE READ, READ ONLY transaction reads everything, so tables and
attachment rows agree; hubjobs.archive.writer streams COPY output and files into the
zip in blocks of about a MiB, so memory stays flat whatever the size. The archive is
written under a temporary name, fsynced and renamed: a cancelled, failed or killed
backup leaves no archive, and a retry removes a killed attempt's temporary file and
starts clean (a new snapshot, never a mix). Files are readable by their owner only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
import zipfile
from pathlib import Path

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from hubjobs.archive.format import MANIFEST, Manifest, archive_name
from hubjobs.archive.writer import AttachmentUnavailable, planned_steps, write_archive
from hubjobs.db.engine import plain_url
from hubjobs.domain.access import ADMINISTRATOR, role_of
from hubjobs.observability.logs import bind_job
from hubjobs.readmodel import store as read_model
from hubjobs.settings import Settings
from hubjobs.temporal.messages import (
    BackupArchive,
    BackupRequest,
    BackupRun,
    Counters,
    JobProgressReport,
)

log = logging.getLogger(__name__)

# Progress reaches the read model (and a cancellation request is looked for) this often;
# the workflow hears of it every HUBJOBS_PROGRESS_REPORT_SECONDS.
PROGRESS_EVERY = 1.0


class CancelRequested(Exception):
    pass


class Progress:
    """Heartbeats carry the stage and bytes done; the read model hears of them about
    once a second, which is also when a cancellation request is looked for."""

    def __init__(self, engine: AsyncEngine, job_id: uuid.UUID, report_every: float = 10.0) -> None:
        self.engine = engine
        self.job_id = job_id
        self.report_every = report_every
        self.total = 0
        self.steps = 0
        self.bytes = 0
        self.stage = "starting"
        self._last = 0.0
        self._reported = time.monotonic()

    async def advance(
        self, *, nbytes: int = 0, step: bool = False, stage: str | None = None
    ) -> None:
        self.bytes += nbytes
        self.steps += int(step)
        self.stage = stage or self.stage
        activity.heartbeat({"stage": self.stage, "steps": self.steps, "bytes": self.bytes})
        if time.monotonic() - self._last >= PROGRESS_EVERY:
            await self.flush()
        else:
            # Compressing and hashing run on the event loop: hand it back after every
            # chunk, so the worker's other activities, its heartbeats and its polling
            # are not starved for a whole second at a time.
            await asyncio.sleep(0)

    async def __call__(self, nbytes: int, step_done: bool, stage: str) -> None:
        """The archive writer's progress callback."""
        await self.advance(nbytes=nbytes, step=step_done, stage=stage)

    async def flush(self, *, check_cancel: bool = True) -> None:
        self._last = time.monotonic()
        message = (
            f"{self.steps} of {self.total} tables and attachments, "
            f"{self.bytes / 1e6:.1f} MB read ({self.stage})"
        )
        async with self.engine.begin() as conn:
            cancel = (
                await conn.execute(
                    text(
                        "UPDATE jobs SET total = :total, processed = :steps, succeeded = :steps, "
                        "progress_message = :message, updated_at = now() WHERE id = :id "
                        "RETURNING cancel_requested_at IS NOT NULL"
                    ),
                    {
                        "id": self.job_id,
                        "total": self.total,
                        "steps": self.steps,
                        "message": message,
                    },
                )
            ).scalar_one()
        if cancel and check_cancel:
            raise CancelRequested()
        if time.monotonic() - self._reported >= self.report_every:
            self._reported = time.monotonic()
            await report_progress(
                Counters(total=self.total, processed=self.steps, succeeded=self.steps), message
            )


class BackupActivities:
    def __init__(self, engine: AsyncEngine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings

    @activity.defn(name="create_backup")
    async def create_backup(self, request: BackupRequest) -> BackupRun:
        async with self.engine.connect() as conn:
            job = await read_model.get_job(conn, request.job_id)
        if job is None:
            raise ApplicationError("job not found", type="job_not_found", non_retryable=True)
        bind_job(job)
        folder = self.settings.resolved_backup_dir
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = folder / archive_name(job.id)
        partial = final.with_name(final.name + ".partial")
        if final.exists():
            # An earlier attempt renamed its archive but died before reporting it.
            return BackupRun(archive=describe_archive(final))
        partial.unlink(missing_ok=True)  # what a killed attempt left behind
        progress = Progress(self.engine, job.id, self.settings.progress_report_seconds)
        try:
            manifest = await self._write(partial, progress)
            await self._require_administrator(job.workspace_id, job.actor_id)
            # A cancellation that came after the last progress beat (and after the last
            # heartbeat, so Temporal may never tell this activity) ends the job cancelled
            # all the same: the archive must not be committed.
            await progress.flush()
            os.replace(partial, final)
            _fsync_dir(folder)
        except CancelRequested:
            partial.unlink(missing_ok=True)
            log.info("backup %s cancelled; no archive kept", job.id)
            return BackupRun()
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        try:
            await progress.flush(check_cancel=False)
        except asyncio.CancelledError:
            # Cancelled by Temporal after the rename: the job ends cancelled, without it.
            final.unlink(missing_ok=True)
            raise
        return BackupRun(archive=_archive(final, manifest))

    async def _require_administrator(self, workspace_id: uuid.UUID, actor_id: uuid.UUID) -> None:
        """Checked again before the archive is committed: the start's check is old news."""
        async with self.engine.connect() as conn:
            if await role_of(conn, workspace_id, actor_id) != ADMINISTRATOR:
                raise ApplicationError(
                    "the actor is no longer an enabled administrator",
                    type="actor_unavailable",
                    non_retryable=True,
                )

    async def _write(self, path: Path, progress: Progress) -> Manifest:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as raw:
            url = plain_url(self.settings.resolved_database_url())
            async with await psycopg.AsyncConnection.connect(url) as conn:
                await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
                await conn.set_read_only(True)
                async with conn.transaction():
                    progress.total = await planned_steps(conn)
                    try:
                        manifest = await write_archive(
                            conn,
                            self.settings.resolved_attachments_dir,
                            raw,
                            progress,
                            backup_id=progress.job_id,
                            max_bytes_per_second=self.settings.backup_max_bytes_per_second,
                        )
                    except AttachmentUnavailable as err:
                        raise ApplicationError(
                            err.message, type=err.code, non_retryable=True
                        ) from None
            raw.flush()
            await asyncio.to_thread(os.fsync, raw.fileno())
        return manifest


async def report_progress(counters: Counters, message: str) -> None:
    """Tells the running activity's workflow how far it got (the ``report_progress``
    signal); a report that does not get through is only logged."""
    info = activity.info()
    if info.workflow_id is None:
        return
    report = JobProgressReport(counters=counters, message=message)
    try:
        handle = activity.client().get_workflow_handle(
            info.workflow_id, run_id=info.workflow_run_id
        )
        await handle.signal("report_progress", report)
    except (RuntimeError, RPCError) as err:
        log.debug("progress report not delivered: %s", err)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _archive(path: Path, manifest: Manifest) -> BackupArchive:
    return BackupArchive(
        backup_id=manifest.backup_id,
        created_at=manifest.created_at,
        size_bytes=path.stat().st_size,
        table_count=len(manifest.tables),
        attachment_count=manifest.attachment_count,
        schema_version=manifest.schema_version,
        archive_path=str(path),
    )


def describe_archive(path: Path) -> BackupArchive:
    with zipfile.ZipFile(path) as zf:
        manifest = Manifest.model_validate(json.loads(zf.read(MANIFEST)))
    return _archive(path, manifest)
