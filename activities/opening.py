"""Opening a job for an attempt: its row moved to running and committed, then its items
snapshotted by the first attempt; a direct start's row is created first."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from activities.deps import Deps
from activities.endings import Refused
from activities.outages import with_outage_retry
from activities.pauses import beating
from hubjobs import job_rows
from hubjobs.db.deadline import current as current_deadline
from hubjobs.db.engine import set_local_budget
from hubjobs.db.limits import Purpose, budget
from hubjobs.errors import HubJobsError
from hubjobs.kinds import JobKind
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal.messages import (
    WorkRequest,
)
from hubjobs.webhooks.policy import checked

log = logging.getLogger(__name__)
T = TypeVar("T")


# Whether a job not yet snapshotted fits one transaction (a bounded count, no write).
Fits = Callable[[AsyncConnection, JobView], Awaitable[bool]]


class NotWhole(Exception):
    """The job cannot be done whole: rolled back, the ordinary attempts take it."""


@dataclass(frozen=True)
class Whole:
    """An attempt done whole: its one transaction, and the kind's test of fit."""

    conn: AsyncConnection
    fits: Fits


async def open_for_attempt(
    deps: Deps,
    kind: JobKind[Any],
    request: WorkRequest,
    workflow_id: str | None,
    run_id: str | None,
    *,
    on_wait: Callable[[], None],
    whole: Whole | None = None,
) -> JobView:
    """Moves the job to running, committed, then takes its items apart, so a long snapshot
    is spent running; a direct start's row is created first. ``whole``: all in its one
    transaction, for an untouched job that fits (else NotWhole)."""
    opening = _Opening(deps, kind, request, workflow_id, run_id, on_wait, whole)
    if whole is not None:
        opened = await opening.once()
        if opened is None:
            raise NotWhole("no row yet: a direct start's ordinary attempt creates it")
        return opened
    async with beating(on_wait):
        opened = await opening.once()
        if opened is None:
            await opening.create_row()
            opened = await opening.once()
    assert opened is not None
    return opened


@dataclass(frozen=True)
class _Opening:
    deps: Deps
    kind: JobKind[Any]
    request: WorkRequest
    workflow_id: str | None
    run_id: str | None
    on_wait: Callable[[], None]
    whole: Whole | None

    async def unit(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """``work`` as one unit: riding out outages, or in the whole attempt's transaction."""
        if self.whole is not None:
            return await work(self.whole.conn)
        return await with_outage_retry(
            self.deps.engine, self.deps.settings, work, transaction=True, on_wait=self.on_wait
        )

    async def once(self) -> JobView | None:
        """The row opened and its items taken; None when it has no row yet."""
        if self.whole is not None:
            # The snapshot lock before the row's, as an attempt takes them: no deadlock.
            await job_rows.lock_snapshot(self.whole.conn, self.request.job.job_id)
        opened = await self.unit(
            lambda conn: open_running(conn, self.request, self.workflow_id, self.run_id)
        )
        if opened is None or opened.is_final:
            return opened
        if self.whole is not None:
            if opened.snapshot_at is not None or opened.cancel_requested_at is not None:
                raise NotWhole("an earlier attempt or a cancellation came first")
            if not await self.whole.fits(self.whole.conn, opened):
                raise NotWhole("larger than one unit of work")
        elif opened.snapshot_at is not None:
            return opened
        taken = await self.unit(lambda conn: self._snapshot(conn, opened))
        if isinstance(taken, HubJobsError):
            raise Refused(taken.message, code=taken.code)
        return taken

    async def _snapshot(self, conn: AsyncConnection, opened: JobView) -> JobView | HubJobsError:
        settings = self.deps.settings
        refused = await snapshot_if_due(conn, opened, settings, bulk=self.whole is None)
        if refused is not None:
            return refused
        taken = await job_rows.get_job(conn, opened.id)
        assert taken is not None, "an opened row stays while its workflow runs"
        return taken

    async def create_row(self) -> None:
        """A direct start's row with a client start's checks; refused, created failed."""
        job = self.request.job
        settings = self.deps.settings
        notify_url, notify_refused = await _notify_url_checked(settings, job.notify_url)
        row = job_rows.JobRow(
            job_id=job.job_id,
            kind=self.kind.name,
            workspace_id=job.workspace_id,
            actor_id=job.actor_id,
            correlation_id=job.correlation_id,
            payload=job.payload,
            workflow_id=self.workflow_id,
            notify_url=notify_url,
            idempotency_key=job.idempotency_key,
        )

        async def admit(conn: AsyncConnection) -> HubJobsError | None:
            kept_for = self.deps.default_retention
            if notify_refused is not None:
                await job_rows.keep_refused(conn, row, notify_refused, kept_for)
                return notify_refused
            try:
                await job_rows.admit_unwatched(
                    conn, row, operators=settings.hub_operators, kept_for=kept_for
                )
            except HubJobsError as err:
                return err
            return None

        refused = await self.unit(admit)
        if refused is not None:
            raise Refused(refused.message, code=refused.code)


async def open_running(
    conn: AsyncConnection,
    request: WorkRequest,
    workflow_id: str | None,
    run_id: str | None,
) -> JobView | None:
    """The row moved to running (a final one as it is, following this run); None when
    the workflow has no row yet."""
    job = request.job
    opened = await job_rows.open_job(
        conn,
        job.job_id,
        run_id=run_id,
        attempts=request.attempt,
        attempts_failed=request.attempts_failed,
        workflow_id=workflow_id,
    )
    if opened is not None and opened.is_final and run_id is not None:
        await job_rows.follow_run(conn, job.job_id, run_id=run_id, workflow_id=workflow_id)
    return opened


async def snapshot_if_due(
    conn: AsyncConnection, job: JobView, settings: Settings, *, bulk: bool = True
) -> HubJobsError | None:
    """The job's snapshot unless final or taken, under the bulk budget (``bulk``; a whole
    job's batch deadline bounds it otherwise), in a savepoint: a refusal is returned."""
    if job.is_final or job.snapshot_at is not None:
        return None
    if bulk:
        bound = current_deadline()
        if bound is not None:
            bound.extend(settings.db_bulk_timeout_seconds)
        limits = budget(settings, Purpose.BULK)
        await set_local_budget(conn, limits.seconds, limits.lock_seconds)
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
