"""Page export on the real servers: a 20,000-page course and a whole workspace exported
as NDJSON files, every page exactly once and as it was when the job started (pages
edited, trashed and added afterwards change nothing), the manifest in the FHIR
bulk-data shape with the right counts; a worker process SIGKILLed mid-export and a
second one finishing it without a duplicated or missing line; a cancelled export
leaving no file; the retention sweep taking an expired export's files; downloads
through the API with a bearer token, and 404 for another workspace's file, a name not
in the manifest and an export not finished; `hubjobs export` on the command line."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.devstack.demo_data import DemoCourse, create_course
from hubjobs.errors import NotFound
from hubjobs.kinds.page_export import export_folder
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal.messages import SweepResult
from starter.api import create_app
from starter.client import HubJobsClient
from tests.support.helpers import (
    edit,
    processed_of,
    snapshot_now,
    wait_until_final,
    wait_until_processed,
)
from tests.support.processes import WorkerProcess, hubjobs_env, hubjobs_json
from tests.support.servers import bearer, running_worker, seed

MANIFEST_KEYS = {"transactionTime", "request", "requiresAccessToken", "output", "error"}
LINE_KEYS = {"id", "title", "markdown", "tags", "version", "updatedAt"}

Page = dict[str, Any]


# --- what the tests read back ----------------------------------------------------------


async def pages_now(engine: AsyncEngine, page_ids: list[uuid.UUID]) -> dict[str, Page]:
    """The pages as they are now, in the export's terms (id → its line's fields)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id, title, markdown, tags, version, updated_at FROM pages "
                "WHERE id = ANY(:ids)"
            ),
            {"ids": page_ids},
        )
        return {
            str(row.id): {
                "id": str(row.id),
                "title": row.title,
                "markdown": row.markdown,
                "tags": list(row.tags),
                "version": row.version,
                "updatedAt": row.updated_at,
            }
            for row in rows
        }


async def workspace_pages(engine: AsyncEngine, workspace_id: uuid.UUID) -> list[uuid.UUID]:
    """Every page of the workspace out of the trash, neither trashed itself nor under a
    trashed page (counted here by climbing each page's ancestors, not by the walk the
    export uses): what a whole-workspace export holds."""
    async with engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    text(
                        """
                        WITH RECURSIVE up AS (
                            SELECT id AS page, id AS at FROM pages WHERE workspace_id = :ws
                            UNION ALL
                            SELECT up.page, p.parent_id FROM up JOIN pages p ON p.id = up.at
                             WHERE p.parent_id IS NOT NULL
                        )
                        SELECT up.page FROM up JOIN pages a ON a.id = up.at
                         GROUP BY up.page HAVING NOT bool_or(a.trashed)
                        """
                    ),
                    {"ws": workspace_id},
                )
            ).scalars()
        )


def file_names(job: JobView) -> list[str]:
    assert job.result is not None
    return [entry["url"].rsplit("/", 1)[-1] for entry in job.result["output"]]


def parse_ndjson(data: bytes) -> list[Page]:
    assert data.endswith(b"\n") or data == b""
    return [json.loads(line) for line in data.decode().splitlines()]


def read_files(settings: Settings, job: JobView) -> dict[str, list[Page]]:
    """Each manifest file's lines, read from the export folder."""
    folder = export_folder(settings, job.id)
    return {name: parse_ndjson((folder / name).read_bytes()) for name in file_names(job)}


