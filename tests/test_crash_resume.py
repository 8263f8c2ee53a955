"""A worker killed mid-course loses nothing and repeats nothing.

A real worker process (``python worker.py``) tags a course of 3000 pages; once some
600 pages are done it is killed with SIGKILL (no graceful shutdown, no last heartbeat).
The activity's lease (the heartbeat timeout) runs out, Temporal retries it, and a second
worker process picks it up from the heartbeat cursor. In the end every page holds the
tag exactly once, with exactly one revision, and the read model agrees with the items.
Without attempts left, the same kill ends the job as ``abandoned``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowExecutionStatus

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.conftest import seed
from tests.helpers import (
    activity_starts,
    assert_every_page_tagged_once,
    processed_of,
    wait_until_final,
    wait_until_processed,
)
from tests.processes import WorkerProcess, hubjobs_env

PAGES = 3000
KILL_AFTER = 600
TAG = "crash-resume"


async def test_a_worker_killed_mid_course_loses_nothing_and_repeats_nothing(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    course = await seed(engine, PAGES)
    # The lease comes from the starter: JobOptions carry the heartbeat timeout.
    starter_settings = settings.model_copy(
        update={"heartbeat_timeout_seconds": 3, "tagging_chunk_size": 1000}
    )
    hub = HubJobsClient(temporal, engine, starter_settings)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    env = hubjobs_env(
        settings,
        tmp_path,
        heartbeat_timeout_seconds=3,
        tagging_batch_size=25,
        tagging_chunk_size=1000,
        tagging_batch_pause_seconds=0.02,
    )
    workers: list[WorkerProcess] = []
    try:
        first = WorkerProcess("worker-1", env, tmp_path)
        workers.append(first)
        job = await jobs.start_course_tagging(root_page_id=course.root_page_id, tag=TAG)
        assert job.total == PAGES

        await wait_until_processed(engine, job.id, KILL_AFTER, first, timeout=60)
        assert first.alive(), f"worker-1 died before the kill:\n{first.tail()}"
        kill_started = time.monotonic()
        exit_code = first.kill()
        assert exit_code == -signal.SIGKILL
        at_kill = await processed_of(engine, job.id)
        print(f"\nkilled worker-1 with {at_kill} of {PAGES} pages done")
        assert KILL_AFTER <= at_kill < PAGES, "the job must still have work left at the kill"

        # Nothing moves while no worker runs: the killed worker's batch in flight
        # rolled back with its connection.
        await asyncio.sleep(1.0)
        assert await processed_of(engine, job.id) == at_kill

        second = WorkerProcess("worker-2", env, tmp_path)
        workers.append(second)
        done = await wait_until_final(jobs, job.id, timeout=90)
        print(f"finished {time.monotonic() - kill_started:.1f} s after the kill")
        assert done.status == "succeeded", (
            f"job ended {done.status} ({done.error_code}: {done.error_message}), "
            f"{done.processed}/{done.total} done\n--- worker-1\n{first.tail()}\n"
            f"--- worker-2\n{second.tail()}"
        )
        assert second.alive(), f"worker-2 died:\n{second.tail()}"
    except BaseException:
        for w in workers:
            print(f"\n--- {w.name} ({w.log_path}):\n{w.tail()}")
        raise
    finally:
        for w in workers:
            w.kill()

    # Lost nothing, repeated nothing.
    await assert_every_page_tagged_once(engine, done, course.page_ids, TAG)

    # Temporal agrees, and the resumption came from the lease running out: the chunk
    # running at the kill timed out on its heartbeat and succeeded on a later attempt.
    handle = temporal.get_workflow_handle(done.workflow_id)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    history = await handle.fetch_history()
    retried = [a for a in activity_starts(history, "tag_course_chunk") if a.attempt > 1]
    assert any(
        attempt.last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
        for attempt in retried
    ), f"no chunk was retried after a heartbeat timeout: {retried}"


async def test_a_job_whose_last_attempt_loses_its_worker_fails_as_abandoned(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """With no attempts left, a worker that stops heartbeating ends the job: failed with
    the stable code ``abandoned`` and a plain message, the work done so far kept."""
    course = await seed(engine, 1000)
    starter_settings = settings.model_copy(
        update={"heartbeat_timeout_seconds": 2, "max_activity_attempts": 1}
    )
    jobs = HubJobsClient(temporal, engine, starter_settings).scope(
        course.workspace_id, course.actor_id
    )
    env = hubjobs_env(settings, tmp_path, tagging_batch_size=10, tagging_batch_pause_seconds=0.05)
    workers = [WorkerProcess("worker-1", env, tmp_path)]
    try:
        job = await jobs.start_course_tagging(root_page_id=course.root_page_id, tag=TAG)
        await wait_until_processed(engine, job.id, 50, workers[0], timeout=60)
        assert workers[0].kill() == -signal.SIGKILL
        at_kill = await processed_of(engine, job.id)
        # Another worker runs the workflow's next task; the activity is not retried.
        workers.append(WorkerProcess("worker-2", env, tmp_path))
        done = await wait_until_final(jobs, job.id, timeout=60)
    finally:
        for w in workers:
            w.kill()
    assert done.status == "failed" and done.error_code == "abandoned", (done, workers[1].tail())
    assert done.error_message == (
        "The job was abandoned: its worker stopped responding and no attempts are left."
    )
    assert done.processed == at_kill < done.total
    description = await temporal.get_workflow_handle(done.workflow_id).describe()
    assert description.status == WorkflowExecutionStatus.FAILED
