"""The reads a caller waits on, as the actor sees them: each one statement in plain
psycopg that checks membership and reads the jobs, rows in binary. A workspace the
actor is not a member of answers as one that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView

# Every column of a JobView, in its order: the view is the one declaration.
JOB_COLUMN_NAMES = tuple(JobView.model_fields)
JOB_COLUMNS = ", ".join(JOB_COLUMN_NAMES)
_J_COLUMNS = ", ".join(f"j.{name}" for name in JOB_COLUMN_NAMES)

# The actor's role, when an enabled member of the workspace: no row otherwise.
_MEMBER = "FROM workspace_memberships m JOIN user_accounts u ON u.id = m.user_id AND u.enabled "
_AS_MEMBER = "WHERE m.workspace_id = %(workspace)s AND m.user_id = %(actor)s"

GET_JOB = (
    f"SELECT m.role, {_J_COLUMNS} {_MEMBER}"
    "LEFT JOIN jobs j ON j.id = %(job)s AND j.workspace_id = m.workspace_id "
    f"{_AS_MEMBER}"
)


# The job holding an idempotency key (a retry's: one per source job), by its unique index.
GET_JOB_BY_KEY = (
    f"SELECT m.role, {_J_COLUMNS} {_MEMBER}"
    "LEFT JOIN jobs j ON j.workspace_id = m.workspace_id AND j.idempotency_key = %(key)s "
    f"{_AS_MEMBER}"
)


def _list_sql(*, by_status: bool, by_kind: bool, by_schedule: bool, paged: bool) -> str:
    """Only the filters given, so each shape gets its own index's plan; keyset paging on
    (created_at, id), both descending."""
    filters = (
        (" AND status = %(status)s" if by_status else "")
        + (" AND kind = %(kind)s" if by_kind else "")
        + (" AND schedule_id = %(schedule)s" if by_schedule else "")
        + (" AND (created_at, id) < (%(before_at)s, %(before_id)s)" if paged else "")
    )
    return (
        f"SELECT m.role, {_J_COLUMNS} {_MEMBER}"
        f"LEFT JOIN (SELECT {JOB_COLUMNS} FROM jobs WHERE workspace_id = %(workspace)s"
        f"{filters} ORDER BY created_at DESC, id DESC LIMIT %(limit)s) j ON true "
        f"{_AS_MEMBER} ORDER BY j.created_at DESC, j.id DESC"
    )


LIST_JOBS = {
    (by_status, by_kind, by_schedule, paged): _list_sql(
        by_status=by_status, by_kind=by_kind, by_schedule=by_schedule, paged=paged
    )
    for by_status in (False, True)
    for by_kind in (False, True)
    for by_schedule in (False, True)
    for paged in (False, True)
}


def job_view(values: Sequence[Any]) -> JobView:
    """A JobView from the values of ``JOB_COLUMNS``, in order."""
    return JobView.model_validate(dict(zip(JOB_COLUMN_NAMES, values, strict=True)))


async def job_as_member(
    conn: AsyncConnection[Any], workspace_id: uuid.UUID, actor_id: uuid.UUID, job_id: uuid.UUID
) -> tuple[str | None, JobView | None]:
    """The actor's role in the workspace (None: not an enabled member, or no such
    workspace) and the job, when the workspace has it."""
    return await _one_as_member(
        conn, GET_JOB, {"workspace": workspace_id, "actor": actor_id, "job": job_id}
    )


async def job_by_key_as_member(
    conn: AsyncConnection[Any], workspace_id: uuid.UUID, actor_id: uuid.UUID, key: str
) -> tuple[str | None, JobView | None]:
    """As ``job_as_member``, the job that holds the idempotency key ``key``."""
    return await _one_as_member(
        conn, GET_JOB_BY_KEY, {"workspace": workspace_id, "actor": actor_id, "key": key}
    )


async def _one_as_member(
    conn: AsyncConnection[Any], statement: str, params: dict[str, Any]
) -> tuple[str | None, JobView | None]:
    cursor = await conn.execute(statement, params, binary=True)
    row = await cursor.fetchone()
    if row is None:
        return None, None
    return str(row[0]), None if row[1] is None else job_view(row[1:])


async def jobs_as_member(
    conn: AsyncConnection[Any],
    workspace_id: uuid.UUID,
    actor_id: uuid.UUID,
    *,
    status: JobStatus | None = None,
    kind: str | None = None,
    schedule_id: str | None = None,
    limit: int = 50,
    before: tuple[datetime, uuid.UUID] | None = None,
) -> tuple[str | None, list[JobView]]:
    """The actor's role and up to ``limit`` of the workspace's jobs, newest first,
    filtered; with ``before``, those after it."""
    shape = (status is not None, kind is not None, schedule_id is not None, before is not None)
    cursor = await conn.execute(
        LIST_JOBS[shape],
        {
            "workspace": workspace_id,
            "actor": actor_id,
            "status": None if status is None else str(status),
            "kind": kind,
            "schedule": schedule_id,
            "limit": limit,
            "before_at": None if before is None else before[0],
            "before_id": None if before is None else before[1],
        },
        binary=True,
    )
    rows = await cursor.fetchall()
    if not rows:
        return None, []
    return str(rows[0][0]), [job_view(row[1:]) for row in rows if row[1] is not None]


JOB_BY_ID = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = %(job)s"


async def job_by_id(conn: AsyncConnection[Any], job_id: uuid.UUID) -> JobView | None:
    """The job, whoever asks: a feed's followers were authorised before."""
    cursor = await conn.execute(JOB_BY_ID, {"job": job_id}, binary=True)
    row = await cursor.fetchone()
    return None if row is None else job_view(row)


JOBS_OF_WORKSPACES = (
    f"SELECT {JOB_COLUMNS} FROM jobs "
    "WHERE id = ANY(%(jobs)s) AND workspace_id = ANY(%(workspaces)s)"
)


async def jobs_of_workspaces(
    conn: AsyncConnection[Any], workspace_ids: Sequence[uuid.UUID], job_ids: Sequence[uuid.UUID]
) -> list[JobView]:
    """The jobs of these workspaces, whoever asks: followers were authorised before."""
    cursor = await conn.execute(
        JOBS_OF_WORKSPACES, {"jobs": list(job_ids), "workspaces": list(workspace_ids)}, binary=True
    )
    return [job_view(row) for row in await cursor.fetchall()]
