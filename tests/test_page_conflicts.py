"""The write side of course tagging on the real database: a page edited between the
batch's read and its write, once or for good, and a page whose update fails, next to
pages that go through."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from activities.course_tagging import CourseTagger
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.kinds import get_kind
from hubjobs.readmodel.lifecycle import create_job
from tests.helpers import edit, items_of, job_revisions, tags_of

TAG = "reviewed"


async def _job(engine: AsyncEngine, course: DemoCourse) -> uuid.UUID:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await create_job(
            conn,
            get_kind("course_tagging"),
            job_id=job_id,
            workspace_id=course.workspace_id,
            actor_id=course.actor_id,
            correlation_id="c-1",
            payload={"root_page_id": str(course.root_page_id), "tag": TAG},
        )
    return job_id


async def _run_all(tagger: CourseTagger, job_id: uuid.UUID) -> None:
    job = await tagger.load_job(job_id)
    after = 0
    while True:
        batch = await tagger.process_batch(job, after, 50)
        if batch.empty:
            return
        after = batch.last_ordinal


async def test_a_page_edited_once_between_read_and_write_is_reread_and_tagged(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    target = course.page_ids[5]

    async def someone_edits(_: AsyncConnection, pages: Sequence[uuid.UUID], attempt: int) -> None:
        if attempt == 1 and target in pages:
            await edit(engine, target, title="Renamed while the job ran")

    job_id = await _job(engine, course)
    await _run_all(CourseTagger(engine, before_write=someone_edits), job_id)
    items = await items_of(engine, job_id)
    assert (items[target].state, items[target].error_code) == ("succeeded", None)
    assert await tags_of(engine, target) == [TAG]
    assert (await job_revisions(engine, TAG))[target] == 1


async def test_a_page_that_stays_in_conflict_fails_and_changes_nothing(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    target = course.page_ids[7]

    async def someone_keeps_editing(
        _: AsyncConnection, pages: Sequence[uuid.UUID], attempt: int
    ) -> None:
        if target in pages:
            await edit(engine, target, markdown=f"edit {attempt}")

    job_id = await _job(engine, course)
    await _run_all(CourseTagger(engine, before_write=someone_keeps_editing), job_id)
    items = await items_of(engine, job_id)
    assert (items[target].state, items[target].error_code) == ("failed", "concurrency_conflict")
    assert await tags_of(engine, target) == []
    revisions = await job_revisions(engine, TAG)
    assert target not in revisions
    # The conflict cost no other page its tag.
    assert len(revisions) == len(course.page_ids) - 1


async def test_a_page_trashed_between_read_and_write_is_unavailable(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    target = course.page_ids[3]

    async def someone_trashes(_: AsyncConnection, pages: Sequence[uuid.UUID], attempt: int) -> None:
        if attempt == 1 and target in pages:
            await edit(engine, target, trashed=True)

    job_id = await _job(engine, course)
    await _run_all(CourseTagger(engine, before_write=someone_trashes), job_id)
    items = await items_of(engine, job_id)
    assert (items[target].state, items[target].error_code) == ("failed", "page_unavailable")


async def test_one_page_failing_to_update_never_undoes_the_others(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    broken = course.page_ids[9]
    async with engine.begin() as conn:
        # A real database failure for one page: a trigger that refuses its update.
        await conn.execute(
            text(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'storage refused the page'; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_one BEFORE UPDATE ON pages FOR EACH ROW "
                f"WHEN (OLD.id = '{broken}') EXECUTE FUNCTION refuse()"
            )
        )
    job_id = await _job(engine, course)
    await _run_all(CourseTagger(engine), job_id)
    items = await items_of(engine, job_id)
    assert (items[broken].state, items[broken].error_code) == ("failed", "page_update_failed")
    others = [page for page in course.page_ids if page != broken]
    assert all(items[page].state == "succeeded" for page in others)
    assert set(await job_revisions(engine, TAG)) == set(others)


async def test_a_batch_recorded_by_another_attempt_is_not_recorded_again(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    """Two attempts of one chunk (a worker presumed dead that still runs, and its retry)
    cannot count the same items twice: the second finds them no longer pending."""
    job_id = await _job(engine, course)
    first, second = CourseTagger(engine), CourseTagger(engine)
    job = await first.load_job(job_id)
    done = await first.process_batch(job, 0, 10)
    again = await second.process_batch(job, 0, 10)  # same cursor, as a stale retry would
    assert done.items == 10
    assert again.items == 10 and again.counters.processed == 20
    async with engine.connect() as conn:
        processed = (
            await conn.execute(text("SELECT processed FROM jobs WHERE id = :id"), {"id": job_id})
        ).scalar_one()
    assert processed == 20
    assert sum((await job_revisions(engine, TAG)).values()) == 20
