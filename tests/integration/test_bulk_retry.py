"""Retrying the failed items of many jobs at once (POST /workspaces/{ws}/jobs/retry) on
the real servers: those named, each answered as its own POST …/retry answers (a new job,
the retry an earlier one started, or its refusal's code); or every finished job with
failed items not yet retried among those the list's filters match, a payload field
included, counted first by the list (GET …/jobs?to_retry=true); one bulk_retry event
with the filter, the counts and every job touched; a reader refused as one retry is."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import starter.client
from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.integration.test_audit import audit
from tests.support.helpers import until
from tests.support.servers import bearer, seed


async def finished_job(
    engine: AsyncEngine,
    course: DemoCourse,
    tag: str,
    *,
    failed: bool = True,
    status: str = "succeeded",
) -> uuid.UUID:
    """A course tagging job of ``tag`` recorded as finished (or ``status``), with one
    failed page when ``failed``: what a run that met a conflict leaves."""
    job_id = uuid.uuid4()
    final = status in ("succeeded", "failed", "cancelled")
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
                "correlation_id, payload, total, processed, failed, snapshot_at, finished_at) "
                "VALUES (:id, :wf, 'course_tagging', :status, :workspace, :actor, 'c', "
                "CAST(:payload AS jsonb), 1, 1, :failed, now(), "
                "CASE WHEN :final THEN now() END)"
            ),
            {
                "id": job_id,
                "wf": f"course_tagging-{job_id}",
                "status": status,
                "workspace": course.workspace_id,
                "actor": course.actor_id,
                "payload": f'{{"root_page_id": "{course.root_page_id}", "tag": "{tag}"}}',
                "failed": int(failed),
                "final": final,
            },
        )
        await conn.execute(
            text(
                "INSERT INTO job_items (job_id, ordinal, ref, label, state, error_code) "
                "VALUES (:job, 1, :page, 'p', :state, :code)"
            ),
            {
                "job": job_id,
                "page": course.page_ids[0],
                "state": "failed" if failed else "succeeded",
                "code": "concurrency_conflict" if failed else None,
            },
        )
    return job_id


async def bulk_events(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings
) -> list[dict[str, Any]]:
    """The workspace's bulk_retry events, oldest first, as GET …/audit answers."""
    events = await audit(http, course, settings, action="bulk_retry")
    return events[::-1]


