"""The shared lifecycle and the retention sweep under Temporal's time-skipping test
server: retry backoffs of 2 s, 10 s, 30 s and 24 hours of retention pass in moments,
against the real embedded PostgreSQL.

How time moves here, on purpose:

- Only ``env.sleep`` moves the server's clock. Awaiting a result with time skipping
  unlocked (what a handle from ``env.client.start_workflow`` does) lets the server run
  on, once the workflow is done, to whatever timer it still holds (seen here: the
  ten-year default run timeout) before the client locks it again; the clock then lands
  anywhere up to ten years ahead. ``env.sleep`` moves it by exactly what it is
  given. Results are awaited with automatic skipping off.
- A handle from ``env.client.get_workflow_handle`` (how a job started by the hubjobs
  client is reached) never unlocks time skipping: its ``result()`` waits in real time.
- The clock is shared by the whole module and only moves forward, so the retention test
  whose first sweep must find nothing expired runs before the tests that skip a day.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import tests.support.toy_impl as toy_impl
import tests.support.toy_kind as toy
import worker as worker_module
from activities.maintenance import DELIVERY_MARGIN, HOOK_RETRY_AFTER
from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.status import JobStatus, NotifyState
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.client import data_converter
from hubjobs.temporal.failures import ERROR_MESSAGES
from hubjobs.temporal.maintenance import RETENTION_SWEEP_WORKFLOW
from hubjobs.temporal.messages import JobOutcome, SweepRequest, SweepResult
from starter.client import HubJobsClient
from tests.support.helpers import activity_summaries, tags_of

DAY_AND_A_BIT = timedelta(hours=24, minutes=1)
TOLERANCE = 1.0
ECHO_ACTIVITY = toy_impl.EchoActivities.echo.__name__


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(Path(sys.executable).parent / "temporal-test-server"),
        data_converter=data_converter(Settings(payload_codec=False)),
    )
    try:
        await environment.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default",
                search_attributes=sa.registration(),
            )
        )
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(autouse=True)
def clear_toy_records() -> None:
    toy_impl.ATTEMPTS.clear()
    toy.EXPIRED.clear()


def worker_for(env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings) -> Worker:
    return worker_module.build_worker(env.client, engine, settings)


def handle_of(env: WorkflowEnvironment, job: JobView) -> WorkflowHandle[Any, JobOutcome]:
    return env.client.get_workflow_handle(job.workflow_id, result_type=JobOutcome)


async def row(engine: AsyncEngine, job_id: uuid.UUID) -> JobView | None:
    async with engine.connect() as conn:
        return await job_rows.get_job(conn, job_id)


async def count(engine: AsyncEngine, table: str) -> int:
    async with engine.connect() as conn:
        n: int = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
    return n


async def echo_backoffs(handle: WorkflowHandle[Any, Any]) -> list[float]:
    """The pauses the workflow made between a failed attempt of the echo activity and
    the next one (each attempt is an activity of its own; the pause is a timer), in
    seconds of the server's clock."""
    scheduled: dict[int, datetime] = {}
    failed: list[datetime] = []
    gaps: list[float] = []
    async for event in handle.fetch_history_events():
        at = event.event_time.ToDatetime(tzinfo=UTC)
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == ECHO_ACTIVITY:
                scheduled[event.event_id] = at
                if failed:
                    gaps.append((at - failed[-1]).total_seconds())
        elif event.HasField("activity_task_failed_event_attributes"):
            if event.activity_task_failed_event_attributes.scheduled_event_id in scheduled:
                failed.append(at)
    return gaps


def assert_gaps(gaps: Sequence[float], expected: Sequence[float]) -> None:
    assert len(gaps) == len(expected), gaps
    for gap, wanted in zip(gaps, expected, strict=True):
        assert abs(gap - wanted) <= TOLERANCE, (gaps, expected)


async def sweep(
    env: WorkflowEnvironment, settings: Settings, limit: int = 100_000
) -> tuple[SweepResult, datetime]:
    """One RetentionSweep run (removing at most ``limit``): its result, and the cutoff it
    swept with (the workflow's clock, read back from the activity's input)."""
    handle = await env.client.start_workflow(
        RETENTION_SWEEP_WORKFLOW,
        limit,
        id=f"sweep-{uuid.uuid4().hex[:12]}",
        task_queue=settings.task_queue,
        result_type=SweepResult,
    )
    # No timer to skip to: waiting in real time keeps the clock where it is.
    with env.auto_time_skipping_disabled():
        result = await handle.result()
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            payloads = event.activity_task_scheduled_event_attributes.input.payloads
            [request] = await env.client.data_converter.decode(payloads, [SweepRequest])
            assert isinstance(request, SweepRequest)
            return result, request.cutoff
    raise AssertionError("the sweep scheduled no activity")


def jobs_swept(swept: tuple[SweepResult, datetime]) -> tuple[int, int]:
    """A sweep's jobs removed and kept (its minutes: however many the ends fell in)."""
    return swept[0].removed, swept[0].kept


