"""What every kind's work activity shares, written once: opening the job for an attempt
(creating its row when it was started straight through Temporal), heartbeating how far
it got, riding out database outages (each unit of work under its purpose's deadline),
giving its slot back when its time slice is over, its worker shuts down, or its worker
cannot reach the database (``OutOfReach``: the job goes to a worker that can), reporting
progress to the workflow, and finishing the row when the work is done or a cancellation
request was seen.

A kind writes only its work: ``async def work(ctx) -> Done | Stopped | Paused``, using
``ctx.db`` for each unit of work (one transaction, retried whole after an outage),
``ctx.beat`` after each durable step, ``ctx.time_to_pause()`` between steps and
``ctx.report`` for long steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.clock import OneClock
from hubjobs.db.deadline import current as current_deadline
from hubjobs.db.deadline import deadline
from hubjobs.db.engine import set_local_budget
from hubjobs.db.errors import is_outage, server_answered, sqlstate_of
from hubjobs.db.limits import Purpose, budget
from hubjobs.errors import HubJobsError, JobNotFound
from hubjobs.kinds import REGISTRY, JobKind, Prepared, job_rows
from hubjobs.observability.logs import bind_job
from hubjobs.observability.telemetry import JobMetrics
from hubjobs.readmodel import store
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings
from hubjobs.temporal.failures import ACTOR_UNAVAILABLE, UNAVAILABLE
from hubjobs.temporal.messages import (
    PROGRESS_SIGNAL,
    Beat,
    JobOutcome,
    JobProgressReport,
    WorkRequest,
    WorkResult,
)
from hubjobs.webhooks.policy import checked

log = logging.getLogger(__name__)
# A progress report is a courtesy: never wait long on Temporal for one.
PROGRESS_RPC_TIMEOUT = timedelta(seconds=5)
T = TypeVar("T")
P = TypeVar("P")


@dataclass
class Reach:
    """Whether this worker has found that it cannot reach the database: one of its
    attempts handed over, and nothing got through since. The task queue may well give
    the job's next attempt back to it (the longest-waiting poll wins, and an idle cut
    off worker's polls are old): its attempts and lifecycle steps then hand over at
    once, trying the database at most once every HUBJOBS_OUTAGE_HANDOVER_SECONDS (and
    handing over at the first failed try), so that the job moves on at little cost."""

    cut_off_at: float | None = None

    @property
    def cut_off(self) -> bool:
        return self.cut_off_at is not None

    def lost(self) -> None:
        self.cut_off_at = time.monotonic()

    def found(self) -> None:
        self.cut_off_at = None

    def tried_lately(self, seconds: float) -> bool:
        """Cut off, and the database was tried less than ``seconds`` ago."""
        return self.cut_off_at is not None and time.monotonic() - self.cut_off_at < seconds


@dataclass(frozen=True)
class Deps:
    """What activities are built with, once per worker."""

    engine: AsyncEngine
    settings: Settings
    metrics: JobMetrics
    # Temporal, for the activities that talk to it (maintenance, progress reports).
    client: Client | None = None
    # Test hooks by name (e.g. "before_write"); empty in production.
    hooks: Mapping[str, Any] = field(default_factory=dict)
    reach: Reach = field(default_factory=Reach)

    @property
    def default_retention(self) -> timedelta:
        return timedelta(hours=self.settings.retention_hours)


# --- how a kind's work ends -----------------------------------------------------------


@dataclass(frozen=True)
class Done:
    """The work is complete: the job succeeds, its result built from ``output``."""

    output: dict[str, Any] | None = None


@dataclass(frozen=True)
class Stopped:
    """A cancellation request was seen: the job ends cancelled, work done kept."""


@dataclass(frozen=True)
class Paused:
    """The attempt gives its slot back (its time slice is over, or its worker is shutting
    down); the next attempt carries on from the last beat."""


WorkEnd = Done | Stopped | Paused


class Refused(HubJobsError):
    """The job cannot go on, whatever is retried (the actor lost the right to run it, an
    attachment is missing): it fails at once with this code."""


class ActorUnavailable(Refused):
    """The job's actor is no longer an enabled administrator of its workspace."""

    code = ACTOR_UNAVAILABLE

    def __init__(self) -> None:
        super().__init__("the actor is no longer an enabled administrator")


