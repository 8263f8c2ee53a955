"""Course tagging end to end on the real servers: every outcome of the SPEC's table,
the snapshot, the result, the read model and Temporal agreeing."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowExecutionStatus

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse, create_workspace
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from starter.client import HubJobsClient
from tests.support.helpers import (
    activity_summaries,
    edit,
    item_counts,
    items_of,
    job_revisions,
    tags_of,
    until,
    workflow_closed,
)
from tests.support.histories import record
from tests.support.servers import running_worker, seed
from workflows.course_tagging import CourseTaggingWorkflow

TAG = "Sustainability"
# The SDK's built-in query of a run's details (the UI's "Current details").
METADATA_QUERY = "__temporal_workflow_metadata"


async def test_every_outcome_of_the_table(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    settings: Settings,
) -> None:
    p = course.page_ids
    # Before the snapshot: one page has the tag in another case, one is full, and a
    # trashed page takes its subtree out of the course (pages 21-29 hang under page 2).
    await edit(engine, p[3], tags=["sustainability"])
    await edit(engine, p[4], tags=[f"t{i}" for i in range(20)])
    await edit(engine, p[2], trashed=True)

    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start(
        "course_tagging", {"root_page_id": course.root_page_id, "tag": f"  {TAG} "}
    )
    # The row exists from the moment the start returns; its first attempt takes the
    # snapshot (tests/integration/test_snapshot.py). Taken here as that attempt would,
    # so that the course can change between the snapshot and the work.
    assert (job.status, job.total, job.snapshot_at) == ("queued", 0, None)
    async with engine.begin() as conn:
        assert await job_rows.take_snapshot(conn, job)
    job = await jobs.get(job.id)
    assert job.total == 30 - 1 - 9
    assert job.summary == f"Tag course Onboarding with {TAG}, 20 pages"
    snapshot = await items_of(engine, job.id)
    assert p[2] not in snapshot and p[25] not in snapshot
    assert snapshot[p[3]].done_at_snapshot and not snapshot[p[5]].done_at_snapshot

    # After the snapshot, before any worker runs: pages go away in every way, and
    # someone else adds the tag to one.
    other_workspace = await _new_workspace(engine)
    await edit(engine, p[5], trashed=True)
    await edit(engine, p[6], workspace_id=other_workspace)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE pages SET parent_id = NULL WHERE parent_id = :id"), {"id": p[7]}
        )
        await conn.execute(text("DELETE FROM pages WHERE id = :id"), {"id": p[7]})
    await edit(engine, p[8], tags=["SUSTAINABILITY"])

    async with running_worker(temporal, settings):
        done = await jobs.wait(job.id, timeout=60)
        # The row is final a step before the run closes (the attempt's completion has
        # yet to reach the workflow): queried and described once closed, worker still up.
        await workflow_closed(temporal, done.workflow_id)
        # The progress query answers with the read model's counters (a worker serves it).
        handle = temporal.get_workflow_handle(done.workflow_id)
        progress = await handle.query(CourseTaggingWorkflow.progress)
        assert progress.counters.processed == 20 and progress.status == "succeeded"
        # The run's details lead with what its failed items make of the success (the UI
        # shows the run Completed, "Failures 0": those count failed activities).
        metadata = await handle.query(METADATA_QUERY, result_type=WorkflowMetadata)
        assert metadata.current_details.startswith("**succeeded (3 failed)**, 20 / 20 done")

    assert done.status == "succeeded"
    items = await items_of(engine, job.id)
    outcome = {page: (row.state, row.error_code) for page, row in items.items()}
    assert outcome[p[3]] == ("skipped", None)
    assert outcome[p[4]] == ("skipped", "tag_limit")
    assert outcome[p[5]] == ("failed", "page_unavailable")
    assert outcome[p[6]] == ("failed", "page_unavailable")
    assert outcome[p[7]] == ("failed", "page_unavailable")
    assert outcome[p[8]] == ("succeeded", None)
    tagged_by_job = [page for page in items if page not in {p[3], p[4], p[5], p[6], p[7], p[8]}]
    assert len(tagged_by_job) == 14
    assert all(outcome[page] == ("succeeded", None) for page in tagged_by_job)

    # Exactly one revision per page the job changed; none where it changed nothing.
    revisions = await job_revisions(engine, TAG)
    assert revisions == {page: 1 for page in tagged_by_job}
    for page in tagged_by_job:
        assert (await tags_of(engine, page)) == [TAG]
    assert await tags_of(engine, p[8]) == ["SUSTAINABILITY"]

    assert done.result == {
        "rootPageId": str(course.root_page_id),
        "tag": TAG,
        "total": 20,
        "processed": 20,
        "succeeded": 15,
        "skipped": 2,
        "failed": 3,
    }
    assert done.result_content_type == "application/json"
    assert (done.total, done.processed, done.succeeded, done.skipped, done.failed) == (
        20,
        20,
        15,
        2,
        3,
    )
    assert await item_counts(engine, job.id) == {"succeeded": 15, "skipped": 2, "failed": 3}
    assert done.started_at is not None and done.finished_at is not None
    assert done.expires_at is not None and done.error_code is None

    # Temporal agrees: completed, with the job's status and failed items as search
    # attributes, which the UI filters on.
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    assert description.typed_search_attributes.get(sa.JOB_STATUS) == "succeeded"
    assert description.typed_search_attributes.get(sa.JOB_FAILED_ITEMS) == 3
    assert description.typed_search_attributes.get(sa.WORKSPACE_ID) == str(course.workspace_id)
    query = f'JobFailedItems > 0 AND WorkspaceId = "{course.workspace_id}"'

    async def found_by_failed_items() -> bool:
        return [wf.id async for wf in temporal.list_workflows(query)] == [done.workflow_id]

    await until("the run found by JobFailedItems", found_by_failed_items)
    await record(handle, "course_tagging_outcomes")


async def test_a_second_run_on_the_same_course_skips_every_page(
    hub: HubJobsClient, worker: None, course: DemoCourse
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    first = await jobs.wait(
        (
            await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": "exam"})
        ).id,
        timeout=60,
    )
    second = await jobs.wait(
        (
            await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": "EXAM"})
        ).id,
        timeout=60,
    )
    assert first.succeeded == 30
    assert (second.succeeded, second.skipped, second.failed) == (0, 30, 0)


async def test_a_healthy_jobs_slices_read_as_slices(
    hub: HubJobsClient, engine: AsyncEngine, temporal: Client, slow_settings: Settings
) -> None:
    """A job whose work takes several time slices, none failing: the UI shows each as a
    slice of the job, numbered, never as an attempt. Before: "Course tagging, attempt
    6" beside Temporal's own "Attempt 1 / 1", a healthy job read as one retried."""
    course = await seed(engine, 300)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, slow_settings):
        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
        done = await jobs.wait(job.id, timeout=120)
        await workflow_closed(temporal, done.workflow_id)
    assert done.status == "succeeded" and done.attempts_failed == 0
    summaries = await activity_summaries(temporal.get_workflow_handle(done.workflow_id))
    assert len(summaries) >= 2, summaries  # 30 batches of 10, paced, in 1 s slices
    assert summaries == [f"Course tagging, slice {n}" for n in range(1, len(summaries) + 1)]
    await record(temporal.get_workflow_handle(done.workflow_id), "course_tagging_slices")


async def _new_workspace(engine: AsyncEngine) -> uuid.UUID:
    async with engine.begin() as conn:
        return await create_workspace(conn, "Elsewhere")
