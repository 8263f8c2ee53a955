"""No payload near Temporal's 2 MB limit (issue 30): an export whose manifest runs past
it, with a real worker process.

20,000 pages, one a file: the manifest lists 20,000 files, over 3 MB of JSON. The job
ends with the row and Temporal agreeing: the run closed Completed, its ``JobStatus``
search attribute ``succeeded``, its result a bounded summary that says where the
manifest is; the read model holds the whole manifest, and the API serves it complete,
every file listed once with its count, each one downloadable.

Before, the row said ``succeeded`` but the run's completion (the whole manifest in its
result) failed its workflow task with ``PayloadsTooLarge``, again every ~10 s for good:
the run stayed Running, its ``JobStatus`` ``running``.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowExecutionStatus

from hubjobs.kinds.page_export import export_folder
from hubjobs.readmodel.status import JobStatus
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.messages import JobOutcome
from starter.client import HubJobsClient
from tests.support.helpers import workflow_closed
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import bearer, seed
from tests.system.test_faults import failed_job, wait_started
from tests.system.test_full_disk import small_disk

PAGES = 20_000
# Temporal's limit on one payload; the warning threshold is 512 KB.
PAYLOAD_LIMIT = 2 * 1024 * 1024
WARNING = 512 * 1024
# The export's folder: a tmpfs of the test's own, where 20,000 fsyncs cost nothing (the
# test is about the manifest, not the disk); 20,000 files of a page take about 80 MB.
EXPORT_DISK = "256m"


# 20,000 files take 150 s on an idle machine, twice that beside two `yes`.
@pytest.mark.timeout(900)
async def test_an_export_whose_manifest_is_over_3_mb_closes_its_run_completed(
    temporal: Client,
    engine: AsyncEngine,
    api_settings: Settings,
    http: httpx.AsyncClient,
    tmp_path: Path,
) -> None:
    course = await seed(engine, PAGES)
    with small_disk(EXPORT_DISK) as disk:
        settings = api_settings.model_copy(update={"export_dir": disk})
        env = hubjobs_env(settings, tmp_path, export_dir=disk)
        worker = WorkerProcess("worker", env, tmp_path)
        try:
            await wait_started(worker)
            jobs = HubJobsClient(temporal, engine, settings).scope(
                course.workspace_id, course.actor_id
            )
            started = time.monotonic()
            job = await jobs.start_page_export(pages_per_file=1)
            done = await jobs.wait(job.id, timeout=900, interval=1)
            row_final = time.monotonic() - started
            # The run closes a workflow task after the row is final; before, it never did.
            await workflow_closed(temporal, done.workflow_id, timeout=60)
            closed = time.monotonic() - started
            handle = temporal.get_workflow_handle(done.workflow_id, result_type=JobOutcome)
            description = await handle.describe()
            outcome = await handle.result()
        finally:
            worker.kill()
        assert done.status == JobStatus.succeeded, failed_job(done, [worker])
        assert done.total == PAGES and done.processed == PAGES
        assert description.status == WorkflowExecutionStatus.COMPLETED, description.status
        assert description.typed_search_attributes.get(sa.JOB_STATUS) == JobStatus.succeeded

        # The read model holds the whole manifest, well past what one payload may carry.
        assert done.result is not None
        stored = json.dumps(done.result, separators=(",", ":")).encode()
        assert len(stored) > 1.4 * PAYLOAD_LIMIT, len(stored)
        # Temporal carries a summary of it, far under the warning, agreeing with the row.
        assert outcome.status == JobStatus.succeeded and outcome.counters == done.counters
        assert outcome.result is not None
        carried = json.dumps(outcome.result, separators=(",", ":")).encode()
        assert len(carried) < WARNING / 100, carried
        assert outcome.result["files"] == PAGES and outcome.result["pages"] == PAGES
        assert outcome.result["manifest"] == f"/workspaces/{course.workspace_id}/jobs/{done.id}"
        assert outcome.result["transactionTime"] == done.result["transactionTime"]

        # The API's manifest, complete: every file once, a page each, all of them there.
        auth = bearer(course.actor_id, api_settings)
        answer = await http.get(outcome.result["manifest"], headers=auth)
        assert answer.status_code == 200, answer.text[:500]
        manifest = answer.json()
        assert manifest == done.result
        base = f"/workspaces/{course.workspace_id}/jobs/{done.id}/files"
        names = [f"pages-{k:04d}.ndjson" for k in range(1, PAGES + 1)]
        assert [e["url"] for e in manifest["output"]] == [f"{base}/{n}" for n in names]
        assert all(e["count"] == 1 for e in manifest["output"])
        folder = export_folder(settings, done.id)
        assert sorted(p.name for p in folder.iterdir()) == sorted(names)
        lines = [json.loads((folder / n).read_bytes()) for n in names]
        assert sorted(uuid.UUID(line["id"]) for line in lines) == sorted(course.page_ids)
    print(
        f"\n{PAGES} files: row final {row_final:.1f} s after the start, run closed at "
        f"{closed:.1f} s; manifest {len(stored) / 1e6:.2f} MB in the read model, "
        f"{len(carried)} bytes carried by Temporal"
    )
