"""The context a kind's work runs in: its units of database work, heartbeats and cursor,
when to give its slot back, and its progress reports to the workflow."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

from activities.deps import Deps
from activities.endings import job_not_found
from activities.outages import ride_out_outages, with_outage_retry
from activities.pauses import pause
from hubjobs import job_rows
from hubjobs.kinds import JobKind
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings
from hubjobs.temporal.messages import (
    PROGRESS_QUERY,
    PROGRESS_SIGNAL,
    Beat,
    JobProgress,
    JobProgressReport,
    WorkRequest,
)

log = logging.getLogger(__name__)
# A progress report is a courtesy: never wait long on Temporal for one.
PROGRESS_RPC_TIMEOUT = timedelta(seconds=5)
T = TypeVar("T")
P = TypeVar("P")


class CancelTaken(Exception):
    """The workflow took a cancel while this attempt waited out an outage: the job goes
    back uncommitted, and the workflow ends it cancelled."""


def asked_to_hand_over() -> bool:
    """The workflow cancelled this attempt because its run is full of signals."""
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested


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
    finished: job_rows.Finished | None = None
    # A whole attempt's one transaction, committed only once the job is finished.
    conn: AsyncConnection | None = None
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
        """Heartbeats how far the attempt got (where the next one starts), and now and then
        the counters to the workflow."""
        if cursor is not None or progress is not None:
            self.beat_state = Beat(
                cursor=self.beat_state.cursor if cursor is None else cursor,
                progress=self.beat_state.progress if progress is None else progress,
            )
        if self.conn is None:  # a whole attempt is a local activity: nothing to tell
            activity.heartbeat(self.beat_state.model_dump(mode="json"))
            self._send_progress()

    def time_to_pause(self) -> bool:
        """Between two steps: give the slot back now?"""
        if activity.is_worker_shutdown() or asked_to_hand_over():
            return True
        return time.monotonic() - self.started >= self.settings.work_slice_seconds

    async def pause(self, seconds: float) -> None:
        """Waits ``seconds`` (a throttle, a breath between batches), beating through it."""
        await pause(seconds, self.beat)

    @staticmethod
    def shutting_down() -> bool:
        """For work that cannot pause mid-way: hand over only when the worker goes."""
        return activity.is_worker_shutdown()

    async def db(
        self, work: Callable[[AsyncConnection], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        """A unit of work, in autocommit or one transaction, run again whole after an
        outage, heartbeating; in a whole attempt, on its one transaction."""
        if self.conn is not None:
            return await work(self.conn)
        return await with_outage_retry(
            self.engine,
            self.settings,
            work,
            transaction=transaction,
            on_wait=self.beat,
            before_retry=self.unless_cancel_taken,
            budget=self.settings.db_batch_timeout_seconds,
        )

    async def finish_in(
        self, conn: AsyncConnection, counters: Counters, output: dict[str, Any] | None
    ) -> job_rows.Finished:
        """Finishes the job in the caller's unit of work (one commit fewer); the caller
        sets ``finished`` once its unit landed, and the attempt writes nothing more."""
        ending = job_rows.Ending(JobStatus.succeeded, counters=counters, output=output)
        finished = await job_rows.finish_job(
            conn, self.job, ending, default_retention=self.deps.default_retention
        )
        if finished is None:
            raise job_not_found()
        return finished

    async def retrying(self, work: Callable[[], Awaitable[T]]) -> T:
        """Like ``db``, for work holding its own connection."""
        return await ride_out_outages(
            self.settings, work, on_wait=self.beat, before_retry=self.unless_cancel_taken
        )

    async def unless_cancel_taken(self) -> None:
        """Before a retry: a cancel the workflow took during the outage could not reach
        the row, so the workflow is asked; unanswered, the unit runs again."""
        info = activity.info()
        if info.workflow_id is None:
            return
        # The job's current run: a run continued as new holds its predecessor's request.
        handle = activity.client().get_workflow_handle(info.workflow_id)
        try:
            progress = await handle.query(
                PROGRESS_QUERY, result_type=JobProgress, rpc_timeout=PROGRESS_RPC_TIMEOUT
            )
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
            log.debug("progress query not answered: %s", err)
            return
        if progress.cancel_requested:
            raise CancelTaken()

    async def report(self, message: str) -> None:
        """A progress message, for the next report."""
        self.message = message
        self._send_progress()

    async def reports_delivered(self) -> None:
        """Waits a while for the report in flight: landing after the result, it would fail
        the run's closing workflow task (UnhandledCommand)."""
        if self._sending is not None and not self._sending.done():
            await asyncio.wait({self._sending}, timeout=PROGRESS_RPC_TIMEOUT.total_seconds())

    def _send_progress(self) -> None:
        """Signals the counters at most every HUBJOBS_PROGRESS_REPORT_SECONDS, when they
        changed, in the background and one at a time (a short attempt sends none). A lost
        report is only logged: the next one says it all again."""
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
        # The loop keeps only weak references to tasks: this one may outlive its step.
        _SENDING.add(self._sending)
        self._sending.add_done_callback(_SENDING.discard)


_SENDING: set[asyncio.Task[None]] = set()


async def _signal_progress(handle: WorkflowHandle[Any, Any], report: JobProgressReport) -> None:
    try:
        await handle.signal(PROGRESS_SIGNAL, report, rpc_timeout=PROGRESS_RPC_TIMEOUT)
    except (RuntimeError, RPCError) as err:
        log.debug("progress report not delivered: %s", err)
