"""The reads a caller waits on, as the actor sees them: each one statement in plain
psycopg that checks membership and reads the jobs, rows in binary. A workspace the
actor is not a member of answers as one that does not exist.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from hubjobs.readmodel.search import RETRY_KEY_PREFIX, JobSearch, JobSort
from hubjobs.readmodel.status import FINAL_STATUSES, sql_list
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


class ListShape(NamedTuple):
    """Which filters a list has: each shape its own statement."""

    status: bool
    statuses: bool
    kind: bool
    schedule: bool
    actor: bool
    ids: bool
    since: bool
    until: bool
    payload: bool
    result: bool
    to_retry: bool
    paged: bool

    @property
    def searched(self) -> bool:
        """A filter beyond the list's own (one status, a kind, a schedule)."""
        return any(
            (
                self.statuses,
                self.actor,
                self.ids,
                self.since,
                self.until,
                self.payload,
                self.result,
                self.to_retry,
            )
        )


# A finished job with failed items whose retry (the job holding its retry's key, by the
# workspace's unique key index) does not exist yet.
_TO_RETRY = (
    f" AND status IN {sql_list(FINAL_STATUSES)} AND failed > 0"
    " AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.workspace_id = jobs.workspace_id"
    f" AND r.idempotency_key = '{RETRY_KEY_PREFIX}' || jobs.id::text)"
)


def _list_sql(shape: ListShape, sort: JobSort) -> str:
    """Only the filters given, so each shape gets its own index's plan; keyset paging on
    (the sort's time, id), in the sort's direction."""
    statuses, status_set, kind, schedule, actor, ids, since, until, payload, result = shape[:10]
    to_retry, paged = shape.to_retry, shape.paged
    at, way = sort.column, "DESC" if sort.descending else "ASC"
    filters = (
        (" AND status = %(status)s" if statuses else "")
        + (" AND status = ANY(%(statuses)s)" if status_set else "")
        + (" AND kind = %(kind)s" if kind else "")
        + (" AND schedule_id = %(schedule)s" if schedule else "")
        + (" AND actor_id = %(actor_id)s" if actor else "")
        + (" AND id BETWEEN %(id_low)s AND %(id_high)s" if ids else "")
        + (" AND created_at >= %(since)s" if since else "")
        + (" AND created_at < %(until)s" if until else "")
        + (" AND payload @> %(payload)s" if payload else "")
        + (" AND result @> %(result)s" if result else "")
        + (_TO_RETRY if to_retry else "")
        + (f" AND {at} IS NOT NULL" if at != "created_at" else "")
        + (
            f" AND ({at}, id) {'<' if sort.descending else '>'} (%(before_at)s, %(before_id)s)"
            if paged
            else ""
        )
    )
    return (
        f"SELECT m.role, {_J_COLUMNS} {_MEMBER}"
        f"LEFT JOIN (SELECT {JOB_COLUMNS} FROM jobs WHERE workspace_id = %(workspace)s"
        f"{filters} ORDER BY {at} {way}, id {way} LIMIT %(limit)s) j ON true "
        f"{_AS_MEMBER} ORDER BY j.{at} {way}, j.id {way}"
    )


@functools.cache
def list_sql(shape: ListShape, sort: JobSort) -> str:
    """The statement of a search's shape, made once (a few hundred shapes at most)."""
    return _list_sql(shape, sort)


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
    search: JobSearch,
    *,
    limit: int = 50,
    before: tuple[datetime, uuid.UUID] | None = None,
) -> tuple[str | None, list[JobView]]:
    """The actor's role and up to ``limit`` of the workspace's jobs ``search`` finds, in
    its order; with ``before`` (a previous page's last), those after it."""
    s = search
    shape = ListShape(
        status=len(s.statuses) == 1,
        statuses=len(s.statuses) > 1,
        kind=s.kind is not None,
        schedule=s.schedule_id is not None,
        actor=s.actor_id is not None,
        ids=s.ids is not None,
        since=s.since is not None,
        until=s.until is not None,
        payload=bool(s.payload),
        result=bool(s.result),
        to_retry=s.to_retry,
        paged=before is not None,
    )
    # A search's plan turns on its values (a workspace of 100,000 jobs or 10, an actor
    # with most of them or few): planned for them each time, never a generic plan.
    plain = not shape.searched and s.sort == JobSort.created_desc
    cursor = await conn.execute(
        list_sql(shape, s.sort),
        {
            "workspace": workspace_id,
            "actor": actor_id,
            "status": str(s.statuses[0]) if s.statuses else None,
            "statuses": [str(status) for status in s.statuses],
            "kind": s.kind,
            "schedule": s.schedule_id,
            "actor_id": s.actor_id,
            "id_low": None if s.ids is None else s.ids[0],
            "id_high": None if s.ids is None else s.ids[1],
            "since": s.since,
            "until": s.until,
            "payload": Jsonb(s.payload or {}),
            "result": Jsonb(s.result or {}),
            "limit": limit,
            "before_at": None if before is None else before[0],
            "before_id": None if before is None else before[1],
        },
        binary=True,
        prepare=None if plain else False,
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
