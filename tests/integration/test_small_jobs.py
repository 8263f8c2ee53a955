"""A small job done whole (workflows/job_lifecycle.py ``_at_once``): a course that fits
in one tagging batch is opened, snapshotted, tagged and finished by its first attempt,
the work activity run as a local activity with ``whole``, in one transaction; anything
else goes the ordinary way, untouched by the try.

The worker's commits are counted on its engine (SQLAlchemy's events): each explicit
transaction that commits, and each statement run in autocommit (its own transaction
on the server), which is what PostgreSQL's ``xact_commit`` counts of that worker."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHistory

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.settings import Settings
from hubjobs.temporal.messages import CANCEL_SIGNAL
from starter.client import HubJobsClient
from tests.support.helpers import (
    assert_every_page_tagged_once,
    item_counts,
    job_revisions,
    local_attempt,
    row_of,
    tagging_activities,
    until,
    with_kind,
    workflow_closed,
)
from tests.support.histories import record
from tests.support.servers import running_worker, seed
from workflows.course_tagging import CourseTaggingWorkflow

TAG = "exam-2026"
WORK = "tag_course"


class Commits:
    """The transactions an engine's connections commit on the server."""

    def __init__(self) -> None:
        self.count = 0

    def watch(self, engine: AsyncEngine) -> None:
        event.listen(engine.sync_engine, "commit", self._commit)
        event.listen(engine.sync_engine, "before_cursor_execute", self._statement)

    @staticmethod
    def _autocommit(conn: Connection) -> bool:
        return conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"

    def _commit(self, conn: Connection) -> None:
        if not self._autocommit(conn):
            self.count += 1

    def _statement(self, conn: Connection, *_: Any) -> None:
        if self._autocommit(conn):
            self.count += 1


