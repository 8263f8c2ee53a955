"""Two tagging batches in flight at once (HUBJOBS_TAGGING_LANES), each in its own
transaction on its own connection, and still every page tagged once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.helpers import (
    assert_every_page_tagged_once,
    item_counts,
    wait_until_final,
    with_kind,
)
from tests.support.servers import running_worker, seed

PAGES = 60
FILL_WITHIN = 30.0


@pytest.mark.parametrize("lanes", [1, 2])
async def test_lanes_overlap_batches_and_tag_every_page_once(
    temporal: Client, engine: AsyncEngine, settings: Settings, lanes: int
) -> None:
    """Each batch's write waits in the test's hook until every lane has had a batch there
    at once, then 0.2 s: with two lanes a second batch is seen there while the first
    waits, with one never. Either way every page gets the tag and one revision once, and
    the counters equal the items."""
    tuned = with_kind(settings, "course_tagging", tagging_batch_size=10, tagging_lanes=lanes)
    course = await seed(engine, PAGES)
    waiting = 0
    most = 0
    # Every lane has had a batch in the hook at once (with one lane, at the first batch).
    filled = asyncio.Event()
    unfilled: list[float] = []

    async def hold(conn: AsyncConnection, page_ids: Sequence[uuid.UUID], attempt: int) -> None:
        nonlocal waiting, most
        waiting += 1
        most = max(most, waiting)
        if most >= lanes:
            filled.set()
        try:
            # Until the lanes have filled (the second batch is here however slowly it
            # was read: not raced against a fixed time), then 0.2 s, in which a batch
            # overlapping with one lane would be seen.
            try:
                await asyncio.wait_for(filled.wait(), FILL_WITHIN)
            except TimeoutError:
                unfilled.append(FILL_WITHIN)
            await asyncio.sleep(0.2)
        finally:
            waiting -= 1

    jobs = HubJobsClient(temporal, engine, tuned).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, tuned, before_write=hold):
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "lanes"}
        )
        done = await wait_until_final(jobs, job.id, timeout=60)
    assert not unfilled, f"with {lanes} lanes, never {lanes} batches at once in {FILL_WITHIN} s"
    assert most == lanes
    assert (done.status, done.succeeded, done.processed) == ("succeeded", PAGES, PAGES)
    assert await item_counts(engine, job.id) == {"succeeded": PAGES}
    await assert_every_page_tagged_once(engine, done, course.page_ids, "lanes")
