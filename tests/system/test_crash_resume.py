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

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowExecutionStatus

from activities.course_tagging import CourseTaggingActivities
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.helpers import (
    assert_every_page_tagged_once,
    job_revisions,
    processed_of,
    run_endings,
    snapshot_now,
    wait_until_final,
    wait_until_processed,
    workflow_closed,
)
from tests.support.histories import record
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import seed

PAGES = 3000
KILL_AFTER = 600
TAG = "crash-resume"
TAG_COURSE = CourseTaggingActivities.tag_course.__name__


async def test_a_worker_killed_mid_course_loses_nothing_and_repeats_nothing(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    course = await seed(engine, PAGES)
    # The lease comes from the starter: JobOptions carry the heartbeat timeout.
    starter_settings = settings.model_copy(update={"heartbeat_timeout_seconds": 3})
    hub = HubJobsClient(temporal, engine, starter_settings)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    env = hubjobs_env(
        settings,
        tmp_path,
        heartbeat_timeout_seconds=3,
        tagging_batch_size=25,
        tagging_batch_pause_seconds=0.02,
    )
    workers: list[WorkerProcess] = []
    try:
        first = WorkerProcess("worker-1", env, tmp_path)
        workers.append(first)
        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})

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
        await workflow_closed(temporal, done.workflow_id)  # while worker-2 can run it
    except BaseException:
        for w in workers:
            print(f"\n--- {w.name} ({w.log_path}):\n{w.tail()}")
        raise
    finally:
        for w in workers:
            w.kill()

    # Lost nothing, repeated nothing.
    await assert_every_page_tagged_once(engine, done, course.page_ids, TAG)

    # Temporal agrees, and the resumption came from the lease running out: the attempt
    # running at the kill timed out on its heartbeat, and a later one finished the job.
    handle = temporal.get_workflow_handle(done.workflow_id)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    await record(handle, "course_tagging_worker_killed")
    endings = await run_endings(temporal, done.workflow_id, TAG_COURSE)
    assert "timed_out:heartbeat" in endings, endings
    assert endings[-1] == "completed", endings
    # It made progress before it died: it cost the job none of its attempts.
    assert done.attempts_failed == 0, done


async def test_attempts_that_die_without_progress_end_the_job_as_abandoned(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """Only attempts without progress count. Here every attempt's first batch waits on a
    lock the test holds on the course's pages, so none can commit anything, and each
    worker holding one is killed: after the kind's 2 attempts in a row, the job fails
    with the stable code ``abandoned`` and a plain message, and nothing is half done."""
    course = await seed(engine, 200)
    starter_settings = settings.model_copy(
        update={"heartbeat_timeout_seconds": 2, "max_activity_attempts": 2}
    )
    jobs = HubJobsClient(temporal, engine, starter_settings).scope(
        course.workspace_id, course.actor_id
    )
    env = hubjobs_env(settings, tmp_path, tagging_batch_size=10)
    workers: list[WorkerProcess] = []
    # Started and snapshotted (as its first attempt would) before the lock, and before
    # any worker runs: each attempt then blocks on its first batch.
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    await snapshot_now(engine, job.id)
    lock_conn = await engine.connect()
    await lock_conn.begin()
    await lock_conn.execute(text("LOCK TABLE pages IN ACCESS EXCLUSIVE MODE"))

    async def attempts_waiting_on_the_lock() -> set[int]:
        """Backends of attempts blocked on the lock (a killed worker's stays blocked), by
        the batch read's items (within the 1 KiB of a query pg_stat_activity keeps)."""
        async with engine.connect() as conn:
            waiting = await conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%FROM job_pending_items(%'"
                )
            )
            return set(waiting.scalars())

    try:
        for n in (1, 2):
            before = await attempts_waiting_on_the_lock()
            worker = WorkerProcess(f"worker-{n}", env, tmp_path)
            workers.append(worker)
            deadline = time.monotonic() + 60
            while not await attempts_waiting_on_the_lock() - before:
                assert worker.alive() and time.monotonic() < deadline, worker.tail()
                await asyncio.sleep(0.1)
            assert worker.kill() == -signal.SIGKILL
        # A live worker for the workflow's tasks: it judges the second death the last.
        workers.append(WorkerProcess("worker-3", env, tmp_path))
        done = await wait_until_final(jobs, job.id, timeout=60)
        await workflow_closed(temporal, done.workflow_id)  # while worker-3 can run it
    finally:
        await lock_conn.rollback()
        await lock_conn.close()
        for w in workers:
            w.kill()
    assert done.status == "failed" and done.error_code == "abandoned", done
    assert done.error_message == (
        "The job was abandoned: its worker stopped responding and no attempts are left."
    )
    assert (done.processed, done.attempts, done.attempts_failed) == (0, 2, 2)
    assert await job_revisions(engine, TAG) == {}
    description = await temporal.get_workflow_handle(done.workflow_id).describe()
    assert description.status == WorkflowExecutionStatus.FAILED
