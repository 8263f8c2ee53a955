"""The audit trail's writes: one event per operator action, inserted in the transaction
that decides the action (a start's, a cancel's, a retry's own), so that none happens
unrecorded; a restore's from its final transaction; the retention sweep's deletes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.readmodel.status import AuditAction, Surface


@dataclass(frozen=True)
class Operator:
    """Who acts (None: a hub operator at the shell) and from which surface."""

    actor_id: uuid.UUID | None
    surface: Surface


INSERT_EVENT = text(
    "INSERT INTO audit_events (workspace_id, actor_id, surface, action, reason, job_ids, "
    "schedule_id, detail) VALUES (:workspace, :actor, :surface, :action, :reason, "
    "CAST(:jobs AS uuid[]), :schedule, CAST(:detail AS jsonb))"
)


def _params(
    workspace_id: uuid.UUID,
    by: Operator,
    action: AuditAction,
    reason: str | None,
    job_ids: Sequence[uuid.UUID],
    schedule_id: str | None,
    detail: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "workspace": workspace_id,
        "actor": by.actor_id,
        "surface": str(by.surface),
        "action": str(action),
        "reason": reason,
        "jobs": list(job_ids),
        "schedule": schedule_id,
        "detail": None if detail is None else json.dumps(detail, default=str),
    }


async def record(
    conn: AsyncConnection,
    workspace_id: uuid.UUID,
    by: Operator,
    action: AuditAction,
    *,
    reason: str | None = None,
    job_ids: Sequence[uuid.UUID] = (),
    schedule_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """One event, in the caller's transaction."""
    await conn.execute(
        INSERT_EVENT, _params(workspace_id, by, action, reason, job_ids, schedule_id, detail)
    )


# A restore's event: on one workspace (:workspace), or on each workspace of a restored
# hub (NULL). Schema-qualified: a restore's session may have another search_path.
INSERT_RESTORE = text(
    "INSERT INTO public.audit_events (workspace_id, actor_id, surface, action, detail) "
    "SELECT id, :actor, :surface, :action, CAST(:detail AS jsonb) FROM public.workspaces "
    "WHERE CAST(:workspace AS uuid) IS NULL OR id = :workspace"
)


def record_restore(
    conn: Connection, workspace_id: uuid.UUID | None, by: Operator, backup_id: str
) -> None:
    """A restore's event, in its final transaction: on the workspace it replaced, or
    (None) on every workspace of the restored hub."""
    detail = {"backup_id": backup_id, "scope": "hub" if workspace_id is None else "workspace"}
    conn.execute(
        INSERT_RESTORE,
        {
            "workspace": workspace_id,
            "actor": by.actor_id,
            "surface": str(by.surface),
            "action": str(AuditAction.restore),
            "detail": json.dumps(detail),
        },
    )


DELETE_OLDER = text(
    "DELETE FROM audit_events WHERE id IN "
    "(SELECT id FROM audit_events WHERE at < :before ORDER BY at LIMIT :limit)"
)


async def delete_older(conn: AsyncConnection, before: datetime, limit: int) -> int:
    """Up to ``limit`` events from before ``before``, oldest first; how many went."""
    deleted = await conn.execute(DELETE_OLDER, {"before": before, "limit": limit})
    return int(deleted.rowcount or 0)
