"""The audit trail as callers read it: an event's view, and the one statement that reads
a workspace's events (or a job's trail) for a member, newest first, keyset-paged on
(at, id). A workspace the actor is not a member of answers as one that does not exist."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from pydantic import BaseModel, Field

from hubjobs.readmodel.status import AuditAction, Surface


class AuditEventView(BaseModel):
    """One operator action."""

    id: int = Field(description="The event's number (increasing; with `at`, its order)")
    at: datetime = Field(description="When the action was decided (its transaction's time)")
    workspace_id: uuid.UUID
    actor_id: uuid.UUID | None = Field(
        description="Who acted; null for a hub operator's restore from the shell"
    )
    surface: Surface = Field(
        description="Where from: the HTTP API (`api`), the CLI (`cli`), the operator's "
        "console (`console`), the Python client (`python`)"
    )
    action: AuditAction
    reason: str | None = Field(description="Why, when the caller said (a cancel's reason)")
    job_ids: list[uuid.UUID] = Field(
        description="The jobs it touched: the job; a bulk action's jobs; a retry's source "
        "and the retry"
    )
    schedule_id: str | None = Field(description="The schedule a schedule action touched")
    detail: dict[str, Any] | None = Field(
        description="What else it says: a bulk action's `filter` and `counts`, a retry's "
        "`source_job_id`, a restore's `backup_id`"
    )


AUDIT_COLUMN_NAMES = tuple(AuditEventView.model_fields)
AUDIT_COLUMNS = ", ".join(AUDIT_COLUMN_NAMES)
_E_COLUMNS = ", ".join(f"e.{name}" for name in AUDIT_COLUMN_NAMES)

_MEMBER = "FROM workspace_memberships m JOIN user_accounts u ON u.id = m.user_id AND u.enabled "
_AS_MEMBER = "WHERE m.workspace_id = %(workspace)s AND m.user_id = %(actor)s"


def _audit_sql(*, by_job: bool, by_action: bool, by_actor: bool, paged: bool) -> str:
    """Only the filters given, so each shape gets its own plan (a job's trail by the GIN
    index on ``job_ids``, the workspace's by (workspace_id, at, id))."""
    filters = (
        (" AND job_ids @> ARRAY[%(job)s::uuid]" if by_job else "")
        + (" AND action = %(action)s" if by_action else "")
        + (" AND actor_id = %(by)s" if by_actor else "")
        + (" AND (at, id) < (%(before_at)s, %(before_id)s)" if paged else "")
    )
    return (
        f"SELECT m.role, {_E_COLUMNS} {_MEMBER}"
        f"LEFT JOIN (SELECT {AUDIT_COLUMNS} FROM audit_events WHERE workspace_id = %(workspace)s"
        f"{filters} ORDER BY at DESC, id DESC LIMIT %(limit)s) e ON true "
        f"{_AS_MEMBER} ORDER BY e.at DESC, e.id DESC"
    )


LIST_AUDIT = {
    (by_job, by_action, by_actor, paged): _audit_sql(
        by_job=by_job, by_action=by_action, by_actor=by_actor, paged=paged
    )
    for by_job in (False, True)
    for by_action in (False, True)
    for by_actor in (False, True)
    for paged in (False, True)
}


async def audit_as_member(
    conn: AsyncConnection[Any],
    workspace_id: uuid.UUID,
    actor_id: uuid.UUID,
    *,
    job_id: uuid.UUID | None = None,
    action: AuditAction | None = None,
    by: uuid.UUID | None = None,
    limit: int = 50,
    before: tuple[datetime, int] | None = None,
) -> tuple[str | None, list[AuditEventView]]:
    """The actor's role (None: not an enabled member, or no such workspace) and up to
    ``limit`` of the workspace's events, newest first: those touching ``job_id``, of
    ``action``, by ``by``; with ``before``, those after it."""
    shape = (job_id is not None, action is not None, by is not None, before is not None)
    cursor = await conn.execute(
        LIST_AUDIT[shape],
        {
            "workspace": workspace_id,
            "actor": actor_id,
            "job": job_id,
            "action": None if action is None else str(action),
            "by": by,
            "limit": limit,
            "before_at": None if before is None else before[0],
            "before_id": None if before is None else before[1],
        },
        binary=True,
    )
    rows = await cursor.fetchall()
    if not rows:
        return None, []
    events = [
        AuditEventView.model_validate(dict(zip(AUDIT_COLUMN_NAMES, row[1:], strict=True)))
        for row in rows
        if row[1] is not None
    ]
    return str(rows[0][0]), events