def assert_manifest(job: JobView, files: dict[str, list[Page]], per_file: int) -> None:
    """The FHIR bulk-data shape, each file listed with its URL (the API's) and count."""
    assert job.result is not None
    manifest = job.result
    assert set(manifest) == MANIFEST_KEYS, manifest.keys()
    # When the first attempt froze the pages.
    assert datetime.fromisoformat(manifest["transactionTime"]) == job.snapshot_at
    assert manifest["request"] == f"/workspaces/{job.workspace_id}/jobs/page_export"
    assert manifest["requiresAccessToken"] is True
    assert manifest["error"] == []
    base = f"/workspaces/{job.workspace_id}/jobs/{job.id}/files"
    expected_files = -(-job.total // per_file)
    assert [e["url"] for e in manifest["output"]] == [
        f"{base}/pages-{k:04d}.ndjson" for k in range(1, expected_files + 1)
    ]
    for entry in manifest["output"]:
        assert set(entry) == {"type", "url", "count"} and entry["type"] == "Page"
        assert entry["count"] == len(files[entry["url"].rsplit("/", 1)[-1]])
    counts = [e["count"] for e in manifest["output"]]
    assert counts[:-1] == [per_file] * (len(counts) - 1) and 1 <= counts[-1] <= per_file
    assert sum(counts) == job.total


def assert_every_page_once(files: dict[str, list[Page]], snapshot: dict[str, Page]) -> None:
    """Every page of the snapshot on exactly one line, each line exactly as the page
    was at the snapshot, and nothing else."""
    lines = [line for name in sorted(files) for line in files[name]]
    ids = [line["id"] for line in lines]
    duplicated = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
    assert not duplicated, f"{len(duplicated)} pages on more than one line"
    assert set(ids) == set(snapshot), (
        f"missing {len(set(snapshot) - set(ids))}, extra {len(set(ids) - set(snapshot))}"
    )
    wrong = []
    for line in lines:
        assert set(line) == LINE_KEYS, line.keys()
        as_read = {**line, "updatedAt": datetime.fromisoformat(line["updatedAt"])}
        if as_read != snapshot[line["id"]]:
            wrong.append(line["id"])
    assert not wrong, f"{len(wrong)} lines differ from the snapshot, e.g. {wrong[:3]}"


def folder_names(settings: Settings, job_id: uuid.UUID) -> list[str]:
    folder = export_folder(settings, job_id)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def edit_after_start(engine: AsyncEngine, pages: list[uuid.UUID]) -> None:
    """Others at work once the export started: titles, text and tags changed (each a new
    version), one page trashed."""
    for n, page in enumerate(pages[:-1]):
        await edit(engine, page, title=f"Renamed {n}", markdown=f"# changed {n}", tags=["later"])
    await edit(engine, pages[-1], trashed=True)


# --- 1. a 20,000-page course and a whole workspace ------------------------------------------


async def test_a_20000_page_course_is_exported_once_each_as_it_was_at_the_start(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    pages, per_file = 20_000, 1000
    course = await seed(engine, pages)
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    snapshot = await pages_now(engine, course.page_ids)

    started = time.monotonic()
    job = await jobs.start(
        "page_export", {"root_page_id": course.root_page_id, "pages_per_file": per_file}
    )
    start_seconds = time.monotonic() - started
    assert (job.total, job.kind, job.snapshot_at) == (0, "page_export", None)
    # The snapshot, as the first attempt takes it; then, before any worker runs: edits, a
    # trashed page, a new page.
    job = await snapshot_now(engine, job.id)
    assert job.total == pages
    await edit_after_start(engine, course.page_ids[100:151])
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO pages (id, workspace_id, parent_id, title, markdown) "
                "VALUES (:id, :ws, :parent, 'Added later', 'new')"
            ),
            {"id": uuid.uuid4(), "ws": course.workspace_id, "parent": course.root_page_id},
        )
    assert (await pages_now(engine, course.page_ids[100:101])) != {
        str(course.page_ids[100]): snapshot[str(course.page_ids[100])]
    }

    async with running_worker(temporal, settings):
        running = time.monotonic()
        done = await jobs.wait(job.id, timeout=240)
        run_seconds = time.monotonic() - running
    print(
        f"\nexport of {pages} pages: start (snapshot) {start_seconds:.2f} s, "
        f"run {run_seconds:.2f} s, {done.attempts} attempts"
    )
    assert done.status == "succeeded", (done.error_code, done.error_message)
    assert (done.total, done.processed, done.succeeded, done.skipped, done.failed) == (
        pages,
        pages,
        pages,
        0,
        0,
    )
    files = read_files(settings, done)
    assert len(files) == pages // per_file
    assert_manifest(done, files, per_file)
    assert_every_page_once(files, snapshot)
    # Only the manifest's files: no temporary file left, and the frozen copies dropped.
    assert folder_names(settings, done.id) == sorted(files)
    async with engine.connect() as conn:
        frozen = (
            await conn.execute(
                text("SELECT count(*) FROM job_items WHERE job_id = :id AND detail IS NOT NULL"),
                {"id": done.id},
            )
        ).scalar_one()
    assert frozen == 0