def job_not_found() -> ApplicationError:
    """A lifecycle write for a job that has no row: nothing a retry could change."""
    return ApplicationError("job not found", type=JobNotFound.code, non_retryable=True)


def asked_to_hand_over() -> bool:
    """The job's workflow cancelled this attempt: its run is full of signals and
    continues as new once the attempt has handed the job over."""
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested


class OutageTooLong(Exception):
    pass


class OutOfReach(Exception):
    """This worker has waited HUBJOBS_OUTAGE_HANDOVER_SECONDS for a database that does
    not answer it: the attempt gives its slot back (at no cost), so that a worker that
    reaches the database takes the job on. ``since`` is when the outage began, for the
    next attempt to carry on measuring it."""

    def __init__(self, since: datetime) -> None:
        super().__init__("the database does not answer this worker")
        self.since = since


@dataclass
class OutageClock:
    """How long the database has not answered a job: since ``since`` (a time on
    ``clock``: Temporal's in an attempt, carried from attempt to attempt in the work
    request, so that HUBJOBS_MAX_OUTAGE_SECONDS holds across handovers and hosts), and
    how long this attempt has waited for it. With ``hand_over``, a wait longer than
    HUBJOBS_OUTAGE_HANDOVER_SECONDS ends in ``OutOfReach``; with ``gives_up``, an outage
    longer than the maximum ends in ``OutageTooLong`` (a lifecycle write never gives up:
    it must land)."""

    since: datetime | None = None
    clock: OneClock = field(default_factory=OneClock.here)
    hand_over: bool = True
    gives_up: bool = True
    # The worker's own knowledge of whether it reaches the database.
    reach: Reach | None = None
    _waiting: float | None = None

    def answered(self) -> None:
        self.since = None
        self._waiting = None
        if self.reach is not None:
            self.reach.found()

    def should_hand_over(self, waited: float, bound: float) -> bool:
        """After this attempt's ``waited`` seconds: hand over now? (At once when its
        worker already knows it is cut off.)"""
        if not self.hand_over:
            return False
        return waited >= bound or (self.reach is not None and self.reach.cut_off)

    def failed(self, *, answered: bool = False) -> tuple[float, float]:
        """Notes a failure; returns (seconds of outage, seconds this attempt waited for
        a database out of its reach). ``answered``: the server itself ended the call at
        its own timeout: it counts as outage, but the worker reaches the database, and
        handing over would not help."""
        now = time.monotonic()
        if self.since is None:
            self.since = self.clock.now()
        if answered:
            self._waiting = None
            if self.reach is not None:
                self.reach.found()
            return self.clock.seconds_since(self.since), 0.0
        if self._waiting is None:
            self._waiting = now
        return self.clock.seconds_since(self.since), now - self._waiting


# The outage clock of the attempt (or lifecycle step) running in this context: every
# unit of database work it runs hands over on it. None outside them (maintenance rides
# outages out in place).
_outage: contextvars.ContextVar[OutageClock | None] = contextvars.ContextVar(
    "hubjobs_outage", default=None
)

# A lifecycle step's worker could not reach the database: retried, by Temporal, on any
# worker (see workflows/job_lifecycle.py).
OUT_OF_REACH = "database_out_of_reach"


@contextmanager
def handing_over(reach: Reach | None = None) -> Iterator[None]:
    """A lifecycle step (the workflow's local activity, or the same step handed to any
    worker): its database waits end after HUBJOBS_OUTAGE_HANDOVER_SECONDS in a retryable
    failure, so that the step does not hold the workflow on a worker that is cut off."""
    token = _outage.set(OutageClock(gives_up=False, reach=reach))
    try:
        yield
    except OutOfReach:
        raise ApplicationError(
            "the database does not answer this worker", type=OUT_OF_REACH
        ) from None
    finally:
        _outage.reset(token)


