"""Backup (seed 000): one consistent archive of every hub table and attachment. When the
job expires, its archive goes with it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.archive.format import HUB_TABLES
from hubjobs.domain.access import require_administrator
from hubjobs.kinds.base import JobKind, NewJob, Prepared
from hubjobs.readmodel.store import JobView
from hubjobs.temporal.messages import BackupArchive, Counters

NAME = "backup"
log = logging.getLogger(__name__)


class BackupPayload(BaseModel):
    """Nothing to choose: a backup takes everything."""

    model_config = ConfigDict(extra="forbid")


async def prepare(conn: AsyncConnection, job: NewJob, payload: BackupPayload) -> Prepared:
    await require_administrator(conn, job.workspace_id, job.actor_id)
    attachments = (await conn.execute(text("SELECT count(*) FROM attachments"))).scalar_one()
    return Prepared(
        total=len(HUB_TABLES) + int(attachments),
        summary=f"Back up the hub: {len(HUB_TABLES)} tables, {attachments} attachments",
    )


def build_result(
    payload: BackupPayload, counters: Counters, output: dict[str, Any] | None
) -> dict[str, Any]:
    archive = BackupArchive.model_validate(output)
    return {
        "backupId": str(archive.backup_id),
        "createdAt": archive.created_at.isoformat(),
        "sizeBytes": archive.size_bytes,
        "tableCount": archive.table_count,
        "attachmentCount": archive.attachment_count,
        "schemaVersion": archive.schema_version,
        "archivePath": archive.archive_path,
    }


async def expire(job: JobView) -> None:
    """Removes the archive of an expired backup (a failed or cancelled one has none)."""
    path = (job.result or {}).get("archivePath")
    if path:
        await asyncio.to_thread(Path(path).unlink, missing_ok=True)
        log.info("removed the archive of expired backup %s", job.id)


BACKUP = JobKind(
    name=NAME,
    payload_model=BackupPayload,
    workflow="Backup",
    prepare=prepare,
    build_result=build_result,
    result_content_type="application/json",
    expire=expire,
)
