"""The reads a caller waits on, as the actor sees them: one job, a workspace's jobs.

Each is one statement that checks the actor's membership and reads the jobs together:
one round trip, in plain psycopg (``hubjobs.db.pool``), so that ``hubjobs status`` and
the API's ``GET`` pay for neither SQLAlchemy nor a second query. Rows come in binary
(ids and times are not parsed from text). A workspace the actor
is not an enabled member of and one that does not exist give the same answer (no row)
from the same statement. Writes stay in ``store``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView

# Every column of a JobView, in its order: the view declares them (one declaration of
# what a job is to callers; a unit test holds it against the table).
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


def _list_sql(*, by_status: bool, by_kind: bool, by_schedule: bool, paged: bool) -> str:
    """Only the filters given, so that each shape gets the plan of its own index
    (ix_jobs_workspace_status_created with a status, ix_jobs_workspace_created without).
    A page after the first starts below the last job of the one before (keyset paging on
    created_at, id: both descending, so the row comparison matches the order)."""
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
    cursor = await conn.execute(
        GET_JOB, {"workspace": workspace_id, "actor": actor_id, "job": job_id}, binary=True
    )
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
    """The actor's role in the workspace (as ``job_as_member``) and up to ``limit`` of
    its jobs, newest first, with the status, kind and schedule given; with ``before``
    (a job's created_at and id), only those after it in that order."""
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
    """The job, whoever asks: for a feed whose followers were authorised when they
    began following (``hubjobs.readmodel.feeds``)."""
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
    """Those of the jobs that belong to one of the workspaces, whoever asks: for the
    workspace streams, whose followers were authorised when they began following
    (``hubjobs.readmodel.workspace_feeds``)."""
    cursor = await conn.execute(
        JOBS_OF_WORKSPACES, {"jobs": list(job_ids), "workspaces": list(workspace_ids)}, binary=True
    )
    return [job_view(row) for row in await cursor.fetchall()]