def outcome_of(job: JobView) -> JobOutcome:
    """The final row as the workflow returns it: a result that grows with the work (an
    export's manifest) as its kind's bounded summary (``JobKind.carried``)."""
    kind = REGISTRY.find(job.kind)
    return JobOutcome(
        job_id=job.id,
        status=job.status,
        counters=job.counters,
        result=job.result if kind is None else kind.carried_result(job),
        error_code=job.error_code,
        error_message=job.error_message,
    )


# --- the context a kind's work runs in -------------------------------------------------


@dataclass
class WorkContext(Generic[P]):
    deps: Deps
    kind: JobKind[Any]
    request: WorkRequest
    job: JobView
    payload: P
    counters: Counters
    beat_state: Beat = field(default_factory=Beat)
    started: float = field(default_factory=time.monotonic)
    # The progress message a kind last gave (``report``); None: the counters say it.
    message: str | None = None
    # Set when the kind's last unit of work finished the row in its own transaction.
    finished: store.Finished | None = None
    # Set when this attempt took the snapshot in the transaction of its whole work (a
    # small job's, ``attempt_at_once``): its total and summary land with the final row.
    snapshot: Prepared | None = None
    _reported: float = field(default_factory=time.monotonic)
    _last_report: JobProgressReport | None = None
    _sending: asyncio.Task[None] | None = None

    @property
    def engine(self) -> AsyncEngine:
        return self.deps.engine

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    @property
    def cursor(self) -> dict[str, Any] | None:
        return self.beat_state.cursor

    def beat(self, cursor: dict[str, Any] | None = None, progress: int | None = None) -> None:
        """Tells Temporal this attempt is alive and how far it got; the details are what
        the workflow sees if the attempt dies, and where the next one starts. Also tells
        the workflow the counters now and then (``report``)."""
        if cursor is not None or progress is not None:
            self.beat_state = Beat(
                cursor=self.beat_state.cursor if cursor is None else cursor,
                progress=self.beat_state.progress if progress is None else progress,
            )
        activity.heartbeat(self.beat_state.model_dump(mode="json"))
        self._send_progress()

    def time_to_pause(self) -> bool:
        """Between two steps: give the slot back now (the time slice is over, the
        worker is shutting down, or the workflow asked for the job back)?"""
        if activity.is_worker_shutdown() or asked_to_hand_over():
            return True
        return time.monotonic() - self.started >= self.settings.work_slice_seconds

    @staticmethod
    def shutting_down() -> bool:
        """For work that cannot pause mid-way (a backup): hand the job over only when the
        worker is going away."""
        return activity.is_worker_shutdown()

    async def db(
        self, work: Callable[[AsyncConnection], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        """Runs ``work`` on a connection in autocommit (each statement its own
        transaction), or with ``transaction`` in one. While the database does not answer,
        waits with capped backoff, heartbeating, and runs it again whole: an outage costs
        the job nothing, until it lasts longer than HUBJOBS_MAX_OUTAGE_SECONDS."""
        return await with_outage_retry(
            self.engine,
            self.settings,
            work,
            transaction=transaction,
            on_wait=self.beat,
            budget=self.settings.db_batch_timeout_seconds,
        )

    async def finish_in(
        self, conn: AsyncConnection, counters: Counters, output: dict[str, Any] | None
    ) -> store.Finished:
        """Finishes the job as succeeded in the caller's unit of work (the kind's last
        batch, whose commit then lands the work and the final row at once: one commit a
        small job fewer). The caller hands the result to ``finished`` once its unit has
        landed, and the attempt then writes nothing more."""
        finished = await job_rows.finish_job(
            conn,
            self.job,
            status=JobStatus.succeeded,
            default_retention=self.deps.default_retention,
            counters=counters,
            output=output,
        )
        if finished is None:
            raise job_not_found()
        return finished

    async def finish_whole(
        self,
        conn: AsyncConnection,
        outcomes: Sequence[store.ItemOutcome],
        output: dict[str, Any] | None,
    ) -> store.Finished | None:
        """Records the outcome of every item of the snapshot this attempt took and
        finishes the job succeeded, in one statement of the caller's transaction (a small
        job's whole work: ``attempt_at_once``); None when they are not all of them."""
        assert self.snapshot is not None, "only the attempt that took the snapshot"
        return await job_rows.finish_whole(
            conn,
            self.job,
            outcomes,
            prepared=self.snapshot,
            output=output,
            default_retention=self.deps.default_retention,
        )

    async def retrying(self, work: Callable[[], Awaitable[T]]) -> T:
        """Like ``db`` for work holding its own connection (a backup's snapshot): after
        an outage it runs again whole."""
        return await ride_out_outages(self.settings, work, on_wait=self.beat)

    async def report(self, message: str) -> None:
        """A progress message for the workflow's query and the UI's details (the next
        report carries it)."""
        self.message = message
        self._send_progress()

    def _send_progress(self) -> None:
        """Signals the job's workflow the counters and message, at most every
        HUBJOBS_PROGRESS_REPORT_SECONDS (1 s: the progress query and the UI's details
        follow the read model within about that) and only when they changed; in the
        background, so a batch never waits on Temporal, and never two at once. An attempt
        over within the interval sends none: a small job costs no extra event. A report
        that does not get through is only logged; the next one says it all again."""
        now = time.monotonic()
        if now - self._reported < self.settings.progress_report_seconds:
            return
        if asked_to_hand_over():
            return  # the run is full: a kind that cannot pause must not fill it further
        if self._sending is not None and not self._sending.done():
            return
        report = JobProgressReport(
            counters=self.counters, message=self.message or self.counters.describe()
        )
        if report == self._last_report:
            return
        info = activity.info()
        if info.workflow_id is None:
            return
        self._reported = now
        self._last_report = report
        handle = activity.client().get_workflow_handle(
            info.workflow_id, run_id=info.workflow_run_id
        )
        self._sending = asyncio.create_task(_signal_progress(handle, report))
        # The loop keeps only weak references to tasks: this one may outlive its attempt.
        _SENDING.add(self._sending)
        self._sending.add_done_callback(_SENDING.discard)


_SENDING: set[asyncio.Task[None]] = set()


async def _signal_progress(handle: WorkflowHandle[Any, Any], report: JobProgressReport) -> None:
    try:
        await handle.signal(PROGRESS_SIGNAL, report, rpc_timeout=PROGRESS_RPC_TIMEOUT)
    except (RuntimeError, RPCError) as err:
        log.debug("progress report not delivered: %s", err)


@asynccontextmanager
async def beating(beat: Callable[[], None], every: float = 1.0) -> AsyncIterator[None]:
    """Heartbeats every ``every`` seconds while the body runs: a step that may take long
    in one statement (a snapshot of a million pages) still shows its attempt alive."""

    async def keep_beating() -> None:
        while True:
            await asyncio.sleep(every)
            beat()

    task = asyncio.create_task(keep_beating())
    try:
        yield
    finally:
        task.cancel()


async def ride_out_outages(
    settings: Settings,
    work: Callable[[], Awaitable[T]],
    *,
    on_wait: Callable[[], None] | None = None,
) -> T:
    """Runs ``work`` until it gets through a database outage: each failure that is an
    outage (by the error's class, see hubjobs.db.errors; a deadline passed included)
    waits 1 s, 2 s, 4 s… (at most HUBJOBS_OUTAGE_RETRY_MAX_SECONDS, calling ``on_wait``
    every second, e.g. to heartbeat) and runs it again whole; past
    HUBJOBS_MAX_OUTAGE_SECONDS of outage (measured across attempts and hosts, on
    Temporal's clock: activities/clock.py) it gives up with OutageTooLong. In an attempt
    (or a lifecycle step), a wait longer than HUBJOBS_OUTAGE_HANDOVER_SECONDS ends in
    OutOfReach: the job goes to a worker that reaches the database. Any other error
    goes straight up."""
    clock = _outage.get() or OutageClock(hand_over=False)
    reach = clock.reach
    bound = settings.outage_handover_seconds
    if clock.hand_over and reach is not None and reach.tried_lately(bound):
        # This worker found it cannot reach the database moments ago: over at once.
        log.info("database out of reach from this worker: handing the work over untried")
        clock.failed()
        assert clock.since is not None
        raise OutOfReach(clock.since)
    delay = 1.0
    while True:
        try:
            result = await work()
            if clock.since is not None:
                outage = clock.clock.seconds_since(clock.since)
                log.info("database answers again after %.1f s", outage)
            clock.answered()
            return result
        except Exception as err:
            if not is_outage(err):
                raise
            outage, waited = clock.failed(answered=server_answered(err))
            if clock.gives_up and outage > settings.max_outage_seconds:
                raise OutageTooLong() from err
            if clock.should_hand_over(waited, settings.outage_handover_seconds):
                log.warning(
                    "database unavailable from this worker for %.1f s: handing the work over",
                    waited,
                )
                if clock.reach is not None:
                    clock.reach.lost()
                assert clock.since is not None
                raise OutOfReach(clock.since) from err
            log.warning(
                "database unavailable (%s, SQLSTATE %s); trying again in %.0f s",
                type(err).__name__,
                sqlstate_of(err),
                delay,
            )
            pause = delay
            if clock.hand_over:
                pause = min(pause, max(0.0, settings.outage_handover_seconds - waited))
            deadline_at = time.monotonic() + pause
            while time.monotonic() < deadline_at:
                if on_wait is not None:
                    on_wait()
                await asyncio.sleep(min(1.0, max(0.0, deadline_at - time.monotonic())))
            delay = min(delay * 2, settings.outage_retry_max_seconds)


async def with_outage_retry(
    engine: AsyncEngine,
    settings: Settings,
    work: Callable[[AsyncConnection], Awaitable[T]],
    *,
    transaction: bool = False,
    on_wait: Callable[[], None] | None = None,
    budget: float | None = None,
) -> T:
    """``work`` on a fresh connection, riding out outages: in autocommit (each statement
    its own transaction), or with ``transaction`` in one transaction, committed when
    ``work`` returns. Each try runs under a deadline of ``budget`` seconds (by default
    HUBJOBS_DB_LIFECYCLE_TIMEOUT_SECONDS): past it, it is an outage."""
    seconds = settings.db_lifecycle_timeout_seconds if budget is None else budget

    async def on_connection() -> T:
        with deadline(seconds):
            if transaction:
                async with engine.begin() as conn:
                    return await work(conn)
            async with engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                return await work(conn)

    return await ride_out_outages(settings, on_connection, on_wait=on_wait)


class NotAtOnce(Exception):
    """A small job's local attempt cannot do the job whole: its transaction rolls back,
    and the workflow's attempts take the job as it is."""


@dataclass(frozen=True)
class WholeWork(Generic[P]):
    """What a kind whose small jobs can be done in one transaction gives
    ``attempt_at_once``: ``fits`` (the job, not yet snapshotted, is small enough: a
    bounded count, no write) and ``work`` (all of it, on the transaction's connection,
    its last statement ``ctx.finish_whole``; None when it did not finish)."""

    fits: Callable[[AsyncConnection, JobView, P], Awaitable[bool]]
    work: Callable[[AsyncConnection, WorkContext[P]], Awaitable[store.Finished | None]]


def _not_at_once(err: Exception) -> None:
    """Logs why a small job's local attempt gave the job back: a refusal or an outage
    as what the attempts will meet and say again; anything else with its traceback, for
    it would otherwise be seen nowhere (the attempts may well succeed)."""
    if isinstance(err, HubJobsError | ApplicationError) or is_outage(err):
        log.info("job not done at once (%s): its attempts take it", type(err).__name__)
    else:
        log.warning("job not done at once: its attempts take it", exc_info=err)


# --- the shared attempt --------------------------------------------------------------------


class KindActivities(Generic[P]):
    """Base of a kind's activities class (``activities/<kind>.py``): built once per worker
    with its dependencies; its work activity calls ``self.attempt(request, work)``."""

    kind: ClassVar[JobKind[Any]]

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def attempt(
        self, request: WorkRequest, work: Callable[[WorkContext[P]], Awaitable[WorkEnd]]
    ) -> WorkResult:
        """The attempt runs in a task of its own: cancelled because its workflow asked for
        the job back (its run is full of signals), it is not cut but hands the job over at
        its next step (``time_to_pause``); cancelled for any other reason (the worker's
        shutdown, a timeout, the run gone), at once, as ever."""
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
        info = activity.info()
        clock = OneClock.temporal()
        beat = Beat(cursor=request.cursor)
        activity.heartbeat(beat.model_dump(mode="json"))
        outage = _outage.set(
            OutageClock(since=request.outage_since, clock=clock, reach=self.deps.reach)
        )
        ctx: WorkContext[P] | None = None
        try:
            job = await self._open(
                request,
                info.workflow_id,
                info.workflow_run_id,
                on_wait=lambda: activity.heartbeat(beat.model_dump(mode="json")),
            )
            if job.is_final:
                return WorkResult(outcome=outcome_of(job), counters=job.counters)
            ctx = WorkContext(
                deps=self.deps,
                kind=self.kind,
                request=request,
                job=job,
                payload=self.kind.validate(job.payload),
                counters=job.counters,
                beat_state=Beat(cursor=request.cursor, progress=self.kind.durable_progress(job)),
            )
            end: WorkEnd = Stopped() if job.cancel_requested_at else await work(ctx)
            if isinstance(end, Paused):
                return WorkResult(beat=ctx.beat_state, counters=ctx.counters)
            done = isinstance(end, Done)
            if done and ctx.finished is not None:
                outcome = after_finish(self.deps, ctx.finished)
            else:
                outcome = await self.finish(
                    job,
                    JobStatus.succeeded if done else JobStatus.cancelled,
                    counters=ctx.counters,
                    output=end.output if isinstance(end, Done) else None,
                )
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
        except OutOfReach as out:
            # Handed over as at a time slice (at no cost), with when the outage began.
            log.info("database out of reach: job handed over")
            state = ctx.beat_state if ctx is not None else beat
            counters = ctx.counters if ctx is not None else Counters()
            return WorkResult(beat=state, counters=counters, outage_since=out.since)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                # Out of time to drain: the job is handed over, not failed; whatever the
                # cut step had not committed never happened.
                log.info("worker shutting down: job handed over")
                return WorkResult(beat=beat)
            raise
        except ApplicationError:
            raise
        except Exception as err:
            log.exception("attempt failed")
            raise ApplicationError(f"the attempt failed ({type(err).__name__})") from None
        finally:
            _outage.reset(outage)

    async def attempt_at_once(self, request: WorkRequest, whole: WholeWork[P]) -> WorkResult:
        """A small job's first attempt as the workflow's local activity: the row opened,
        the snapshot taken, the work done and the row finished in ONE transaction (one
        commit, no activity task, no second workflow task). It does only a job that
        ``whole`` says fits (counted before anything is written) and that nothing has
        touched yet (no snapshot, no cancellation request); a job it cannot finish here,
        for whatever reason (too big, refused, a failure, the database out of reach or
        slow), it leaves exactly as it found it, its transaction rolled back, and hands
        back no outcome: the workflow's attempts then do the job as they always did.
        Run twice (its worker killed after the commit), it finds the row final and
        returns it."""
        bind_job(request.job)
        if self.deps.reach.cut_off:
            return WorkResult()  # this worker knows it cannot reach the database
        info = activity.info()
        try:
            # One unit of work of one batch's size: the batch's deadline bounds it all.
            with deadline(self.deps.settings.db_batch_timeout_seconds):
                async with self.deps.engine.begin() as conn:
                    finished = await self._whole(conn, request, info.workflow_id, whole)
        except NotAtOnce as why:
            log.debug("job not done at once: %s", why)
            return WorkResult()
        except Exception as err:  # whatever it was, the attempts take the job over
            _not_at_once(err)
            return WorkResult()
        outcome = after_finish(self.deps, finished)
        return WorkResult(outcome=outcome, counters=outcome.counters)

    async def _whole(
        self,
        conn: AsyncConnection,
        request: WorkRequest,
        workflow_id: str | None,
        whole: WholeWork[P],
    ) -> store.Finished:
        """``attempt_at_once``'s transaction, in as few statements as it can take: the
        snapshot lock, the row opened only if nothing touched it (its snapshot marked
        taken), the size counted, the items inserted, then the kind's work, whose last
        statement records every outcome with the final row. Raises NotAtOnce (rolling
        it all back) unless the job was finished, by now or by an earlier run of it."""
        await store.lock_snapshot(conn, request.job.job_id)
        opened = await store.open_untouched(
            conn,
            request.job.job_id,
            run_id=activity.info().workflow_run_id,
            attempts=request.attempt,
            attempts_failed=request.attempts_failed,
            workflow_id=workflow_id,
        )
        if opened is None:
            raise NotAtOnce("no row of this workflow (a direct start creates it)")
        job, untouched = opened
        if job.is_final:
            run_id = activity.info().workflow_run_id
            if run_id is not None:
                await store.follow_run(conn, job.id, run_id=run_id, workflow_id=workflow_id)
            return store.Finished(job, changed=False)
        if not untouched:
            raise NotAtOnce("an earlier attempt or a cancellation came first")
        payload = self.kind.validate(job.payload)
        if not await whole.fits(conn, job, payload):
            raise NotAtOnce("larger than one unit of work")
        snapshot = await job_rows.insert_snapshot(conn, job)
        ctx: WorkContext[P] = WorkContext(
            deps=self.deps,
            kind=self.kind,
            request=request,
            job=job,
            payload=payload,
            counters=Counters(total=snapshot.total),
            snapshot=snapshot,
        )
        finished = await whole.work(conn, ctx)
        if finished is None:
            raise NotAtOnce("the work did not finish in one unit")
        return finished

    async def _open(
        self,
        request: WorkRequest,
        workflow_id: str | None,
        run_id: str | None,
        *,
        on_wait: Callable[[], None],
    ) -> JobView:
        """Moves the job to running for this attempt, taking its items first when no
        attempt has yet (hubjobs.kinds.job_rows.take_snapshot), in one transaction: a
        small job's first attempt commits once before its work. A job started straight
        through Temporal has no row yet: it is created with the checks a start through
        the client makes, and a refused one gets a failed row and fails at once; a job
        whose snapshot is refused (its course trashed since the start) fails with the
        refusal's code."""
        job = request.job
        settings = self.deps.settings

        async def open_row(conn: AsyncConnection) -> JobView | HubJobsError | None:
            row = await store.get_job(conn, job.job_id)
            if row is None or (workflow_id is not None and row.workflow_id != workflow_id):
                return None
            refused = await snapshot_if_due(conn, row, settings)
            if refused is not None:
                return refused
            opened = await store.open_job(
                conn,
                job.job_id,
                run_id=run_id,
                attempts=request.attempt,
                attempts_failed=request.attempts_failed,
                workflow_id=workflow_id,
            )
            if opened is not None and opened.is_final and run_id is not None:
                await store.follow_run(conn, job.job_id, run_id=run_id, workflow_id=workflow_id)
            return opened

        async def create_row(
            conn: AsyncConnection, notify_url: str | None, notify_refused: HubJobsError | None
        ) -> HubJobsError | None:
            try:
                if notify_refused is not None:
                    raise notify_refused
                async with conn.begin_nested():
                    await job_rows.create_job(
                        conn,
                        self.kind,
                        job_id=job.job_id,
                        workspace_id=job.workspace_id,
                        actor_id=job.actor_id,
                        correlation_id=job.correlation_id,
                        payload=job.payload,
                        workflow_id=workflow_id,
                        notify_url=notify_url,
                    )
            except HubJobsError as err:
                await job_rows.record_refused(
                    conn,
                    job_id=job.job_id,
                    kind=job.kind,
                    workspace_id=job.workspace_id,
                    actor_id=job.actor_id,
                    correlation_id=job.correlation_id,
                    payload=job.payload,
                    code=err.code,
                    message=err.message,
                    retention=self.deps.default_retention,
                    workflow_id=workflow_id,
                )
                return err
            return None

        async def open_once() -> JobView | None:
            opened = await with_outage_retry(
                self.deps.engine, settings, open_row, transaction=True, on_wait=on_wait
            )
            if isinstance(opened, HubJobsError):
                raise Refused(opened.message, code=opened.code)
            return opened

        async with beating(on_wait):
            opened = await open_once()
            if opened is not None:
                return opened
            # A direct start's notify_url gets the checks a start through the client
            # makes (off the event loop: it resolves the host) before its row is created.
            notify_url, notify_refused = await _notify_url_checked(settings, job.notify_url)
            refused = await with_outage_retry(
                self.deps.engine,
                settings,
                lambda conn: create_row(conn, notify_url, notify_refused),
                transaction=True,
                on_wait=on_wait,
            )
            if refused is not None:
                raise Refused(refused.message, code=refused.code)
            opened = await open_once()
        assert opened is not None
        return opened

    async def finish(
        self,
        job: JobView,
        status: JobStatus,
        *,
        counters: Counters | None = None,
        output: dict[str, Any] | None = None,
    ) -> JobOutcome:
        return await finish(self.deps, job, status, counters=counters, output=output)


async def snapshot_if_due(
    conn: AsyncConnection, job: JobView, settings: Settings
) -> HubJobsError | None:
    """In an attempt's opening transaction: the job's snapshot, unless it is final or
    was taken. It reads the whole course, so it runs under the bulk budget (the unit's
    deadline moved on, the server's bounds raised for this transaction), in a savepoint:
    a refusal (its course gone since the start) is returned, the rest kept."""
    if job.is_final or job.snapshot_at is not None:
        return None
    bound = current_deadline()
    if bound is not None:
        bound.extend(settings.db_bulk_timeout_seconds)
    bulk = budget(settings, Purpose.BULK)
    await set_local_budget(conn, bulk.seconds, bulk.lock_seconds)
    try:
        async with conn.begin_nested():
            await job_rows.take_snapshot(conn, job)
    except HubJobsError as err:
        return err
    return None


async def _notify_url_checked(
    settings: Settings, url: str | None
) -> tuple[str | None, HubJobsError | None]:
    """A direct start's notify_url as the start's checks leave it, or their refusal."""
    try:
        return await checked(settings, url), None
    except HubJobsError as err:
        return None, err


async def finish(
    deps: Deps,
    job: JobView,
    status: JobStatus,
    *,
    counters: Counters | None = None,
    output: dict[str, Any] | None = None,
    error_code: str | None = None,
    error_message: str | None = None,
    attempts: int = 0,
    attempts_failed: int = 0,
) -> JobOutcome:
    """The final write, shared by attempts and the workflow's local activity; it rides
    out outages like any other write, and finishing twice changes nothing."""

    async def write(conn: AsyncConnection) -> store.Finished | None:
        return await job_rows.finish_job(
            conn,
            job,
            status=status,
            default_retention=deps.default_retention,
            counters=counters,
            output=output,
            error_code=error_code,
            error_message=error_message,
            attempts=attempts,
            attempts_failed=attempts_failed,
        )

    finished = await with_outage_retry(deps.engine, deps.settings, write)
    if finished is None:
        raise job_not_found()
    if finished.changed and finished.job.status == JobStatus.cancelled:
        kind = REGISTRY.find(finished.job.kind)
        if kind is not None and kind.discard is not None:
            await kind.discard(finished.job, deps.settings)
    return after_finish(deps, finished)


def after_finish(deps: Deps, finished: store.Finished) -> JobOutcome:
    """What follows the final write, wherever it was made: the metrics and the log line
    of the attempt that moved the row, and the outcome for the workflow."""
    final = finished.job
    if finished.changed:
        seconds = None
        if final.started_at is not None and final.finished_at is not None:
            seconds = (final.finished_at - final.started_at).total_seconds()
        deps.metrics.job_finished(final.kind, final.status, seconds)
        log.info("job finished: %s %s", final.status, final.error_code or "")
    return outcome_of(final)
