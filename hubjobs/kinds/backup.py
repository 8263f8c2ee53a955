"""Backup (seed 000): one consistent archive of every hub table and attachment. It has no
items: its progress is tables and attachments streamed, and its only durable progress
is the finished archive (a backup cut mid-stream made none; the next attempt starts a
new snapshot). When the job expires, its archive goes with it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.archive.format import HUB_TABLES, temporary_files
from hubjobs.kinds.base import JobKind, NewJob, Prepared, Result
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

log = logging.getLogger(__name__)


class BackupPayload(BaseModel):
    """Nothing to choose: a backup takes everything."""

    model_config = ConfigDict(extra="forbid")


class BackupArchive(BaseModel):
    """What a finished backup wrote: the attempt's output, the result's source."""

    backup_id: uuid.UUID
    created_at: datetime
    size_bytes: int
    table_count: int
    attachment_count: int
    schema_version: str
    archive_path: str


# An Alembic revision's id, and a path on Linux (PATH_MAX): bounds of the result's text.
REVISION_MAX_LENGTH = 32
PATH_MAX_LENGTH = 4096


class BackupResult(Result):
    backup_id: uuid.UUID
    created_at: datetime
    size_bytes: int
    table_count: int
    attachment_count: int
    schema_version: str = Field(max_length=REVISION_MAX_LENGTH)
    archive_path: str = Field(max_length=PATH_MAX_LENGTH)


def what_is_backed_up(tables: int, attachments: int) -> str:
    """ "12 tables", "12 tables and 3 attachments": attachments named only when there are
    some."""
    if not attachments:
        return f"{tables} tables"
    return f"{tables} tables and {attachments} attachment{'s' if attachments != 1 else ''}"


def progress_line(steps: int, total: int, nbytes: int, stage: str) -> str:
    """A backup's progress: its steps are the tables, then the attachment files."""
    attachments = max(0, total - len(HUB_TABLES))
    what = "tables" if not attachments else "tables and attachments"
    return f"{steps} of {total} {what}, {nbytes / 1e6:.1f} MB read ({stage})"


async def check(conn: AsyncConnection, job: NewJob, payload: BackupPayload) -> str:
    """Nothing to check but the actor (the shared start's): any administrator may."""
    return "Back up the hub"


async def prepare(conn: AsyncConnection, job: NewJob, payload: BackupPayload) -> Prepared:
    """By the first attempt: what the backup holds (the attachments, counted then)."""
    attachments = (await conn.execute(text("SELECT count(*) FROM attachments"))).scalar_one()
    return Prepared(
        total=len(HUB_TABLES) + int(attachments),
        summary=f"Back up the hub: {what_is_backed_up(len(HUB_TABLES), int(attachments))}",
    )


def build_result(
    payload: BackupPayload, counters: Counters, output: dict[str, Any] | None
) -> BackupResult:
    return BackupResult.model_validate(BackupArchive.model_validate(output).model_dump())


async def expire(job: JobView, settings: Settings) -> None:
    """Removes the archive of an expired backup (a failed or cancelled one has none), and
    any temporary file an attempt killed midway left behind."""
    path = (job.result or {}).get("archivePath")
    if path:
        await asyncio.to_thread(Path(path).unlink, missing_ok=True)
        log.info("removed the archive of expired backup %s", job.id)
    for leftover in temporary_files(settings.resolved_backup_dir, job.id):
        await asyncio.to_thread(leftover.unlink, missing_ok=True)


BACKUP = JobKind(
    name="backup",
    title="Backup",
    payload=BackupPayload,
    result=BackupResult,
    check=check,
    prepare=prepare,
    build_result=build_result,
    expire=expire,
    # Tables streamed are not durable: only the finished archive is.
    durable_progress=lambda job: 0,
    # Bulk: behind interactive kinds when workers are busy.
    priority=4,
    help="Back up every hub table and attachment into one archive (HUBJOBS_BACKUP_DIR).",
)
