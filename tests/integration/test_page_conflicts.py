"""The write side of course tagging on the real database: a page edited between the
batch's read and its write, once or for good, a page whose update is refused for its
own sake, next to pages that go through, and one whose update meets an error that is
not its own (never recorded against it); two attempts racing over the same batch."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hubjobs.devstack.demo_data import DemoCourse
from tests.support.helpers import (
    create_tagging_job,
    edit,
    items_of,
    job_revisions,
    tag_one_batch,
    tag_whole_job,
    tagger_for,
    tags_of,
)

TAG = "reviewed"


async def _job(engine: AsyncEngine, course: DemoCourse) -> uuid.UUID:
    return await create_tagging_job(engine, course, TAG)


async def test_a_page_edited_once_between_read_and_write_is_reread_and_tagged(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    target = course.page_ids[5]

    async def someone_edits(_: AsyncConnection, pages: Sequence[uuid.UUID], attempt: int) -> None:
        if attempt == 1 and target in pages:
            await edit(engine, target, title="Renamed while the job ran")

    job_id = await _job(engine, course)
    await tag_whole_job(engine, job_id, someone_edits)
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
    await tag_whole_job(engine, job_id, someone_keeps_editing)
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
    await tag_whole_job(engine, job_id, someone_trashes)
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
    await tag_whole_job(engine, job_id)
    items = await items_of(engine, job_id)
    assert (items[broken].state, items[broken].error_code) == ("failed", "page_update_failed")
    others = [page for page in course.page_ids if page != broken]
    assert all(items[page].state == "succeeded" for page in others)
    assert set(await job_revisions(engine, TAG)) == set(others)


async def refuse_updates_of(engine: AsyncEngine, page: uuid.UUID, sqlstate: str) -> None:
    """A trigger that fails every update of ``page`` with ``sqlstate``."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_one BEFORE UPDATE ON pages FOR EACH ROW "
                f"WHEN (OLD.id = '{page}') EXECUTE FUNCTION refuse()"
            )
        )


@pytest.mark.parametrize("sqlstate", ["XX000", "40P01"])
async def test_an_error_not_of_the_pages_own_is_never_recorded_against_it(
    engine: AsyncEngine, course: DemoCourse, sqlstate: str
) -> None:
    """The server's error (an internal error, a deadlock) on one page's update, page by
    page as in the batch: it goes up to the attempt, and no item is recorded failed
    for it. Before, the batch fell back page by page and the page was recorded
    ``page_update_failed`` for good."""
    broken = course.page_ids[9]
    await refuse_updates_of(engine, broken, sqlstate)
    job_id = await _job(engine, course)
    with pytest.raises(DBAPIError) as raised:
        await tag_whole_job(engine, job_id)
    assert getattr(raised.value.orig, "sqlstate", None) == sqlstate
    items = await items_of(engine, job_id)
    assert [page for page, item in items.items() if item.state == "failed"] == []
    assert items[broken].state == "pending"


async def test_two_attempts_racing_over_one_batch_record_it_once(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    """An attempt presumed dead that still runs, and the attempt that replaced it, read
    the same pending pages; both write. The ETag guard lets one tag each page, the
    other finds it tagged on its re-read, and only items still pending are recorded:
    each page gets the tag and a revision once, and the counters move once."""
    job_id = await _job(engine, course)
    both_read = asyncio.Barrier(2)

    async def wait_for_the_other(_: AsyncConnection, __: Sequence[uuid.UUID], attempt: int) -> None:
        if attempt == 1:
            await both_read.wait()

    first = await tagger_for(engine, job_id, wait_for_the_other, batch=10)
    second = await tagger_for(engine, job_id, wait_for_the_other, batch=10)
    results = await asyncio.gather(tag_one_batch(*first, 0), tag_one_batch(*second, 0))
    assert all(r is not None and r[0] == 10 for r in results)
    recorded = sorted(r[1].recorded for r in results if r is not None)
    assert recorded == [0, 10]
    async with engine.connect() as conn:
        processed = (
            await conn.execute(text("SELECT processed FROM jobs WHERE id = :id"), {"id": job_id})
        ).scalar_one()
    assert processed == 10
    revisions = await job_revisions(engine, TAG)
    assert len(revisions) == 10 and set(revisions.values()) == {1}
