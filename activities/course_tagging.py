"""The course-tagging work: a job's pending pages in batches, each one transaction of a
read, one ETag-guarded write (conflicts read and written once more) and one record of
the items with the job's counters. Every statement is idempotent, so a crash loses at
most the batches in flight. Batches over ranges of ordinals run in lanes, each on its
own connection, meeting only at the job's row, which each updates last. The cursor only
saves reading: the work is done when no item is pending.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import NamedTuple

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity

from activities.attempt import KindActivities
from activities.context import WorkContext
from activities.deps import Deps
from activities.endings import ActorUnavailable, Done, Paused, Stopped, WorkEnd, job_not_found
from hubjobs import job_rows
from hubjobs.db import direct
from hubjobs.db.direct import Statement
from hubjobs.db.errors import refused_for_its_row, sqlstate_of
from hubjobs.domain.pages import (
    PAGE_FACTS,
    PageFacts,
    TagChange,
    add_tag_if_match,
    read_page_facts,
)
from hubjobs.job_rows import Finished
from hubjobs.kinds.course_tagging import (
    COURSE_TAGGING,
    CourseTaggingPayload,
    CourseTaggingSettings,
    PageOutcome,
    TaggingCursor,
    TaggingOutput,
    change_summary,
    decide,
    fits,
    written,
)
from hubjobs.readmodel import items as job_items
from hubjobs.readmodel.items import ItemOutcome, Recorded
from hubjobs.readmodel.views import JobView
from hubjobs.temporal.messages import WorkRequest, WorkResult

log = logging.getLogger(__name__)

# Called between deciding a batch's pages and writing them: tests edit pages there.
BeforeWrite = Callable[[AsyncConnection, Sequence[uuid.UUID], int], Awaitable[None]]


class BatchWriteFailed(Exception):
    """The batch's one write failed for some page: its transaction is lost."""


class Item(NamedTuple):
    ordinal: int
    page_id: uuid.UUID
    done_at_snapshot: bool
    page: PageFacts


class Landed(NamedTuple):
    """A batch that landed: the last ordinal it covered, what it recorded, and the final
    row when it was the job's last and finished it in its own transaction."""

    after: int
    recorded: Recorded
    finished: Finished | None = None


# The next pending items with their pages' facts, by key (LATERAL … LIMIT 1 stops a
# hash of pages on stale statistics).
READ_BATCH = Statement.of(
    f"""
    SELECT i.ordinal, i.ref, i.done_at_snapshot, {PAGE_FACTS}
      FROM job_pending_items(
               CAST(:job AS uuid), CAST(:after AS int), CAST(:upto AS int), CAST(:limit AS int)
           ) i
      LEFT JOIN LATERAL (SELECT * FROM pages WHERE id = i.ref LIMIT 1) p ON true
     ORDER BY i.ordinal
""",
    prepared=True,
)


