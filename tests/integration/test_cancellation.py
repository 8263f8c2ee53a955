"""Cancellation: by the starter's signal, by a bare signal sent to Temporal, and from the
Temporal UI (workflow cancellation) all end the job as cancelled, quickly, keeping the
work already done. And an actor who stops being an administrator fails the job."""

from __future__ import annotations

import asyncio
import time
import uuid
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

from activities.maintenance import STUCK_ATTEMPTS
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.messages import CancelRequest
from starter.client import HubJobsClient, WorkspaceJobs
from tests.integration.test_versioning import Gate, eventually, reconcile_once
from tests.support.helpers import item_counts, job_revisions, with_kind, workflow_closed
from tests.support.histories import record
from tests.support.servers import running_worker, seed
from tests.support.wedged_build import WedgingCourseTaggingWorkflow
from worker import workflows
from workflows.course_tagging import CourseTaggingWorkflow

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


# --- a cancel its workflow cannot take ------------------------------------------------------


@pytest.mark.parametrize("attempt_held", [False, True])
async def test_a_cancel_a_stuck_workflow_cannot_take_still_ends_the_job_and_its_run(
    temporal: Client, engine: AsyncEngine, settings: Settings, attempt_held: bool
) -> None:
    """A run wedged by a bug (tests/support/wedged_build.py: a bare ``cancel`` fails each
    of its workflow tasks) can take no cancel. The one the client recorded is honoured
    all the same: by the running attempt, which ends the row cancelled, and by the
    reconciler, which terminates the run that can no longer close; with the attempt
    held mid-batch, by the reconciler alone, which cancels the job first."""
    wedging = [
        WedgingCourseTaggingWorkflow if cls is CourseTaggingWorkflow else cls for cls in workflows()
    ]
    course = await seed(engine, 2000)
    # A deployment of its own: the wedging build is declared for versioned workers.
    paced = with_kind(
        settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.2
    ).model_copy(
        update={
            "worker_versioning": True,
            "deployment_name": f"test-{uuid.uuid4().hex[:10]}",
            "build_id": "1",
            # One attempt, silent: nothing but the failing task happens in the run.
            "work_slice_seconds": 600,
            "progress_report_seconds": 600,
        }
    )
    jobs = HubJobsClient(temporal, engine, paced).scope(course.workspace_id, course.actor_id)
    gate = Gate()
    hold = gate if attempt_held else None
    async with running_worker(temporal, paced, before_write=hold, workflow_classes=wedging):
        job = await _started(jobs, course, at_least=0 if attempt_held else 10)
        if attempt_held:
            await asyncio.wait_for(gate.held.wait(), 30)
        handle = temporal.get_workflow_handle(job.workflow_id)
        await handle.signal("cancel")  # bare: this build's typed handler raises

        async def failing_task() -> int | None:
            raw = (await handle.describe()).raw_description
            attempt = raw.pending_workflow_task.attempt
            return attempt if attempt >= STUCK_ATTEMPTS else None

        await eventually(failing_task, 60, "the workflow task failing")
        asked = await jobs.cancel(job.id, reason="the run is stuck")
        assert asked.cancel_requested_at is not None
        if not attempt_held:
            final = await jobs.wait(job.id, timeout=30, interval=0.05)
            assert final.status == "cancelled"  # the attempt read the recorded request
            await eventually(failing_task, 60, "the workflow task failing again")
        result = await reconcile_once(temporal, paced)
        gate.released.set()
        assert result.ended == 1
        described = await _closed(temporal, job.workflow_id)
        assert described.status == WorkflowExecutionStatus.TERMINATED
        history = await handle.fetch_history()
        reason = history.events[-1].workflow_execution_terminated_event_attributes.reason
        assert reason.startswith("job cancelled; its workflow was stuck (TypeError"), reason
        ended = await jobs.get(job.id)
        assert ended.status == "cancelled" and ended.cancel_reason == "the run is stuck"
        # Nothing is terminated twice, and a healthy run is left alone.
        assert (await reconcile_once(temporal, paced)).ended == 0
