"""Every page's outcome, listed, and what failed, run again, on the real servers.

A course is tagged while others edit some of its pages between the job's read and
its write (the ``before_write`` hook), for good (``concurrency_conflict``), trash one
(``page_unavailable``), and some pages had the tag already (skipped). The items
listing (client, CLI, API) then shows each page's state, code and message, agreeing
with the job's counters; keyset paging returns every item exactly once; another
workspace gets 404. ``retry`` starts a new job over the failed pages still there,
tags each once, and a second ``retry`` of the same job (client, CLI, API) is the same
job. Refusals: a kind whose items cannot be retried, a job not finished, nothing left
to retry, an actor who may not start jobs."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.client import Client

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.errors import Forbidden, HubJobsError, InvalidInput, NotFound
from hubjobs.readmodel.status import ItemState, JobStatus
from hubjobs.readmodel.views import ItemView, JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient, WorkspaceJobs, retry_key
from tests.support.helpers import edit, job_revisions, tags_of
from tests.support.processes import hubjobs_json, run_hubjobs
from tests.support.servers import bearer, running_worker, seed

TAG = "reviewed"
PAGES = 300


async def all_items(
    jobs: WorkspaceJobs, job_id: uuid.UUID, *, state: ItemState | None = None, limit: int
) -> tuple[list[ItemView], int]:
    """Every item, page by page (following ``next``); and how many pages that took."""
    items: list[ItemView] = []
    after, pages = 0, 0
    while True:
        page = await jobs.items(job_id, state=state, after=after, limit=limit)
        pages += 1
        assert len(page.items) <= limit
        items += page.items
        if page.next is None:
            return items, pages
        assert page.next == page.items[-1].ordinal
        after = page.next


class Tagged:
    """A course tagged while others edit: which pages ended which way."""

    def __init__(self, course: DemoCourse) -> None:
        self.course = course
        pages = course.page_ids
        self.had_tag = pages[10:15]
        self.conflicts = pages[40:52]  # edited at both writes: concurrency_conflict
        self.trashed = pages[77]  # trashed at the first write: page_unavailable

    async def before_write(
        self, engine: AsyncEngine, pages: Sequence[uuid.UUID], attempt: int
    ) -> None:
        for page in pages:
            if page in self.conflicts:
                await edit(engine, page, markdown=f"someone else's edit {attempt}")
            elif page == self.trashed and attempt == 1:
                await edit(engine, page, trashed=True)


@pytest_asyncio.fixture
async def tagged(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> tuple[Tagged, JobView]:
    course = await seed(engine, PAGES)
    scenario = Tagged(course)
    for page in scenario.had_tag:
        await edit(engine, page, tags=[TAG])

    async def before_write(_: AsyncConnection, pages: Sequence[uuid.UUID], attempt: int) -> None:
        await scenario.before_write(engine, pages, attempt)

    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, settings, before_write=before_write):
        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
        done = await jobs.wait(job.id, timeout=120)
    assert done.status == "succeeded", (done.error_code, done.error_message)
    assert (done.total, done.succeeded, done.skipped, done.failed) == (
        PAGES,
        PAGES - 5 - 13,
        5,
        13,
    )
    assert done.result is not None and "sourceJobId" not in done.result
    return scenario, done


# --- items ------------------------------------------------------------------------------------


async def test_items_show_each_pages_outcome_as_the_counters_do(
    hub: HubJobsClient, tagged: tuple[Tagged, JobView], engine: AsyncEngine
) -> None:
    scenario, job = tagged
    course = scenario.course
    jobs = hub.scope(course.workspace_id, course.actor_id)
    items, pages = await all_items(jobs, job.id, limit=7)
    assert pages == -(-PAGES // 7)
    # Every item exactly once, in order, one per page of the course.
    assert [i.ordinal for i in items] == list(range(1, PAGES + 1))
    assert Counter(i.ref for i in items) == Counter(course.page_ids)
    states = Counter(i.state.value for i in items)
    assert states == {"succeeded": job.succeeded, "skipped": job.skipped, "failed": job.failed}
    by_page = {i.ref: i for i in items}
    codes = Counter(i.error_code for i in items if i.state == ItemState.failed)
    assert codes == {"concurrency_conflict": 12, "page_unavailable": 1}
    assert {p for p in course.page_ids if by_page[p].error_code == "concurrency_conflict"} == set(
        scenario.conflicts
    )
    assert by_page[scenario.trashed].error_code == "page_unavailable"
    assert all(by_page[p].state == ItemState.skipped for p in scenario.had_tag)
    for item in items:
        if item.state == ItemState.failed:
            assert item.error_message and item.processed_at is not None
        else:
            assert item.error_code is None
    # The title at the snapshot (the conflicting edits changed the text, not the titles).
    assert by_page[course.root_page_id].label == "Onboarding"
    assert by_page[course.page_ids[1]].label == "Onboarding lesson 1"

    failed, failed_pages = await all_items(jobs, job.id, state=ItemState.failed, limit=5)
    assert failed_pages == 3 and [i.ordinal for i in failed] == sorted(
        i.ordinal for i in items if i.state == ItemState.failed
    )
    last = await jobs.items(job.id, state="failed", after=failed[-1].ordinal)
    assert (last.items, last.next) == ([], None)

    for bad, code in (
        ({"state": "broken"}, "invalid_state"),
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 1001}, "invalid_limit"),
        ({"after": -1}, "invalid_cursor"),
    ):
        with pytest.raises(InvalidInput) as refused:
            await jobs.items(job.id, **bad)
        assert refused.value.code == code

    # Another workspace: its administrator sees neither this workspace nor the job.
    other = await seed(engine, 3)
    with pytest.raises(NotFound) as hidden:
        await hub.scope(course.workspace_id, other.actor_id).items(job.id)
    assert hidden.value.code == "workspace_not_found"
    with pytest.raises(NotFound) as foreign:
        await hub.scope(other.workspace_id, other.actor_id).items(job.id)
    assert foreign.value.code == "job_not_found"
    # A reader of this workspace may see the outcomes.
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    seen = await hub.scope(course.workspace_id, reader).items(job.id, state=ItemState.failed)
    assert len(seen.items) == 13


async def test_items_through_the_api_and_the_cli(
    http: httpx.AsyncClient,
    api_settings: Settings,
    tagged: tuple[Tagged, JobView],
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    scenario, job = tagged
    course = scenario.course
    auth = bearer(course.actor_id, api_settings)
    url = f"/workspaces/{course.workspace_id}/jobs/{job.id}/items"
    seen: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        answer = await http.get(url, params={"after": after, "limit": 64}, headers=auth)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"items", "next"}
        seen += body["items"]
        after = body["next"]
    assert [i["ordinal"] for i in seen] == list(range(1, PAGES + 1))
    assert set(seen[0]) == {
        "ordinal",
        "ref",
        "label",
        "state",
        "error_code",
        "error_message",
        "processed_at",
    }
    assert Counter(i["state"] for i in seen) == {
        "succeeded": job.succeeded,
        "skipped": job.skipped,
        "failed": job.failed,
    }
    failed = await http.get(url, params={"state": "failed", "limit": 100}, headers=auth)
    assert failed.status_code == 200 and failed.json()["next"] is None
    assert {i["ref"] for i in failed.json()["items"]} == {
        str(p) for p in [*scenario.conflicts, scenario.trashed]
    }
    for query in ({"state": "broken"}, {"limit": 0}, {"after": -1}, {"limit": 5000}):
        refused = await http.get(url, params=query, headers=auth)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_request"
    assert (await http.get(url)).status_code == 401

    other = await seed(engine, 3)
    outsider = bearer(other.actor_id, api_settings)
    probe = await http.get(url, headers=outsider)
    assert probe.status_code == 404 and probe.json()["error"]["code"] == "workspace_not_found"
    foreign = await http.get(
        url.replace(str(course.workspace_id), str(other.workspace_id)), headers=outsider
    )
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "job_not_found"

    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    listed = await hubjobs_json(
        api_settings, tmp_path, "items", str(job.id), *scope, "--state", "failed"
    )
    assert [i["error_code"] for i in listed["items"]].count("concurrency_conflict") == 12
    assert listed["next"] is None and len(listed["items"]) == 13
    first = await hubjobs_json(
        api_settings, tmp_path, "items", str(job.id), *scope, "--limit", "100"
    )
    second = await hubjobs_json(
        api_settings, tmp_path, "items", str(job.id), *scope, "--after", str(first["next"])
    )
    assert len(first["items"]) == 100 and first["next"] == 100
    assert second["items"][0]["ordinal"] == 101 and len(second["items"]) == 100
    text_view = await run_hubjobs(
        api_settings,
        tmp_path,
        "items",
        str(job.id),
        *scope,
        "--state",
        "failed",
        extra_env={"COLUMNS": "200"},
    )
    assert text_view.returncode == 0, text_view.stderr
    assert text_view.stdout.count("concurrency_conflict") == 12
    assert "page_unavailable" in text_view.stdout


async def test_a_job_with_failed_items_says_so_wherever_its_status_is_shown(
    http: httpx.AsyncClient,
    api_settings: Settings,
    tagged: tuple[Tagged, JobView],
    tmp_path: Path,
) -> None:
    """A job that succeeded with 13 of its pages failed: the list and ``status`` show
    ``succeeded (13 failed)``, the API's resource ``has_failed_items``. Before: a plain
    ``succeeded``, the failures to be found in a counter (Temporal's side:
    tests/integration/test_course_tagging.py)."""
    scenario, job = tagged
    course = scenario.course
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    wide = {"COLUMNS": "200"}
    for command in (["list"], ["status", str(job.id)]):
        shown = await run_hubjobs(api_settings, tmp_path, *command, *scope, extra_env=wide)
        assert shown.returncode == 0, shown.stderr
        assert "succeeded (13 failed)" in shown.stdout, shown.stdout
    listed = await http.get(
        f"/workspaces/{course.workspace_id}/jobs", headers=bearer(course.actor_id, api_settings)
    )
    [resource] = listed.json()["jobs"]
    assert (resource["status"], resource["has_failed_items"], resource["failed"]) == (
        "succeeded",
        True,
        13,
    )


# --- retry ------------------------------------------------------------------------------------


async def test_retry_tags_the_failed_pages_once_and_is_one_job_per_source(
    hub: HubJobsClient,
    http: httpx.AsyncClient,
    api_settings: Settings,
    tagged: tuple[Tagged, JobView],
    engine: AsyncEngine,
    temporal: Client,
    settings: Settings,
    tmp_path: Path,
) -> None:
    scenario, source = tagged
    course = scenario.course
    jobs = hub.scope(course.workspace_id, course.actor_id)
    # One conflicting page goes to the trash before the retry: it is no longer there.
    gone = scenario.conflicts[-1]
    await edit(engine, gone, trashed=True)
    retried_pages = scenario.conflicts[:-1]
    for page in retried_pages:
        assert TAG not in await tags_of(engine, page)

    async with running_worker(temporal, settings):
        retry = await jobs.retry(source.id)
        # Its first attempt takes its items: the failed pages still out of the trash.
        assert (retry.kind, retry.source_job_id, retry.total) == ("course_tagging", source.id, 0)
        assert retry.payload == source.payload
        done = await jobs.wait(retry.id, timeout=60)
        again = await jobs.retry(source.id)
    assert again.id == retry.id
    assert done.status == "succeeded"
    assert (done.total, done.succeeded, done.skipped, done.failed) == (len(retried_pages), 11, 0, 0)
    assert done.result is not None and done.result["sourceJobId"] == str(source.id)
    assert done.result["tag"] == TAG and done.result["succeeded"] == 11
    items, _ = await all_items(jobs, done.id, limit=100)
    assert [i.ref for i in items] == list(retried_pages)
    assert all(i.state == ItemState.succeeded for i in items)

    # Tagged once each: the retried pages and every page the first run tagged; the two
    # trashed pages never.
    for page in retried_pages:
        assert await tags_of(engine, page) == [TAG]
    revisions = await job_revisions(engine, TAG)
    assert {p: n for p, n in revisions.items() if n != 1} == {}
    tagged_by_jobs = set(course.page_ids) - set(scenario.had_tag) - {gone, scenario.trashed}
    assert set(revisions) == tagged_by_jobs

    # The same retry through the API and the CLI; the read model links the two.
    auth = bearer(course.actor_id, api_settings)
    answer = await http.post(
        f"/workspaces/{course.workspace_id}/jobs/{source.id}/retry", headers=auth
    )
    assert answer.status_code == 202 and answer.json()["id"] == str(retry.id)
    assert answer.headers["Content-Location"] == (
        f"/workspaces/{course.workspace_id}/jobs/{retry.id}"
    )
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    by_cli = await hubjobs_json(settings, tmp_path, "retry", str(source.id), *scope)
    assert by_cli["id"] == str(retry.id) and by_cli["status"] == "succeeded"
    assert (await jobs.get(retry.id)).source_job_id == source.id

    # Nothing failed in the retry: retrying it has nothing to do.
    with pytest.raises(InvalidInput) as nothing:
        await jobs.retry(retry.id)
    assert nothing.value.code == "nothing_to_retry"


async def test_a_retry_with_nothing_to_do_does_not_become_the_retry(
    hub: HubJobsClient,
    tagged: tuple[Tagged, JobView],
    engine: AsyncEngine,
    temporal: Client,
    settings: Settings,
) -> None:
    """Every failed page in the trash: the retry is refused (``nothing_to_retry``), not
    a job of no page that "succeeds" and then answers every later retry of the same
    job. Before: that empty job, and once the pages were back, the same empty job again,
    so that they could never be retried. An empty retry left so (its pages trashed
    between its start and its first attempt) gives its key up likewise."""
    scenario, source = tagged
    course = scenario.course
    jobs = hub.scope(course.workspace_id, course.actor_id)
    failed = [*scenario.conflicts, scenario.trashed]
    for page in scenario.conflicts:
        await edit(engine, page, trashed=True)
    with pytest.raises(InvalidInput) as nothing:
        await jobs.retry(source.id)
    assert nothing.value.code == "nothing_to_retry"
    assert [job.id for job in await jobs.list()] == [source.id]

    # A retry that took no page, as one whose pages were trashed after its start ends.
    empty = uuid.uuid4()
    async with engine.begin() as conn:
        await job_rows.insert_job(
            conn,
            job_id=empty,
            kind="course_tagging",
            workspace_id=course.workspace_id,
            actor_id=course.actor_id,
            correlation_id="empty-retry",
            idempotency_key=retry_key(source.id),
            payload=source.payload,
            source_job_id=source.id,
        )
        await job_rows.set_snapshot(conn, empty, total=0, summary="Retry tagging 0 pages")
        await job_rows.open_job(conn, empty, run_id=None, attempts=1, attempts_failed=0)
        succeeded = job_rows.Ending(JobStatus.succeeded)
        await job_rows.finish(conn, empty, succeeded, retention=timedelta(hours=1))

    # The pages back: the retry is a new job, which tags them.
    for page in failed:
        await edit(engine, page, trashed=False)
    async with running_worker(temporal, settings):
        retry = await jobs.retry(source.id)
        assert retry.id != empty and retry.source_job_id == source.id
        done = await jobs.wait(retry.id, timeout=60)
        assert (await jobs.retry(source.id)).id == retry.id
    assert (done.status, done.total, done.succeeded) == ("succeeded", len(failed), len(failed))
    for page in failed:
        assert await tags_of(engine, page) == [TAG]


async def test_retry_is_refused_with_a_clear_code(
    hub: HubJobsClient,
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    temporal: Client,
    settings: Settings,
    course: DemoCourse,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    # Not finished: no worker runs yet.
    tagging = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    with pytest.raises(InvalidInput) as running:
        await jobs.retry(tagging.id)
    assert running.value.code == "job_not_finished"
    async with running_worker(temporal, settings):
        done = await jobs.wait(tagging.id, timeout=60)
        export = await jobs.wait((await jobs.start("page_export", {})).id, timeout=60)
        backup = await jobs.start("backup", {})
        for job in (export, backup):
            with pytest.raises(InvalidInput) as kind:
                await jobs.retry(job.id)
            assert kind.value.code == "not_retryable"
        await jobs.wait(backup.id, timeout=60)
    assert done.status == "succeeded" and done.failed == 0
    with pytest.raises(InvalidInput) as nothing:
        await jobs.retry(done.id)
    assert nothing.value.code == "nothing_to_retry"
    with pytest.raises(NotFound) as missing:
        await jobs.retry(uuid.uuid4())
    assert missing.value.code == "job_not_found"

    # Who may: an administrator of the job's workspace only, and others learn nothing.
    other = await seed(engine, 3)
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    with pytest.raises(Forbidden) as not_admin:
        await hub.scope(course.workspace_id, reader).retry(done.id)
    assert not_admin.value.code == "actor_not_administrator"
    with pytest.raises(NotFound) as outsider:
        await hub.scope(course.workspace_id, other.actor_id).retry(done.id)
    assert outsider.value.code == "workspace_not_found"
    with pytest.raises(NotFound) as foreign:
        await hub.scope(other.workspace_id, other.actor_id).retry(done.id)
    assert foreign.value.code == "job_not_found"

    # The API answers with the same codes; a refused retry writes no job.
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    before = len(await jobs.list())
    for job_id, status, code in (
        (done.id, 422, "nothing_to_retry"),
        (export.id, 422, "not_retryable"),
        (uuid.uuid4(), 404, "job_not_found"),
    ):
        answer = await http.post(f"{base}/{job_id}/retry", headers=auth)
        assert answer.status_code == status and answer.json()["error"]["code"] == code
    foreign_api = await http.post(
        f"/workspaces/{other.workspace_id}/jobs/{done.id}/retry",
        headers=bearer(other.actor_id, api_settings),
    )
    assert foreign_api.status_code == 404
    assert foreign_api.json()["error"]["code"] == "job_not_found"
    assert len(await jobs.list()) == before
    with pytest.raises(HubJobsError):
        await jobs.retry(done.id, correlation_id="not a key")