class CourseTaggingActivities(KindActivities[CourseTaggingPayload]):
    kind = COURSE_TAGGING

    def __init__(self, deps: Deps) -> None:
        super().__init__(deps)
        self.before_write: BeforeWrite | None = deps.hooks.get("before_write")
        # Read once, as the worker's other settings are: a bad value stops it at start.
        self.own = CourseTaggingSettings.of(deps.settings)

    @activity.defn
    async def tag_course(self, request: WorkRequest) -> WorkResult:
        """One attempt: tags pending pages until none is left (the job succeeds), a
        cancellation request is seen, or the time slice is over."""
        return await self.attempt(request, self.work)

    async def fits_whole(self, conn: AsyncConnection, job: JobView) -> bool:
        """A course that fits in one batch is tagged whole, in one transaction."""
        payload = self.kind.validate(job.payload)
        return await fits(conn, job, payload, self.own.tagging_batch_size)

    async def work(self, ctx: WorkContext[CourseTaggingPayload]) -> WorkEnd:
        after = TaggingCursor.model_validate(ctx.cursor or {}).after
        finished = self.done(ctx)
        ended = await self.tag_ranges(ctx, after)
        if ended is not None:
            return ended
        if ctx.counters.processed >= ctx.counters.total:
            return finished  # the counters are exact: no need to look for more
        # The items, not the cursor, say when it is done: a failover that lost commits
        # may have put items behind the cursor back to pending.
        after = 0
        while True:
            landed = await self.one_batch(ctx, after, None)
            if landed is None:
                return finished
            after, result = landed.after, landed.recorded
            ctx.finished = landed.finished or ctx.finished
            ended = self.after_batch(ctx, result, cursor=after)
            if ended is not None:
                return ended
            await self.breathe(ctx)

    async def tag_ranges(
        self, ctx: WorkContext[CourseTaggingPayload], after: int
    ) -> WorkEnd | None:
        """The items after the cursor in ranges a batch long (ordinals are dense), up to
        ``tagging_lanes`` at once: PostgreSQL writes one batch while the next is read.
        Returns how the attempt ends, or None once every range is done."""
        lanes = Lanes(self, ctx, after)
        ended: WorkEnd | None = None
        try:
            lanes.fill()
            while lanes.running:
                await lanes.land_some()
                ctx.beat(
                    cursor=TaggingCursor(after=lanes.frontier).model_dump(),
                    progress=ctx.counters.processed,
                )
                if lanes.failure is None and ended is None:
                    ended = self.end_after_batch(ctx, cancel_requested=lanes.cancel_requested)
                if lanes.failure is not None or ended is not None:
                    continue  # launch nothing more; let the batches in flight land
                await self.breathe(ctx)
                lanes.fill()
        finally:
            # Cancelled: what was in flight rolls back whole.
            await lanes.cancel()
        if lanes.failure is not None:
            raise lanes.failure
        return ended

    async def one_batch(
        self, ctx: WorkContext[CourseTaggingPayload], after: int, upto: int | None
    ) -> Landed | None:
        """A batch of the pending items after ``after`` (up to ``upto``), in one
        transaction: one commit for its pages, items, counters and a final row."""
        try:
            return await ctx.db(
                partial(self.tag_batch, ctx=ctx, after=after, upto=upto), transaction=True
            )
        except BatchWriteFailed:
            # Some page's update was refused: again, a statement a page.
            return await ctx.db(
                partial(self.tag_batch, ctx=ctx, after=after, upto=upto, careful=True)
            )

    @staticmethod
    def done(ctx: WorkContext[CourseTaggingPayload]) -> Done:
        return Done(TaggingOutput(source_job_id=ctx.job.source_job_id).model_dump(mode="json"))

    def after_batch(
        self, ctx: WorkContext[CourseTaggingPayload], result: Recorded, *, cursor: int
    ) -> WorkEnd | None:
        ctx.counters = result.counters
        ctx.beat(cursor=TaggingCursor(after=cursor).model_dump(), progress=ctx.counters.processed)
        return self.end_after_batch(ctx, cancel_requested=result.cancel_requested)

    def end_after_batch(
        self, ctx: WorkContext[CourseTaggingPayload], *, cancel_requested: bool
    ) -> WorkEnd | None:
        """How the attempt ends after a batch, if it does (the counters are exact)."""
        if cancel_requested:
            return Stopped()
        if ctx.counters.processed >= ctx.counters.total:
            return self.done(ctx)
        if ctx.time_to_pause():
            return Paused()
        return None

    async def breathe(self, ctx: WorkContext[CourseTaggingPayload]) -> None:
        pause = self.own.tagging_batch_pause_seconds
        if pause:
            await ctx.pause(pause)

    async def tag_batch(
        self,
        conn: AsyncConnection,
        *,
        ctx: WorkContext[CourseTaggingPayload],
        after: int,
        upto: int | None = None,
        careful: bool = False,
    ) -> Landed | None:
        """The next batch; None when no pending item is left. ``careful`` (autocommit):
        a refused write is retried page by page, else BatchWriteFailed. The last batch
        finishes the job in its transaction, unless a cancel was asked for."""
        job = ctx.job
        gate = await job_rows.gate(conn, job.id)
        if gate is None:
            raise job_not_found()
        if not gate.actor_ok:
            raise ActorUnavailable()
        if gate.cancel_requested:
            return Landed(after, Recorded(ctx.counters, 0, cancel_requested=True))
        items = await self.read_items(conn, ctx, after, upto) if gate.running else []
        if not items:
            return None
        outcomes = await self._tag(conn, ctx, items, careful=careful)
        result = await job_items.record_outcomes(
            conn,
            job.id,
            [
                ItemOutcome(o, outcomes[o].state, outcomes[o].code, outcomes[o].message)
                for o in outcomes
            ],
        )
        if result.recorded:
            delta = Counter(outcome.state.value for outcome in outcomes.values())
            self.deps.metrics.items_processed(self.kind.name, dict(delta))
        counters = result.counters
        finished = None
        if counters.processed >= counters.total and not result.cancel_requested:
            finished = await ctx.finish_in(conn, counters, self.done(ctx).output)
        return Landed(items[-1].ordinal, result, finished)

    async def read_items(
        self,
        conn: AsyncConnection,
        ctx: WorkContext[CourseTaggingPayload],
        after: int,
        upto: int | None,
    ) -> list[Item]:
        rows, _ = await direct.rows(
            conn,
            READ_BATCH,
            {
                "job": ctx.job.id,
                "after": after,
                "upto": upto,
                "limit": self.own.tagging_batch_size,
                "workspace": ctx.job.workspace_id,
                "tag": ctx.payload.tag,
            },
        )
        # By position (by name costs CPU); a change to READ_BATCH's columns fails here.
        return [
            Item(ordinal, ref, done, PageFacts(available, has_tag, tag_count, version))
            for ordinal, ref, done, available, has_tag, tag_count, version in rows
        ]

    async def _tag(
        self,
        conn: AsyncConnection,
        ctx: WorkContext[CourseTaggingPayload],
        items: list[Item],
        *,
        careful: bool,
    ) -> dict[int, PageOutcome]:
        outcomes: dict[int, PageOutcome] = {}
        pending: dict[int, PageFacts | None] = {item.ordinal: item.page for item in items}
        by_ordinal = {item.ordinal: item for item in items}
        # Pages in conflict are read and written once more; still in conflict, they fail.
        for attempt in (1, 2):
            wanted: list[tuple[Item, int]] = []
            for ordinal, page in pending.items():
                item = by_ordinal[ordinal]
                decided = decide(item.done_at_snapshot, page)
                if decided is not None:
                    outcomes[ordinal] = decided
                elif page is not None:
                    wanted.append((item, page.version))
            if not wanted:
                return outcomes
            if self.before_write is not None:
                await self.before_write(conn, [i.page_id for i, _ in wanted], attempt)
            changed, broken = await self._write(conn, ctx, wanted, careful=careful)
            conflicts: list[Item] = []
            for item, _ in wanted:
                outcome = written(
                    item.page_id in changed, item.page_id in broken, reread=attempt == 2
                )
                if outcome is None:
                    conflicts.append(item)
                else:
                    outcomes[item.ordinal] = outcome
            if not conflicts:
                return outcomes
            facts = await read_page_facts(
                conn,
                [i.page_id for i in conflicts],
                workspace_id=ctx.job.workspace_id,
                tag=ctx.payload.tag,
            )
            pending = {i.ordinal: facts.get(i.page_id) for i in conflicts}
        return outcomes

    async def _write(
        self,
        conn: AsyncConnection,
        ctx: WorkContext[CourseTaggingPayload],
        wanted: list[tuple[Item, int]],
        *,
        careful: bool,
    ) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
        """One statement; refused for some page's sake, BatchWriteFailed (``careful``:
        each page alone). Returns the pages changed and refused; the rest conflicted.
        Any other error is no page's doing: it goes up, no page recorded failed."""
        job = ctx.job

        async def write(changes: list[TagChange]) -> set[uuid.UUID]:
            return await add_tag_if_match(
                conn,
                workspace_id=job.workspace_id,
                tag=ctx.payload.tag,
                changes=changes,
                actor_id=job.actor_id,
                correlation_id=job.correlation_id,
                change_summary=change_summary(ctx.payload.tag),
            )

        try:
            return await write([TagChange(i.page_id, v) for i, v in wanted]), set()
        except DBAPIError as err:
            if not refused_for_its_row(err):
                raise
            log.warning("batch tag update refused (SQLSTATE %s); page by page", sqlstate_of(err))
            if not careful:
                raise BatchWriteFailed() from None
        changed: set[uuid.UUID] = set()
        broken: set[uuid.UUID] = set()
        for item, version in wanted:
            try:
                changed |= await write([TagChange(item.page_id, version)])
            except DBAPIError as err:
                if not refused_for_its_row(err):
                    raise
                log.warning(
                    "tag update of page %s refused (SQLSTATE %s)", item.page_id, sqlstate_of(err)
                )
                broken.add(item.page_id)
        return changed, broken