async def test_a_whole_workspace_is_exported_and_nothing_of_another(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    course = await seed(engine, 1500)
    other = await seed(engine, 200)  # another workspace: none of it in the export
    async with engine.begin() as conn:
        second = await create_course(conn, course.workspace_id, 499, title="Second course")
        await conn.execute(
            text("UPDATE pages SET trashed = true WHERE id = :id"), {"id": course.page_ids[-1]}
        )
        # A lesson with pages under it (fanout 10: page 1 holds pages 11 to 20, and
        # theirs): it and all of them are in the trash, as course tagging has it.
        await conn.execute(
            text("UPDATE pages SET trashed = true WHERE id = :id"), {"id": second[1]}
        )
    expected = await workspace_pages(engine, course.workspace_id)
    under_trashed = {second[1], *second[11:21], *second[111:211]}
    assert len(expected) == 1500 + 499 - 1 - len(under_trashed)
    assert not set(expected) & (set(other.page_ids) | under_trashed)
    assert set(second) - under_trashed <= set(expected)
    snapshot = await pages_now(engine, expected)
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    job = await jobs.start("page_export", {"pages_per_file": 250})
    await snapshot_now(engine, job.id)  # as the first attempt takes it
    await edit_after_start(engine, second[:20])
    async with running_worker(temporal, settings):
        done = await jobs.wait(job.id, timeout=120)
    assert done.status == "succeeded" and done.total == done.succeeded == len(expected)
    files = read_files(settings, done)
    assert len(files) == 8
    assert_manifest(done, files, 250)
    assert_every_page_once(files, snapshot)


# --- 2. a worker killed mid-export ------------------------------------------------------------


async def test_a_worker_killed_mid_export_is_finished_by_another_exactly(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """A real worker process writes 200 files of 50 pages; SIGKILLed once some 2,000
    pages are recorded (maybe mid-file: after its write, before its record), the lease
    runs out and a second process carries on from the pending items. Each file is
    written whole from the frozen snapshot, so a file written twice is the same file."""
    pages, per_file, kill_after = 10_000, 50, 2000
    course = await seed(engine, pages)
    snapshot = await pages_now(engine, course.page_ids)
    starter = settings.model_copy(update={"heartbeat_timeout_seconds": 3})
    jobs = HubJobsClient(temporal, engine, starter).scope(course.workspace_id, course.actor_id)
    env = hubjobs_env(settings, tmp_path, heartbeat_timeout_seconds=3, work_slice_seconds=30)
    workers: list[WorkerProcess] = []
    try:
        job = await jobs.start(
            "page_export", {"root_page_id": course.root_page_id, "pages_per_file": per_file}
        )
        # The snapshot as the first attempt takes it, then edits, then the first worker.
        await snapshot_now(engine, job.id)
        await edit_after_start(engine, course.page_ids[5000:5011])
        first = WorkerProcess("worker-1", env, tmp_path)
        workers.append(first)
        t0 = time.monotonic()
        await wait_until_processed(engine, job.id, kill_after, first, timeout=90)
        print(f"\nreached {kill_after} in {time.monotonic() - t0:.1f} s")
        assert first.kill() == -signal.SIGKILL
        at_kill = await processed_of(engine, job.id)
        print(f"\nkilled worker-1 with {at_kill} of {pages} pages exported")
        assert kill_after <= at_kill < pages, "the export must still have files left at the kill"
        await asyncio.sleep(1.0)
        assert await processed_of(engine, job.id) == at_kill  # nothing moves meanwhile

        second = WorkerProcess("worker-2", env, tmp_path)
        workers.append(second)
        t1 = time.monotonic()
        done = await wait_until_final(jobs, job.id, timeout=120)
        print(f"finished {time.monotonic() - t1:.1f} s after the second worker started")
        assert done.status == "succeeded", (done.error_code, second.tail())
    except BaseException:
        for w in workers:
            print(f"\n--- {w.name}:\n{w.tail()}")
        raise
    finally:
        for w in workers:
            w.kill()
    assert done.attempts >= 2 and done.attempts_failed == 0, done
    files = read_files(settings, done)
    assert len(files) == pages // per_file
    assert_manifest(done, files, per_file)
    assert_every_page_once(files, snapshot)
    assert folder_names(settings, done.id) == sorted(files)  # no temporary file left


# --- 3. cancelled, expired ----------------------------------------------------------------------


async def test_a_cancelled_export_leaves_no_file(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    pages = 10_000
    course = await seed(engine, pages)
    hub = HubJobsClient(temporal, engine, settings)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, settings):
        job = await jobs.start(
            "page_export", {"root_page_id": course.root_page_id, "pages_per_file": 5}
        )
        deadline = time.monotonic() + 60
        while await processed_of(engine, job.id) < 500:
            assert time.monotonic() < deadline, "the export did not get going"
            await asyncio.sleep(0.02)
        written = folder_names(settings, job.id)
        assert written, "files were written before the cancellation"
        await jobs.cancel(job.id, reason="not needed")
        done = await wait_until_final(jobs, job.id, timeout=60)
    assert done.status == "cancelled", done.status
    assert done.processed < pages
    assert not export_folder(settings, job.id).exists()
    with pytest.raises(NotFound) as gone:
        await jobs.job_file(job.id, written[0])
    assert gone.value.code == "job_not_found"


async def test_the_retention_sweep_removes_an_expired_exports_files(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    course = await seed(engine, 120)
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, settings):
        expiring = await jobs.wait(
            (await jobs.start("page_export", {"pages_per_file": 50})).id, timeout=60
        )
        kept = await jobs.wait(
            (await jobs.start("page_export", {"pages_per_file": 50})).id, timeout=60
        )
        assert expiring.status == kept.status == "succeeded"
        assert len(folder_names(settings, expiring.id)) == len(folder_names(settings, kept.id)) == 3
        path = (await jobs.job_file(expiring.id, "pages-0001.ndjson")).path
        assert path.is_file()
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE jobs SET expires_at = now() - interval '1 minute' WHERE id = :id"),
                {"id": expiring.id},
            )
        swept = await temporal.execute_workflow(
            "RetentionSweep",
            100,
            id=f"sweep-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            result_type=SweepResult,
        )
    assert (swept.removed, swept.kept) == (1, 0)
    assert not export_folder(settings, expiring.id).exists() and not path.exists()
    assert len(folder_names(settings, kept.id)) == 3
    with pytest.raises(NotFound):
        await jobs.job_file(expiring.id, "pages-0001.ndjson")
    assert (await jobs.job_file(kept.id, "pages-0003.ndjson")).path.is_file()


# --- 4. through the API ---------------------------------------------------------------------


async def test_files_are_downloaded_through_the_api_and_only_by_their_workspace(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, temporal: Client
) -> None:
    course = await seed(engine, 2500)
    other = await seed(engine, 10)
    snapshot = await pages_now(engine, course.page_ids)
    auth = bearer(course.actor_id, api_settings)
    outsider = bearer(other.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"

    started = await http.post(
        f"{base}/page_export",
        json={"root_page_id": str(course.root_page_id), "pages_per_file": 1000},
        headers=auth,
    )
    assert started.status_code == 202
    location = started.headers["Content-Location"]
    job_id = started.json()["id"]
    # Not finished (no worker yet): no file, though the name is the one it will have.
    unfinished = await http.get(f"{location}/files/pages-0001.ndjson", headers=auth)
    assert unfinished.status_code == 404
    assert unfinished.json()["error"]["code"] == "job_not_found"

    async with running_worker(temporal, api_settings):
        answer = await http.get(location, headers=auth)
        deadline = time.monotonic() + 60
        while answer.status_code == 202 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            answer = await http.get(location, headers=auth)
    assert answer.status_code == 200, answer.text
    manifest = answer.json()
    assert set(manifest) == MANIFEST_KEYS and manifest["requiresAccessToken"] is True
    assert [e["count"] for e in manifest["output"]] == [1000, 1000, 500]

    downloaded: dict[str, list[Page]] = {}
    for entry in manifest["output"]:
        url = entry["url"]
        assert url.startswith(f"{location}/files/")
        got = await http.get(url, headers=auth)
        assert got.status_code == 200
        assert got.headers["content-type"] == "application/x-ndjson"
        assert int(got.headers["content-length"]) == len(got.content)
        name = url.rsplit("/", 1)[-1]
        on_disk = export_folder(api_settings, uuid.UUID(job_id)) / name
        assert got.content == on_disk.read_bytes()
        downloaded[name] = parse_ndjson(got.content)
        assert len(downloaded[name]) == entry["count"]
    assert_every_page_once(downloaded, snapshot)

    # An API that knows its public base URL (behind a proxy that strips the prefix)
    # lists the same files at absolute URLs (FHIR bulk data's shape).
    public = "http://hubjobs/public-api"
    absolute_app = create_app(
        api_settings.model_copy(update={"api_base_url": public}),
        client=HubJobsClient(temporal, engine, api_settings),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=absolute_app), base_url="http://hubjobs"
    ) as absolute_http:
        answer = await absolute_http.get(location, headers=auth)
        assert answer.status_code == 200, answer.text
        absolute = answer.json()
        assert absolute["request"] == f"{public}{manifest['request']}"
        assert [e["url"] for e in absolute["output"]] == [
            f"{public}{e['url']}" for e in manifest["output"]
        ]
        got = await absolute_http.get(
            absolute["output"][0]["url"].removeprefix(public), headers=auth
        )
        assert got.status_code == 200 and got.content

    first = manifest["output"][0]["url"]
    # The same bearer token as every call: none, or a bad one, is 401.
    assert (await http.get(first)).status_code == 401
    assert (await http.get(first, headers={"Authorization": "Bearer x"})).status_code == 401
    # Another workspace's administrator: this workspace does not exist for it, and from
    # its own workspace the job does not either.
    probe = await http.get(first, headers=outsider)
    assert probe.status_code == 404 and probe.json()["error"]["code"] == "workspace_not_found"
    foreign = first.replace(str(course.workspace_id), str(other.workspace_id))
    hidden = await http.get(foreign, headers=outsider)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "job_not_found"
    # Only the manifest's names: nothing else in the folder or beside it.
    for name in (
        "pages-0004.ndjson",
        ".pages-0001.ndjson.partial",
        "pages-1.ndjson",
        "..%2F..%2Fstack.json",
        "%2e%2e",
    ):
        refused = await http.get(f"{location}/files/{name}", headers=auth)
        assert refused.status_code == 404, (name, refused.status_code)
        assert refused.json()["error"]["code"] in ("job_not_found", "not_found"), name
    # A job of another kind has no files.
    tagging = await http.post(
        f"{base}/course_tagging",
        json={"root_page_id": str(course.root_page_id), "tag": "t"},
        headers=auth,
    )
    none = await http.get(
        f"{tagging.headers['Content-Location']}/files/pages-0001.ndjson", headers=auth
    )
    assert none.status_code == 404 and none.json()["error"]["code"] == "job_not_found"


# --- 5. the command line -----------------------------------------------------------------------


async def test_hubjobs_export_on_the_command_line(
    settings: Settings, engine: AsyncEngine, course: DemoCourse, worker: None, tmp_path: Path
) -> None:
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    whole = await hubjobs_json(
        settings, tmp_path, "export", *scope, "--pages-per-file", "7", "--wait", timeout=120
    )
    assert (whole["kind"], whole["status"], whole["total"]) == ("page_export", "succeeded", 30)
    assert [e["count"] for e in whole["result"]["output"]] == [7, 7, 7, 7, 2]
    course_only = await hubjobs_json(
        settings,
        tmp_path,
        "export",
        *scope,
        "--root-page",
        str(course.page_ids[1]),
        "--wait",
        timeout=120,
    )
    # Page 1's subtree: itself and the pages under it (the demo course's tree).
    assert course_only["status"] == "succeeded" and 1 <= course_only["total"] < 30
    assert [e["count"] for e in course_only["result"]["output"]] == [course_only["total"]]
