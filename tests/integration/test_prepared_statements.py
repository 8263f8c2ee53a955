"""Prepared statements (hubjobs/db/engine.py PREPARED): a statement that asks is prepared
once per connection and no other ever is; a small job's whole attempt prepares its key
lookups and never a statement whose plan could turn on its values (arrays, the
course's walk); a schema change made meanwhile by another connection (a migration while
workers run) and a rollback leave them working."""

from __future__ import annotations

import asyncio
import re
import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.runtime import Runtime

from hubjobs import job_rows
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.observability.telemetry import JobMetrics, refresh_queue_state
from hubjobs.readmodel.views import JobView, QueueState
from hubjobs.settings import Settings
from tests.support.helpers import local_attempt, tagging_activities

UNPREPARED = "SELECT count(*) FROM jobs WHERE status = 'queued'"


async def _prepared(conn: AsyncConnection) -> list[str]:
    """The statements this connection has prepared on the server."""
    rows = await conn.execute(text("SELECT statement FROM pg_prepared_statements"))
    return [str(statement) for statement in rows.scalars()]


async def _insert(conn: AsyncConnection, course: DemoCourse) -> JobView:
    job = await job_rows.insert_job(
        conn,
        job_id=uuid.uuid4(),
        kind=COURSE_TAGGING.name,
        workspace_id=course.workspace_id,
        actor_id=course.actor_id,
        correlation_id="prepared",
        idempotency_key=None,
        payload={"root_page_id": str(course.root_page_id), "tag": "prepared"},
    )
    assert job is not None
    return job


async def test_a_statement_that_asks_is_prepared_once_and_no_other_is(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    async with engine.connect() as conn:
        job = await _insert(conn, course)
        for _ in range(7):  # past psycopg's own threshold (5), were it on
            assert await job_rows.get_job(conn, job.id) == job
            await conn.execute(text(UNPREPARED))
        prepared = await _prepared(conn)
        assert sum("INSERT INTO jobs" in s for s in prepared) == 1
        assert sum(s.startswith("SELECT") and "FROM jobs WHERE id" in s for s in prepared) == 1
        assert not any("count(*)" in s for s in prepared)
        await conn.commit()


async def test_a_schema_change_meanwhile_and_a_rollback_leave_them_working(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    """A column added to ``jobs`` by another connection after this one prepared its
    statements: they are planned again on their next run and return what they did (each
    names its columns). A rollback drops them (psycopg), and they are prepared again."""
    async with engine.connect() as conn:
        job = await _insert(conn, course)
        await conn.commit()
        assert await job_rows.get_job(conn, job.id) == job
        await conn.commit()
        async with engine.connect() as other:
            await other.execute(text("ALTER TABLE jobs ADD COLUMN added_later integer DEFAULT 7"))
            await other.commit()
        assert await job_rows.get_job(conn, job.id) == job
        second = await _insert(conn, course)
        assert await job_rows.get_job(conn, second.id) == second
        await conn.rollback()
        assert await _prepared(conn) == []
        assert await job_rows.get_job(conn, job.id) == job
        assert await job_rows.get_job(conn, second.id) is None  # rolled back with its statements
        assert any("FROM jobs WHERE id" in s for s in await _prepared(conn))
        await conn.commit()


async def test_a_small_jobs_attempt_prepares_its_lookups_and_nothing_that_plans_on_values(
    course: DemoCourse, settings: Settings
) -> None:
    """A course that fits in a batch, done in one transaction on a connection of its own
    (the ordinary attempt's statements): the opening, the snapshot lock with the check
    that the snapshot is due, the snapshot's record, the row's read, the root's facts,
    the job's gate and the batch's read are prepared; the count and the snapshot (the
    course's walk), the write and the outcomes (arrays of the batch) never are, whatever
    the size: their generic plan is the trap hubjobs/db/engine.py describes."""
    engine = async_engine(settings.resolved_database_url(), pool_size=1)
    try:
        async with engine.connect() as conn:
            job = await _insert(conn, course)
            await conn.commit()
        request, environment = local_attempt(job)
        done = await environment.run(tagging_activities(engine, settings).tag_course, request)
        assert done.outcome is not None and done.outcome.status == "succeeded"
        async with engine.connect() as conn:
            prepared = await _prepared(conn)
            await conn.commit()
    finally:
        await engine.dispose()
    assert sum("UPDATE jobs SET status = 'running'" in s for s in prepared) == 1
    assert sum("pg_advisory_xact_lock" in s for s in prepared) == 1
    assert sum("SELECT snapshot_at IS NULL AS due FROM jobs" in s for s in prepared) == 1
    assert sum("UPDATE jobs SET total" in s for s in prepared) == 1
    assert sum("FROM jobs WHERE id = $1 AND (CAST($2 AS uuid)" in s for s in prepared) == 1
    assert sum("trashed, title FROM pages WHERE id" in s for s in prepared) == 1
    assert sum("AS cancel_requested" in s for s in prepared) == 1  # the job's gate
    assert sum("FROM job_pending_items(" in s for s in prepared) == 1  # the batch's read
    assert sum("INSERT INTO jobs" in s for s in prepared) == 1  # the start's, by key
    assert len(prepared) == 9, prepared  # and nothing else: not the pool's ping either
    planned_on_values = re.compile(r"(unnest|ANY)\(\s*(CAST\()?\$\d|RECURSIVE|INTO job_items")
    assert not any(planned_on_values.search(s) for s in prepared)


class _GaugesRead(JobMetrics):
    """The worker's gauges, saying when a refresh has read the queue."""

    def __init__(self) -> None:
        super().__init__(Runtime.default().metric_meter)
        self.read = asyncio.Event()

    def queue_state(self, state: QueueState) -> None:
        super().queue_state(state)
        self.read.set()


async def test_the_queue_gauges_refresh_leaves_the_jobs_statements_prepared(
    course: DemoCourse, settings: Settings
) -> None:
    """The worker's queue gauges read on the pool's warmest connection, the one its jobs
    use: their refresh ends its transaction by COMMIT, since a ROLLBACK makes psycopg
    drop (DEALLOCATE ALL) what the jobs prepared there."""
    engine = async_engine(settings.resolved_database_url(), pool_size=1)
    stop = asyncio.Event()
    gauges = _GaugesRead()
    try:
        async with engine.connect() as conn:
            job = await _insert(conn, course)
            await conn.commit()
            assert await job_rows.get_job(conn, job.id) == job
            await conn.commit()
            assert any("FROM jobs WHERE id" in s for s in await _prepared(conn))
            await conn.commit()
        refresh = asyncio.create_task(refresh_queue_state(engine, gauges, stop))
        await asyncio.wait_for(gauges.read.wait(), 30)
        stop.set()
        await refresh
        async with engine.connect() as conn:
            assert any("FROM jobs WHERE id" in s for s in await _prepared(conn))
            await conn.commit()
    finally:
        await engine.dispose()
