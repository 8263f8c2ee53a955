"""``job_minutes``: the jobs that ended, counted per workspace, minute, kind and final
status, with their pages summed as they stood at the end. The overview reads its ended
counts and throughput here, not off the jobs, so a workspace's day costs at most a row a
minute per kind and status, however many jobs ended in it.

Counted by the statement that ends the job (``store.finish``, ``store.withdraw``), from
the row its guarded UPDATE returned: a move that did not happen (a finish run twice)
counts nothing. Minutes older than the overview's longest window go with the retention
sweep; ``recount`` counts a workspace's again from its rows."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.readmodel.status import FINAL_STATUSES, sql_list

# The overview's longest window: older minutes are never read.
KEPT = timedelta(days=1)

# The job's counters, and the columns of the minute that sum them.
PAGES = {
    "total": "pages_total",
    "processed": "pages_processed",
    "succeeded": "pages_succeeded",
    "skipped": "pages_skipped",
    "failed": "pages_failed",
}
# What ``counting`` reads of an ended job's row.
READS = "workspace_id, kind, status, finished_at, " + ", ".join(PAGES)
MINUTE = "date_bin('1 minute', finished_at, TIMESTAMPTZ 'epoch')"
_COLUMNS = "workspace_id, minute, kind, status, jobs, " + ", ".join(PAGES.values())
_SUMS = ", ".join(f"sum({job})" for job in PAGES)
_ADDED = ", ".join(f"{c} = m.{c} + EXCLUDED.{c}" for c in ["jobs", *PAGES.values()])


def counting(ended: str) -> str:
    """An INSERT that adds the rows ``ended`` names (a CTE of the statement that ended
    them, or a select of ended jobs) to their minutes. Grouped first: one statement may
    not update a minute twice."""
    return (
        f"INSERT INTO job_minutes AS m ({_COLUMNS}) "
        f"SELECT workspace_id, {MINUTE}, kind, status, count(*), {_SUMS} FROM {ended} "
        "GROUP BY 1, 2, 3, 4 "
        f"ON CONFLICT (workspace_id, minute, kind, status) DO UPDATE SET {_ADDED}"
    )


# A workspace's minutes within ``KEPT``, counted again from the ended jobs it keeps.
RECOUNT = counting(
    f"(SELECT {READS} FROM jobs WHERE workspace_id = :workspace "
    f"AND status IN {sql_list(FINAL_STATUSES)} "
    "AND finished_at >= now() - CAST(:kept AS interval)) ended"
)


async def recount(conn: AsyncConnection, workspace_id: uuid.UUID) -> None:
    """The workspace's minutes counted again from its jobs: for rows written otherwise
    than by a job's end (a bulk load)."""
    params = {"workspace": workspace_id, "kept": KEPT}
    await conn.execute(text("DELETE FROM job_minutes WHERE workspace_id = :workspace"), params)
    await conn.execute(text(RECOUNT), params)


DELETE_OLDER = text(
    "DELETE FROM job_minutes WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM job_minutes WHERE minute < :before LIMIT :limit))"
)


async def delete_older(conn: AsyncConnection, before: datetime, limit: int) -> int:
    """Up to ``limit`` minutes from before ``before``; how many went."""
    deleted = await conn.execute(DELETE_OLDER, {"before": before, "limit": limit})
    return int(deleted.rowcount or 0)
