"""Backup: one consistent archive of a workspace or, a hub operator's, of the whole hub.
No items: its only durable progress is the finished archive. The archive expires with
its job."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.archive.format import HUB_TABLES, temporary_files
from hubjobs.archive.scope import count_attachments
from hubjobs.kinds.base import KIND_SETTINGS, JobKind, NewJob, Prepared, Result
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

log = logging.getLogger(__name__)


Scope = Literal["workspace", "hub"]


class BackupSettings(BaseSettings):
    """HUBJOBS_BACKUP_*."""

    model_config = KIND_SETTINGS

    # Where backups are written. Default: inside the state folder.
    backup_dir: Path | None = None
    # Bytes a second a backup reads at most, so it need not saturate the disk; unset: no cap.
    backup_max_bytes_per_second: float | None = Field(default=None, gt=0)

    @classmethod
    def of(cls, settings: Settings) -> BackupSettings:
        return BACKUP.settings_as(cls, settings)

    def resolved_backup_dir(self, home: Path) -> Path:
        """Where backups are written, for the deployment's state folder ``home``."""
        return (self.backup_dir or home / "backups").resolve()


class BackupPayload(BaseModel):
    """What the archive holds: the job's workspace (the default), or the whole hub."""

    model_config = ConfigDict(extra="forbid")

    scope: Scope = Field(
        default="workspace",
        description="workspace: the job's workspace alone; hub: every workspace (a hub "
        "operator's, HUBJOBS_HUB_OPERATORS)",
    )

    def workspace_of(self, job_workspace: uuid.UUID) -> uuid.UUID | None:
        """The workspace the archive holds, None for the whole hub."""
        return job_workspace if self.scope == "workspace" else None


class BackupArchive(BaseModel):
    """What a finished backup wrote: the attempt's output, the result's source."""

    backup_id: uuid.UUID
    # An attempt of a build before scopes wrote a whole hub's archive.
    scope: Scope = "hub"
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
    scope: Scope
    created_at: datetime
    size_bytes: int
    table_count: int
    attachment_count: int
    schema_version: str = Field(max_length=REVISION_MAX_LENGTH)
    archive_path: str = Field(max_length=PATH_MAX_LENGTH)


def what_is_backed_up(tables: int, attachments: int) -> str:
    """ "12 tables", or "12 tables and 3 attachments"."""
    if not attachments:
        return f"{tables} tables"
    return f"{tables} tables and {attachments} attachment{'s' if attachments != 1 else ''}"


def progress_line(steps: int, total: int, nbytes: int, stage: str) -> str:
    """A backup's progress: its steps are the tables, then the attachment files."""
    attachments = max(0, total - len(HUB_TABLES))
    what = "tables" if not attachments else "tables and attachments"
    return f"{steps} of {total} {what}, {nbytes / 1e6:.1f} MB read ({stage})"


def _title(payload: BackupPayload) -> str:
    return "Back up the hub" if payload.scope == "hub" else "Back up the workspace"


async def check(conn: AsyncConnection, job: NewJob, payload: BackupPayload) -> str:
    """Nothing to check beyond the shared start's actor checks."""
    return _title(payload)


async def prepare(conn: AsyncConnection, job: NewJob, payload: BackupPayload) -> Prepared:
    """By the first attempt: what the backup holds (the attachments, counted then)."""
    attachments = (
        await conn.execute(text(count_attachments(payload.workspace_of(job.workspace_id))))
    ).scalar_one()
    what = what_is_backed_up(len(HUB_TABLES), int(attachments))
    return Prepared(total=len(HUB_TABLES) + int(attachments), summary=f"{_title(payload)}: {what}")


def build_result(
    payload: BackupPayload, counters: Counters, output: dict[str, Any] | None
) -> BackupResult:
    return BackupResult.model_validate(BackupArchive.model_validate(output).model_dump())


def backup_folder(settings: Settings) -> Path:
    return BackupSettings.of(settings).resolved_backup_dir(settings.home)


async def expire(job: JobView, settings: Settings) -> None:
    """Removes an expired backup's archive and what killed attempts left."""
    path = (job.result or {}).get("archivePath")
    if path:
        await asyncio.to_thread(Path(path).unlink, missing_ok=True)
        log.info("removed the archive of expired backup %s", job.id)
    for leftover in temporary_files(backup_folder(settings), job.id):
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
    # A whole hub is above any workspace: its start is a hub operator's.
    hub_wide=lambda payload: payload.scope == "hub",
    # Bulk: behind interactive kinds when workers are busy.
    priority=4,
    help="Back up the workspace (--scope hub: the whole hub, a hub operator's) into one "
    "archive (HUBJOBS_BACKUP_DIR).",
    settings=BackupSettings,
)
