"""The platform around the kinds, on the real dev server: a third kind through the
whole lifecycle, starts straight through Temporal (good and bad), the reconciler
(terminated workflows, lost final writes, recorded-but-never-started jobs), the
maintenance schedules, and the queue state."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

import worker as worker_module
from hubjobs import job_rows
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.errors import IdempotencyKeyReused
from hubjobs.job_rows import JobRow, admit
from hubjobs.kinds import REGISTRY
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.settings import Settings
from hubjobs.temporal.maintenance import (
    MAINTENANCE_WORKFLOW,
    RECONCILER_WORKFLOW,
    RETENTION_SWEEP_WORKFLOW,
    ensure_maintenance,
)
from hubjobs.temporal.messages import JobInput, ReconcileRequest, ReconcileResult, SweepResult
from starter.client import HubJobsClient
from tests.support import toy_kind
from tests.support.helpers import final_row, row_of, until, with_kind
from tests.support.servers import running_worker, seed


@pytest.fixture
def platform_worker(worker: None) -> None:
    """The worker serves the toy kind as it serves every registered kind: importing
    tests.toy_kind registered it."""
    assert toy_kind.TOY.name in REGISTRY.names()


def direct_input(
    job_id: uuid.UUID,
    course: DemoCourse,
    payload: dict[str, Any],
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """A course-tagging workflow input as another service would send it, as JSON."""
    return JobInput(
        job_id=job_id,
        kind="course_tagging",
        workspace_id=course.workspace_id,
        actor_id=course.actor_id,
        correlation_id="other-service",
        payload=payload,
        idempotency_key=idempotency_key,
    ).model_dump(mode="json")


async def test_a_third_kind_runs_through_the_whole_lifecycle(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("toy_echo", {"message": "hello"}, idempotency_key="k1")
    assert job.kind == "toy_echo" and job.workflow_id == f"toy_echo-{job.id}"
    assert job.summary == "Echo"  # no start check of its own: the kind's title
    done = await jobs.wait(job.id, timeout=30)
    assert done.status == "succeeded" and done.result == {"echo": "hello"}
    assert done.summary == "Echo a message"  # its snapshot's, by its first attempt
    assert done.expires_at is not None and done.finished_at is not None
    assert await jobs.start("toy_echo", {"message": "hello"}, idempotency_key="k1") == done
    outcome = await temporal.get_workflow_handle(done.workflow_id).result()
    assert outcome["status"] == "succeeded"


async def test_a_bad_payload_sent_straight_to_temporal_fails_at_once(
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    job_id = uuid.uuid4()
    raw = direct_input(job_id, course, {"root_page_id": "not-a-page", "tag": "\x07"})
    started = time.monotonic()
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        raw,
        id=f"course_tagging-{job_id}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert time.monotonic() - started < 10
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "invalid_payload"
    row = await row_of(engine, job_id)
    assert row is not None and row.status == "failed" and row.error_code == "invalid_payload"
    assert row.finished_at is not None

    # Not even an envelope: failed at once too, never a workflow task retrying.
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        {"hello": "world"},
        id=f"bad-{uuid.uuid4()}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "invalid_payload"


async def test_a_good_start_straight_through_temporal_creates_its_row(
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    job_id = uuid.uuid4()
    raw = direct_input(job_id, course, {"root_page_id": str(course.root_page_id), "tag": "direct"})
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        raw,
        id=f"course_tagging-{job_id}",
        task_queue=settings.task_queue,
    )
    await handle.result()
    row = await row_of(engine, job_id)
    assert row is not None and row.status == "succeeded" and row.succeeded == 30


async def test_a_direct_start_whose_key_names_another_job_fails_with_its_code(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    """A start straight through Temporal carrying a key that names a job started
    through the client fails ``idempotency_key_reused`` naming it, with another payload
    and with the same one under its own workflow id, and never touches that job; a key
    of its own is recorded, and a client's start with it and another payload is refused
    naming the direct start's job."""
    jobs = hub.scope(course.workspace_id, course.actor_id)
    root = str(course.root_page_id)
    first = await jobs.start(
        "course_tagging", {"root_page_id": root, "tag": "svc-1"}, idempotency_key="shared"
    )
    for tag in ("svc-2", "svc-1"):
        job_id = uuid.uuid4()
        handle = await temporal.start_workflow(
            COURSE_TAGGING.workflow_type,
            direct_input(job_id, course, {"root_page_id": root, "tag": tag}, "shared"),
            id=f"course_tagging-{job_id}",
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        assert isinstance(failure.value.cause, ApplicationError)
        assert failure.value.cause.type == "idempotency_key_reused"
        assert str(first.id) in failure.value.cause.message
        row = await row_of(engine, job_id)
        assert row is not None and (row.status, row.error_code) == (
            "failed",
            "idempotency_key_reused",
        )
        assert row.idempotency_key is None and str(first.id) in (row.error_message or "")
    done = await jobs.wait(first.id, timeout=60)
    assert (done.status, done.succeeded, done.payload["tag"]) == ("succeeded", 30, "svc-1")
    assert done.idempotency_key == "shared"
    async with engine.connect() as conn:
        svc_2 = await conn.execute(
            text("SELECT count(*) FROM page_revisions WHERE change_summary = :s"),
            {"s": "Course tag svc-2 added"},
        )
        assert svc_2.scalar_one() == 0

    job_id = uuid.uuid4()
    await temporal.execute_workflow(
        COURSE_TAGGING.workflow_type,
        direct_input(job_id, course, {"root_page_id": root, "tag": "svc-3"}, "direct-key"),
        id=f"course_tagging-{job_id}",
        task_queue=settings.task_queue,
    )
    direct = await row_of(engine, job_id)
    assert direct is not None and (direct.status, direct.idempotency_key) == (
        "succeeded",
        "direct-key",
    )
    with pytest.raises(IdempotencyKeyReused) as caught:
        await jobs.start(
            "course_tagging", {"root_page_id": root, "tag": "svc-4"}, idempotency_key="direct-key"
        )
    assert caught.value.job_id == job_id
    again = await jobs.start(
        "course_tagging", {"root_page_id": root, "tag": "svc-3"}, idempotency_key="direct-key"
    )
    assert again.id == job_id and again.status == "succeeded"


async def test_a_terminated_workflow_is_failed_by_the_maintenance_reconciler(
    hub: HubJobsClient,
    engine: AsyncEngine,
    temporal: Client,
    settings: Settings,
    stack: object,
) -> None:
    slow = with_kind(
        settings, "course_tagging", tagging_batch_size=5, tagging_batch_pause_seconds=0.1
    ).model_copy(
        update={
            "reconcile_seconds": 1,
            "reconcile_grace_seconds": 0,
            "retention_sweep_seconds": 3600,
        }
    )
    course = await seed(engine, 500)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    maintenance = temporal.get_workflow_handle(await ensure_maintenance(temporal, slow))
    try:
        engine2 = async_engine(slow.resolved_database_url(), pool_size=5)
        async with worker_module.build_worker(temporal, engine2, slow):
            description = await maintenance.describe()
            assert description.workflow_type == MAINTENANCE_WORKFLOW
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "t"}
            )
            async for current in jobs.watch(job.id, interval=0.05):
                if current.processed > 0:
                    break
            terminate = await asyncio.to_thread(
                subprocess.run,
                [
                    str(Path(sys.executable).parent / "temporal"),
                    "workflow",
                    "terminate",
                    "--address",
                    slow.resolved_temporal_address(),
                    "--workflow-id",
                    job.workflow_id,
                    "--reason",
                    "test",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert terminate.returncode == 0, terminate.stderr
            done = await final_row(engine, job.id, timeout=15)
        await engine2.dispose()
    finally:
        await maintenance.terminate("test over")
    assert done.status == "failed" and done.error_code == "terminated"
    assert done.error_message == "The job was terminated in Temporal."
    assert 0 < done.processed < done.total


async def test_the_reconciler_restarts_a_recorded_job_that_never_started(
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:  # the starter died right after this commit
        await admit(
            conn,
            JobRow(
                kind="toy_echo",
                job_id=job_id,
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="c",
                payload={"message": "late"},
            ),
        )
    result = await temporal.execute_workflow(
        RECONCILER_WORKFLOW,
        ReconcileRequest(grace_seconds=0),
        id=f"reconcile-{uuid.uuid4()}",
        task_queue=settings.task_queue,
        result_type=ReconcileResult,
    )
    assert result.restarted == 1
    done = await final_row(engine, job_id)
    assert done.status == "succeeded" and done.result == {"echo": "late"}


async def test_the_starter_repairs_a_recorded_job_given_the_same_key(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse, platform_worker: None
) -> None:
    async with engine.begin() as conn:
        await admit(
            conn,
            JobRow(
                kind="toy_echo",
                job_id=uuid.uuid4(),
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="c",
                payload={"message": "again"},
                idempotency_key="repair-me",
            ),
        )
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("toy_echo", {"message": "again"}, idempotency_key="repair-me")
    done = await jobs.wait(job.id, timeout=30)
    assert done.status == "succeeded"


async def test_a_lost_final_write_is_brought_back_by_the_reconciler(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    done = await jobs.wait((await jobs.start("toy_echo", {"message": "x"})).id, timeout=30)
    await temporal.get_workflow_handle(done.workflow_id).result()
    async with engine.begin() as conn:  # as if the finish write had never landed
        await conn.execute(
            text(
                "UPDATE jobs SET status = 'running', result = NULL, finished_at = NULL, "
                "expires_at = NULL WHERE id = :id"
            ),
            {"id": done.id},
        )
    result = await temporal.execute_workflow(
        RECONCILER_WORKFLOW,
        ReconcileRequest(grace_seconds=0),
        id=f"reconcile-{uuid.uuid4()}",
        task_queue=settings.task_queue,
        result_type=ReconcileResult,
    )
    assert (result.checked, result.finished) == (1, 1)
    again = await jobs.get(done.id)
    assert again.status == "succeeded" and again.result == {"echo": "x"}
    assert again.expires_at is not None


async def test_the_reconciler_pages_through_its_selection(
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    """More unfinished rows than a page holds (100), their workflows gone: a run takes
    them a page at a time up to its limit, each once, and the next run the rest."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
                "correlation_id, payload, updated_at) SELECT gen_random_uuid(), 'gone-' || g, "
                "'toy_echo', 'running', :workspace, :actor, 'c', '{\"message\": \"m\"}', "
                "now() - g * interval '1 second' FROM generate_series(1, 230) g"
            ),
            {"workspace": course.workspace_id, "actor": course.actor_id},
        )

    async def reconcile(limit: int) -> ReconcileResult:
        result: ReconcileResult = await temporal.execute_workflow(
            RECONCILER_WORKFLOW,
            ReconcileRequest(grace_seconds=0, limit=limit),
            id=f"reconcile-{uuid.uuid4()}",
            task_queue=settings.task_queue,
            result_type=ReconcileResult,
        )
        return result

    first = await reconcile(150)
    assert (first.checked, first.finished, first.restarted) == (150, 150, 0)
    rest = await reconcile(500)
    assert (rest.checked, rest.finished, rest.restarted) == (80, 80, 0)
    async with engine.connect() as conn:
        outcomes = (
            await conn.execute(
                text(
                    "SELECT status, error_code, count(*) AS n FROM jobs "
                    "WHERE workflow_id LIKE 'gone-%' GROUP BY status, error_code"
                )
            )
        ).all()
    assert [(o.status, o.error_code, o.n) for o in outcomes] == [("failed", "abandoned", 230)]


async def test_one_retention_sweep_at_a_time(
    engine: AsyncEngine,
    course: DemoCourse,
    platform_worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    """While another sweep's batch holds the retention lock a run leaves the expired rows
    to it; once it is let go, the next run takes them all (three batches of 100 here)."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
                "correlation_id, payload, finished_at, expires_at) SELECT gen_random_uuid(), "
                "'expired-' || g, 'toy_echo', 'succeeded', :workspace, :actor, 'c', "
                "'{\"message\": \"m\"}', now() - interval '2 days', "
                "now() - interval '1 day' FROM generate_series(1, 250) g"
            ),
            {"workspace": course.workspace_id, "actor": course.actor_id},
        )

    async def sweep() -> SweepResult:
        result: SweepResult = await temporal.execute_workflow(
            RETENTION_SWEEP_WORKFLOW,
            100_000,
            id=f"sweep-{uuid.uuid4()}",
            task_queue=settings.task_queue,
            result_type=SweepResult,
        )
        return result

    async with engine.begin() as other:
        assert await job_rows.claim_retention(other)
        held = await sweep()
    assert (held.removed, held.kept, held.more) == (0, 0, False)
    swept = await sweep()
    assert (swept.removed, swept.kept, swept.more) == (250, 0, False)
    async with engine.connect() as conn:
        left = await conn.execute(text("SELECT count(*) FROM jobs WHERE expires_at <= now()"))
        assert left.scalar_one() == 0


async def test_queue_state_comes_from_the_read_model(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    async with engine.begin() as conn:
        # Two failures, one 59 and one 61 minutes ago: only the first counts (a gauge of
        # recent failures, not of every failure still within retention).
        failed_ago = iter(("59 minutes", "61 minutes"))
        for status in ("queued", "queued", "running", "failed", "failed", "succeeded"):
            job_id = uuid.uuid4()
            await job_rows.insert_job(
                conn,
                job_id=job_id,
                kind="toy_echo",
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="c",
                idempotency_key=None,
                payload={"message": "m"},
            )
            await conn.execute(
                text(
                    "UPDATE jobs SET status = :status, finished_at = now() - "
                    "CAST(:ago AS interval) WHERE id = :id"
                ),
                {
                    "status": status,
                    "id": job_id,
                    "ago": next(failed_ago) if status == "failed" else None,
                },
            )
        await conn.execute(
            text(
                "UPDATE jobs SET created_at = now() - interval '90 seconds' "
                "WHERE status = 'queued' AND ctid = (SELECT min(ctid) FROM jobs "
                "WHERE status = 'queued')"
            )
        )
        state = await job_rows.queue_state(conn)
    assert (state.queued, state.running, state.failed) == (2, 1, 1)
    assert state.oldest_queued_age_seconds is not None
    assert 89 <= state.oldest_queued_age_seconds < 120


async def test_cancelling_a_job_whose_workflow_never_started_cancels_its_row(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:  # the starter died right after this commit
        await admit(
            conn,
            JobRow(
                kind="toy_echo",
                job_id=job_id,
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="c",
                payload={"message": "never"},
            ),
        )
    jobs = hub.scope(course.workspace_id, course.actor_id)
    cancelled = await jobs.cancel(job_id)
    assert cancelled.status == "cancelled"
    assert cancelled.cancel_requested_by == course.actor_id
    assert cancelled.finished_at is not None and cancelled.expires_at is not None


async def test_maintenance_is_one_long_lived_workflow_per_task_queue(
    engine: AsyncEngine, course: DemoCourse, temporal: Client, settings: Settings
) -> None:
    """Every worker start hands the running maintenance workflow the plan (no second
    run); it sweeps expired jobs on its interval, round after round, and the Temporal
    UI's list gains one run, not one a minute per step (the Schedules of before: 2,880
    a day)."""
    fast = settings.model_copy(update={"retention_sweep_seconds": 0.5, "reconcile_seconds": 0.5})
    workflow_id = await ensure_maintenance(temporal, fast)
    assert await ensure_maintenance(temporal, fast) == workflow_id  # a second worker
    handle = temporal.get_workflow_handle(workflow_id)

    async def expire(count: int) -> None:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
                    "correlation_id, payload, finished_at, expires_at) SELECT "
                    "gen_random_uuid(), 'expired-' || gen_random_uuid(), 'toy_echo', "
                    "'succeeded', :workspace, :actor, 'c', '{\"message\": \"m\"}', "
                    "now() - interval '2 days', now() - interval '1 day' "
                    "FROM generate_series(1, :count)"
                ),
                {"workspace": course.workspace_id, "actor": course.actor_id, "count": count},
            )

    async def expired_left() -> int:
        async with engine.connect() as conn:
            left = await conn.execute(text("SELECT count(*) FROM jobs WHERE expires_at <= now()"))
            return int(left.scalar_one())

    try:
        async with running_worker(temporal, fast):
            for round_ in range(3):  # three sweeps at least, each finding new rows
                await expire(10)

                async def swept() -> bool:
                    return await expired_left() == 0

                await until(f"sweep {round_ + 1}", swept, timeout=30)

            # The rows go at the sweep's commit; its count reaches the workflow with the
            # activity's result, a moment later.
            async def counted() -> dict[str, Any] | None:
                state: dict[str, Any] = await handle.query("state")
                return state if state["swept"] >= 30 else None

            state = await until("the sweeps counted", counted, timeout=30)
            assert state["swept"] >= 30 and state["plan"]["sweep_seconds"] == 0.5
        runs = await temporal.count_workflows(f"TaskQueue = '{fast.task_queue}'")
        assert runs.count == 1  # the one maintenance run: no run per step
    finally:
        await handle.terminate("test over")
