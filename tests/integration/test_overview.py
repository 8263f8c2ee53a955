"""The console's overview through the API, on the real PostgreSQL: the counts of a known
set of jobs exact per kind (a stuck one among the running, one ended before the hour and
within the day, another workspace's jobs never counted), the buckets summing to the
counts, and a member of another workspace answered as for a workspace that does not
exist. The rows are written as the worker leaves them, times set relative to now (their
minutes counted again, as for a bulk load). And the ended counts as the statements that
end jobs leave them: each window's counts and buckets those of a count over the jobs."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.job_rows import minutes
from hubjobs.readmodel.overview import Window
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters
from hubjobs.settings import Settings
from tests.support.overview_counts import ended_in_jobs, ended_of, read_overview
from tests.support.servers import bearer, seed

INSERT = text(
    "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, correlation_id, "
    "payload, total, processed, succeeded, skipped, failed, created_at, finished_at, "
    "stuck_since) VALUES (:id, :workflow_id, :kind, :status, :workspace, :actor, 'overview', "
    "'{}', :total, :processed, :succeeded, :skipped, :failed, :created_at, :finished_at, "
    ":stuck_since)"
)


async def add_job(
    engine: AsyncEngine,
    course: DemoCourse,
    kind: str,
    status: JobStatus,
    *,
    created_ago: timedelta = timedelta(minutes=1),
    finished_ago: timedelta | None = None,
    stuck: bool = False,
    pages: tuple[int, int, int] = (0, 0, 0),
) -> uuid.UUID:
    """A row of ``kind`` at ``status``; ``pages`` its (succeeded, skipped, failed) items."""
    job_id = uuid.uuid4()
    now = datetime.now(UTC)
    succeeded, skipped, failed = pages
    async with engine.begin() as conn:
        await conn.execute(
            INSERT,
            {
                "id": job_id,
                "workflow_id": f"{kind}-{job_id}",
                "kind": kind,
                "status": str(status),
                "workspace": course.workspace_id,
                "actor": course.actor_id,
                "total": sum(pages),
                "processed": sum(pages),
                "succeeded": succeeded,
                "skipped": skipped,
                "failed": failed,
                "created_at": now - created_ago,
                "finished_at": None if finished_ago is None else now - finished_ago,
                "stuck_since": now if stuck else None,
            },
        )
        # Written here, not by the statement that ends a job: its minutes counted again.
        await minutes.recount(conn, course.workspace_id)
    return job_id


async def overview(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings, **params: str
) -> dict[str, Any]:
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/overview",
        params=params,
        headers=bearer(course.actor_id, settings),
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def kinds_of(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        k["kind"]: {n: v for n, v in k.items() if n not in ("kind", "oldest_queued")}
        for k in found["kinds"]
    }


def assert_buckets_sum_to_counts(found: dict[str, Any], pages: int) -> None:
    for status in (JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled):
        in_buckets = sum(b[status] for b in found["buckets"])
        assert in_buckets == sum(k[status] for k in found["kinds"]), status
    assert sum(b["pages"]["processed"] for b in found["buckets"]) == pages
    starts = [datetime.fromisoformat(b["start"]) for b in found["buckets"]]
    step = timedelta(seconds=found["bucket_seconds"])
    assert starts[0] == datetime.fromisoformat(found["since"])
    assert all(later - earlier == step for earlier, later in itertools.pairwise(starts))


async def test_overview_counts_a_known_set_of_jobs_exactly(
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
    database_url: str,
) -> None:
    tagging, backup = "course_tagging", "backup"
    oldest = await add_job(
        engine, course, tagging, JobStatus.queued, created_ago=timedelta(minutes=40)
    )
    await add_job(engine, course, tagging, JobStatus.queued, created_ago=timedelta(minutes=3))
    await add_job(engine, course, backup, JobStatus.queued, created_ago=timedelta(minutes=9))
    await add_job(engine, course, tagging, JobStatus.running, stuck=True)
    await add_job(engine, course, tagging, JobStatus.running)
    minutes = timedelta(minutes=1)
    await add_job(
        engine, course, tagging, JobStatus.succeeded, finished_ago=2 * minutes, pages=(8, 1, 1)
    )
    await add_job(
        engine, course, tagging, JobStatus.succeeded, finished_ago=25 * minutes, pages=(20, 0, 0)
    )
    await add_job(engine, course, tagging, JobStatus.failed, finished_ago=50 * minutes)
    await add_job(
        engine, course, backup, JobStatus.cancelled, finished_ago=5 * minutes, pages=(3, 0, 0)
    )
    # Ended before the hour, within the day.
    await add_job(
        engine,
        course,
        tagging,
        JobStatus.succeeded,
        created_ago=timedelta(hours=3),
        finished_ago=timedelta(hours=2),
        pages=(100, 0, 0),
    )
    other = await seed(engine, 1)
    await add_job(engine, other, tagging, JobStatus.queued, created_ago=timedelta(hours=1))
    await add_job(engine, other, tagging, JobStatus.succeeded, finished_ago=minutes)

    hour = await overview(http, course, api_settings)
    assert hour["window"] == "hour"
    assert (hour["bucket_seconds"], len(hour["buckets"])) == (60, 60)
    zero = {"queued": 0, "running": 0, "stuck": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
    assert kinds_of(hour) == {
        backup: {**zero, "queued": 1, "cancelled": 1},
        tagging: {**zero, "queued": 2, "running": 2, "stuck": 1, "succeeded": 2, "failed": 1},
    }
    assert hour["oldest_queued"]["job_id"] == str(oldest)
    assert_buckets_sum_to_counts(hour, pages=10 + 20 + 3)

    day = await overview(http, course, api_settings, window="day")
    assert (day["bucket_seconds"], len(day["buckets"])) == (900, 96)
    assert kinds_of(day)[tagging]["succeeded"] == 3
    assert_buckets_sum_to_counts(day, pages=10 + 20 + 3 + 100)
    # Each ended job in the bucket its end falls in, as a count over the jobs says.
    for window in Window:
        found = await read_overview(database_url, course.workspace_id, course.actor_id, window)
        assert ended_of(found) == ended_in_jobs(database_url, course.workspace_id, found)
        # Four ends in the hour's minutes; in the day's quarters, the two hours ago too.
        assert len(ended_of(found)[1]) >= (3 if window is Window.day else 4)


async def test_overview_of_another_workspace_is_not_found(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    await add_job(engine, course, "course_tagging", JobStatus.queued)
    outsider = await seed(engine, 1)
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/overview",
        headers=bearer(outsider.actor_id, api_settings),
    )
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "workspace_not_found"
    refused = await http.get(
        f"/workspaces/{course.workspace_id}/overview",
        params={"window": "week"},
        headers=bearer(course.actor_id, api_settings),
    )
    assert refused.status_code == 422


async def queued(engine: AsyncEngine, course: DemoCourse, kind: str) -> uuid.UUID:
    """A queued row, as a start leaves it."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await job_rows.insert_job(
            conn,
            job_id=job_id,
            kind=kind,
            workspace_id=course.workspace_id,
            actor_id=course.actor_id,
            correlation_id="overview",
            idempotency_key=None,
            payload={},
        )
    return job_id


