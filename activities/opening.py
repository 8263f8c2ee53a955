"""Opening a job for an attempt: its row moved to running and committed, then its items
snapshotted by the first attempt (seconds for a large course, the row saying running
meanwhile), or, for a job started straight through Temporal, its row created with the
checks a start through the client makes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from activities.deps import Deps
from activities.endings import Refused
from activities.outages import with_outage_retry
from activities.pauses import beating
from hubjobs.db.deadline import current as current_deadline
from hubjobs.db.engine import set_local_budget
from hubjobs.db.limits import Purpose, budget
from hubjobs.errors import HubJobsError
from hubjobs.kinds import JobKind, Prepared, job_rows
from hubjobs.readmodel import store
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal.messages import (
    WorkRequest,
)
from hubjobs.webhooks.policy import checked

log = logging.getLogger(__name__)


async def open_for_attempt(
    deps: Deps,
    kind: JobKind[Any],
    request: WorkRequest,
    workflow_id: str | None,
    run_id: str | None,
    *,
    on_wait: Callable[[], None],
) -> JobView:
    """Moves the job to running for this attempt, committed, then takes its items when
    no attempt has yet (hubjobs.kinds.job_rows.take_snapshot) in a transaction of
    their own: what a large course's snapshot takes, the job spends running, as its
    workflow says, and its ``started_at`` is when it started. A job started straight
    through Temporal has no row yet: it is created with the checks a start through
    the client makes, and a refused one gets a failed row and fails at once; a job
    whose snapshot is refused (its course trashed since the start) fails with the
    refusal's code."""
    job = request.job
    settings = deps.settings

    async def open_row(conn: AsyncConnection) -> JobView | None:
        return await open_running(conn, request, workflow_id, run_id)

    async def snapshot_row(conn: AsyncConnection, opened: JobView) -> JobView | HubJobsError:
        refused = await snapshot_if_due(conn, opened, settings)
        if refused is not None:
            return refused
        taken = await store.get_job(conn, opened.id)
        assert taken is not None, "an opened row stays while its workflow runs"
        return taken

    async def create_row(
        conn: AsyncConnection, notify_url: str | None, notify_refused: HubJobsError | None
    ) -> HubJobsError | None:
        row = job_rows.JobRow(
            job_id=job.job_id,
            kind=kind.name,
            workspace_id=job.workspace_id,
            actor_id=job.actor_id,
            correlation_id=job.correlation_id,
            payload=job.payload,
            workflow_id=workflow_id,
            notify_url=notify_url,
            idempotency_key=job.idempotency_key,
        )
        try:
            await job_rows.admit(
                conn,
                row,
                operators=settings.hub_operators,
                refused_kept_for=deps.default_retention,
                refusal=notify_refused,
            )
        except HubJobsError as err:
            return err
        return None

    async def open_once() -> JobView | None:
        opened = await with_outage_retry(
            deps.engine, settings, open_row, transaction=True, on_wait=on_wait
        )
        if opened is None or opened.is_final or opened.snapshot_at is not None:
            return opened
        taken = await with_outage_retry(
            deps.engine,
            settings,
            lambda conn: snapshot_row(conn, opened),
            transaction=True,
            on_wait=on_wait,
        )
        if isinstance(taken, HubJobsError):
            raise Refused(taken.message, code=taken.code)
        return taken

    async with beating(on_wait):
        opened = await open_once()
        if opened is not None:
            return opened
        # A direct start's notify_url gets the checks a start through the client
        # makes (off the event loop: it resolves the host) before its row is created.
        notify_url, notify_refused = await _notify_url_checked(settings, job.notify_url)
        refused = await with_outage_retry(
            deps.engine,
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


# Whether a job, read but not yet snapshotted, is small enough to be done whole in one
# transaction (a bounded count, no write).
Fits = Callable[[AsyncConnection, JobView], Awaitable[bool]]


class NotWhole(Exception):
    """A small job's attempt cannot do the job whole: its transaction rolls back, and
    the workflow's attempts take the job as it is."""


async def open_running(
    conn: AsyncConnection,
    request: WorkRequest,
    workflow_id: str | None,
    run_id: str | None,
    *,
    snapshot: Prepared | None = None,
) -> JobView | None:
    """An ordinary attempt's opening, in the caller's transaction: the row moved to
    running (a final one as it is, following this run), with ``snapshot`` the items
    this transaction took recorded in the same update. None when the workflow has no
    row (a direct start creates it)."""
    job = request.job
    opened = await store.open_job(
        conn,
        job.job_id,
        run_id=run_id,
        attempts=request.attempt,
        attempts_failed=request.attempts_failed,
        workflow_id=workflow_id,
        snapshot=None if snapshot is None else (snapshot.total, snapshot.summary),
    )
    if opened is not None and opened.is_final and run_id is not None:
        await store.follow_run(conn, job.job_id, run_id=run_id, workflow_id=workflow_id)
    return opened


async def open_whole(
    conn: AsyncConnection,
    settings: Settings,
    request: WorkRequest,
    workflow_id: str | None,
    run_id: str | None,
    *,
    fits: Fits,
) -> JobView | HubJobsError | None:
    """A small job's opening, done whole in the caller's one transaction: the row read,
    its items snapshotted, the row moved to running (a final one as it is, following
    this run). None when the workflow has no row; a refusal of the snapshot is
    returned. Only for a job nothing has touched yet (no snapshot, no cancellation
    request) that ``fits``, else NotWhole."""
    job = request.job
    # Read under the snapshot lock: an attempt (presumed dead) taking the items now has
    # taken them by then.
    row = await store.get_job_locked(conn, job.job_id)
    if row is None or (workflow_id is not None and row.workflow_id != workflow_id):
        return None
    if not row.is_final:
        if row.snapshot_at is not None or row.cancel_requested_at is not None:
            raise NotWhole("an earlier attempt or a cancellation came first")
        if not await fits(conn, row):
            raise NotWhole("larger than one unit of work")
    snapshot = None
    if not row.is_final:
        # Under the snapshot lock, its snapshot not taken (checked above): no budget,
        # no savepoint, since a refusal rolls the one transaction back whole.
        try:
            snapshot = await job_rows.insert_snapshot(conn, row)
        except HubJobsError as err:
            return err
    return await open_running(conn, request, workflow_id, run_id, snapshot=snapshot)


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
