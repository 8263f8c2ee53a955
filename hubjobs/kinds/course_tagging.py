"""Course tagging (seed 000): add a tag to every page of a course, page by page, each
update guarded by the ETag read. The items are the course's pages, snapshotted at start.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.domain.access import require_administrator
from hubjobs.domain.pages import normalize_tag
from hubjobs.errors import InvalidInput, NotFound
from hubjobs.kinds.base import JobKind, NewJob, Prepared
from hubjobs.temporal.messages import Counters

NAME = "course_tagging"
# Snapshots this large refresh job_items' planner statistics in their own transaction.
ANALYZE_FROM = 10_000


class CourseTaggingPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root_page_id: uuid.UUID
    tag: str

    @field_validator("tag")
    @classmethod
    def _valid_tag(cls, value: str) -> str:
        try:
            return normalize_tag(value)
        except InvalidInput as err:
            raise ValueError(err.message) from None


def change_summary(tag: str) -> str:
    return f"Course tag {tag} added"


async def prepare(conn: AsyncConnection, job: NewJob, payload: CourseTaggingPayload) -> Prepared:
    await require_administrator(conn, job.workspace_id, job.actor_id)
    root = (
        await conn.execute(
            text("SELECT workspace_id, trashed, title FROM pages WHERE id = :id"),
            {"id": payload.root_page_id},
        )
    ).first()
    if root is None or root.workspace_id != job.workspace_id:
        raise NotFound("the root page does not exist in this workspace", code="page_not_found")
    if root.trashed:
        raise InvalidInput("the root page is in the trash", code="page_trashed")
    # The snapshot: the root and every descendant reachable through pages not in the
    # trash, in a stable order (depth, then title), each noting whether it already had
    # the tag. One statement, whatever the size of the course.
    total = (
        await conn.execute(
            text(
                """
                WITH RECURSIVE course AS (
                    SELECT id, 0 AS depth FROM pages WHERE id = :root
                    UNION ALL
                    SELECT p.id, c.depth + 1 FROM pages p JOIN course c ON p.parent_id = c.id
                     WHERE p.workspace_id = :workspace AND NOT p.trashed
                ), inserted AS (
                    INSERT INTO job_items (job_id, ordinal, page_id, initially_tagged)
                    SELECT :job, row_number() OVER (ORDER BY c.depth, p.title, p.id), p.id,
                           EXISTS (SELECT 1 FROM unnest(p.tags) t WHERE lower(t) = lower(:tag))
                      FROM course c JOIN pages p ON p.id = c.id
                    RETURNING 1
                )
                SELECT count(*) FROM inserted
                """
            ),
            {
                "root": payload.root_page_id,
                "workspace": job.workspace_id,
                "job": job.job_id,
                "tag": payload.tag,
            },
        )
    ).scalar_one()
    if total >= ANALYZE_FROM:
        # A big snapshot changes job_items' statistics at once; without fresh ones the
        # planner takes this job's items for a handful and sorts them all for every
        # batch. (Autovacuum would get there, but only after the job has started.)
        await conn.execute(text("ANALYZE job_items"))
    return Prepared(
        total=int(total), summary=f"Tag course {root.title} with {payload.tag}, {total} pages"
    )


def build_result(
    payload: CourseTaggingPayload, counters: Counters, output: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "rootPageId": str(payload.root_page_id),
        "tag": payload.tag,
        "total": counters.total,
        "processed": counters.processed,
        "succeeded": counters.succeeded,
        "skipped": counters.skipped,
        "failed": counters.failed,
    }


COURSE_TAGGING = JobKind(
    name=NAME,
    payload_model=CourseTaggingPayload,
    workflow="CourseTagging",
    prepare=prepare,
    build_result=build_result,
)
