"""Cancellation: by the starter's signal, by a bare signal sent to Temporal, and from the
Temporal UI (workflow cancellation) all end the job as cancelled, quickly, keeping the
work already done. And an actor who stops being an administrator fails the job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
)

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.views import JobView
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.messages import CancelRequest
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import item_counts, job_revisions, workflow_closed
from tests.support.histories import record
from tests.support.servers import seed

TAG = "archived"


@pytest_asyncio.fixture
async def big_course(engine: AsyncEngine) -> DemoCourse:
    return await seed(engine, 1000)


async def _started(jobs: WorkspaceJobs, course: DemoCourse, at_least: int) -> JobView:
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    async for current in jobs.watch(job.id, interval=0.05):
        if current.processed >= at_least:
            return current
    raise AssertionError("the job ended before it got going")


async def _closed(temporal: Client, workflow_id: str) -> WorkflowExecutionDescription:
    """The workflow once it has closed (the read model is finished just before); a run
    that does not close fails the test, named."""
    await workflow_closed(temporal, workflow_id)
    return await temporal.get_workflow_handle(workflow_id).describe()


async def _kept_work(engine: AsyncEngine, job: JobView) -> None:
    """Work done before the cancellation stays done and counted; the rest is untouched."""
    counts = await item_counts(engine, job.id)
    assert 0 < job.processed < job.total
    assert counts.get("pending", 0) == job.total - job.processed
    assert counts.get("succeeded", 0) == job.succeeded == job.processed
    assert sum((await job_revisions(engine, TAG)).values()) == job.succeeded


async def test_cancel_signal_from_the_starter_stops_the_job_within_two_seconds(
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
    big_course: DemoCourse,
    temporal: Client,
) -> None:
    jobs = hub.scope(big_course.workspace_id, big_course.actor_id)
    running = await _started(jobs, big_course, at_least=50)
    asked = time.monotonic()
    requested = await jobs.cancel(running.id, reason="wrong tag")
    # Recorded in the read model at once, before the workflow even ran.
    assert requested.cancel_requested_at is not None
    assert requested.cancel_requested_by == big_course.actor_id
    assert requested.cancel_reason == "wrong tag"
    done = await jobs.wait(running.id, timeout=30, interval=0.05)
    assert time.monotonic() - asked < 2.0
    assert done.status == "cancelled" and done.result is None and done.error_code is None
    assert done.cancel_reason == "wrong tag"
    await _kept_work(engine, done)

    description = await _closed(temporal, done.workflow_id)
    # Temporal agrees: the run closed as Canceled (the UI's list tells it from a
    # success), with the job cancelled. (Runs recorded before it closed as Completed:
    # tests/histories/course_tagging_cancelled_by_signal.json still replays.)
    assert description.status == WorkflowExecutionStatus.CANCELED
    assert description.typed_search_attributes.get(sa.JOB_STATUS) == "cancelled"
    await record(
        temporal.get_workflow_handle(done.workflow_id), "course_tagging_cancelled_by_signal"
    )

    # Cancelling again, now that it is finished, changes nothing.
    again = await jobs.cancel(running.id)
    assert again == done


async def test_a_bare_signal_sent_to_temporal_cancels_too(
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
    big_course: DemoCourse,
    temporal: Client,
) -> None:
    """Another service may only know Temporal: the signal alone does everything."""
    jobs = hub.scope(big_course.workspace_id, big_course.actor_id)
    running = await _started(jobs, big_course, at_least=50)
    handle = temporal.get_workflow_handle(running.workflow_id)
    asked = time.monotonic()
    await handle.signal(
        "cancel", CancelRequest(actor_id=big_course.actor_id, reason="from another service")
    )
    done = await jobs.wait(running.id, timeout=30, interval=0.05)
    assert time.monotonic() - asked < 2.5
    assert done.status == "cancelled"
    assert done.cancel_requested_by == big_course.actor_id
    assert done.cancel_reason == "from another service"
    await _kept_work(engine, done)


async def test_cancelling_from_the_temporal_ui_ends_the_same_way(
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
    big_course: DemoCourse,
    temporal: Client,
) -> None:
    jobs = hub.scope(big_course.workspace_id, big_course.actor_id)
    running = await _started(jobs, big_course, at_least=50)
    handle = temporal.get_workflow_handle(running.workflow_id)
    await handle.cancel()  # what the UI's "Request cancellation" does
    done = await jobs.wait(running.id, timeout=30, interval=0.05)
    assert done.status == "cancelled" and done.cancel_requested_at is not None
    assert done.cancel_reason == "cancelled in Temporal"
    await _kept_work(engine, done)
    description = await _closed(temporal, done.workflow_id)
    assert description.status == WorkflowExecutionStatus.CANCELED
    assert description.typed_search_attributes.get(sa.JOB_STATUS) == "cancelled"
    await record(handle, "course_tagging_cancelled_in_temporal")


@pytest.mark.parametrize("demotion", ["role", "disabled"])
async def test_an_actor_who_stops_being_an_administrator_fails_the_job(
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
    big_course: DemoCourse,
    temporal: Client,
    demotion: str,
) -> None:
    jobs = hub.scope(big_course.workspace_id, big_course.actor_id)
    running = await _started(jobs, big_course, at_least=30)
    async with engine.begin() as conn:
        if demotion == "role":
            await conn.execute(
                text("UPDATE workspace_memberships SET role = 'editor' WHERE user_id = :id"),
                {"id": big_course.actor_id},
            )
        else:
            await conn.execute(
                text("UPDATE user_accounts SET enabled = false WHERE id = :id"),
                {"id": big_course.actor_id},
            )
    # The job is read through the hub's view of it: the actor can no longer read it
    # either (disabled), so read the row directly.
    await asyncio.sleep(0)
    done = await _wait_row(engine, running, timeout=30)
    assert done["status"] == "failed"
    assert done["error_code"] == "actor_unavailable"
    assert done["error_message"] == (
        "The actor is no longer an enabled administrator of the workspace."
    )
    assert 0 < done["processed"] < running.total

    handle = temporal.get_workflow_handle(running.workflow_id)
    assert (await _closed(temporal, running.workflow_id)).status == WorkflowExecutionStatus.FAILED
    # Not retried: every attempt of the tagging activity was a first attempt.
    attempts = [
        event.activity_task_started_event_attributes.attempt
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert attempts and set(attempts) == {1}
    if demotion == "role":
        await record(handle, "course_tagging_actor_unavailable")


async def _wait_row(engine: AsyncEngine, job: JobView, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        text(
                            "SELECT status, error_code, error_message, processed FROM jobs "
                            "WHERE id = :id"
                        ),
                        {"id": job.id},
                    )
                )
                .mappings()
                .one()
            )
        if row["status"] in ("succeeded", "failed", "cancelled"):
            return dict(row)
        await asyncio.sleep(0.1)
    raise AssertionError("the job did not finish")
