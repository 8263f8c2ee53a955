"""A 100,000-page course: the pages stay in Postgres, never in the workflow history,
which stays small; and with small chunks the workflow continues as new (the session's
dev server suggests it at 400 events) and still ends exact."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.helpers import all_runs_history, item_counts, with_kind, workflow_closed
from tests.support.histories import record
from tests.support.servers import SUGGEST_CONTINUE_AS_NEW, running_worker, seed

PAGES = 100_000


async def _runs(temporal: Client, workflow_id: str) -> list[int]:
    """Event counts of every run of the workflow, first to last."""
    return [len(events) for events in await all_runs_history(temporal, workflow_id)]


async def test_a_100000_page_course_keeps_its_history_small(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    big = with_kind(settings, "course_tagging", tagging_batch_size=1000).model_copy(
        update={"work_slice_seconds": 2}
    )
    course = await seed(engine, PAGES)
    jobs = HubJobsClient(temporal, engine, big).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, big):
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "big"}
        )
        done = await jobs.wait(job.id, timeout=240)
        # The row is final a step before the run closes: its history is read whole.
        await workflow_closed(temporal, done.workflow_id)
    assert done.status == "succeeded"
    assert (done.total, done.processed, done.succeeded) == (PAGES, PAGES, PAGES)
    assert await item_counts(engine, job.id) == {"succeeded": PAGES}
    sizes = await _runs(temporal, done.workflow_id)
    # A handful of attempts (each a time slice): some tens of events, where a page per
    # event would be 100,000s.
    assert len(sizes) == 1 and sizes[0] < 200, sizes
    async with engine.connect() as conn:
        revisions = (
            await conn.execute(
                text("SELECT count(*) FROM page_revisions WHERE change_summary = :s"),
                {"s": "Course tag big added"},
            )
        ).scalar_one()
    assert revisions == PAGES


async def test_small_chunks_continue_as_new_and_end_exact(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    pages = 20_000
    tiny = with_kind(settings, "course_tagging", tagging_batch_size=100).model_copy(
        update={"work_slice_seconds": 0}
    )
    course = await seed(engine, pages)
    jobs = HubJobsClient(temporal, engine, tiny).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, tiny):
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "can"}
        )
        done = await jobs.wait(job.id, timeout=240)
        # The row is final a step before the run closes: wait for it, worker still up.
        await workflow_closed(temporal, done.workflow_id)
        handle = temporal.get_workflow_handle(done.workflow_id)
        final = await handle.describe()
    # The last run: it started from a checkpoint, for the replay test.
    await record(handle, "course_tagging_continued_as_new")
    assert done.status == "succeeded" and done.processed == done.succeeded == pages
    assert await item_counts(engine, job.id) == {"succeeded": pages}
    sizes = await _runs(temporal, done.workflow_id)
    # 200 one-batch attempts would be ~1,200 events in one run; the runs continued as new.
    assert len(sizes) >= 2, sizes
    assert all(size < SUGGEST_CONTINUE_AS_NEW + 50 for size in sizes), sizes
    assert final.status is not None and final.status.name == "COMPLETED"
    continued = [
        event
        async for event in temporal.get_workflow_handle(
            done.workflow_id, run_id=None
        ).fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    ]
    assert continued[0].workflow_execution_started_event_attributes.continued_execution_run_id
