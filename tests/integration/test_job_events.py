"""A job's progress as Server-Sent Events on the real servers (uvicorn in process, the
embedded PostgreSQL): every change then the final event, a reconnect that misses
nothing, another workspace's job, a lost notification caught up, and the client's
``watch`` on the same notifications. The tests write the row as a worker would (the
store's own statements), one change at a time, each seen before the next: no timing."""

from __future__ import annotations

import asyncio
import uuid
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
from hubjobs.errors import Unavailable
from hubjobs.readmodel.changes import JobChanges
from hubjobs.readmodel.feeds import JobFeeds
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings
from starter.api import create_app
from starter.api.events import event_id
from starter.client import HubJobsClient
from tests.support.helpers import until, with_kind
from tests.support.servers import API_SECRET, bearer, running_worker, seed
from tests.support.sse import Event, Stream, opened, serving


@pytest.fixture
def api_settings(settings: Settings) -> Settings:
    # A heartbeat often enough that a test sees one while nothing changes.
    return settings.model_copy(
        update={"api_jwt_secret": SecretStr(API_SECRET), "api_events_heartbeat_seconds": 0.2}
    )


@pytest_asyncio.fixture
async def api(
    api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> AsyncIterator[tuple[httpx.AsyncClient, HubJobsClient]]:
    """The API served for real, its client (whose feeds the streams follow)."""
    hub = HubJobsClient(temporal, engine, api_settings)
    async with (
        serving(create_app(api_settings, client=hub)) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        yield client, hub
    await hub.close()


async def new_job(engine: AsyncEngine, course: DemoCourse) -> uuid.UUID:
    """A queued job row, no workflow: the test moves it as a worker would."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await job_rows.insert_job(
            conn,
            job_id=job_id,
            kind="course_tagging",
            workspace_id=course.workspace_id,
            actor_id=course.actor_id,
            correlation_id="events",
            idempotency_key=None,
            payload={"root_page_id": str(course.root_page_id), "tag": "sse"},
        )
    return job_id


async def progress(engine: AsyncEngine, job_id: uuid.UUID, done: int, message: str) -> None:
    async with engine.begin() as conn:
        counters = Counters(total=3, processed=done, succeeded=done)
        await job_rows.set_progress(conn, job_id, counters, message)


async def finish(engine: AsyncEngine, job_id: uuid.UUID) -> None:
    """Opened and finished at once, as a small job's one transaction does."""
    async with engine.begin() as conn:
        await job_rows.open_job(conn, job_id, run_id=None, attempts=1, attempts_failed=0)
        await job_rows.finish(
            conn,
            job_id,
            job_rows.Ending(JobStatus.succeeded),
            retention=job_rows.FAILED_WINDOW,
            result={},
        )


async def next_event(stream: Stream) -> Event:
    event = await asyncio.wait_for(stream.next(), timeout=30)
    assert event is not None, "the stream ended"
    return event


def events_url(course: DemoCourse, job_id: uuid.UUID) -> str:
    return f"/workspaces/{course.workspace_id}/jobs/{job_id}/events"


async def test_a_stream_sees_every_change_then_its_final_event_and_ends(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, _ = api
    job_id = await new_job(engine, course)
    auth = bearer(course.actor_id, api_settings)
    async with opened(client, events_url(course, job_id), auth) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        first = await next_event(stream)
        assert (first.event, first.job["status"]) == ("progress", "queued")
        async with engine.begin() as conn:
            await job_rows.open_job(conn, job_id, run_id="r", attempts=1, attempts_failed=0)
        assert (await next_event(stream)).job["status"] == "running"
        for done, message in ((1, "one"), (2, "two"), (3, "three")):
            await progress(engine, job_id, done, message)
            seen = (await next_event(stream)).job
            assert (seen["processed"], seen["progress_message"]) == (done, message)
        await finish(engine, job_id)
        final = await next_event(stream)
        assert (final.event, final.job["status"], final.job["processed"]) == (
            "final",
            "succeeded",
            3,
        )
        assert await asyncio.wait_for(stream.next(), timeout=30) is None


async def test_a_heartbeat_keeps_a_quiet_stream_alive(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, _ = api
    job_id = await new_job(engine, course)
    async with opened(
        client, events_url(course, job_id), bearer(course.actor_id, api_settings)
    ) as stream:
        await next_event(stream)
        # Nothing changes: only comments come, one per heartbeat.
        for _ in range(2):
            await asyncio.wait_for(stream.comment(), timeout=30)


async def test_a_reconnect_with_last_event_id_misses_nothing(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, _ = api
    job_id = await new_job(engine, course)
    auth = bearer(course.actor_id, api_settings)
    url = events_url(course, job_id)
    async with opened(client, url, auth) as stream:
        await progress(engine, job_id, 1, "one")
        seen = await next_event(stream)
        while seen.job["processed"] != 1:
            seen = await next_event(stream)
    # Changed while no stream was open: the reconnect's first event is the new state.
    await progress(engine, job_id, 2, "two")
    async with opened(client, url, {**auth, "Last-Event-ID": seen.id or ""}) as stream:
        resumed = await next_event(stream)
        assert resumed.job["processed"] == 2 and resumed.id != seen.id
    # Unchanged since: nothing is sent again, the next change is.
    async with opened(client, url, {**auth, "Last-Event-ID": resumed.id or ""}) as stream:
        await progress(engine, job_id, 3, "three")
        assert (await next_event(stream)).job["processed"] == 3
        await finish(engine, job_id)
        final = await next_event(stream)
        assert final.event == "final"
    # After the final event: 204, an EventSource's signal to stop reconnecting.
    again = await client.get(url, headers={**auth, "Last-Event-ID": final.id or ""})
    assert again.status_code == 204
    # A reconnect from an older event gets the final one.
    async with opened(client, url, {**auth, "Last-Event-ID": seen.id or ""}) as stream:
        assert (await next_event(stream)).id == final.id
        assert await asyncio.wait_for(stream.next(), timeout=30) is None


async def test_another_workspaces_job_is_404_as_for_a_get(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, _ = api
    job_id = await new_job(engine, course)
    other = await seed(engine, 1)
    auth = bearer(other.actor_id, api_settings)
    # Their own workspace, our job's id: the answer a GET of it gets.
    url = f"/workspaces/{other.workspace_id}/jobs/{job_id}"
    stream = await client.get(f"{url}/events", headers=auth)
    get = await client.get(url, headers=auth)
    assert stream.status_code == get.status_code == 404
    assert stream.json() == get.json()
    # Our workspace, as them: not a member, as for a GET.
    url = f"/workspaces/{course.workspace_id}/jobs/{job_id}"
    stream = await client.get(f"{url}/events", headers=auth)
    get = await client.get(url, headers=auth)
    assert (stream.status_code, stream.json()) == (get.status_code, get.json())
    assert stream.status_code == 404
    unauthenticated = await client.get(f"{url}/events")
    assert unauthenticated.status_code == 401


async def test_a_missed_notification_is_caught_up_when_the_listener_reconnects(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    client, hub = api
    job_id = await new_job(engine, course)
    async with opened(
        client, events_url(course, job_id), bearer(course.actor_id, api_settings)
    ) as stream:
        await next_event(stream)
        changes = hub.feeds.changes
        listener = await until("the listener", lambda: asyncio.sleep(0, changes.backend_pid))
        connections = changes.connections
        # Listening: a notified change comes through first.
        await progress(engine, job_id, 1, "one")
        while (await next_event(stream)).job["processed"] != 1:
            pass
        async with engine.begin() as conn:
            # A change whose notification is lost: written without one.
            await conn.execute(
                text("UPDATE jobs SET processed = 2, updated_at = now() WHERE id = :id"),
                {"id": job_id},
            )
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": listener})
        caught_up = await next_event(stream)
        assert caught_up.job["processed"] == 2
        await until("the reconnection", lambda: asyncio.sleep(0, changes.connections > connections))
        # And the new connection listens: the next change comes as usual.
        await finish(engine, job_id)
        assert (await next_event(stream)).event == "final"


async def test_watch_follows_the_notifications(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    job_id = await new_job(engine, course)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    watching = jobs.watch(job_id, interval=0)
    assert (await anext(watching)).status == JobStatus.queued
    for done in (1, 2):
        await progress(engine, job_id, done, f"{done}")
        assert (await asyncio.wait_for(anext(watching), timeout=30)).processed == done
    await finish(engine, job_id)
    final = await asyncio.wait_for(anext(watching), timeout=30)
    assert final.status == JobStatus.succeeded
    with pytest.raises(StopAsyncIteration):
        await anext(watching)
    # Two jobs' worth of reads: one per change, not one per interval.
    assert hub.feeds.reads <= 5
    assert event_id(final) == event_id(await jobs.get(job_id))
    await hub.close()


async def test_wait_times_out_on_a_job_that_does_not_move(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    job_id = await new_job(engine, course)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    with pytest.raises(Exception) as raised:
        await jobs.wait(job_id, timeout=0.5)
    assert getattr(raised.value, "code", None) == "wait_timeout"
    await hub.close()


async def test_a_failed_read_ends_the_feed_with_its_error_and_the_next_follower_reads_again(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    job_id = await new_job(engine, course)
    failures = [Unavailable("the job database does not answer")]

    async def read(wanted: uuid.UUID) -> JobView | None:
        if failures:
            raise failures.pop()
        return await hub.scope(course.workspace_id, course.actor_id).get(wanted)

    feeds = JobFeeds(JobChanges(hub.reads.url), read)
    try:
        with pytest.raises(Unavailable):
            await anext(feeds.follow(job_id))
        again = feeds.follow(job_id)
        assert (await asyncio.wait_for(anext(again), timeout=30)).id == job_id
        await again.aclose()
    finally:
        await feeds.close()
        await hub.close()


async def test_the_listener_ends_with_its_last_waiter_and_starts_with_the_next(
    settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    """A client never closed keeps no listening connection once nobody waits (nor
    retries one, every half second, to a database that has gone): the listener closes
    at its next check after the last waiter leaves, and the next subscriber opens a new
    one, which wakes on the next change as the first did."""
    changes = JobChanges(settings.resolved_database_url(), check_seconds=0.2)
    job_id = await new_job(engine, course)
    try:
        for done in (1, 2):
            with changes.subscribe(job_id) as changed:
                await until("the listener", lambda: asyncio.sleep(0, changes.backend_pid))
                assert changes.connections == done
                changed.clear()
                await progress(engine, job_id, done, "step")
                await asyncio.wait_for(changed.wait(), timeout=30)
            await until("the listener gone", lambda: asyncio.sleep(0, not changes.listening))
            assert changes.backend_pid is None
    finally:
        await changes.close()


async def test_a_tagging_jobs_stream_follows_its_batches_to_the_final_event(
    api: tuple[httpx.AsyncClient, HubJobsClient],
    api_settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
) -> None:
    client, _ = api
    course = await seed(engine, 40)
    # Slow enough to be seen between batches on any machine: 4 batches, paused between.
    slow = with_kind(
        api_settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.5
    )
    auth = bearer(course.actor_id, api_settings)
    started = await client.post(
        f"/workspaces/{course.workspace_id}/jobs/course_tagging",
        json={"root_page_id": str(course.root_page_id), "tag": "streamed"},
        headers=auth,
    )
    assert started.status_code == 202
    job_id = uuid.UUID(started.json()["id"])
    async with (
        opened(client, events_url(course, job_id), auth) as stream,
        running_worker(temporal, slow),
    ):
        seen: list[Event] = []
        while (event := await asyncio.wait_for(stream.next(), timeout=60)) is not None:
            seen.append(event)
    processed = [event.job["processed"] for event in seen]
    assert processed == sorted(processed)
    assert [event.event for event in seen][-1] == "final"
    assert seen[-1].job["status"] == "succeeded" and processed[-1] == 40
    assert any(0 < done < 40 for done in processed), processed
    assert all(event.event == "progress" for event in seen[:-1])