async def test_named_jobs_are_each_answered_as_their_own_retry_is(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    failing = [await finished_job(engine, course, f"t{n}") for n in range(2)]
    clean = await finished_job(engine, course, "clean", failed=False)
    running = await finished_job(engine, course, "run", status="running")
    other = await seed(engine, 3)
    theirs = await finished_job(engine, other, "theirs")
    unknown = uuid.uuid4()
    named = [*failing, clean, running, theirs, unknown]
    answer = await http.post(
        f"{base}/retry", json={"ids": [str(i) for i in named], "reason": "conflicts"}, headers=auth
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["more"] is False
    results = body["results"]
    assert [r["id"] for r in results] == [str(i) for i in named]
    retries = {}
    for result, source in zip(results[:2], failing, strict=True):
        assert result["error"] is None and result["created"] is True
        record = await http.get(f"{base}/{result['retry']['id']}/record", headers=auth)
        assert record.json()["source_job_id"] == str(source)
        assert result["retry"]["status"] == "queued"
        retries[source] = result["retry"]["id"]
    # The others: byte for byte what a retry of each answers, job by job.
    for result, job_id in zip(results[2:], named[2:], strict=True):
        assert result["retry"] is None and result["created"] is False
        single = await http.post(f"{base}/{job_id}/retry", headers=auth)
        assert single.status_code in (404, 422), single.text
        assert result["error"] == single.json()["error"]
    codes = [r["error"]["code"] for r in results[2:]]
    assert codes == ["nothing_to_retry", "job_not_finished", "job_not_found", "job_not_found"]

    # One event: the reason, the counts, the refusals by code, every job touched (the
    # sources found and their retries; not another workspace's, not a missing one).
    [event] = await bulk_events(http, course, api_settings)
    assert (event["reason"], event["surface"]) == ("conflicts", "api")
    assert event["detail"] == {
        "filter": None,
        "counts": {"named": 6, "retried": 2, "already_retried": 0, "refused": 2, "not_found": 2},
        "refused": {"nothing_to_retry": 1, "job_not_finished": 1},
        "more": False,
    }
    touched = {*failing, clean, running, *(uuid.UUID(r) for r in retries.values())}
    assert set(event["job_ids"]) == {str(i) for i in touched}
    # On the trail of each of them, as a bulk cancel is.
    trail = await audit(http, course, api_settings, job_id=failing[0])
    assert [e["action"] for e in trail] == ["bulk_retry"]

    # Again: already retried, the same retry as the first (one per job).
    again = await http.post(f"{base}/retry", json={"ids": [str(failing[0])]}, headers=auth)
    (result,) = again.json()["results"]
    assert (result["created"], result["retry"]["id"]) == (False, retries[failing[0]])
    second = (await bulk_events(http, course, api_settings))[1]
    assert second["detail"]["counts"]["already_retried"] == 1
    assert second["reason"] is None


async def test_a_filter_retries_exactly_what_the_list_counts_a_payload_field_included(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    exam = [await finished_job(engine, course, "exam") for _ in range(3)]
    failed_exam = await finished_job(engine, course, "exam", status="failed")
    draft = await finished_job(engine, course, "draft")
    await finished_job(engine, course, "exam", failed=False)
    await finished_job(engine, course, "exam", status="running")
    done = await http.post(f"{base}/{exam[0]}/retry", headers=auth)
    assert done.status_code == 202, done.text
    wanted = [failed_exam, exam[2], exam[1]]  # newest first; exam[0] retried already
    query: dict[str, Any] = {"kind": "course_tagging", "field": "payload.tag=exam"}

    # Counted first, by the list with the same filter.
    counted = await http.get(base, params={**query, "to_retry": "true"}, headers=auth)
    assert counted.status_code == 200, counted.text
    assert [j["id"] for j in counted.json()["jobs"]] == [str(i) for i in wanted]

    filter_ = {"kind": "course_tagging", "field": ["payload.tag=exam"]}
    answer = await http.post(
        f"{base}/retry", json={"filter": filter_, "reason": "exam week"}, headers=auth
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["more"] is False
    assert [r["id"] for r in body["results"]] == [str(i) for i in wanted]
    assert all(r["created"] and r["error"] is None for r in body["results"])
    [event] = await bulk_events(http, course, api_settings)
    assert event["reason"] == "exam week"
    assert event["detail"] == {
        "filter": {
            "status": None,
            "kind": "course_tagging",
            "schedule_id": None,
            "field": ["payload.tag=exam"],
        },
        "counts": {"named": 3, "retried": 3, "already_retried": 0, "refused": 0, "not_found": 0},
        "refused": {},
        "more": False,
    }
    retries = {uuid.UUID(r["retry"]["id"]) for r in body["results"]}
    assert set(event["job_ids"]) == {str(i) for i in {*wanted, *retries}}
    # The draft was not the filter's; the count is now none, and so is a second call.
    assert str(draft) not in event["job_ids"]
    recount = await http.get(base, params={**query, "to_retry": "true"}, headers=auth)
    assert recount.json()["jobs"] == []
    again = await http.post(f"{base}/retry", json={"filter": filter_}, headers=auth)
    assert again.json() == {"results": [], "more": False}
    # A status narrows it as the list's does: the failed one only.
    await finished_job(engine, course, "exam", status="failed")
    only = await http.post(
        f"{base}/retry", json={"filter": {**filter_, "status": ["failed"]}}, headers=auth
    )
    assert len(only.json()["results"]) == 1


async def test_a_filter_past_the_cap_says_more_and_the_next_call_takes_the_rest(
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(starter.client, "MAX_BULK_CANCEL", 2)
    auth = bearer(course.actor_id, api_settings)
    url = f"/workspaces/{course.workspace_id}/jobs/retry"
    ids = [await finished_job(engine, course, "cap") for _ in range(3)]
    first = (await http.post(url, json={"filter": {}}, headers=auth)).json()
    assert (len(first["results"]), first["more"]) == (2, True)
    rest = (await http.post(url, json={"filter": {}}, headers=auth)).json()
    assert ([r["id"] for r in rest["results"]], rest["more"]) == ([str(ids[0])], False)
    events = await bulk_events(http, course, api_settings)
    assert [e["detail"]["more"] for e in events] == [True, False]


async def test_refusals_a_readers_403_and_nothing_recorded(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    base = f"/workspaces/{course.workspace_id}/jobs"
    auth = bearer(course.actor_id, api_settings)
    job_id = await finished_job(engine, course, "kept")
    bodies: list[dict[str, Any]] = [
        {},
        {"ids": [], "filter": {}},
        {"ids": ["x"]},
        {"filter": {"status": "odd"}},
    ]
    for body in bodies:
        refused = await http.post(f"{base}/retry", json=body, headers=auth)
        assert refused.status_code == 422, body
        assert refused.json()["error"]["code"] == "invalid_request", body
    # The list's refusals, with the list's codes.
    for filter_, code in (
        ({"kind": "nope"}, "unknown_kind"),
        ({"field": ["payload.tag=x"]}, "invalid_field_filter"),
        ({"kind": "course_tagging", "field": ["payload.nope=x"]}, "unknown_field"),
        ({"id": "xyz"}, "invalid_job_id"),
    ):
        refused = await http.post(f"{base}/retry", json={"filter": filter_}, headers=auth)
        assert refused.json()["error"]["code"] == code, filter_
    long_reason = {"ids": [str(job_id)], "reason": "x" * 501}
    refused = await http.post(f"{base}/retry", json=long_reason, headers=auth)
    assert refused.json()["error"]["code"] == "invalid_reason"
    assert (await http.post(f"{base}/retry", json={"ids": []})).status_code == 401

    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Re")
    as_reader = bearer(reader, api_settings)
    single = await http.post(f"{base}/{job_id}/retry", headers=as_reader)
    assert single.status_code == 403
    for body in ({"ids": [str(job_id)]}, {"filter": {"kind": "course_tagging"}}):
        forbidden = await http.post(f"{base}/retry", json=body, headers=as_reader)
        assert forbidden.status_code == 403, body
        assert forbidden.json()["error"] == single.json()["error"]
        assert forbidden.json()["error"]["code"] == "actor_not_administrator"
    stranger = (await seed(engine, 1)).actor_id
    missing = await http.post(
        f"{base}/retry", json={"filter": {}}, headers=bearer(stranger, api_settings)
    )
    listed = await http.get(base, headers=bearer(stranger, api_settings))
    assert missing.status_code == listed.status_code == 404
    assert missing.json() == listed.json()
    assert await bulk_events(http, course, api_settings) == []
    async with engine.connect() as conn:
        retried = await conn.scalar(
            text("SELECT count(*) FROM jobs WHERE source_job_id = :id"), {"id": job_id}
        )
    assert retried == 0


async def test_a_bulk_retry_cut_short_still_keeps_its_event(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    """A caller that gives up midway (the API's request budget cancels it): the retries
    answered by then are on the trail, the one event saying it was cut short."""
    jobs = hub.scope(course.workspace_id, course.actor_id)
    ids = [await finished_job(engine, course, "cut") for _ in range(300)]
    bulk = asyncio.create_task(jobs.retry_many(ids, reason="cut short"))

    async def some_retried() -> bool:
        async with engine.connect() as conn:
            found = await conn.scalar(
                text("SELECT count(*) FROM jobs WHERE source_job_id = ANY(:ids)"), {"ids": ids}
            )
        return int(found or 0) >= 20

    # A retry's row exists before its answer: at most BULK_RETRY_STARTS unanswered.
    await until("twenty retries started", some_retried)
    bulk.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bulk
    [event] = await jobs.audit(action="bulk_retry")
    detail = event.detail or {}
    assert event.reason == "cut short" and detail["interrupted"] is True
    counts = detail["counts"]
    least = 20 - starter.client.BULK_RETRY_STARTS
    assert counts["named"] == 300 and least <= counts["retried"] < 300
    recorded = {uuid.UUID(str(i)) for i in event.job_ids}
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT id, source_job_id FROM jobs WHERE source_job_id = ANY(:ids)"),
            {"ids": ids},
        )
        made = {row.id: row.source_job_id for row in rows}
    # Every retry it recorded exists, with its source; only those in flight are missing.
    retried = recorded & made.keys()
    assert len(retried) == counts["retried"]
    assert {made[r] for r in retried} <= recorded
    assert len(made) - len(retried) <= starter.client.BULK_RETRY_STARTS
