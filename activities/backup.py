"""The backup work: one REPEATABLE READ snapshot streamed into one archive, memory flat.
The archive is written under a temporary name of the attempt's own and linked to its
name unless another attempt did first: an unfinished backup leaves no archive, and an
attempt presumed dead never touches its successor's file. An outage restarts the
stream; a stream that stalls past a batch's budget is an outage, not a wait.
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
from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity

from activities.attempt import KindActivities
from activities.context import WorkContext
from activities.endings import ActorUnavailable, Done, Paused, Refused, Stopped, WorkEnd
from activities.pauses import pause
from activities.storage import storage_refusal
from hubjobs import job_rows
from hubjobs.archive.format import (
    MANIFEST,
    Manifest,
    archive_name,
    temporary_files,
    temporary_name,
)
from hubjobs.archive.writer import AttachmentUnavailable, planned_steps, write_archive
from hubjobs.db.deadline import Deadline, deadline, watch, within
from hubjobs.db.engine import plain_url
from hubjobs.db.limits import ConnectOptions, Purpose
from hubjobs.domain.access import ADMINISTRATOR, role_of
from hubjobs.kinds.backup import (
    BACKUP,
    BackupArchive,
    BackupPayload,
    BackupSettings,
    progress_line,
)
from hubjobs.readmodel.views import Counters
from hubjobs.temporal.messages import WorkRequest, WorkResult

log = logging.getLogger(__name__)

# Progress reaches the read model, and a cancel is looked for, this often.
PROGRESS_EVERY = 1.0


class CancelRequested(Exception):
    pass


class HandOver(Exception):
    """The worker is shutting down: drop the stream, let another worker start over."""


class Progress:
    """Heartbeats after every chunk, tells the read model once a second (and looks for a
    cancel then); with a pace (bytes a second since the stream began) it waits for the
    pace to catch up, beating through the wait."""

    def __init__(self, ctx: WorkContext[BackupPayload], pace: float | None = None) -> None:
        self.ctx = ctx
        self.pace = pace
        self.total = 0
        self.steps = 0
        self.bytes = 0
        self.stage = "starting"
        self._last = 0.0
        self._began = time.monotonic()
        # The snapshot stream's stall bound, moved on at every chunk.
        self.stall: Deadline | None = None

    def restart(self) -> None:
        """A new stream (after an outage): counted, and paced, from nothing."""
        self.steps = self.bytes = 0
        self._began = time.monotonic()

    def alive(self) -> None:
        """The attempt and its stream are alive: a heartbeat, the stall bound moved on."""
        if self.stall is not None:
            self.stall.extend(self.ctx.settings.db_batch_timeout_seconds)
        self.ctx.beat()

    async def advance(
        self, *, nbytes: int = 0, step: bool = False, stage: str | None = None
    ) -> None:
        self.bytes += nbytes
        self.steps += int(step)
        self.stage = stage or self.stage
        self.alive()
        while True:
            if self.ctx.shutting_down():
                raise HandOver()
            if time.monotonic() - self._last >= PROGRESS_EVERY:
                await self.flush()
            ahead = self._ahead()
            if ahead <= 0:
                break
            await pause(min(ahead, PROGRESS_EVERY), self.alive)
        # Compressing runs on the event loop: yield after every chunk, so the worker's
        # other activities and heartbeats are not starved.
        await asyncio.sleep(0)

    def _ahead(self) -> float:
        """How far the stream is ahead of its pace, in seconds (0: no pace)."""
        if not self.pace:
            return 0.0
        return self.bytes / self.pace - (time.monotonic() - self._began)

    async def __call__(self, nbytes: int, step_done: bool, stage: str) -> None:
        """The archive writer's progress callback."""
        await self.advance(nbytes=nbytes, step=step_done, stage=stage)

    async def flush(self, *, check_cancel: bool = True) -> None:
        self._last = time.monotonic()
        message = progress_line(self.steps, self.total, self.bytes, self.stage)
        counters = Counters(total=self.total, processed=self.steps, succeeded=self.steps)
        self.ctx.counters = counters
        job_id = self.ctx.job.id

        async def write(conn: AsyncConnection) -> bool:
            return await job_rows.set_progress(conn, job_id, counters, message)

        cancel = await self.ctx.db(write)
        if cancel and check_cancel:
            raise CancelRequested()
        await self.ctx.report(message)


