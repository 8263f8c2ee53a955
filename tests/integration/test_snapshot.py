"""The snapshot is the job's first durable step (issue 22): a start inserts the row and
nothing else, whatever the course's size; the job's first attempt takes the items in
the transaction after the one that opens it (the row says running meanwhile). "Had the
tag at snapshot" then means: at ``jobs.snapshot_at``, the first attempt's moment, not
the start call's. Edits between the start and the first attempt are seen; two attempts
taking the snapshot at once take it once; a course trashed in between refuses the job
as the start would have."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.status import JobStatus
from hubjobs.settings import Settings
from hubjobs.temporal.messages import PROGRESS_QUERY
from starter.client import HubJobsClient
from tests.support.helpers import edit, items_of, row_of, until
from tests.support.servers import bearer, running_worker

TAG = "Week-1"


async def _add_page(engine: AsyncEngine, course: DemoCourse, parent: uuid.UUID) -> uuid.UUID:
    page = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO pages (id, workspace_id, parent_id, title, markdown) "
                "VALUES (:id, :workspace, :parent, 'Added after the start', '')"
            ),
            {"id": page, "workspace": course.workspace_id, "parent": parent},
        )
    return page


async def test_a_start_takes_no_items_and_the_first_attempt_sees_edits_made_since(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    settings: Settings,
) -> None:
    # No worker polls yet: the job waits between its start and its first attempt, as a
    # busy queue would make it, while someone edits the course.
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    started = await row_of(engine, job.id)
    assert started is not None
    assert (started.status, started.total, started.snapshot_at) == ("queued", 0, None)
    assert started.summary == f"Tag course Onboarding with {TAG}"
    assert await items_of(engine, job.id) == {}

    # Two leaves (a trashed parent would take its subtree with it).
    tagged_since, trashed_since = course.page_ids[-2], course.page_ids[-1]
    await edit(engine, tagged_since, tags=[TAG.lower()])
    await edit(engine, trashed_since, trashed=True)
    added = await _add_page(engine, course, course.root_page_id)

    async with running_worker(temporal, settings):
        done = await jobs.wait(job.id, timeout=60)
    assert done.status == "succeeded"
    assert done.snapshot_at is not None and done.started_at is not None
    assert done.created_at < done.started_at <= done.snapshot_at
    items = await items_of(engine, job.id)
    # The course as the first attempt found it: 30 pages, one trashed, one added.
    assert done.total == len(items) == 30
    assert trashed_since not in items and added in items
    assert items[tagged_since].done_at_snapshot and items[tagged_since].state == "skipped"
    assert items[added].state == "succeeded"
    assert done.summary == f"Tag course Onboarding with {TAG}, 30 pages"


async def test_two_attempts_taking_the_snapshot_at_once_take_it_once(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse, temporal: Client
) -> None:
    """An attempt presumed dead may still be taking the snapshot when the next one
    starts: the job's snapshot lock puts the second after the first, which then finds
    the items taken (no duplicate ordinals, no items past the total)."""
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    await temporal.get_workflow_handle(job.workflow_id).terminate("the test takes the snapshot")
    row = await row_of(engine, job.id)
    assert row is not None
    first_holds_lock = asyncio.Event()
    second_done = asyncio.Event()

    async def second_waits_on_a_lock() -> bool:
        async with engine.connect() as conn:
            waiting = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
            )
            return bool(waiting.scalar_one())

    async def first() -> bool:
        async with engine.begin() as conn:
            took = await job_rows.take_snapshot(conn, row)
            first_holds_lock.set()
            # The second is seen waiting on the lock (whatever the machine's pace): it
            # cannot finish first.
            await until("the second taking waiting on the lock", second_waits_on_a_lock, 30)
            assert not second_done.is_set()
            return took

    async def second() -> bool:
        await first_holds_lock.wait()
        async with engine.begin() as conn:
            took = await job_rows.take_snapshot(conn, row)
        second_done.set()
        return took

    took = await asyncio.gather(first(), second())
    assert list(took) == [True, False]
    after = await row_of(engine, job.id)
    assert after is not None and after.total == 30 and after.snapshot_at is not None
    items = await items_of(engine, job.id)
    assert sorted(item.ordinal for item in items.values()) == list(range(1, 31))


async def test_a_course_trashed_before_the_first_attempt_fails_the_job(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    settings: Settings,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    await edit(engine, course.root_page_id, trashed=True)
    async with running_worker(temporal, settings):
        done = await jobs.wait(job.id, timeout=60)
    assert (done.status, done.error_code, done.total) == ("failed", "page_trashed", 0)
    assert await items_of(engine, job.id) == {}
    async with engine.connect() as conn:
        assert not await job_rows.snapshot_due(conn, job.id)  # final: never taken again


async def _waiting_on_an_advisory_lock(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        waiting = await conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
            )
        )
        return bool(waiting.scalar_one())


async def test_a_job_taking_its_snapshot_says_running_everywhere(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    settings: Settings,
    http: httpx.AsyncClient,
    api_settings: Settings,
) -> None:
    """A large course's snapshot takes seconds (here its attempt waits on the job's
    snapshot lock, which the test holds): meanwhile the row says running, as the
    workflow's progress query does, through the client, the API and a listing by
    status, and its ``started_at`` is when the attempt opened it, before the snapshot.
    Before: queued until the snapshot committed, then started_at backdated to then."""
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    holder = await engine.connect()
    try:
        await holder.begin()
        await job_rows.lock_snapshot(holder, job.id)
        async with running_worker(temporal, settings):

            async def opened_and_waiting() -> bool:
                row = await row_of(engine, job.id)
                running = row is not None and row.status == JobStatus.running
                return running and await _waiting_on_an_advisory_lock(engine)

            await until("the attempt taking the snapshot, its row running", opened_and_waiting)
            seen = await jobs.get(job.id)
            assert (seen.status, seen.snapshot_at, seen.total) == (JobStatus.running, None, 0)
            assert seen.started_at is not None
            listed = await jobs.list(status=JobStatus.running)
            assert [j.id for j in listed] == [job.id]
            answer = await http.get(
                f"/workspaces/{course.workspace_id}/jobs/{job.id}",
                headers=bearer(course.actor_id, api_settings),
            )
            assert answer.status_code == 202 and answer.json()["status"] == "running"
            progress: dict[str, Any] = await temporal.get_workflow_handle(job.workflow_id).query(
                PROGRESS_QUERY
            )
            assert progress["status"] == "running"

            await holder.rollback()
            done = await jobs.wait(job.id, timeout=60)
    finally:
        await holder.close()
    assert (done.status, done.total) == ("succeeded", 30)
    assert done.started_at == seen.started_at
    assert done.snapshot_at is not None and done.started_at < done.snapshot_at
