"""The audit trail on the real servers: every operator action (start, cancel, retry, bulk
cancel, schedule changes) is one event with who, when, from which surface and why, on
the trail of every job it touched (GET /workspaces/{ws}/audit?job_id=); a refused
action records nothing; another workspace's member reads none of it (404, as a missing
workspace); the retention sweep removes events older than the jobs' retention."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.settings import Settings
from hubjobs.temporal.maintenance import RETENTION_SWEEP_WORKFLOW
from hubjobs.temporal.messages import SweepResult
from starter.client import HubJobsClient
from tests.support.servers import bearer, seed

Event = dict[str, Any]


def tagging(course: DemoCourse, tag: str) -> dict[str, Any]:
    return {"root_page_id": str(course.root_page_id), "tag": tag}


async def audit(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings, **params: Any
) -> list[Event]:
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/audit",
        params={k: str(v) for k, v in params.items()},
        headers=bearer(course.actor_id, settings),
    )
    assert answer.status_code == 200, answer.text
    events: list[Event] = answer.json()["events"]
    return events


async def event_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM audit_events"))).scalar_one())


async def test_a_cancel_with_a_reason_is_on_the_jobs_trail(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", tagging(course, "audited"))
    auth = bearer(course.actor_id, api_settings)
    url = f"/workspaces/{course.workspace_id}/jobs/{job.id}"
    cancelled = await http.delete(url, params={"reason": "wrong tag"}, headers=auth)
    assert cancelled.status_code == 202, cancelled.text

    trail = await audit(http, course, api_settings, job_id=job.id)
    assert [(e["action"], e["surface"]) for e in trail] == [
        ("cancel", "api"),
        ("start", "python"),
    ]
    cancel = trail[0]
    assert cancel["actor_id"] == str(course.actor_id)
    assert cancel["reason"] == "wrong tag"
    assert cancel["job_ids"] == [str(job.id)]
    assert cancel["workspace_id"] == str(course.workspace_id)
    assert cancel["detail"] == {"already_final": False}

    # The console says so; a surface the API does not know is refused, and not recorded.
    console = {**auth, "X-Hubjobs-Surface": "console"}
    again = await http.delete(url, params={"reason": "still wrong"}, headers=console)
    assert again.status_code == 202, again.text
    before = await event_count(engine)
    posing = await http.delete(url, headers={**auth, "X-Hubjobs-Surface": "python"})
    assert posing.status_code == 422
    assert posing.json()["error"]["code"] == "invalid_surface"
    assert await event_count(engine) == before
    newest = (await audit(http, course, api_settings, job_id=job.id))[0]
    assert (newest["surface"], newest["reason"]) == ("console", "still wrong")

    # Filters and keyset paging: two cancels, a page of one each.
    first = await audit(http, course, api_settings, action="cancel", limit=1)
    page = await http.get(
        f"/workspaces/{course.workspace_id}/audit",
        params={"action": "cancel", "limit": 1},
        headers=auth,
    )
    following = await http.get(
        f"/workspaces/{course.workspace_id}/audit",
        params={"action": "cancel", "limit": 1, "before": page.json()["next"]},
        headers=auth,
    )
    assert [e["reason"] for e in first] == ["still wrong"]
    assert [e["reason"] for e in following.json()["events"]] == ["wrong tag"]
    # A cursor this API did not give (an id past a bigint's, a naive time, not base64).
    for bad in ("MjAyNi0xMi0wNlQwOTozMDowMCswMDowMHw5OTk5OTk5OTk5OTk5OTk5OTk5OQ", "e30", "!"):
        refused = await http.get(
            f"/workspaces/{course.workspace_id}/audit", params={"before": bad}, headers=auth
        )
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["error"]["code"] == "invalid_cursor"
    odd = await http.get(
        f"/workspaces/{course.workspace_id}/audit", params={"action": "odd"}, headers=auth
    )
    assert (odd.status_code, odd.json()["error"]["code"]) == (422, "invalid_action")
    mine = await audit(http, course, api_settings, actor_id=course.actor_id)
    assert len(mine) == 3
    assert await audit(http, course, api_settings, actor_id=uuid.uuid4()) == []


async def test_a_start_and_a_retry_are_recorded(
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    keyed = {**auth, "Idempotency-Key": "audited-start"}
    started = await http.post(f"{base}/course_tagging", json=tagging(course, "s"), headers=keyed)
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    # The same start again names the same job: one start, one event.
    repeated = await http.post(f"{base}/course_tagging", json=tagging(course, "s"), headers=keyed)
    assert repeated.json()["id"] == job_id
    trail = await audit(http, course, api_settings, job_id=job_id)
    assert [(e["action"], e["surface"], e["actor_id"]) for e in trail] == [
        ("start", "api", str(course.actor_id))
    ]

    # A finished job with a failed page, retried.
    source = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
                "correlation_id, payload, total, processed, failed, snapshot_at, finished_at) "
                "VALUES (:id, :wf, 'course_tagging', 'succeeded', :workspace, :actor, 'c', "
                "CAST(:payload AS jsonb), 1, 1, 1, now(), now())"
            ),
            {
                "id": source,
                "wf": f"course_tagging-{source}",
                "workspace": course.workspace_id,
                "actor": course.actor_id,
                "payload": f'{{"root_page_id": "{course.root_page_id}", "tag": "r"}}',
            },
        )
        await conn.execute(
            text(
                "INSERT INTO job_items (job_id, ordinal, ref, label, state, error_code) "
                "VALUES (:job, 1, :page, 'p', 'failed', 'concurrency_conflict')"
            ),
            {"job": source, "page": course.page_ids[0]},
        )
    retried = await http.post(f"{base}/{source}/retry", headers=auth)
    assert retried.status_code == 202, retried.text
    retry_id = retried.json()["id"]
    for touched in (source, retry_id):
        [event] = await audit(http, course, api_settings, job_id=touched)
        assert (event["action"], event["surface"]) == ("retry", "api")
        assert event["job_ids"] == [str(source), retry_id]
        assert event["detail"] == {"source_job_id": str(source), "retry_job_id": retry_id}


async def test_a_bulk_cancel_is_on_every_touched_jobs_trail_with_its_counts(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    ids = [(await jobs.start("course_tagging", tagging(course, f"b{n}"))).id for n in range(3)]
    auth = bearer(course.actor_id, api_settings)
    answer = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel",
        json={"filter": {"kind": "course_tagging"}, "reason": "all of them"},
        headers=auth,
    )
    assert answer.status_code == 202, answer.text
    [bulk] = await audit(http, course, api_settings, action="bulk_cancel")
    assert sorted(bulk["job_ids"]) == sorted(str(i) for i in ids)
    assert (bulk["surface"], bulk["reason"]) == ("api", "all of them")
    assert bulk["detail"] == {
        "filter": {"status": None, "kind": "course_tagging", "schedule_id": None},
        "counts": {"named": 3, "requested": 3, "already_final": 0, "not_found": 0},
        "more": False,
    }
    for job_id in ids:
        trail = await audit(http, course, api_settings, job_id=job_id)
        assert [e["action"] for e in trail] == ["bulk_cancel", "start"]
        assert trail[0]["id"] == bulk["id"]

    # By ids: another workspace's job and an unknown id are counted, never named (no
    # worker runs here: the first job is still queued, its cancel asked again).
    other = await seed(engine, 1)
    theirs = await hub.scope(other.workspace_id, other.actor_id).start(
        "course_tagging", tagging(other, "theirs")
    )
    unknown = uuid.uuid4()
    named = [str(ids[0]), str(theirs.id), str(unknown)]
    answer = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel", json={"ids": named}, headers=auth
    )
    assert answer.status_code == 202, answer.text
    latest = (await audit(http, course, api_settings, action="bulk_cancel"))[0]
    assert latest["job_ids"] == [str(ids[0])]
    assert latest["detail"]["filter"] is None
    assert latest["detail"]["counts"] == {
        "named": 3,
        "requested": 1,
        "already_final": 0,
        "not_found": 2,
    }
    their_trail = await audit(http, other, api_settings, job_id=theirs.id)
    assert [e["action"] for e in their_trail] == ["start"]


async def test_schedule_changes_are_recorded(
    http: httpx.AsyncClient, api_settings: Settings, course: DemoCourse
) -> None:
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    created = await http.post(base, json={"kind": "backup", "cron": "0 3 * * *"}, headers=auth)
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    for verb in ("pause", "unpause", "trigger"):
        moved = await http.post(f"{base}/{schedule_id}/{verb}", headers=auth)
        assert moved.status_code < 300, moved.text
    deleted = await http.delete(f"{base}/{schedule_id}", headers=auth)
    assert deleted.status_code == 204, deleted.text

    trail = await audit(http, course, api_settings)
    assert [e["action"] for e in trail] == [
        "schedule_delete",
        "schedule_trigger",
        "schedule_unpause",
        "schedule_pause",
        "schedule_create",
    ]
    assert {(e["schedule_id"], e["surface"], e["actor_id"]) for e in trail} == {
        (schedule_id, "api", str(course.actor_id))
    }
    assert all(e["job_ids"] == [] for e in trail)
    assert trail[-1]["detail"] == {
        "kind": "backup",
        "cron": "0 3 * * *",
        "every_seconds": None,
        "time_zone": None,
        "keep": None,
    }


async def test_a_refused_action_records_nothing(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    job = await hub.scope(course.workspace_id, course.actor_id).start(
        "course_tagging", tagging(course, "kept")
    )
    async with engine.begin() as conn:
        editor = await create_account(conn, course.workspace_id, role="editor", name="Ed")
    stranger = (await seed(engine, 1)).actor_id
    before = await event_count(engine)
    base = f"/workspaces/{course.workspace_id}"
    for actor, status in ((editor, 403), (stranger, 404)):
        auth = bearer(actor, api_settings)
        calls = [
            http.delete(f"{base}/jobs/{job.id}", params={"reason": "no"}, headers=auth),
            http.post(f"{base}/jobs/{job.id}/retry", headers=auth),
            http.post(f"{base}/jobs/course_tagging", json=tagging(course, "n"), headers=auth),
            http.post(f"{base}/jobs/cancel", json={"ids": [str(job.id)]}, headers=auth),
            http.post(f"{base}/schedules", json={"kind": "backup", "every": "1h"}, headers=auth),
        ]
        for call in calls:
            answer = await call
            assert answer.status_code == status, answer.text
    missing = await http.delete(
        f"{base}/jobs/{uuid.uuid4()}", headers=bearer(course.actor_id, api_settings)
    )
    assert missing.status_code == 404
    assert await event_count(engine) == before


async def test_another_workspaces_member_reads_none_of_it(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
) -> None:
    job = await hub.scope(course.workspace_id, course.actor_id).start(
        "course_tagging", tagging(course, "private")
    )
    other = await seed(engine, 1)
    as_other = bearer(other.actor_id, api_settings)
    theirs = await http.get(f"/workspaces/{course.workspace_id}/audit", headers=as_other)
    by_job = await http.get(
        f"/workspaces/{course.workspace_id}/audit", params={"job_id": str(job.id)}, headers=as_other
    )
    missing = await http.get(f"/workspaces/{uuid.uuid4()}/audit", headers=as_other)
    assert theirs.status_code == by_job.status_code == missing.status_code == 404
    assert theirs.json() == by_job.json() == missing.json()
    assert theirs.json()["error"]["code"] == "workspace_not_found"
    # A member who may not act reads it whole.
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Re")
    read = await http.get(
        f"/workspaces/{course.workspace_id}/audit", headers=bearer(reader, api_settings)
    )
    assert [e["job_ids"] for e in read.json()["events"]] == [[str(job.id)]]


async def test_the_sweep_removes_events_older_than_the_retention(
    engine: AsyncEngine,
    course: DemoCourse,
    worker: None,
    temporal: Client,
    settings: Settings,
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO audit_events (at, workspace_id, actor_id, surface, action, job_ids) "
                "SELECT now() - CAST(:age AS interval), :workspace, :actor, 'api', 'cancel', "
                "ARRAY[gen_random_uuid()] FROM generate_series(1, :n)"
            ),
            [
                {"age": "3 days", "n": 250, "workspace": course.workspace_id, "actor": None},
                {"age": "1 hour", "n": 5, "workspace": course.workspace_id, "actor": None},
            ],
        )
    swept: SweepResult = await temporal.execute_workflow(
        RETENTION_SWEEP_WORKFLOW,
        100_000,
        id=f"sweep-{uuid.uuid4()}",
        task_queue=settings.task_queue,
        result_type=SweepResult,
    )
    assert swept.audit_removed == 250
    async with engine.connect() as conn:
        left = await conn.execute(
            text("SELECT min(at) > now() - interval '1 day' FROM audit_events")
        )
        assert left.scalar_one() is True
    assert await event_count(engine) == 5