def scheduled(history: WorkflowHistory) -> list[str]:
    """The ordinary activities the run scheduled, by type."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def local_activities(history: WorkflowHistory) -> list[str]:
    """The local activities the run recorded (a marker each), by type."""
    found = []
    for e in history.events:
        if e.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        details = e.marker_recorded_event_attributes.details
        if "data" in details:
            data = details["data"].payloads[0].data
            found += [WORK] if f'"{WORK}"'.encode() in data else []
    return found


def workflow_tasks(history: WorkflowHistory) -> int:
    return sum(
        1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )


async def test_a_one_page_job_is_one_local_activity_and_one_commit(
    hub: HubJobsClient, engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    one_page = await seed(engine, 1)
    jobs = hub.scope(one_page.workspace_id, one_page.actor_id)
    commits = Commits()
    job = await jobs.start("course_tagging", {"root_page_id": one_page.root_page_id, "tag": TAG})
    async with running_worker(temporal, settings, on_engine=commits.watch):
        done = await jobs.wait(job.id, timeout=60)
        handle = temporal.get_workflow_handle(done.workflow_id)
        assert await handle.result() is not None
        progress = await handle.query(CourseTaggingWorkflow.progress)

    assert commits.count == 1
    assert done.status == "succeeded" and done.attempts == 1 and done.attempts_failed == 0
    await assert_every_page_tagged_once(engine, done, one_page.page_ids, TAG)
    assert done.result == {
        "rootPageId": str(one_page.root_page_id),
        "tag": TAG,
        "total": 1,
        "processed": 1,
        "succeeded": 1,
        "skipped": 0,
        "failed": 0,
    }
    assert done.snapshot_at is not None and done.started_at is not None
    assert done.finished_at is not None and done.expires_at is not None
    assert done.summary is not None and done.summary.endswith(f"with {TAG}, 1 pages")
    # The progress query and Temporal agree with the row.
    assert progress.status == "succeeded" and progress.counters == done.counters
    assert progress.attempts == 1
    history = await handle.fetch_history()
    assert scheduled(history) == [] and local_activities(history) == [WORK]
    assert workflow_tasks(history) == 1
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    await record(handle, "course_tagging_at_once")


async def test_a_course_larger_than_a_batch_goes_the_ordinary_way(
    hub: HubJobsClient, engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    course = await seed(engine, 30)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    smaller = with_kind(settings, "course_tagging", tagging_batch_size=29)
    commits = Commits()
    async with running_worker(temporal, smaller, on_engine=commits.watch):
        done = await jobs.wait(job.id, timeout=60)
        # The row is final a step before the run closes: its history is read whole.
        await workflow_closed(temporal, done.workflow_id)
    await assert_every_page_tagged_once(engine, done, course.page_ids, TAG)
    history = await temporal.get_workflow_handle(done.workflow_id).fetch_history()
    # Tried, found too big, and handed on having done nothing: the first ordinary
    # attempt is attempt 1, as before.
    assert local_activities(history) == [WORK]
    assert scheduled(history)[0] == WORK
    assert done.attempts == len(scheduled(history))
    await record(temporal.get_workflow_handle(done.workflow_id), "course_tagging_at_once_too_big")
    # The ordinary way's commits: the open with the snapshot, then each batch (the last
    # finishing the job), at the least.
    assert commits.count >= 3


async def test_a_cancel_recorded_before_the_work_commits_cancels_it(
    hub: HubJobsClient, engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    """The request is written while the local attempt runs, and commits before the
    attempt takes the job's row (which it holds to its commit): the attempt sees it,
    rolls everything back, and the job ends cancelled with no page touched."""
    one_page = await seed(engine, 1)
    jobs = hub.scope(one_page.workspace_id, one_page.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": one_page.root_page_id, "tag": TAG})
    async with engine.connect() as cancel:
        request = await cancel.begin()
        await job_rows.request_cancel(cancel, job.id, one_page.actor_id)
        async with running_worker(temporal, settings):
            # The attempt waits on the request's uncommitted write to the row.
            await until("the local attempt waiting on the row", lambda: _waiting(engine))
            await request.commit()
            handle = temporal.get_workflow_handle(job.workflow_id)
            await handle.signal(CANCEL_SIGNAL)
            try:
                await handle.result()
            except WorkflowFailureError:
                pass
            done = await row_of(engine, job.id)
    assert done is not None and done.status == "cancelled"
    assert (done.processed, done.succeeded) == (0, 0)
    assert await job_revisions(engine, TAG) == {}
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    history = await handle.fetch_history()
    assert local_activities(history) == [WORK]
    await record(handle, "course_tagging_at_once_cancelled")


async def test_a_cancel_arriving_while_the_work_commits_finds_the_job_final(
    hub: HubJobsClient, engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    """A cancel signalled while the local attempt holds the row (between its read and
    its write of the page): the request waits for the attempt's commit and then finds
    the job final, as after any last batch: succeeded, the cancel a no-op."""
    one_page = await seed(engine, 1)
    jobs = hub.scope(one_page.workspace_id, one_page.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": one_page.root_page_id, "tag": TAG})
    cancelling: list[asyncio.Task[Any]] = []

    async def cancel_now(conn: AsyncConnection, pages: Any, attempt: int) -> None:
        if cancelling:
            return
        cancelling.append(asyncio.create_task(jobs.cancel(job.id)))
        # The request is in flight, waiting on the row this transaction holds.
        await until("the cancellation waiting on the row", lambda: _waiting(engine))

    async with running_worker(temporal, settings, before_write=cancel_now):
        handle = temporal.get_workflow_handle(job.workflow_id)
        await handle.result()
        await cancelling[0]
    done = await row_of(engine, job.id)
    assert done is not None and done.status == "succeeded"
    assert done.cancel_requested_at is None  # it came after the final write: no-op
    await assert_every_page_tagged_once(engine, done, one_page.page_ids, TAG)
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_cancelled_in_temporal_while_it_runs_the_job_ends_as_temporal_says(
    hub: HubJobsClient, engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    """Cancelled from Temporal (the UI) while the local attempt waits on the row: the
    attempt is shielded, let finish, and the workflow takes its outcome, or ends the job
    cancelled, whichever way the race went; the read model and Temporal agree, and the
    page was tagged exactly when the job succeeded."""
    one_page = await seed(engine, 1)
    jobs = hub.scope(one_page.workspace_id, one_page.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": one_page.root_page_id, "tag": TAG})
    handle = temporal.get_workflow_handle(job.workflow_id)
    async with engine.connect() as holder:
        held = await holder.begin()
        await holder.execute(
            text("UPDATE jobs SET updated_at = now() WHERE id = :id"), {"id": job.id}
        )
        async with running_worker(temporal, settings):
            await until("the local attempt waiting on the row", lambda: _waiting(engine))
            await handle.cancel()
            await held.commit()
            try:
                await handle.result()
            except WorkflowFailureError:
                pass
            done = await row_of(engine, job.id)
    assert done is not None and done.is_final
    status = (await handle.describe()).status
    tagged = await job_revisions(engine, TAG)
    if done.status == "succeeded":
        assert status == WorkflowExecutionStatus.COMPLETED
        await assert_every_page_tagged_once(engine, done, one_page.page_ids, TAG)
    else:
        assert done.status == "cancelled" and status == WorkflowExecutionStatus.CANCELED
        assert tagged == {} and done.processed == 0


async def test_the_local_attempt_run_twice_or_cut_keeps_the_read_model_exact(
    engine: AsyncEngine, course: DemoCourse, hub: HubJobsClient, settings: Settings
) -> None:
    """Its worker killed after the commit, the workflow's next worker runs it again: it
    finds the row final and returns it. Cut before the commit (here, by a failure in
    the middle of its write), it leaves nothing: no snapshot, no item, no page tagged,
    the row still queued."""
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    request, environment = local_attempt(job)

    async def cut(conn: AsyncConnection, pages: Any, attempt: int) -> None:
        raise RuntimeError("cut mid-write")

    cut_short = tagging_activities(engine, settings, {"before_write": cut})
    left = await environment.run(cut_short.tag_course, request)
    assert left.outcome is None
    row = await row_of(engine, job.id)
    assert row is not None and (row.status, row.snapshot_at, row.total) == ("queued", None, 0)
    assert await item_counts(engine, job.id) == {}
    assert await job_revisions(engine, TAG) == {}

    tagger = tagging_activities(engine, settings, {})
    first = await environment.run(tagger.tag_course, request)
    again = await environment.run(tagger.tag_course, request)
    assert first.outcome is not None and first.outcome.status == "succeeded"
    assert again.outcome == first.outcome
    done = await row_of(engine, job.id)
    assert done is not None
    await assert_every_page_tagged_once(engine, done, course.page_ids, TAG)


async def test_a_local_attempt_behind_an_ordinary_snapshot_gives_the_job_back(
    engine: AsyncEngine, course: DemoCourse, hub: HubJobsClient, settings: Settings
) -> None:
    """An ordinary attempt (one presumed dead) may be taking the snapshot when the local
    attempt runs: the local attempt waits on the job's snapshot lock, then finds the
    snapshot taken and leaves the job as the other left it (items all pending, the
    row not opened, nothing tagged), for the attempts to do."""
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    request, environment = local_attempt(job)
    row = await row_of(engine, job.id)
    assert row is not None
    holding = asyncio.Event()

    async def ordinary() -> bool:
        async with engine.begin() as conn:
            took = await job_rows.take_snapshot(conn, row)
            holding.set()
            await until("the local attempt waiting on the lock", lambda: _waiting(engine), 30)
            return took

    async def local() -> Any:
        await holding.wait()
        return await environment.run(tagging_activities(engine, settings, {}).tag_course, request)

    took, left = await asyncio.gather(ordinary(), local())
    assert took and left.outcome is None
    after = await row_of(engine, job.id)
    assert after is not None and (after.status, after.total) == ("queued", len(course.page_ids))
    assert after.snapshot_at is not None and after.processed == 0
    assert await item_counts(engine, job.id) == {"pending": len(course.page_ids)}
    assert await job_revisions(engine, TAG) == {}


async def _waiting(engine: AsyncEngine) -> bool | None:
    """Some backend of this database waits on a lock (the job's row)."""
    async with engine.connect() as conn:
        waiting = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
        )
    return True if waiting else None
