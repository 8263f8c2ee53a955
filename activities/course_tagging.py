"""The course-tagging activity: tags the pending pages of a job in batches.

Each batch is one transaction that locks its items, reads their pages, applies one
ETag-guarded update for all pages that need the tag (each row checked against the
version read), writes one revision per changed page, and records every item's outcome
and the job's counters. A crash loses at most the batch in flight, which then never
happened; the retry (on any worker) resumes after the last committed item, from the
heartbeat cursor, and no page gets the tag or a revision twice.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from hubjobs.domain.pages import PageState, TagChange, add_tag_if_match, has_tag, read_pages
from hubjobs.kinds.course_tagging import NAME, CourseTaggingPayload, change_summary
from hubjobs.observability.logs import bind_job
from hubjobs.observability.telemetry import JobMetrics
from hubjobs.readmodel import store as read_model
from hubjobs.temporal.messages import Counters, TagChunk, TagChunkResult, TaggingCursor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Item:
    ordinal: int
    page_id: uuid.UUID
    initially_tagged: bool


@dataclass(frozen=True)
class Outcome:
    state: str  # succeeded | skipped | failed
    code: str | None = None
    message: str | None = None


SUCCEEDED = Outcome("succeeded")
ALREADY_TAGGED = Outcome("skipped")
TAG_LIMIT = Outcome("skipped", "tag_limit", "The page already holds the maximum number of tags.")
UNAVAILABLE = Outcome("failed", "page_unavailable", "The page is no longer available.")
CONFLICT = Outcome(
    "failed", "concurrency_conflict", "The page changed during the job; the change was skipped."
)
UPDATE_FAILED = Outcome("failed", "page_update_failed", "The page could not be updated.")


def decide(item: Item, page: PageState | None, workspace_id: uuid.UUID, tag: str) -> Outcome | None:
    """The outcome an item has without writing, or None when the page needs the tag."""
    if page is None or page.workspace_id != workspace_id or page.trashed:
        return UNAVAILABLE
    if has_tag(page.tags, tag):
        # Had it at snapshot: nothing to do. Gained it since (an earlier attempt of this
        # job, or someone else): the page is as the job wants it.
        return ALREADY_TAGGED if item.initially_tagged else SUCCEEDED
    if page.at_tag_limit:
        return TAG_LIMIT
    return None


# Called between reading a batch and writing it (and before the retry write after a
# conflict); tests use it to change pages in between, as another user would.
BeforeWrite = Callable[[AsyncConnection, Sequence[uuid.UUID], int], Awaitable[None]]


@dataclass(frozen=True)
class JobContext:
    job_id: uuid.UUID
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    tag: str
    kind: str = NAME


class ActorUnavailable(Exception):
    pass


@dataclass
class BatchResult:
    last_ordinal: int
    counters: Counters
    cancel_requested: bool = False
    empty: bool = False
    # Items this batch recorded, and their outcomes.
    items: int = 0
    delta: Counters | None = None


class CourseTagger:
    """Tags one batch of a job's pending items per call, in one transaction."""

    def __init__(self, engine: AsyncEngine, *, before_write: BeforeWrite | None = None) -> None:
        self.engine = engine
        self.before_write = before_write

    async def load_job(self, job_id: uuid.UUID) -> JobContext:
        async with self.engine.connect() as conn:
            job = await read_model.get_job(conn, job_id)
        if job is None:
            raise ApplicationError("job not found", type="job_not_found", non_retryable=True)
        payload = CourseTaggingPayload.model_validate(job.payload)
        return JobContext(job.id, job.workspace_id, job.actor_id, job.correlation_id, payload.tag)

    async def process_batch(self, job: JobContext, after_ordinal: int, limit: int) -> BatchResult:
        async with self.engine.begin() as conn:
            check = (
                await conn.execute(
                    text(
                        """
                        SELECT j.cancel_requested_at IS NOT NULL AS cancel_requested,
                               EXISTS (SELECT 1 FROM workspace_memberships m
                                         JOIN user_accounts u ON u.id = m.user_id
                                        WHERE m.workspace_id = j.workspace_id
                                          AND m.user_id = j.actor_id AND u.enabled
                                          AND m.role = 'administrator') AS actor_ok
                          FROM jobs j WHERE j.id = :job
                        """
                    ),
                    {"job": job.job_id},
                )
            ).one()
            if check.cancel_requested:
                return BatchResult(after_ordinal, Counters(), cancel_requested=True)
            if not check.actor_ok:
                raise ActorUnavailable()
            # Locking the items keeps a zombie attempt (a worker presumed dead that is
            # still running) from recording the same items; state = 'pending' is re-read
            # after the lock, so a batch it committed meanwhile is not processed again.
            rows = await conn.execute(
                text(
                    "SELECT ordinal, page_id, initially_tagged FROM job_items "
                    "WHERE job_id = :job AND ordinal > :after AND state = 'pending' "
                    "ORDER BY ordinal LIMIT :limit FOR UPDATE"
                ),
                {"job": job.job_id, "after": after_ordinal, "limit": limit},
            )
            items = [Item(*row) for row in rows]
            if not items:
                return BatchResult(after_ordinal, Counters(), empty=True)
            outcomes = await self._tag(conn, job, items)
            delta = await self._record(conn, job, outcomes)
            counters = await read_model.add_progress(conn, job.job_id, delta)
            await read_model.set_progress_message(conn, job.job_id, progress_message(counters))
            return BatchResult(items[-1].ordinal, counters, items=len(items), delta=delta)

    async def _tag(
        self, conn: AsyncConnection, job: JobContext, items: list[Item]
    ) -> dict[int, Outcome]:
        outcomes: dict[int, Outcome] = {}
        pending = items
        # The first write uses the ETags of the batch read; pages in conflict are read
        # again and written once more; a page still in conflict fails.
        for attempt in (1, 2):
            pages = await read_pages(conn, [i.page_id for i in pending])
            wanted: list[tuple[Item, int]] = []
            for item in pending:
                page = pages.get(item.page_id)
                decided = decide(item, page, job.workspace_id, job.tag)
                if decided is not None:
                    outcomes[item.ordinal] = decided
                else:
                    assert page is not None
                    wanted.append((item, page.version))
            if not wanted:
                break
            if self.before_write is not None:
                await self.before_write(conn, [i.page_id for i, _ in wanted], attempt)
            changed, broken = await self._write(conn, job, wanted)
            for item, _ in wanted:
                if item.page_id in changed:
                    outcomes[item.ordinal] = SUCCEEDED
                elif item.page_id in broken:
                    outcomes[item.ordinal] = UPDATE_FAILED
            pending = [
                item
                for item, _ in wanted
                if item.page_id not in changed and item.ordinal not in outcomes
            ]
            if not pending:
                break
        for item in pending:
            outcomes.setdefault(item.ordinal, CONFLICT)
        return outcomes

    async def _write(
        self, conn: AsyncConnection, job: JobContext, wanted: list[tuple[Item, int]]
    ) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
        """One statement for the batch; should it fail, each page alone, so that one
        page's failure never undoes another's. Returns the pages changed and the pages
        whose update failed; the rest were in conflict."""

        async def write(changes: list[TagChange]) -> set[uuid.UUID]:
            async with conn.begin_nested():
                return await add_tag_if_match(
                    conn,
                    workspace_id=job.workspace_id,
                    tag=job.tag,
                    changes=changes,
                    actor_id=job.actor_id,
                    correlation_id=job.correlation_id,
                    change_summary=change_summary(job.tag),
                )

        try:
            return await write([TagChange(i.page_id, v) for i, v in wanted]), set()
        except DBAPIError:
            log.warning("batch tag update failed; retrying page by page", exc_info=True)
        changed: set[uuid.UUID] = set()
        broken: set[uuid.UUID] = set()
        for item, version in wanted:
            try:
                changed |= await write([TagChange(item.page_id, version)])
            except DBAPIError:
                log.warning("tag update of page %s failed", item.page_id, exc_info=True)
                broken.add(item.page_id)
        return changed, broken

    async def _record(
        self, conn: AsyncConnection, job: JobContext, outcomes: dict[int, Outcome]
    ) -> Counters:
        ordinals = sorted(outcomes)
        rows = await conn.execute(
            text(
                """
                UPDATE job_items i
                   SET state = o.state, error_code = o.code, error_message = o.message,
                       processed_at = now()
                  FROM unnest(CAST(:ordinals AS int[]), CAST(:states AS text[]),
                              CAST(:codes AS text[]), CAST(:messages AS text[]))
                       AS o(ordinal, state, code, message)
                 WHERE i.job_id = :job AND i.ordinal = o.ordinal AND i.state = 'pending'
                   AND i.ordinal BETWEEN :first AND :last
             RETURNING i.state
                """
            ),
            {
                "job": job.job_id,
                "first": ordinals[0],
                "last": ordinals[-1],
                "ordinals": ordinals,
                "states": [outcomes[o].state for o in ordinals],
                "codes": [outcomes[o].code for o in ordinals],
                "messages": [outcomes[o].message for o in ordinals],
            },
        )
        states = [row.state for row in rows]
        return Counters(
            processed=len(states),
            succeeded=states.count("succeeded"),
            skipped=states.count("skipped"),
            failed=states.count("failed"),
        )


