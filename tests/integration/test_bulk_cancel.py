"""Cancelling many jobs at once (POST /workspaces/{ws}/jobs/cancel) on the real servers:
those named (another workspace's and an unknown id answered as missing, job by job), or
every unfinished one a filter matches; each ends cancelled with the reason, as a DELETE
would end it; the refusals are the API's."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.settings import Settings
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import with_kind
from tests.support.servers import API_SECRET, bearer, seed

TAG = "bulk"


@pytest.fixture
def slow_settings(settings: Settings) -> Settings:
    # Long enough that every job is still running when cancelled.
    return with_kind(
        settings, "course_tagging", tagging_batch_size=5, tagging_batch_pause_seconds=0.2
    )


@pytest.fixture
def api_settings(slow_settings: Settings) -> Settings:
    return slow_settings.model_copy(update={"api_jwt_secret": SecretStr(API_SECRET)})


async def running_jobs(jobs: WorkspaceJobs, course: DemoCourse, count: int) -> list[uuid.UUID]:
    """``count`` tagging jobs of the course, each seen running."""
    ids = []
    for n in range(count):
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": f"{TAG}-{n}"}
        )
        async for current in jobs.watch(job.id, interval=0.05):
            if current.processed > 0:
                break
        ids.append(job.id)
    return ids


async def all_cancelled(jobs: WorkspaceJobs, ids: list[uuid.UUID], reason: str) -> None:
    for job_id in ids:
        done = await jobs.wait(job_id, timeout=60, interval=0.05)
        assert (done.status, done.cancel_reason) == ("cancelled", reason)


async def test_named_jobs_are_cancelled_and_anothers_answer_as_missing(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
) -> None:
    course, other = await seed(engine, 400), await seed(engine, 400)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    ids = await running_jobs(jobs, course, 3)
    (theirs,) = await running_jobs(hub.scope(other.workspace_id, other.actor_id), other, 1)
    unknown = uuid.uuid4()
    answer = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel",
        json={"ids": [str(i) for i in [*ids, theirs, unknown]], "reason": "wrong tag"},
        headers=bearer(course.actor_id, api_settings),
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["more"] is False
    results = body["results"]
    assert [r["id"] for r in results] == [str(i) for i in [*ids, theirs, unknown]]
    for result in results[:3]:
        assert result["error"] is None
        assert result["job"]["cancel_reason"] == "wrong tag"
        assert result["job"]["cancel_requested_at"] is not None
    # Theirs and none at all: byte for byte what a DELETE of each answers.
    for result, job_id in zip(results[3:], (theirs, unknown), strict=True):
        assert result["job"] is None
        single = await http.delete(
            f"/workspaces/{course.workspace_id}/jobs/{job_id}",
            headers=bearer(course.actor_id, api_settings),
        )
        assert single.status_code == 404 and result["error"] == single.json()["error"]
    await all_cancelled(jobs, ids, "wrong tag")
    assert (await hub.scope(other.workspace_id, other.actor_id).get(theirs)).status == "running"
    # Again: each as a DELETE of a finished job answers, the job as it is.
    again = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel",
        json={"ids": [str(ids[0])], "reason": "twice"},
        headers=bearer(course.actor_id, api_settings),
    )
    (result,) = again.json()["results"]
    assert result["job"]["status"] == "cancelled" and result["job"]["cancel_reason"] == "wrong tag"
    await hub.scope(other.workspace_id, other.actor_id).cancel(theirs)


async def test_a_filter_cancels_every_unfinished_job_it_matches(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
) -> None:
    course = await seed(engine, 400)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    (finished,) = await running_jobs(jobs, course, 1)
    await jobs.cancel(finished, reason="first")
    await all_cancelled(jobs, [finished], "first")
    ids = await running_jobs(jobs, course, 2)
    answer = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel",
        json={"filter": {"status": "running", "kind": "course_tagging"}, "reason": "all"},
        headers=bearer(course.actor_id, api_settings),
    )
    assert answer.status_code == 202, answer.text
    # Newest first, as the list shows them; the finished one is not among them.
    assert [r["id"] for r in answer.json()["results"]] == [str(i) for i in reversed(ids)]
    await all_cancelled(jobs, ids, "all")
    # A filter of finished jobs matches nothing to cancel.
    none = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel",
        json={"filter": {"status": "cancelled"}},
        headers=bearer(course.actor_id, api_settings),
    )
    assert none.status_code == 202 and none.json() == {"results": [], "more": False}


async def test_a_filter_is_the_lists_a_payload_field_and_statuses_included(
    http: httpx.AsyncClient,
    api_settings: Settings,
    hub: HubJobsClient,
    engine: AsyncEngine,
    slow_worker: None,
) -> None:
    """The filter reads as GET …/jobs reads its query: a search's field and several
    statuses pick exactly what the list shows, and nothing else is cancelled."""
    course = await seed(engine, 400)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    ids = await running_jobs(jobs, course, 2)
    auth = bearer(course.actor_id, api_settings)
    search = {"kind": "course_tagging", "field": f"payload.tag={TAG}-1"}
    listed = await http.get(f"/workspaces/{course.workspace_id}/jobs", params=search, headers=auth)
    assert [j["id"] for j in listed.json()["jobs"]] == [str(ids[1])]
    answer = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/cancel",
        json={
            "filter": {**search, "field": [search["field"]], "status": ["queued", "running"]},
            "reason": "one tag",
        },
        headers=auth,
    )
    assert answer.status_code == 202, answer.text
    assert [r["id"] for r in answer.json()["results"]] == [str(ids[1])]
    await all_cancelled(jobs, [ids[1]], "one tag")
    assert (await jobs.get(ids[0])).status == "running"
    await jobs.cancel(ids[0])


async def test_refusals(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    base = f"/workspaces/{course.workspace_id}/jobs/cancel"
    auth = bearer(course.actor_id, api_settings)
    bodies: list[dict[str, Any]] = [
        {},
        {"ids": [], "filter": {}},
        {"ids": ["x"]},
        {"filter": {"status": "odd"}},
    ]
    for body in bodies:
        refused = await http.post(base, json=body, headers=auth)
        assert refused.status_code == 422, body
        assert refused.json()["error"]["code"] == "invalid_request", body
    too_many = {"ids": [str(uuid.uuid4()) for _ in range(1001)]}
    assert (await http.post(base, json=too_many, headers=auth)).status_code == 422
    long_reason = {"ids": [str(uuid.uuid4())], "reason": "x" * 501}
    refused = await http.post(base, json=long_reason, headers=auth)
    assert refused.json()["error"]["code"] == "invalid_reason"
    assert (await http.post(base, json={"ids": []})).status_code == 401
    async with engine.begin() as conn:
        member = await create_account(conn, course.workspace_id, role="editor", name="Mo")
    forbidden = await http.post(base, json={"ids": []}, headers=bearer(member, api_settings))
    assert forbidden.status_code == 403
    other = await seed(engine, 1)
    stranger = await http.post(base, json={"ids": []}, headers=bearer(other.actor_id, api_settings))
    listed = await http.get(
        f"/workspaces/{course.workspace_id}/jobs", headers=bearer(other.actor_id, api_settings)
    )
    assert stranger.status_code == listed.status_code == 404
    assert stranger.json() == listed.json()