class Lanes:
    """One attempt's batches in flight; the frontier is the end of the ranges landed
    without a gap (what the cursor may say)."""

    def __init__(
        self, tagger: CourseTaggingActivities, ctx: WorkContext[CourseTaggingPayload], after: int
    ) -> None:
        self.tagger, self.ctx = tagger, ctx
        self.size = tagger.own.tagging_batch_size
        self.lanes = max(1, tagger.own.tagging_lanes)
        self.total = ctx.counters.total
        self.starts = iter(range(after, self.total, self.size))
        self.running: dict[asyncio.Task[Landed | None], int] = {}
        self.landed: set[int] = set()
        self.frontier = after
        self.cancel_requested = False
        self.failure: BaseException | None = None

    def fill(self) -> None:
        """Starts batches until every lane has one (or no range is left)."""
        while len(self.running) < self.lanes:
            start = next(self.starts, None)
            if start is None:
                return
            upto = min(start + self.size, self.total)
            task = asyncio.create_task(self.tagger.one_batch(self.ctx, start, upto))
            self.running[task] = start

    async def land_some(self) -> None:
        """Takes in what landed (in any order: the counters are the highest seen); a
        failure is raised once the others have landed."""
        landed, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
        for task in landed:
            start = self.running.pop(task)
            try:
                landed_batch = task.result()
            except Exception as err:
                self.failure = self.failure or err
                continue
            self.landed.add(start)
            if landed_batch is not None:
                result = landed_batch.recorded
                if result.counters.processed >= self.ctx.counters.processed:
                    self.ctx.counters = result.counters
                self.ctx.finished = landed_batch.finished or self.ctx.finished
                self.cancel_requested = self.cancel_requested or result.cancel_requested
        while self.frontier in self.landed:
            self.landed.remove(self.frontier)
            self.frontier = min(self.frontier + self.size, self.total)

    async def cancel(self) -> None:
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
