"""Course tagging: a tag added to every page of a course, each update guarded by the ETag
read. The items are the pages, snapshotted by the first attempt, each noting whether it
had the tag then (``tag_key()`` in the database decides); a retry takes the failed ones.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.db import direct
from hubjobs.db.direct import Statement
from hubjobs.domain.pages import (
    COURSE,
    MAX_TAG_LENGTH,
    ConcurrencyConflict,
    PageFacts,
    TagLimit,
    course_root,
    normalize_tag,
)
from hubjobs.errors import InvalidInput
from hubjobs.kinds.base import KIND_SETTINGS, JobKind, NewJob, Prepared, Result
from hubjobs.readmodel import items as job_items
from hubjobs.readmodel.status import ItemState
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

# Snapshots this large refresh job_items' planner statistics in their own transaction.
ANALYZE_FROM = 10_000


class CourseTaggingSettings(BaseSettings):
    """HUBJOBS_TAGGING_*."""

    model_config = KIND_SETTINGS

    # Pages per batch, one transaction: the fastest size bench/bench_tagging.py --settings
    # compared, still holding row locks only briefly.
    tagging_batch_size: int = Field(default=4000, ge=1)
    # Batches of one tagging attempt in flight at once, each on its own connection
    # (1: one after the other).
    tagging_lanes: int = Field(default=2, ge=1, le=8)
    # Breathing room between batches, so a huge course does not hog the database.
    tagging_batch_pause_seconds: float = 0.0

    @classmethod
    def of(cls, settings: Settings) -> CourseTaggingSettings:
        return COURSE_TAGGING.settings_as(cls, settings)


class CourseTaggingPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root_page_id: uuid.UUID = Field(
        description="Root page of the course (the CLI's default: its profile's).",
        json_schema_extra={"x-option": "root-page", "x-profile-default": True},
    )
    tag: str = Field(strict=True, description="The tag to add to every page.")

    @field_validator("tag")
    @classmethod
    def _valid_tag(cls, value: str) -> str:
        try:
            return normalize_tag(value)
        except InvalidInput as err:
            raise ValueError(err.message) from None


class CourseTaggingResult(Result):
    root_page_id: uuid.UUID
    tag: str = Field(strict=True, max_length=MAX_TAG_LENGTH)
    total: int
    processed: int
    succeeded: int
    skipped: int
    failed: int
    # A retry's source job (left out of the JSON of a first run).
    source_job_id: uuid.UUID | None = Field(default=None, exclude_if=lambda v: v is None)


class TaggingOutput(BaseModel):
    """What the attempt that finished a tagging job hands to its result."""

    source_job_id: uuid.UUID | None = None


class TaggingCursor(BaseModel):
    """Where an attempt carries on: after the last ordinal whose outcome is recorded."""

    after: int = 0


def change_summary(tag: str) -> str:
    return f"Course tag {tag} added"


# --- the outcome of each page -------------------------------------------------------------


@dataclass(frozen=True)
class PageOutcome:
    state: ItemState
    code: str | None = None
    message: str | None = None


SUCCEEDED = PageOutcome(ItemState.succeeded)
ALREADY_TAGGED = PageOutcome(ItemState.skipped)
TAG_LIMIT = PageOutcome(
    ItemState.skipped, TagLimit.code, "The page already holds the maximum number of tags."
)
UNAVAILABLE = PageOutcome(ItemState.failed, "page_unavailable", "The page is no longer available.")
CONFLICT = PageOutcome(
    ItemState.failed,
    ConcurrencyConflict.code,
    "The page changed during the job; the change was skipped.",
)
UPDATE_FAILED = PageOutcome(
    ItemState.failed, "page_update_failed", "The page could not be updated."
)


def decide(done_at_snapshot: bool, page: PageFacts | None) -> PageOutcome | None:
    """The outcome without writing, or None when the page needs the tag."""
    if page is None or not page.available:
        return UNAVAILABLE
    if page.has_tag:
        # Had it at snapshot: nothing done. Gained it since: as the job wants it.
        return ALREADY_TAGGED if done_at_snapshot else SUCCEEDED
    if page.at_tag_limit:
        return TAG_LIMIT
    return None


def written(changed: bool, broken: bool, *, reread: bool) -> PageOutcome | None:
    """The outcome of a page written: changed, refused, or in conflict (None: read it
    again and decide afresh, once; after that, it fails)."""
    if changed:
        return SUCCEEDED
    if broken:
        return UPDATE_FAILED
    return CONFLICT if reread else None


# --- the start and the snapshot -------------------------------------------------------------

# The course: the root and every descendant reachable through pages not in the trash, in
# a stable order (depth, then title), each noting whether it already had the tag.
COURSE_ITEMS = f"""{COURSE}
    SELECT row_number() OVER (ORDER BY c.depth, c.title, c.id)::int, c.id, c.title,
           EXISTS (SELECT 1 FROM unnest(c.tags) t WHERE tag_key(t) = tag_key(:tag)),
           NULL::jsonb
      FROM course c