def progress_message(counters: Counters) -> str:
    return (
        f"{counters.processed} of {counters.total} pages done: {counters.succeeded} tagged, "
        f"{counters.skipped} skipped, {counters.failed} failed"
    )


class TaggingActivities:
    """The activity as the worker registers it, around a CourseTagger."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        batch_size: int = 200,
        batch_pause: float = 0.0,
        before_write: BeforeWrite | None = None,
        metrics: JobMetrics | None = None,
    ) -> None:
        self.tagger = CourseTagger(engine, before_write=before_write)
        self.metrics = metrics
        self.batch_size = batch_size
        self.batch_pause = batch_pause

    @activity.defn(name="tag_course_chunk")
    async def tag_course_chunk(self, chunk: TagChunk) -> TagChunkResult:
        """Tags up to ``chunk.limit`` pending pages after ``chunk.after_ordinal``,
        heartbeating the cursor after every committed batch. A retry starts from the
        last cursor it was sent; a cancellation arrives through the heartbeat, and a
        cancellation request in the read model is seen between batches."""
        info = activity.info()
        cursor = chunk.after_ordinal
        if info.heartbeat_details:
            try:
                cursor = max(
                    cursor, TaggingCursor.model_validate(info.heartbeat_details[0]).last_ordinal
                )
            except ValueError:
                log.warning("ignoring malformed heartbeat details of job %s", chunk.job_id)
        job = await self.tagger.load_job(chunk.job_id)
        bind_job(job)
        # Alive from the start, not only after the first batch has committed.
        activity.heartbeat(TaggingCursor(last_ordinal=cursor).model_dump())
        done_in_chunk = 0
        counters = Counters()
        while done_in_chunk < chunk.limit:
            size = min(self.batch_size, chunk.limit - done_in_chunk)
            try:
                batch = await self.tagger.process_batch(job, cursor, size)
            except ActorUnavailable:
                raise ApplicationError(
                    "the actor is no longer an enabled administrator",
                    type="actor_unavailable",
                    non_retryable=True,
                ) from None
            if batch.cancel_requested:
                return TagChunkResult(
                    last_ordinal=cursor, counters=counters, done=False, cancel_requested=True
                )
            if batch.empty:
                return TagChunkResult(last_ordinal=cursor, counters=counters, done=True)
            cursor, counters = batch.last_ordinal, batch.counters
            if self.metrics is not None and batch.delta is not None:
                d = batch.delta
                self.metrics.items_processed(
                    "course_tagging",
                    {"succeeded": d.succeeded, "skipped": d.skipped, "failed": d.failed},
                )
            done_in_chunk += batch.items
            activity.heartbeat(TaggingCursor(last_ordinal=cursor).model_dump())
            if self.batch_pause:
                await asyncio.sleep(self.batch_pause)
        return TagChunkResult(
            last_ordinal=cursor, counters=counters, done=counters.processed >= counters.total
        )
