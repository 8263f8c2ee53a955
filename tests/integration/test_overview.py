"""The console's overview through the API, on the real PostgreSQL: the counts of a known
set of jobs exact per kind (a stuck one among the running, one ended before the hour and
within the day, another workspace's jobs never counted), the buckets summing to the
counts, and a member of another workspace answered as for a workspace that does not
exist. The rows are written as the worker leaves them, times set relative to now."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.status import JobStatus
from hubjobs.settings import Settings
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
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
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
