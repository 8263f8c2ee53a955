"""The one-page job every floor and peer runs (psycopg only: imported by the Temporal
floor's activity and by each peer's worker in the peers' venv).

The start, in one transaction as hubjobs' start does: the job's row (queued) and its one
item, the page as the snapshot saw it. The job, in one transaction: read the page's
version (its ETag), the ETag-guarded update adding the tag (``WHERE version = <read>``),
its revision, the item's outcome, the final row. The tables are hubjobs' own (each
contender's database is a copy of the migrated template), so every contender writes
the same rows, indexes and constraints.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool

TAG = "onepage"


@dataclass(frozen=True)
class Page:
    """One one-page course: the workspace, its administrator, the page."""

    workspace_id: str
    actor_id: str
    page_id: str


def pages_of(url: str, limit: int) -> list[Page]:
    """Up to ``limit`` one-page courses of a database seeded for the benchmark whose page
    no job has tagged yet (tagging one twice would break ``tags_distinct``)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT p.workspace_id, m.user_id, p.id FROM pages p "
            "JOIN workspace_memberships m ON m.workspace_id = p.workspace_id "
            "AND m.role = 'administrator' "
            "WHERE p.parent_id IS NULL AND NOT p.trashed AND NOT %s = ANY(p.tags) "
            "AND NOT EXISTS (SELECT 1 FROM job_items i WHERE i.ref = p.id) ORDER BY p.id LIMIT %s",
            (TAG, limit),
        ).fetchall()
    return [Page(str(w), str(a), str(p)) for w, a, p in rows]


START_SQL = (
    "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
    "correlation_id, payload, total, summary) VALUES (%(id)s, %(wf)s, 'course_tagging', "
    "'queued', %(ws)s, %(actor)s, 'bench', %(payload)s, 1, 'bench one-page job')",
    "INSERT INTO job_items (job_id, ordinal, ref, label, done_at_snapshot) "
    "SELECT %(id)s, 1, p.id, p.title, %(tag)s = ANY(p.tags) FROM pages p WHERE p.id = %(page)s",
)


def start_params(page: Page, job_id: str, prefix: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "wf": f"{prefix}-{job_id}",
        "ws": page.workspace_id,
        "actor": page.actor_id,
        "page": page.page_id,
        "tag": TAG,
        "payload": json.dumps({"root_page_id": page.page_id, "tag": TAG}),
    }


async def start_row(
    conn: psycopg.AsyncConnection[Any], page: Page, prefix: str, job_id: str | None = None
) -> str:
    """The job's row and item, in one transaction (one commit); returns the job id."""
    job_id = job_id or str(uuid.uuid4())
    params = start_params(page, job_id, prefix)
    async with conn.transaction():
        for sql in START_SQL:
            await conn.execute(sql, params)
    return job_id


JOB_SQL = {
    "read": "SELECT p.id, p.version FROM job_items i JOIN pages p ON p.id = i.ref "
    "WHERE i.job_id = %(job)s AND i.ordinal = 1",
    "update": "UPDATE pages SET tags = array_append(tags, %(tag)s), version = version + 1, "
    "updated_at = now() WHERE id = %(page)s AND version = %(version)s "
    "RETURNING version, title, tags",
    "revision": "INSERT INTO page_revisions (page_id, version, actor_id, change_summary, "
    "correlation_id, title, tags) SELECT %(page)s, %(new)s, j.actor_id, %(summary)s, "
    "'bench', %(title)s, %(tags)s FROM jobs j WHERE j.id = %(job)s",
    "item": "UPDATE job_items SET state = 'succeeded', processed_at = now() "
    "WHERE job_id = %(job)s AND ordinal = 1 AND state = 'pending'",
    "final": "UPDATE jobs SET status = 'succeeded', processed = 1, succeeded = 1, "
    "started_at = coalesce(started_at, now()), finished_at = now(), updated_at = now(), "
    "expires_at = now() + interval '24 hours' WHERE id = %(job)s",
}


async def run_job(pool: psycopg_pool.AsyncConnectionPool[Any], job_id: str) -> str:
    """The one-page job's work, one transaction; returns the outcome."""
    params: dict[str, Any] = {"job": job_id, "tag": TAG, "summary": f"Course tag {TAG} added"}
    async with pool.connection() as conn, conn.transaction():
        row = await (await conn.execute(JOB_SQL["read"], params)).fetchone()
        assert row is not None, f"job {job_id} has no item"
        params.update(page=row[0], version=row[1])
        updated = await (await conn.execute(JOB_SQL["update"], params)).fetchone()
        outcome = "succeeded"
        if updated is None:  # the ETag no longer matches: a conflict, recorded as such
            outcome = "failed"
        else:
            params.update(new=updated[0], title=updated[1], tags=updated[2])
            await conn.execute(JOB_SQL["revision"], params)
        await conn.execute(JOB_SQL["item"], params)
        await conn.execute(JOB_SQL["final"], params)
    return outcome


# A worker process's pool for its jobs (each peer's handler and the floor's activity
# reach it here: a module every importer shares, even when the worker is ``__main__``).
POOL: dict[str, psycopg_pool.AsyncConnectionPool[Any]] = {}


async def open_worker_pool(url: str, size: int) -> None:
    pool = open_pool(url, size)
    await pool.open(wait=True)
    POOL["pool"] = pool


async def run_worker_job(job_id: str) -> str:
    """The one-page job on the worker's pool (``open_worker_pool`` first)."""
    return await run_job(POOL["pool"], job_id)


def open_pool(url: str, size: int = 10) -> psycopg_pool.AsyncConnectionPool[Any]:
    """The job's connections (opened by the caller: ``await pool.open()``)."""
    return psycopg_pool.AsyncConnectionPool(url, min_size=size, max_size=size, open=False)