class BackupActivities(KindActivities[BackupPayload]):
    kind = BACKUP

    @activity.defn
    async def write_backup(self, request: WorkRequest) -> WorkResult:
        """One attempt: the whole archive, or nothing."""
        return await self.attempt(request, self.work)

    async def work(self, ctx: WorkContext[BackupPayload]) -> WorkEnd:
        job = ctx.job
        own = BackupSettings.of(ctx.settings)
        folder = own.resolved_backup_dir(ctx.settings.home)
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:
            raise storage_refusal(err) or err from None
        final = folder / archive_name(job.id)
        partial = folder / temporary_name(job.id, uuid.uuid4().hex[:12])
        if final.exists():
            # An earlier attempt committed its archive but died before reporting it.
            return _committed(final, job.id)
        progress = Progress(ctx, own.backup_max_bytes_per_second)

        async def stream() -> Manifest:
            partial.unlink(missing_ok=True)  # what a killed or cut attempt left behind
            progress.restart()
            return await self._write(ctx, partial, progress)

        try:
            manifest = await ctx.retrying(stream)
            await ctx.db(lambda conn: self._require_actor(conn, ctx))
            # A cancel after the last progress beat must still keep the archive out.
            await progress.flush()
            if not _commit(partial, final):
                return _committed(final, job.id)
        except CancelRequested:
            partial.unlink(missing_ok=True)
            log.info("backup cancelled; no archive kept")
            return Stopped()
        except HandOver:
            partial.unlink(missing_ok=True)
            log.info("worker shutting down: backup handed over")
            return Paused()
        except OSError as err:
            partial.unlink(missing_ok=True)
            refusal = storage_refusal(err)
            if refusal is None:
                raise
            log.warning("the archive cannot be written (%s); no file kept", refusal.code)
            raise refusal from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        _remove_leftovers(final, job.id)
        return Done(_archive(final, manifest).model_dump(mode="json"))

    @staticmethod
    async def _require_actor(conn: AsyncConnection, ctx: WorkContext[BackupPayload]) -> None:
        """Checked again before the archive is committed (the start's check is old news):
        an enabled administrator, and for the whole hub still a hub operator."""
        job = ctx.job
        if await role_of(conn, job.workspace_id, job.actor_id) != ADMINISTRATOR:
            raise ActorUnavailable()
        hub_wide = ctx.payload.workspace_of(job.workspace_id) is None
        if hub_wide and job.actor_id not in ctx.settings.hub_operators:
            raise ActorUnavailable()

    async def _write(
        self, ctx: WorkContext[BackupPayload], path: Path, progress: Progress
    ) -> Manifest:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as raw:
            settings = ctx.settings
            url = ConnectOptions.of(settings, Purpose.BULK).conninfo(
                plain_url(settings.resolved_database_url())
            )
            # Connecting within a lifecycle budget, then the stream within its stall bound.
            with deadline(settings.db_lifecycle_timeout_seconds) as bound:
                progress.stall = bound
                async with await within(psycopg.AsyncConnection.connect(url)) as conn:
                    watch(conn)
                    await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
                    await conn.set_read_only(True)
                    async with conn.transaction():
                        workspace = ctx.payload.workspace_of(ctx.job.workspace_id)
                        progress.total = await planned_steps(conn, workspace)
                        try:
                            manifest = await write_archive(
                                conn,
                                settings.resolved_attachments_dir,
                                raw,
                                progress,
                                backup_id=ctx.job.id,
                                workspace_id=workspace,
                            )
                        except AttachmentUnavailable as err:
                            raise Refused(err.message, code=err.code) from None
                progress.stall = None
            raw.flush()
            await asyncio.to_thread(os.fsync, raw.fileno())
        return manifest


def _commit(partial: Path, final: Path) -> bool:
    """The archive under its name, unless an attempt committed one first (False): a link
    never replaces a file, as a rename would."""
    try:
        os.link(partial, final)
    except FileExistsError:
        partial.unlink(missing_ok=True)
        return False
    except FileNotFoundError:
        if final.exists():
            return False
        raise
    partial.unlink()
    _fsync_dir(final.parent)
    return True


def _committed(final: Path, backup_id: uuid.UUID) -> Done:
    """The archive another attempt committed, and what it left behind removed."""
    _remove_leftovers(final, backup_id)
    return Done(describe_archive(final).model_dump(mode="json"))


def _remove_leftovers(final: Path, backup_id: uuid.UUID) -> None:
    """Once the archive is committed: the temporary files of attempts killed midway."""
    for leftover in temporary_files(final.parent, backup_id):
        leftover.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _archive(path: Path, manifest: Manifest) -> BackupArchive:
    return BackupArchive(
        backup_id=manifest.backup_id,
        scope=manifest.scope,
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