async def running(
    engine: AsyncEngine, course: DemoCourse, kind: str, pages: tuple[int, int, int]
) -> uuid.UUID:
    """A running row whose attempt counted ``pages`` (succeeded, skipped, failed)."""
    job_id = await queued(engine, course, kind)
    ok, skipped, failed = pages
    counters = Counters(
        total=sum(pages) + 2, processed=sum(pages), succeeded=ok, skipped=skipped, failed=failed
    )
    async with engine.begin() as conn:
        await job_rows.open_job(conn, job_id, run_id="r", attempts=1, attempts_failed=0)
        await job_rows.set_progress(conn, job_id, counters, "working")
    return job_id


async def test_the_ended_counts_are_those_the_ending_statements_moved(
    engine: AsyncEngine, course: DemoCourse, database_url: str
) -> None:
    """Finishes, withdraws, a finish applied twice, a finish and a withdraw of a job that
    is final already, a cancel: the overview's ended counts and buckets are a count over
    the jobs table, in both windows; the job still running is in neither."""
    tagging, backup = "course_tagging", "backup"
    kept = timedelta(hours=1)

    async def finish(job_id: uuid.UUID, status: JobStatus) -> bool:
        async with engine.begin() as conn:
            ending = job_rows.Ending(status, error_code=None if status == "succeeded" else "x")
            done = await job_rows.finish(conn, job_id, ending, retention=kept)
        assert done is not None
        return done.changed

    async def withdraw(job_id: uuid.UUID) -> bool:
        async with engine.begin() as conn:
            return await job_rows.withdraw(
                conn, job_id, code="unavailable", message="not started", retention=kept
            )

    twice = await running(engine, course, tagging, (8, 1, 1))
    assert await finish(twice, JobStatus.succeeded)
    # An activity run again: the second finish moves nothing, and counts nothing.
    assert not await finish(twice, JobStatus.succeeded)
    failed = await running(engine, course, tagging, (3, 0, 4))
    assert await finish(failed, JobStatus.failed)
    assert not await finish(failed, JobStatus.cancelled)
    withdrawn = await queued(engine, course, backup)
    assert await withdraw(withdrawn)
    assert not await withdraw(withdrawn)
    # A start that did go through: no longer queued, the withdraw moves nothing.
    started = await running(engine, course, backup, (5, 0, 0))
    assert not await withdraw(started)
    async with engine.begin() as conn:
        await job_rows.request_cancel(conn, started, course.actor_id, "wrong course")
    assert await finish(started, JobStatus.cancelled)
    cancelled = await queued(engine, course, tagging)
    assert await finish(cancelled, JobStatus.cancelled)
    still = await running(engine, course, tagging, (2, 0, 0))
    other = await seed(engine, 1)
    elsewhere = await running(engine, other, tagging, (9, 0, 0))
    assert await finish(elsewhere, JobStatus.succeeded)

    for window in Window:
        found = await read_overview(database_url, course.workspace_id, course.actor_id, window)
        kinds, buckets = ended_of(found)
        assert (kinds, buckets) == ended_in_jobs(database_url, course.workspace_id, found)
        assert kinds == {tagging: (1, 1, 1), backup: (0, 1, 1)}
        pages = [sum(bucket[4] for bucket in buckets.values())]
        assert pages == [10 + 7 + 0 + 5 + 0]
        running_now = {k.kind: k.running for k in found.kinds}
        assert running_now[tagging] == 1
    assert await finish(still, JobStatus.succeeded)
    found = await read_overview(database_url, course.workspace_id, course.actor_id, Window.hour)
    assert ended_of(found)[0][tagging] == (2, 1, 1)
