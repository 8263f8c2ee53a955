"""The attempt every kind's work activity shares: the job opened, the kind's work run,
the row finished or the job handed over; or, for a small job, all in one transaction.
A kind writes only ``async def work(ctx) -> Done | Stopped | Paused``, with ``ctx.db``
per unit of work, ``ctx.beat`` after each and ``ctx.time_to_pause()`` between them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.clock import OneClock
from activities.context import CancelTaken, WorkContext, asked_to_hand_over
from activities.deps import Deps
from activities.endings import (
    Done,
    Paused,
    Refused,
    Stopped,
    WorkEnd,
    after_finish,
    finish,
    outcome_of,
)
from activities.opening import NotWhole, Whole, open_for_attempt
from activities.outages import OutageClock, OutageTooLong, OutOfReach, outage_clock, unobserved
from hubjobs import job_rows
from hubjobs.db.deadline import deadline
from hubjobs.db.errors import is_outage
from hubjobs.errors import HubJobsError
from hubjobs.kinds import JobKind
from hubjobs.observability.logs import bind_job
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.temporal.failures import UNAVAILABLE
from hubjobs.temporal.messages import (
    Beat,
    WorkRequest,
    WorkResult,
)

log = logging.getLogger(__name__)
P = TypeVar("P")


def _not_whole(err: Exception) -> None:
    """Why a whole attempt gave the job back: the unexpected with its traceback, which
    would otherwise be seen nowhere (the attempts may well succeed)."""
    if isinstance(err, HubJobsError | ApplicationError | DBAPIError | Refused) or is_outage(err):
        log.info("job not done whole (%s): its attempts take it", type(err).__name__)
    else:
        log.warning("job not done whole: its attempts take it", exc_info=err)


def _handed_over(
    ctx: WorkContext[Any] | None, beat: Beat, outage_since: datetime | None = None
) -> WorkResult:
    """The job given back with how far the attempt got."""
    if ctx is None:
        return WorkResult(beat=beat, counters=Counters(), outage_since=outage_since)
    return WorkResult(beat=ctx.beat_state, counters=ctx.counters, outage_since=outage_since)


class KindActivities(Generic[P]):
    """Base of a kind's activities class (``activities/<kind>.py``): built once per worker
    with its dependencies; its work activity calls ``self.attempt(request, work)``."""

    kind: ClassVar[JobKind[Any]]

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def attempt(
        self, request: WorkRequest, work: Callable[[WorkContext[P]], Awaitable[WorkEnd]]
    ) -> WorkResult:
        """In a task of its own: cancelled because its run is full, the attempt hands over
        at its next step rather than being cut; any other cancel cuts it at once."""
        if request.whole:
            return await self._whole(request, work)
        running = asyncio.ensure_future(self._attempt(request, work))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if asked_to_hand_over():
                try:
                    return await asyncio.shield(running)
                except asyncio.CancelledError:
                    pass  # cancelled again (the worker's graceful shutdown ran out)
            running.cancel()
            return await running

    async def _attempt(
        self, request: WorkRequest, work: Callable[[WorkContext[P]], Awaitable[WorkEnd]]
    ) -> WorkResult:
        bind_job(request.job)
        settings = self.deps.settings
        clock = OneClock.temporal()
        beat = Beat(cursor=request.cursor)
        activity.heartbeat(beat.model_dump(mode="json"))
        outage = outage_clock.set(
            OutageClock(since=request.outage_since, clock=clock, reach=self.deps.reach)
        )
        ctx: WorkContext[P] | None = None
        try:
            job = await self._open(
                request, on_wait=lambda: activity.heartbeat(beat.model_dump(mode="json"))
            )
            if job.is_final:
                return WorkResult(outcome=outcome_of(job), counters=job.counters)
            progress = self.kind.durable_progress(job)
            ctx = self._context(
                request, job, beat_state=Beat(cursor=request.cursor, progress=progress)
            )
            end: WorkEnd = Stopped() if job.cancel_requested_at else await work(ctx)
            if isinstance(end, Paused):
                await ctx.reports_delivered()
                return WorkResult(beat=ctx.beat_state, counters=ctx.counters)
            done = isinstance(end, Done)
            if done and ctx.finished is not None:
                outcome = after_finish(self.deps, ctx.finished)
            else:
                ending = job_rows.Ending(
                    JobStatus.succeeded if done else JobStatus.cancelled,
                    counters=ctx.counters,
                    output=end.output if isinstance(end, Done) else None,
                )
                outcome = await finish(
                    self.deps,
                    job,
                    ending,
                    on_wait=ctx.beat,
                    before_retry=ctx.unless_cancel_taken,
                )
            await ctx.reports_delivered()
            return WorkResult(outcome=outcome, beat=ctx.beat_state, counters=outcome.counters)
        except Refused as err:
            log.info("job refused: %s", err.code)
            raise ApplicationError(
                err.message, beat.model_dump(mode="json"), type=err.code, non_retryable=True
            ) from None
        except OutageTooLong:
            log.error("database unavailable for longer than %.0f s", settings.max_outage_seconds)
            raise ApplicationError(
                "the database did not answer for too long", type=UNAVAILABLE, non_retryable=True
            ) from None
        except CancelTaken:
            log.info("cancellation taken while the database refused: job handed back")
            return _handed_over(ctx, beat)
        except OutOfReach as out:
            # Handed over as at a time slice (at no cost), with when the outage began.
            log.info("database out of reach: job handed over")
            return _handed_over(ctx, beat, out.since)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                # Out of time to drain: handed over, not failed.
                log.info("worker shutting down: job handed over")
                return WorkResult(beat=beat)
            raise
        except ApplicationError:
            raise
        except Exception as err:
            log.exception("attempt failed")
            raise ApplicationError(f"the attempt failed ({type(err).__name__})") from None
        finally:
            outage_clock.reset(outage)

    async def fits_whole(self, conn: AsyncConnection, job: JobView) -> bool:
        """Whether a job not yet snapshotted fits one transaction (a bounded count)."""
        return False

    async def _whole(
        self, request: WorkRequest, work: Callable[[WorkContext[P]], Awaitable[WorkEnd]]
    ) -> WorkResult:
        """The ordinary attempt in ONE transaction, for an untouched job that
        ``fits_whole``; any job it cannot finish so it rolls back and hands back no
        outcome. Run twice, it finds the row final and returns it."""
        bind_job(request.job)
        if self.deps.reach.cut_off:
            return WorkResult()  # this worker knows it cannot reach the database
        try:
            # One unit of work of one batch's size: the batch's deadline bounds it all.
            with deadline(self.deps.settings.db_batch_timeout_seconds):
                async with self.deps.engine.begin() as conn:
                    finished = await self._in_one_transaction(conn, request, work)
        except NotWhole as why:
            log.debug("job not done whole: %s", why)
            return WorkResult()
        except Exception as err:  # whatever it was, the attempts take the job over
            _not_whole(err)
            return WorkResult()
        outcome = after_finish(self.deps, finished)
        return WorkResult(outcome=outcome, counters=outcome.counters)

    async def _in_one_transaction(
        self,
        conn: AsyncConnection,
        request: WorkRequest,
        work: Callable[[WorkContext[P]], Awaitable[WorkEnd]],
    ) -> job_rows.Finished:
        # A local activity has no heartbeat to send.
        job = await self._open(request, on_wait=unobserved, whole=Whole(conn, self.fits_whole))
        if job.is_final:
            return job_rows.Finished(job, changed=False)
        ctx = self._context(request, job, conn=conn)
        end = await work(ctx)
        if not isinstance(end, Done) or ctx.finished is None:
            raise NotWhole("the work did not finish in one unit")
        return ctx.finished

    async def _open(
        self, request: WorkRequest, *, on_wait: Callable[[], None], whole: Whole | None = None
    ) -> JobView:
        info = activity.info()
        return await open_for_attempt(
            self.deps,
            self.kind,
            request,
            info.workflow_id,
            info.workflow_run_id,
            on_wait=on_wait,
            whole=whole,
        )

    def _context(
        self,
        request: WorkRequest,
        job: JobView,
        *,
        beat_state: Beat | None = None,
        conn: AsyncConnection | None = None,
    ) -> WorkContext[P]:
        return WorkContext(
            deps=self.deps,
            kind=self.kind,
            request=request,
            job=job,
            payload=self.kind.validate(job.payload),
            counters=job.counters,
            beat_state=beat_state or Beat(),
            conn=conn,
        )
