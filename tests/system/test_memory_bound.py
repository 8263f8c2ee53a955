"""A worker's memory is bounded whatever the page size (issue 30): a worker process in
a memory cgroup of 256 MB (tests/support/cgroups.py: the kernel OOM-kills it if it
outgrows that) backs up and then exports a hub of 40 pages of 5 MB (random hex, which
no compression shrinks; 210 MB of pages, 1,000 pages a file: one file), each job on
its first attempt, the worker never killed. Its peak RSS over idle is reported for
each job (``VmHWM``, reset between them), with the group's peak charge
(``memory.max_usage_in_bytes``, which counts the page cache the files filled too).

Before, the export read a file's pages whole and wrote them at once (2.1× the pages'
bytes over idle): the worker was OOM-killed on its first attempt."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.kinds.page_export import export_folder
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.cgroups import MemoryCgroup, memory_cgroup
from tests.support.helpers import workflow_closed
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import seed
from tests.system.test_faults import failed_job, wait_started

MB = 1 << 20
LIMIT = 256 * MB
PAGES = 40
PAGE_BYTES = 5 * MB
# What a job may add to the worker's resident memory: a few chunks and buffers, not a
# page, let alone the hub (before: 2.1x the pages' bytes).
OVER_IDLE = 64 * MB


async def five_mb_pages(engine: AsyncEngine, workspace_id: uuid.UUID) -> None:
    """Every page of the workspace gets 5 MB of random hex markdown."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE pages p SET markdown = (SELECT string_agg(md5(p.id::text || i || "
                "random()), '') FROM generate_series(1, :digests) i) WHERE workspace_id = :ws"
            ),
            {"digests": PAGE_BYTES // 32, "ws": workspace_id},
        )


def rss(pid: int) -> tuple[int, int]:
    """The process's resident memory now and its peak (VmRSS, VmHWM), in bytes."""
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def reset_peaks(pid: int, group: MemoryCgroup) -> None:
    """The process's peak RSS and the group's peak charge start again from now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    (group.path / "memory.max_usage_in_bytes").write_text("0")


async def finished(
    jobs: WorkspaceJobs, job_id: uuid.UUID, worker: WorkerProcess, group: MemoryCgroup
) -> JobView:
    """The job once final; fails at once if the worker died meanwhile."""
    deadline = time.monotonic() + 600
    while True:
        job = await jobs.get(job_id)
        if job.is_final:
            return job
        assert worker.alive(), (
            f"the worker died (exit {worker.process.poll()}, {group.oom_kills()} OOM "
            f"kill(s) in its group) at {job.processed}/{job.total} of its {job.kind}, "
            f"attempt {job.attempts}:\n{worker.tail()}"
        )
        assert time.monotonic() < deadline, f"{job.kind} not done in 600 s: {job}"
        await asyncio.sleep(0.2)


async def test_a_worker_in_256_mb_backs_up_and_exports_5_mb_pages(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    course = await seed(engine, PAGES)
    await five_mb_pages(engine, course.workspace_id)
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    peaks: dict[str, tuple[int, int]] = {}
    with memory_cgroup(f"hubjobs-payloads-{os.getpid()}", LIMIT) as group:
        # One time slice for the whole job, however slow the machine: a second attempt
        # then means the worker died (OOM-killed), never that its slice ran out.
        env = hubjobs_env(settings, tmp_path, work_slice_seconds=600)
        worker = WorkerProcess("worker", env, tmp_path, prefix=group.prefix())
        try:
            await wait_started(worker)
            assert worker.pid in group.pids()
            idle, _ = rss(worker.pid)
            for kind in ("backup", "page_export"):
                reset_peaks(worker.pid, group)
                started = time.monotonic()
                if kind == "backup":
                    job = await jobs.start("backup", {})
                else:
                    job = await jobs.start("page_export", {})
                done = await finished(jobs, job.id, worker, group)
                await workflow_closed(temporal, done.workflow_id)
                assert done.status == JobStatus.succeeded, failed_job(done, [worker])
                assert (done.attempts, done.attempts_failed) == (1, 0), done
                peaks[kind] = (rss(worker.pid)[1], group.max_usage_bytes())
                print(
                    f"\n{kind} of {PAGES} pages of {PAGE_BYTES // MB} MB in {LIMIT // MB} MB: "
                    f"{time.monotonic() - started:.1f} s; worker idle {idle / MB:.0f} MB, peak "
                    f"{peaks[kind][0] / MB:.0f} MB (+{(peaks[kind][0] - idle) / MB:.0f} MB); "
                    f"the group's peak charge {peaks[kind][1] / MB:.0f} MB (page cache in it)"
                )
                if kind == "page_export":
                    exported = export_folder(settings, done.id) / "pages-0001.ndjson"
                    assert exported.stat().st_size > PAGES * PAGE_BYTES
            assert group.oom_kills() == 0 and worker.alive()
        finally:
            worker.kill()
    for kind, (peak, _) in peaks.items():
        assert peak - idle < OVER_IDLE, (kind, peak - idle)