"""
# A retry: the source job's failed pages that are still in the workspace, out of the
# trash, in their order.
FAILED_ITEMS = """
    SELECT row_number() OVER (ORDER BY i.ordinal)::int, i.ref, p.title,
           EXISTS (SELECT 1 FROM unnest(p.tags) t WHERE tag_key(t) = tag_key(:tag)),
           NULL::jsonb
      FROM job_failed_items(CAST(:source AS uuid)) i JOIN pages p ON p.id = i.ref
     WHERE p.workspace_id IS NOT DISTINCT FROM CAST(:workspace AS uuid) AND NOT p.trashed
"""


# How many items a job would take, up to ``:bound``: a recursive query under a LIMIT is
# evaluated only as far as it is read.
COURSE_SIZE = Statement.of(f"""{COURSE}
    SELECT count(*) FROM (SELECT 1 FROM course LIMIT :bound) s
""")
FAILED_SIZE = Statement.of(f"SELECT count(*) FROM ({FAILED_ITEMS} LIMIT :bound) s")
COURSE_SNAPSHOT = job_items.item_snapshot("course_tagging.course", COURSE_ITEMS)
RETRY_SNAPSHOT = job_items.item_snapshot("course_tagging.retry", FAILED_ITEMS)


async def fits(
    conn: AsyncConnection, job: JobView, payload: CourseTaggingPayload, pages: int
) -> bool:
    """Whether the snapshot would take at most ``pages`` items. Pages added before it is
    taken leave items after the one batch, and the ordinary attempts take the job."""
    params: dict[str, Any] = {"workspace": job.workspace_id, "bound": pages + 1}
    if job.source_job_id is not None:
        query = FAILED_SIZE
        params |= {"tag": payload.tag, "source": job.source_job_id}
    else:
        query = COURSE_SIZE
        params |= {"root": payload.root_page_id}
    ((size,),), _ = await direct.rows(conn, query, params)
    return int(size) <= pages


async def _failed_pages_left(
    conn: AsyncConnection, job: NewJob, payload: CourseTaggingPayload
) -> bool:
    """Whether a retry's snapshot would take a page (read no further than the first)."""
    params = {
        "workspace": job.workspace_id,
        "tag": payload.tag,
        "source": job.source_job_id,
        "bound": 1,
    }
    ((size,),), _ = await direct.rows(conn, FAILED_SIZE, params)
    return bool(size)


async def check(conn: AsyncConnection, job: NewJob, payload: CourseTaggingPayload) -> str:
    """The root is a page of the workspace out of the trash (a retry: a failed page is
    left); returns the summary."""
    if job.source_job_id is not None:
        # The pages the retry's snapshot would take, not the failed items alone: one
        # whose pages are all in the trash would run empty and "succeed".
        if not await _failed_pages_left(conn, job, payload):
            raise InvalidInput(
                "no failed page of that job is left to retry (in the trash, or gone)",
                code="nothing_to_retry",
            )
        return f"Retry tagging the failed pages with {payload.tag}"
    title = await course_root(conn, payload.root_page_id, job.workspace_id)
    return f"Tag course {title} with {payload.tag}"


async def prepare(conn: AsyncConnection, job: NewJob, payload: CourseTaggingPayload) -> Prepared:
    """The course as it is at the first attempt; a root gone or trashed since the start
    refuses the job, as the start would have."""
    params: dict[str, Any] = {"workspace": job.workspace_id, "tag": payload.tag}
    if job.source_job_id is not None:
        total = await job_items.insert_items(
            conn, job.job_id, RETRY_SNAPSHOT, {**params, "source": job.source_job_id}
        )
        return Prepared(total=total, summary=f"Retry tagging {total} pages with {payload.tag}")
    title = await course_root(conn, payload.root_page_id, job.workspace_id)
    total = await job_items.insert_items(
        conn, job.job_id, COURSE_SNAPSHOT, {**params, "root": payload.root_page_id}
    )
    if total >= ANALYZE_FROM:
        # Without fresh statistics the planner may take these items for a handful.
        await job_items.analyze_items(conn)
    return Prepared(total=total, summary=f"Tag course {title} with {payload.tag}, {total} pages")


def build_result(
    payload: CourseTaggingPayload, counters: Counters, output: dict[str, Any] | None
) -> CourseTaggingResult:
    done = TaggingOutput.model_validate(output or {})
    return CourseTaggingResult(
        root_page_id=payload.root_page_id,
        tag=payload.tag,
        source_job_id=done.source_job_id,
        **counters.model_dump(),
    )


COURSE_TAGGING = JobKind(
    name="course_tagging",
    title="Course tagging",
    payload=CourseTaggingPayload,
    result=CourseTaggingResult,
    cursor=TaggingCursor,
    check=check,
    prepare=prepare,
    build_result=build_result,
    # Interactive: someone waits for their course; ahead of backups and exports.
    priority=2,
    retryable_items=True,
    whole_when_small=True,
    command="tag-course",
    help="Tag every page of a course.",
    settings=CourseTaggingSettings,
    # Each of its lanes holds a connection.
    connections_per_attempt=lambda settings: CourseTaggingSettings.of(settings).tagging_lanes,
)
