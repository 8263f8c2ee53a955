"""A workspace's jobs as they change, one Server-Sent Events stream for a whole list, on
the real servers (uvicorn in process, the embedded PostgreSQL): a reset first, then each
change of the workspace's jobs and none of another's, a reset again after a lost
notification, refusals as the list's, and one read per batch of changes however many
streams follow. The tests write the rows as a worker would, one change at a time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.settings import Settings
from starter.api import create_app
from starter.client import HubJobsClient
from tests.integration.test_job_events import new_job, progress
from tests.support.helpers import until
from tests.support.servers import API_SECRET, bearer, seed
from tests.support.sse import Event, Stream, opened, serving


@pytest.fixture
def api_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"api_jwt_secret": SecretStr(API_SECRET), "api_events_heartbeat_seconds": 0.2}
    )


@pytest_asyncio.fixture
async def api(
    api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> AsyncIterator[tuple[httpx.AsyncClient, HubJobsClient]]:
    hub = HubJobsClient(temporal, engine, api_settings)
    async with (
        serving(create_app(api_settings, client=hub)) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        yield client, hub
    await hub.close()


def list_url(course: DemoCourse) -> str:
    return f"/workspaces/{course.workspace_id}/jobs/events"


async def next_event(stream: Stream) -> Event:
    event = await asyncio.wait_for(stream.next(), timeout=30)
    assert event is not None, "the stream ended"
    return event


async def job_event(stream: Stream, done: int) -> Event:
    """The next ``job`` event whose job has ``done`` processed (earlier states may come
    first: the stream sends the newest of each, a batch at a time)."""
    while True:
        event = await next_event(stream)
        if event.event == "job" and event.job["processed"] == done:
            return event


async def test_one_stream_sees_its_workspaces_changes_and_not_anothers(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, _ = api
    other = await seed(engine, 1)
    mine, theirs = await new_job(engine, course), await new_job(engine, other)
    async with opened(client, list_url(course), bearer(course.actor_id, api_settings)) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        assert (await next_event(stream)).event == "reset"
        await progress(engine, theirs, 1, "theirs")
        await progress(engine, mine, 1, "mine")
        seen = await job_event(stream, 1)
        assert seen.job["id"] == str(mine) and seen.job["progress_message"] == "mine"
        assert seen.job["status_url"] == f"/workspaces/{course.workspace_id}/jobs/{mine}"
        # A job started after the stream opened is seen too (a list shows it at the top).
        newer = await new_job(engine, course)
        await progress(engine, newer, 2, "newer")
        assert (await job_event(stream, 2)).job["id"] == str(newer)
        # Nothing of theirs came through, whatever their job did.
        await progress(engine, theirs, 2, "theirs again")
        await progress(engine, mine, 3, "mine again")
        assert (await job_event(stream, 3)).job["id"] == str(mine)


async def test_refusals_are_the_lists(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, _ = api
    other = await seed(engine, 1)
    auth = bearer(other.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    stream = await client.get(f"{base}/events", headers=auth)
    listed = await client.get(base, headers=auth)
    assert stream.status_code == listed.status_code == 404
    assert stream.json() == listed.json()
    assert (await client.get(f"{base}/events")).status_code == 401


async def test_a_lost_notification_is_a_reset(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, hub = api
    job_id = await new_job(engine, course)
    async with opened(client, list_url(course), bearer(course.actor_id, api_settings)) as stream:
        assert (await next_event(stream)).event == "reset"
        changes = hub.changes
        listener = await until("the listener", lambda: asyncio.sleep(0, changes.backend_pid))
        async with engine.begin() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": listener})
        # Whatever changed meanwhile is unknown: read the list again.
        assert (await next_event(stream)).event == "reset"
        await progress(engine, job_id, 1, "after")
        assert (await job_event(stream, 1)).job["id"] == str(job_id)


async def test_many_streams_cost_one_read_a_batch(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    """Twenty lists open on one workspace: each change is read once for all of them."""
    client, hub = api
    job_id = await new_job(engine, course)
    auth = bearer(course.actor_id, api_settings)
    async with contextlib.AsyncExitStack() as opened_streams:
        streams = [
            await opened_streams.enter_async_context(opened(client, list_url(course), auth))
            for _ in range(20)
        ]
        for stream in streams:
            assert (await next_event(stream)).event == "reset"
        before = hub.workspace_feeds.reads
        for done in (1, 2, 3):
            await progress(engine, job_id, done, f"{done}")
            for stream in streams:
                await job_event(stream, done)
        assert hub.workspace_feeds.reads - before <= 3


async def test_the_client_follows_the_workspace(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    job_id = await new_job(engine, course)
    changes = hub.scope(course.workspace_id, course.actor_id).changes()
    try:
        assert (await asyncio.wait_for(anext(changes), timeout=30)).reset
        await progress(engine, job_id, 1, "one")
        change = await asyncio.wait_for(anext(changes), timeout=30)
        assert [job.id for job in change.jobs] == [job_id]
        async with engine.begin() as conn:
            job = await job_rows.get_job(conn, job_id)
        assert change.jobs[0] == job
    finally:
        await changes.aclose()
        await hub.close()