async def insert_finished(
    engine: AsyncEngine,
    course: DemoCourse,
    payloads: Sequence[dict[str, Any]],
    notify_url: str | None = None,
) -> list[uuid.UUID]:
    """Finished toy jobs written straight into the read model, expiring in 24 h (with
    ``notify_url``, their completion webhook pending)."""
    ids = [uuid.uuid4() for _ in payloads]
    async with engine.begin() as conn:
        for job_id, payload in zip(ids, payloads, strict=True):
            assert await job_rows.insert_job(
                conn,
                job_id=job_id,
                kind=toy.TOY.name,
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id=uuid.uuid4().hex,
                idempotency_key=None,
                payload=payload,
                notify_url=notify_url,
            )
            await job_rows.open_job(conn, job_id, run_id=None, attempts=1, attempts_failed=0)
            await job_rows.finish(
                conn,
                job_id,
                job_rows.Ending(JobStatus.succeeded),
                retention=timedelta(hours=24),
                result={"echo": payload["message"]},
            )
    return ids


# --- retries ---------------------------------------------------------------------


async def test_a_flaky_activity_retries_after_2_10_and_30_seconds(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    settings = settings.model_copy(update={"max_activity_attempts": 5})
    hub = HubJobsClient(env.client, engine, settings)
    async with worker_for(env, engine, settings):
        job = await hub.scope(course.workspace_id, course.actor_id).start(
            "toy_echo", {"message": "hi", "fail_attempts": 3}
        )
        handle = handle_of(env, job)
        # 2 + 10 + 30 s of backoff, and some room.
        await env.sleep(timedelta(minutes=1))
        outcome = await handle.result()

    assert outcome.status == "succeeded"
    assert outcome.result == {"echo": "hi"}
    assert [attempt for attempt, _ in toy_impl.ATTEMPTS] == [1, 2, 3, 4]
    assert_gaps(await echo_backoffs(handle), [2, 10, 30])
    # Each activity a slice of the job, and "attempt" only for those a failure started.
    assert await activity_summaries(handle) == [
        "Echo, slice 1",
        "Echo, slice 2, attempt 2 after a failure",
        "Echo, slice 3, attempt 3 after 2 failures",
        "Echo, slice 4, attempt 4 after 3 failures",
    ]
    done = await row(engine, job.id)
    assert done is not None
    assert done.status == "succeeded"
    assert done.result == {"echo": "hi"}
    assert done.error_code is None and done.error_message is None


async def test_a_job_fails_plainly_when_its_attempts_run_out(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    assert settings.max_activity_attempts == 3
    hub = HubJobsClient(env.client, engine, settings)
    async with worker_for(env, engine, settings):
        job = await hub.scope(course.workspace_id, course.actor_id).start(
            "toy_echo", {"message": "hi", "fail_attempts": 99}
        )
        handle = handle_of(env, job)
        await env.sleep(timedelta(seconds=30))
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        description = await handle.describe()

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "processing_failed"
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.typed_search_attributes.get(sa.JOB_STATUS) == "failed"

    assert [attempt for attempt, _ in toy_impl.ATTEMPTS] == [1, 2, 3]
    assert_gaps(await echo_backoffs(handle), [2, 10])
    failed = await row(engine, job.id)
    assert failed is not None
    assert failed.status == "failed"
    assert failed.error_code == "processing_failed"
    assert failed.error_message == ERROR_MESSAGES["processing_failed"]
    for detail in ("RuntimeError", "transient failure", "Traceback"):
        assert detail not in failed.error_message
    assert failed.result is None


# --- retention --------------------------------------------------------------------


async def test_a_finished_job_goes_24_hours_later_after_its_hook(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    hub = HubJobsClient(env.client, engine, settings)
    async with worker_for(env, engine, settings):
        job = await hub.scope(course.workspace_id, course.actor_id).start(
            "toy_echo", {"message": "hi"}
        )
        # No retries, no timers: it ends in real time.
        assert (await handle_of(env, job).result()).status == "succeeded"
        done = await row(engine, job.id)
        assert done is not None and done.status == "succeeded"
        assert done.finished_at is not None and done.expires_at is not None
        assert done.expires_at - done.finished_at == timedelta(hours=24)
        # An item of the job's, to see it go with the job.
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO job_items (job_id, ordinal, ref, done_at_snapshot, state) "
                    "VALUES (:job, 1, :page, false, 'succeeded')"
                ),
                {"job": job.id, "page": course.root_page_id},
            )

        first, cutoff = await sweep(env, settings)
        assert cutoff < done.expires_at, "the module's clock is a day ahead: run the file in order"
        assert first == SweepResult(removed=0, kept=0)
        assert await row(engine, job.id) is not None
        assert await count(engine, "audit_events") == 1
        # The minute its end was counted in stays while the overview's day reads it.
        assert await count(engine, "job_minutes") == 1
        assert toy.EXPIRED == []

        await env.sleep(DAY_AND_A_BIT)
        second, cutoff = await sweep(env, settings)

    assert cutoff >= done.expires_at
    # The start's audit event goes too: a day older than the cutoff's retention; and the
    # minute its end was counted in, older than the overview's longest window.
    assert second == SweepResult(removed=1, kept=0, audit_removed=1, minutes_removed=1)
    assert await row(engine, job.id) is None
    assert await count(engine, "job_minutes") == 0
    assert await count(engine, "job_items") == 0
    assert await count(engine, "audit_events") == 0
    assert [expired.id for expired in toy.EXPIRED] == [job.id]
    # The hook saw the finished row, as it was before its removal.
    assert toy.EXPIRED[0].status == "succeeded"
    assert toy.EXPIRED[0].result == {"echo": "hi"}


async def test_250_expired_jobs_go_in_one_run_up_to_its_limit(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    """A sweep keeps taking batches of 100 until none is left, up to its run's limit;
    what the limit leaves goes in the next run."""
    ids = await insert_finished(engine, course, [{"message": "m"}] * 250)
    assert await count(engine, "jobs") == 250
    async with worker_for(env, engine, settings):
        await env.sleep(DAY_AND_A_BIT)
        limited, _ = await sweep(env, settings, limit=100)
        rest, _ = await sweep(env, settings)
        nothing, _ = await sweep(env, settings)

    # Their ends, in one transaction, were counted in one minute.
    assert limited == SweepResult(removed=100, kept=0, minutes_removed=1, more=True)
    assert rest == SweepResult(removed=150, kept=0)
    assert nothing == SweepResult(removed=0, kept=0)
    assert len(toy.EXPIRED) == 250
    assert {expired.id for expired in toy.EXPIRED} == set(ids)
    assert await count(engine, "jobs") == 0


async def test_a_failing_hook_keeps_its_row_for_a_later_sweep(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    failing, normal = await insert_finished(
        engine, course, [{"message": "m", "fail_expire": True}, {"message": "m"}]
    )
    async with worker_for(env, engine, settings):
        await env.sleep(DAY_AND_A_BIT)
        result, cutoff = await sweep(env, settings)
        # Its next try waits an hour: a sweep right after leaves it alone.
        again, _ = await sweep(env, settings)

    assert result == SweepResult(removed=1, kept=1, minutes_removed=1)
    assert again == SweepResult(removed=0, kept=0)
    kept = await row(engine, failing)
    assert kept is not None
    assert kept.expires_at == cutoff + HOOK_RETRY_AFTER
    assert await row(engine, normal) is None
    assert [expired.id for expired in toy.EXPIRED] == [normal]


async def test_a_job_whose_webhook_is_still_being_delivered_stays_until_its_delivery_ends(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    """Retention waits for a completion webhook still trying (for up to its deadline,
    HUBJOBS_WEBHOOK_DEADLINE_HOURS, and the margin of a last try): the receiver is told
    of a job it can still look up, and the delivery's outcome is not lost with the row.
    Once delivered it goes at the next sweep; a delivery that never ends (its workflow
    terminated) holds its row no longer than the deadline."""
    plain, delivered, never = (
        *await insert_finished(engine, course, [{"message": "m"}]),
        *await insert_finished(
            engine, course, [{"message": "m"}] * 2, notify_url="http://127.0.0.1:9/hook"
        ),
    )
    # Finished now by the server's clock (earlier tests of the module moved it on).
    now = await env.get_current_time()
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE jobs SET finished_at = :now, expires_at = :now + interval '24 hours' "
                "WHERE id = ANY(:ids)"
            ),
            {"now": now, "ids": [plain, delivered, never]},
        )
    async with worker_for(env, engine, settings):
        await env.sleep(DAY_AND_A_BIT)
        assert jobs_swept(await sweep(env, settings)) == (1, 0)
        assert await row(engine, plain) is None
        assert await row(engine, delivered) is not None and await row(engine, never) is not None

        async with engine.begin() as conn:
            assert await job_rows.record_notify(
                conn, delivered, state=NotifyState.delivered, attempt=1
            )
        assert jobs_swept(await sweep(env, settings)) == (1, 0)
        assert await row(engine, delivered) is None
        pending = await row(engine, never)
        assert pending is not None and pending.notify_state == NotifyState.pending

        await env.sleep(timedelta(hours=settings.webhook_deadline_hours) + DELIVERY_MARGIN)
        assert jobs_swept(await sweep(env, settings)) == (1, 0)
        assert await row(engine, never) is None


# --- the real kind ----------------------------------------------------------------


async def test_course_tagging_runs_on_the_time_skipping_server(
    env: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    hub = HubJobsClient(env.client, engine, settings)
    async with worker_for(env, engine, settings):
        job = await hub.scope(course.workspace_id, course.actor_id).start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "Sustainability"}
        )
        # No timers: real time. An outstanding activity holds the server's time-skipping
        # lock, so its heartbeat timeout cannot be skipped past while it works.
        outcome = await handle_of(env, job).result()

    assert outcome.status == "succeeded"
    assert outcome.counters.succeeded == 30
    done = await row(engine, job.id)
    assert done is not None and done.status == "succeeded"
    assert (done.total, done.processed, done.succeeded, done.skipped, done.failed) == (
        30,
        30,
        30,
        0,
        0,
    )
    assert done.result is not None and done.result["succeeded"] == 30
    for page in course.page_ids:
        assert await tags_of(engine, page) == ["Sustainability"]
