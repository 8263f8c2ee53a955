"""Jobs outlive the faults they exist to survive (issue 9), on real servers and real
worker processes (``python worker.py``), each case at a bounded size:

1. The worker holding the tagging attempt is SIGKILLed 8 times in a row, each kill
   landing after the attempt committed work since it began, and started again each
   time: the job succeeds exactly, and no attempt is spent (one that made progress
   costs nothing).
2. PostgreSQL is stopped (``-m immediate``) mid-job for several times the whole retry
   budget the old design had: the attempt waits it out, the job succeeds exactly on
   its first attempt. Past HUBJOBS_MAX_OUTAGE_SECONDS the job fails ``unavailable``
   with the work done kept. Items a server forgot it had recorded (commits it lost)
   are done before the job succeeds.
3. A rolling restart: the worker holding the attempt is SIGTERMed and started again,
   alternately each of two, mid-job: every handover is free, the job exact.
4. (The Temporal dev server SIGKILLed and brought back while its worker runs on:
   tests/test_server_restarts.py.)
5. A backup's worker SIGTERMed mid-stream hands the job over at no cost, leaves no
   partial file, and the next worker writes a whole archive.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType, PendingActivityState, TimeoutType
from temporalio.client import Client, WorkflowExecutionStatus

from activities.backup import BackupActivities
from activities.course_tagging import CourseTaggingActivities
from hubjobs.archive.format import archive_name
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.kinds.backup import backup_folder
from hubjobs.ops.restore import restore
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.archive_helpers import (
    MB,
    Databases,
    add_attachments,
    archive_being_written,
    assert_same_attachments,
    file_facts,
    fingerprint,
    names_in,
)
from tests.support.helpers import (
    all_runs_history,
    assert_every_page_tagged_once,
    item_counts,
    job_revisions,
    processed_of,
    run_endings,
    wait_until_final,
    wait_until_processed,
    with_kind,
    workflow_closed,
)
from tests.support.own_postgres import OwnPostgres, own_postgres_server
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import running_worker, seed

TAG_COURSE = CourseTaggingActivities.tag_course.__name__
WRITE_BACKUP = BackupActivities.write_backup.__name__
DEFAULT_MAX_ATTEMPTS: int = Settings.model_fields["max_activity_attempts"].default


# --- shared ----------------------------------------------------------------------------


def identity_of(worker: WorkerProcess) -> str:
    """The Temporal identity the SDK gives a worker process: ``<pid>@<host name>``."""
    return f"{worker.pid}@{os.uname().nodename}"


@dataclass(frozen=True)
class RunningAttempt:
    """An attempt of a job's work that a worker has started, as Temporal sees it."""

    key: tuple[str, str]  # (run id, activity id): unique across continue-as-new
    identity: str


async def running_attempt(client: Client, workflow_id: str, activity: str) -> RunningAttempt | None:
    """The attempt a worker holds right now (Temporal's pending activity), if one does."""
    description = await client.get_workflow_handle(workflow_id).describe()
    for pending in description.raw_description.pending_activities:
        if (
            pending.activity_type.name == activity
            and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        ):
            return RunningAttempt(
                (description.run_id or "", pending.activity_id), pending.last_worker_identity
            )
    return None


async def next_attempt(
    client: Client,
    jobs: WorkspaceJobs,
    job: JobView,
    activity: str,
    seen: set[tuple[str, str]],
    workers: list[WorkerProcess],
    timeout: float = 60,
) -> RunningAttempt:
    """The first running attempt not in ``seen``, once a worker has started one."""
    deadline = time.monotonic() + timeout
    while True:
        attempt = await running_attempt(client, job.workflow_id, activity)
        if attempt is not None and attempt.key not in seen:
            return attempt
        assert time.monotonic() < deadline, f"no new attempt started:{tails(workers)}"
        current = await jobs.get(job.id)
        assert not current.is_final, f"the job ended before the faults: {failed_job(current, [])}"
        await asyncio.sleep(0.05)


def holder_of(attempt: RunningAttempt, workers: list[WorkerProcess]) -> WorkerProcess:
    holders = [w for w in workers if identity_of(w) == attempt.identity]
    assert len(holders) == 1, (attempt, [identity_of(w) for w in workers])
    return holders[0]


async def wait_started(worker: WorkerProcess, timeout: float = 60) -> None:
    """Until the worker process polls its task queue (its log says so)."""
    deadline = time.monotonic() + timeout
    while "worker started" not in worker.log_text():
        assert worker.alive(), f"{worker.name} exited:\n{worker.tail()}"
        assert time.monotonic() < deadline, f"{worker.name} never started:\n{worker.tail()}"
        await asyncio.sleep(0.05)


def tails(workers: list[WorkerProcess]) -> str:
    return "".join(f"\n--- {w.name} ({w.log_path}):\n{w.tail()}" for w in workers)


def failed_job(job: JobView, workers: list[WorkerProcess]) -> str:
    return (
        f"job ended {job.status} ({job.error_code}: {job.error_message}), "
        f"{job.processed}/{job.total} done{tails(workers)}"
    )


# --- 1. the holder of the attempt killed 8 times ------------------------------------------

KILLS = 8
KILL_PAGES = 1500
# Pages the attempt must commit, after it was seen running, before its worker is killed.
PROGRESS_BEFORE_KILL = 50


async def test_killing_the_worker_that_holds_the_attempt_8_times_costs_no_attempt(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """Two worker processes share a 1,500-page course (batches of 25, 0.05 s apart). Each
    time an attempt is running (Temporal's pending activity, and the worker identity
    holding it) and the job's row shows 50 pages committed since the attempt was first
    seen, that worker is SIGKILLed and started again. The starter's options are the
    defaults (5 attempts without progress) but a 2 s lease; attempts do not hand over by
    time slice (60 s), so that each lives until its kill. Under the old rule (every
    death an attempt) the job would fail ``abandoned`` at the fifth kill."""
    course = await seed(engine, KILL_PAGES)
    starter = settings.model_copy(
        update={"heartbeat_timeout_seconds": 2, "max_activity_attempts": DEFAULT_MAX_ATTEMPTS}
    )
    jobs = HubJobsClient(temporal, engine, starter).scope(course.workspace_id, course.actor_id)
    env = hubjobs_env(
        settings,
        tmp_path,
        tagging_batch_size=25,
        tagging_batch_pause_seconds=0.05,
        work_slice_seconds=60,
    )
    slots = [WorkerProcess("worker-a", env, tmp_path), WorkerProcess("worker-b", env, tmp_path)]
    every = list(slots)
    try:
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "kills"}
        )
        killed: set[tuple[str, str]] = set()
        first_kill = killed_at = 0.0
        for n in range(1, KILLS + 1):
            attempt = await next_attempt(temporal, jobs, job, TAG_COURSE, killed, every)
            seen_at = await processed_of(engine, job.id)
            gap = f", {time.monotonic() - killed_at:.1f} s after the last kill" if n > 1 else ""
            holder = holder_of(attempt, slots)
            # Mid-work: it has committed pages since it was seen running.
            deadline = time.monotonic() + 60
            while (at_kill := await processed_of(engine, job.id)) < seen_at + PROGRESS_BEFORE_KILL:
                assert holder.alive(), f"{holder.name} died:{tails(every)}"
                assert at_kill < KILL_PAGES, "the job finished before the kills"
                assert time.monotonic() < deadline, f"the attempt made no progress:{tails(every)}"
                await asyncio.sleep(0.02)
            assert await running_attempt(temporal, job.workflow_id, TAG_COURSE) == attempt
            assert await asyncio.to_thread(holder.kill) == -signal.SIGKILL
            killed_at = time.monotonic()
            first_kill = first_kill or killed_at
            killed.add(attempt.key)
            # The kill hit the holder: Temporal has the attempt on it until the lease ends.
            assert await running_attempt(temporal, job.workflow_id, TAG_COURSE) == attempt
            print(
                f"kill {n}: {holder.name} held attempt {attempt.key[1]} (started{gap}); "
                f"{at_kill - seen_at} pages committed since it was seen, {at_kill} in all"
            )
            restarted = WorkerProcess(f"{holder.name[:8]}-{n}", env, tmp_path)
            every.append(restarted)
            slots[slots.index(holder)] = restarted

        done = await wait_until_final(jobs, job.id, timeout=120)
        took = time.monotonic() - first_kill
        print(f"{KILLS} kills; the job {done.status} {took:.1f} s after the first kill")
        assert done.status == "succeeded", failed_job(done, every)
        # The last attempt commits the final row, then reports its completion: the
        # workers stay up until the run has closed, or that report may be cut too.
        await workflow_closed(temporal, job.workflow_id)
    finally:
        for w in every:
            w.kill()

    await assert_every_page_tagged_once(engine, done, course.page_ids, "kills")
    # Every kill cut an attempt that had made progress: none of them counted.
    assert done.attempts_failed == 0, done
    endings = await run_endings(temporal, done.workflow_id, TAG_COURSE)
    sticky = await sticky_timeouts(temporal, done.workflow_id)
    print(f"{sticky} of the {KILLS} kills also waited out the dead worker's sticky queue")
    assert endings[:KILLS] == ["timed_out:heartbeat"] * KILLS, endings
    assert set(endings[KILLS:]) == {"completed"}, endings
    assert done.attempts == len(endings), (done.attempts, endings)


async def sticky_timeouts(client: Client, workflow_id: str) -> int:
    """Workflow tasks that waited on a worker's sticky queue until they timed out (10 s,
    the SDK's default) and went to the task queue: what a worker that held the job's
    workflow in its cache costs when it dies, on top of the lease."""
    return sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        and e.workflow_task_timed_out_event_attributes.timeout_type
        == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
        for events in await all_runs_history(client, workflow_id)
        for e in events
    )


# --- 2. PostgreSQL down for longer than the old retry budget -----------------------------

OUTAGE_PAGES = 1500
OUTAGE_AFTER = 300


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    with own_postgres_server("hubjobs-faults-") as server:
        yield server


def old_retry_budget(settings: Settings) -> float:
    """How long the old design rode out a failing activity: the waits between its
    ``max_activity_attempts`` tries (2 + 10 + 30 + 30 s by default), after which the
    job failed."""
    return sum(
        min(
            settings.retry_initial_seconds * settings.retry_coefficient**n,
            settings.retry_max_seconds,
        )
        for n in range(settings.max_activity_attempts - 1)
    )


@dataclass
class OutageRun:
    jobs: WorkspaceJobs
    course: DemoCourse
    job: JobView
    worker: WorkerProcess
    tag: str


def outage_starter(settings: Settings, postgres: OwnPostgres) -> Settings:
    """The starter's options, shortened: 3 attempts without progress, 0.5 s then 1 s
    between them (an old budget of 1.5 s), a 5 s lease."""
    return settings.model_copy(
        update={
            "database_url": postgres.database_url,
            "heartbeat_timeout_seconds": 5,
            "max_activity_attempts": 3,
            "retry_initial_seconds": 0.5,
            "retry_coefficient": 2,
            "retry_max_seconds": 1,
        }
    )


@asynccontextmanager
async def outage_run(
    temporal: Client, starter: Settings, logs: Path, tag: str, **worker: Any
) -> AsyncIterator[tuple[OutageRun, AsyncEngine]]:
    """A course of OUTAGE_PAGES, one worker process (batches of 25, 0.05 s apart, one
    attempt for the whole job, database tries at most 1 s apart) and the job started."""
    env = hubjobs_env(
        starter,
        logs,
        tagging_batch_size=25,
        tagging_batch_pause_seconds=0.05,
        work_slice_seconds=600,
        outage_retry_max_seconds=1,
        **worker,
    )
    engine = async_engine(starter.resolved_database_url(), pool_size=2)
    process: WorkerProcess | None = None
    try:
        course = await seed(engine, OUTAGE_PAGES)
        jobs = HubJobsClient(temporal, engine, starter).scope(course.workspace_id, course.actor_id)
        process = WorkerProcess(f"worker-{tag}", env, logs)
        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": tag})
        yield OutageRun(jobs, course, job, process, tag), engine
    except BaseException:
        if process is not None:
            print(tails([process]))
        raise
    finally:
        if process is not None:
            process.kill()
        await engine.dispose()


# Stopped this long, then started again (crash recovery takes a few seconds more).
POSTGRES_DOWN_SECONDS = 7.0


async def test_postgres_down_for_several_old_retry_budgets_costs_no_attempt(
    temporal: Client, settings: Settings, own_postgres: OwnPostgres, tmp_path: Path
) -> None:
    """Shortened through settings: 3 attempts without progress (HUBJOBS_MAX_ACTIVITY_
    ATTEMPTS=3), 0.5 s then 1 s between them (HUBJOBS_RETRY_INITIAL_SECONDS=0.5,
    HUBJOBS_RETRY_COEFFICIENT=2, HUBJOBS_RETRY_MAX_SECONDS=1): the old design's budget
    is then 0.5 + 1 = 1.5 s, and PostgreSQL is down at least 7 s, more than four of
    them (about six, with its restart). The worker tries the database at most 1 s apart
    (HUBJOBS_OUTAGE_RETRY_MAX_SECONDS=1) and slices no attempt (HUBJOBS_WORK_SLICE_
    SECONDS=600): the attempt that waited is the only one."""
    starter = outage_starter(settings, own_postgres)
    budget = old_retry_budget(starter)
    assert budget == 1.5 and POSTGRES_DOWN_SECONDS > 4 * budget
    async with outage_run(temporal, starter, tmp_path, "outage") as (run, engine):
        at_stop = await wait_until_processed(engine, run.job.id, OUTAGE_AFTER, run.worker, 60)
        attempt = await running_attempt(temporal, run.job.workflow_id, TAG_COURSE)
        assert attempt is not None
        outage = asyncio.create_task(own_postgres.stop_for(POSTGRES_DOWN_SECONDS))
        await asyncio.sleep(POSTGRES_DOWN_SECONDS - 2)
        # Deep in the outage: the same attempt is alive in Temporal, its worker too.
        assert not outage.done()
        assert await running_attempt(temporal, run.job.workflow_id, TAG_COURSE) == attempt
        assert run.worker.alive(), run.worker.tail()
        down = await outage
        back = time.monotonic()
        done = await wait_until_final(run.jobs, run.job.id, timeout=60)
        print(
            f"PostgreSQL down {down:.1f} s ({down / budget:.1f} old budgets of {budget:.1f} s) "
            f"with {at_stop} of {OUTAGE_PAGES} pages done; the job {done.status} "
            f"{time.monotonic() - back:.1f} s after it was back"
        )
        assert done.status == "succeeded", failed_job(done, [run.worker])
        log = run.worker.log_text()
        await assert_every_page_tagged_once(engine, done, run.course.page_ids, run.tag)
        await workflow_closed(temporal, done.workflow_id)  # while the worker can run it
    assert (done.attempts, done.attempts_failed) == (1, 0), done
    endings = await run_endings(temporal, done.workflow_id, TAG_COURSE)
    assert endings == ["completed"], endings
    assert "database unavailable" in log and "database answers again" in log, log[-3000:]
    # The queue gauges' refresh says an outage in a line, never with a traceback a tick.
    assert "queue state refresh failed" not in log, log[-3000:]


MAX_OUTAGE_SECONDS = 3.0
LONG_DOWN_SECONDS = 7.0


async def test_postgres_down_past_the_max_outage_fails_the_job_unavailable_work_kept(
    temporal: Client, settings: Settings, own_postgres: OwnPostgres, tmp_path: Path
) -> None:
    """The same shortened options, and HUBJOBS_MAX_OUTAGE_SECONDS=3 on the worker;
    PostgreSQL stays down at least 7 s. The attempt gives up, the job fails ``unavailable`` (its
    final write lands once the database is back) and keeps the pages it tagged."""
    starter = outage_starter(settings, own_postgres)
    async with outage_run(
        temporal, starter, tmp_path, "too-long", max_outage_seconds=MAX_OUTAGE_SECONDS
    ) as (run, engine):
        await wait_until_processed(engine, run.job.id, OUTAGE_AFTER, run.worker, 60)
        down = await own_postgres.stop_for(LONG_DOWN_SECONDS)
        back = time.monotonic()
        done = await wait_until_final(run.jobs, run.job.id, timeout=90)
        print(
            f"PostgreSQL down {down:.1f} s (max outage {MAX_OUTAGE_SECONDS:.0f} s): the job "
            f"{done.status} ({done.error_code}) {time.monotonic() - back:.1f} s after it was "
            f"back, {done.processed} of {done.total} pages kept"
        )
        assert (done.status, done.error_code) == ("failed", "unavailable"), failed_job(
            done, [run.worker]
        )
        assert run.worker.alive(), run.worker.tail()
        await workflow_closed(temporal, done.workflow_id)  # while the worker can run it
        await assert_work_kept(engine, done, run.tag)
    assert done.error_message == (
        "The job failed: the database did not answer for longer than allowed."
    )
    description = await temporal.get_workflow_handle(done.workflow_id).describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert (done.attempts, done.attempts_failed) == (1, 0), done


# Down this long, several times the handover bound below.
HANDOVER_SECONDS = 2.0


async def test_postgres_down_for_several_handover_bounds_hands_over_at_no_cost(
    temporal: Client, settings: Settings, own_postgres: OwnPostgres, tmp_path: Path
) -> None:
    """PostgreSQL down for everyone: with HUBJOBS_OUTAGE_HANDOVER_SECONDS=2 the attempt
    gives its slot back after 2 s of waiting, and so does each next one (at once, its
    worker knowing it is cut off, then trying again every 2 s), 0.5 s apart and more
    as they go on. When the database is back, an attempt carries on from the cursor:
    the job succeeds exactly and no handover counted as a failure."""
    starter = outage_starter(settings, own_postgres).model_copy(
        update={"handover_pause_seconds": 0.5}
    )
    async with outage_run(
        temporal, starter, tmp_path, "handovers", outage_handover_seconds=HANDOVER_SECONDS
    ) as (run, engine):
        await wait_until_processed(engine, run.job.id, OUTAGE_AFTER, run.worker, 60)
        down = await own_postgres.stop_for(POSTGRES_DOWN_SECONDS)
        back = time.monotonic()
        done = await wait_until_final(run.jobs, run.job.id, timeout=60)
        print(
            f"PostgreSQL down {down:.1f} s ({down / HANDOVER_SECONDS:.1f} handover bounds); "
            f"the job {done.status} {time.monotonic() - back:.1f} s after it was back, "
            f"{done.attempts} attempts"
        )
        assert done.status == "succeeded", failed_job(done, [run.worker])
        await assert_every_page_tagged_once(engine, done, run.course.page_ids, run.tag)
        log = run.worker.log_text()
        # The row is final before the last attempt's completion reaches Temporal: its
        # ending is read once the run has closed, while the worker can still report it.
        await workflow_closed(temporal, done.workflow_id)
    assert done.attempts_failed == 0, done
    endings = await run_endings(temporal, done.workflow_id, TAG_COURSE)
    assert len(endings) >= 3 and set(endings) == {"completed"}, endings
    assert "job handed over" in log, log[-3000:]


async def test_the_maximum_outage_is_measured_across_handovers(
    temporal: Client, settings: Settings, own_postgres: OwnPostgres, tmp_path: Path
) -> None:
    """HUBJOBS_MAX_OUTAGE_SECONDS=5 and attempts that hand over after 1.5 s: none of
    them waits 5 s, but the outage each carries on from the one before does. The job
    fails ``unavailable`` once the outage, across attempts, passes 5 s (the attempt
    that gives up does so within a few seconds of that), not at the database's return,
    and not never."""
    starter = outage_starter(settings, own_postgres).model_copy(
        update={"handover_pause_seconds": 0.5}
    )
    async with outage_run(
        temporal,
        starter,
        tmp_path,
        "across",
        max_outage_seconds=5,
        outage_handover_seconds=1.5,
    ) as (run, engine):
        await wait_until_processed(engine, run.job.id, OUTAGE_AFTER, run.worker, 60)
        stopped_at = time.time()
        await own_postgres.stop_for(LONG_DOWN_SECONDS + 5)
        done = await wait_until_final(run.jobs, run.job.id, timeout=90)
        assert (done.status, done.error_code) == ("failed", "unavailable"), failed_job(
            done, [run.worker]
        )
        await workflow_closed(temporal, done.workflow_id)
    endings = await run_endings(temporal, done.workflow_id, TAG_COURSE)
    gave_up = await failed_at(temporal, done.workflow_id)
    print(
        f"max outage 5 s, handovers after 1.5 s: {len(endings) - 1} handovers, then "
        f"the job failed unavailable {gave_up - stopped_at:.1f} s after PostgreSQL stopped"
    )
    assert len(endings) >= 2 and endings[-1] == "failed", endings
    assert set(endings[:-1]) == {"completed"}, endings
    assert gave_up - stopped_at < 5 + 1.5 + 5, gave_up - stopped_at
    assert done.attempts_failed == 0, done


async def failed_at(client: Client, workflow_id: str) -> float:
    """When the job's work last failed (epoch seconds), from the history."""
    times = [
        e.event_time.ToDatetime().timestamp()
        for events in await all_runs_history(client, workflow_id)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert times, "no attempt failed"
    return times[-1]


async def assert_work_kept(engine: AsyncEngine, job: JobView, tag: str) -> None:
    """The work done is kept, exactly: each page recorded done holds the tag once, with
    one revision; every other page is untouched and its item still pending."""
    assert 0 < job.processed < job.total, job
    assert job.processed == job.succeeded, job
    assert await item_counts(engine, job.id) == {
        "succeeded": job.processed,
        "pending": job.total - job.processed,
    }
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT i.ref, i.state, (SELECT count(*) FROM unnest(p.tags) t WHERE t = :tag) "
                "AS n FROM job_items i JOIN pages p ON p.id = i.ref WHERE i.job_id = :job"
            ),
            {"tag": tag, "job": job.id},
        )
        tags = {row.ref: (row.state, row.n) for row in rows}
    assert len(tags) == job.total
    assert {ref: n for ref, (state, n) in tags.items() if n != int(state == "succeeded")} == {}
    tagged = [ref for ref, (state, _) in tags.items() if state == "succeeded"]
    assert await job_revisions(engine, tag) == dict.fromkeys(tagged, 1)


LOST_PAGES = 300


async def test_items_a_database_forgot_behind_the_cursor_are_done_before_success(
    temporal: Client, engine: AsyncEngine, settings: Settings
) -> None:
    """A server that acknowledged commits and lost them (found here: the session's
    server, without synchronous commits, stopped ``-m immediate``; in production a
    failover to an asynchronous replica) can put items the attempt has moved past back
    to pending. Here the outcomes of the second batch are forgotten as such a loss
    would leave them (the items pending and uncounted, the pages' tag write kept)
    while the job is well past them: the job still succeeds only once every item is
    done, every page tagged once. Before, the attempt finished the job ``succeeded``
    when no item was pending after its cursor, with 25 items left pending."""
    course = await seed(engine, LOST_PAGES)
    worker_settings = with_kind(
        settings, "course_tagging", tagging_batch_size=25, tagging_batch_pause_seconds=0.05
    )
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, worker_settings):
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "forgot"}
        )
        deadline = time.monotonic() + 30
        while await processed_of(engine, job.id) < 100:
            assert time.monotonic() < deadline, "the job made no progress"
            await asyncio.sleep(0.02)
        async with engine.begin() as conn:
            forgotten = await conn.execute(
                text(
                    "UPDATE job_items SET state = 'pending', processed_at = NULL "
                    "WHERE job_id = :job AND ordinal BETWEEN 26 AND 50 AND state = 'succeeded'"
                ),
                {"job": job.id},
            )
            assert forgotten.rowcount == 25
            await conn.execute(
                text(
                    "UPDATE jobs SET processed = processed - 25, succeeded = succeeded - 25 "
                    "WHERE id = :job AND status = 'running'"
                ),
                {"job": job.id},
            )
        assert not (await jobs.get(job.id)).is_final, "the job finished before the loss"
        done = await jobs.wait(job.id, timeout=60, interval=0.1)
    assert done.status == "succeeded", done
    await assert_every_page_tagged_once(engine, done, course.page_ids, "forgot")


# --- 3. a rolling restart -----------------------------------------------------------------

ROLLING_RESTARTS = 6
ROLLING_PAGES = 3000
PROGRESS_BEFORE_TERM = 20
# Batches of 10 at most 5 a second (50 pages a second) while the rollout goes on: each
# restart waits for the new worker to poll, up to 10 s on 2 loaded cores. The last two
# restarts roll out no pause between batches, so that the rest goes fast.
SLOW = {"tagging_batch_size": 10, "tagging_batch_pause_seconds": 0.2}
FAST = {"tagging_batch_size": 25, "tagging_batch_pause_seconds": 0}


async def test_a_rolling_restart_of_two_workers_hands_the_job_over_at_no_cost(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    """Two worker processes; each time an attempt runs and has committed work since it
    was seen, the worker holding it is SIGTERMed (it drains: the attempt hands the job
    over at its next batch) and started again, and the next SIGTERM waits until the new
    one polls: the other worker is always there to take the job on. The holder is then
    the worker not just restarted, so the two are restarted alternately, 3 times each.
    The starter's options are the defaults but a 3 s lease; no time slicing (60 s). The
    job is slowed down (at most 50 pages a second) until the last two restarts, which
    roll out batches without a pause: it outlasts the rollout however slowly workers
    start on a loaded machine, and its rest then goes fast."""
    course = await seed(engine, ROLLING_PAGES)
    starter = settings.model_copy(
        update={"heartbeat_timeout_seconds": 3, "max_activity_attempts": DEFAULT_MAX_ATTEMPTS}
    )
    jobs = HubJobsClient(temporal, engine, starter).scope(course.workspace_id, course.actor_id)
    slow = hubjobs_env(settings, tmp_path, work_slice_seconds=60, **SLOW)
    fast = hubjobs_env(settings, tmp_path, work_slice_seconds=60, **FAST)
    slots = [WorkerProcess("worker-a", slow, tmp_path), WorkerProcess("worker-b", slow, tmp_path)]
    every = list(slots)
    drains: list[float] = []
    terminated: list[int] = []
    try:
        for w in slots:
            await wait_started(w)
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "rolling"}
        )
        started = time.monotonic()
        seen: set[tuple[str, str]] = set()
        for n in range(1, ROLLING_RESTARTS + 1):
            attempt = await next_attempt(temporal, jobs, job, TAG_COURSE, seen, every)
            seen.add(attempt.key)
            holder = holder_of(attempt, slots)
            at_seen = await processed_of(engine, job.id)
            await wait_until_processed(
                engine, job.id, at_seen + PROGRESS_BEFORE_TERM, holder, timeout=60
            )
            at_term = await processed_of(engine, job.id)
            assert at_term < ROLLING_PAGES, "the job finished before the restarts"
            code, took = await asyncio.to_thread(holder.terminate, 30)
            holder.kill()  # closes its log
            assert code == 0, f"{holder.name} exited {code}:\n{holder.tail()}"
            assert "job handed over" not in holder.log_text(), "cut, not drained"
            drains.append(took)
            slot = slots.index(holder)
            terminated.append(slot)
            print(
                f"SIGTERM {n}: {holder.name} held attempt {attempt.key[1]}, drained in "
                f"{took:.2f} s, {at_term} of {ROLLING_PAGES} pages done"
            )
            env = fast if n >= ROLLING_RESTARTS - 1 else slow
            restarted = WorkerProcess(f"worker-{'ab'[slot]}{n}", env, tmp_path)
            every.append(restarted)
            slots[slot] = restarted
            await wait_started(restarted)
        done = await wait_until_final(jobs, job.id, timeout=120)
        took = time.monotonic() - started
        assert done.status == "succeeded", failed_job(done, every)
        await workflow_closed(temporal, done.workflow_id)  # while the workers can run it
    finally:
        for w in every:
            w.kill()

    await assert_every_page_tagged_once(engine, done, course.page_ids, "rolling")
    # Alternately: a, b, a, b… (or b, a, …).
    assert terminated == [(terminated[0] + n) % 2 for n in range(ROLLING_RESTARTS)], terminated
    # Every handover was free: no attempt failed, none timed out, none counted.
    assert done.attempts_failed == 0, done
    endings = await run_endings(temporal, done.workflow_id, TAG_COURSE)
    assert endings == ["completed"] * len(endings), endings
    assert done.attempts == len(endings) >= ROLLING_RESTARTS + 1, (done.attempts, endings)
    gaps = await handover_gaps(temporal, done.workflow_id, TAG_COURSE)
    print(
        f"{ROLLING_RESTARTS} SIGTERMs: drains took {min(drains):.2f}-{max(drains):.2f} s "
        f"(mean {sum(drains) / len(drains):.2f} s); each next attempt started "
        f"{min(gaps):.2f}-{max(gaps):.2f} s after the one before returned; the job "
        f"succeeded {took:.1f} s after it started"
    )
    # A handover is quick: the next attempt starts well within one lease.
    assert max(gaps) < starter.heartbeat_timeout_seconds, gaps


async def handover_gaps(client: Client, workflow_id: str, activity: str) -> list[float]:
    """Seconds between each attempt's end and the next one's start, from the history."""
    spans: list[tuple[float, float]] = []
    for events in await all_runs_history(client, workflow_id):
        scheduled = {
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == activity
        }
        starts: dict[int, float] = {}
        for e in events:
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attributes = e.activity_task_started_event_attributes
                if attributes.scheduled_event_id in scheduled:
                    starts[attributes.scheduled_event_id] = e.event_time.ToDatetime().timestamp()
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                completed = e.activity_task_completed_event_attributes
                if completed.scheduled_event_id in scheduled:
                    ended = e.event_time.ToDatetime().timestamp()
                    spans.append((starts[completed.scheduled_event_id], ended))
    return [later[0] - earlier[1] for earlier, later in itertools.pairwise(spans)]


# --- 5. a backup's worker SIGTERMed mid-stream --------------------------------------------


async def test_a_backup_whose_worker_is_sigtermed_mid_stream_is_handed_over_whole(
    temporal: Client,
    engine: AsyncEngine,
    settings: Settings,
    database_url: str,
    stack: Any,
    tmp_path: Path,
) -> None:
    """A backup of 1,000 pages and 60 MB of attachments; once its archive has grown past
    2 MB, the worker writing it is SIGTERMed. A backup's only durable progress is a
    finished archive, but a drain is a handover, not a failure: the attempt drops its
    stream and its ``.partial`` and returns; no attempt is spent. The next worker writes
    a whole archive from a new snapshot, which restores row for row and byte for
    byte."""
    backup_settings = with_kind(
        settings.model_copy(
            update={"attachments_dir": tmp_path / "attachments", "heartbeat_timeout_seconds": 3}
        ),
        "backup",
        backup_dir=tmp_path / "backups",
    )
    folder = backup_settings.resolved_attachments_dir
    backups = backup_folder(backup_settings)
    course = await seed(engine, 1000)
    created = await add_attachments(engine, folder, course.page_ids, [MB] * 60 + [0, 7, 70_000])
    source = await asyncio.to_thread(fingerprint, database_url)
    jobs = HubJobsClient(temporal, engine, backup_settings).scope(
        course.workspace_id, course.actor_id
    )
    env = hubjobs_env(backup_settings, tmp_path, backup_dir=backups, attachments_dir=folder)
    workers = [WorkerProcess("worker-1", env, tmp_path)]
    try:
        first = workers[0]
        job = await jobs.start("backup", {})
        final = backups / archive_name(job.id)
        await archive_being_written(backups, first)
        assert file_facts(final) is None, "the backup finished before the SIGTERM"
        code, took = await asyncio.to_thread(first.terminate, 30)
        first.kill()
        assert code == 0, first.tail()
        print(f"\nworker-1 SIGTERMed mid-stream; drained in {took:.2f} s")
        # Handed over: nothing left behind, the job still running, waiting for a worker.
        assert names_in(backups) == [], names_in(backups)
        assert (await jobs.get(job.id)).status == "running"
        assert "backup handed over" in first.log_text(), first.tail()

        workers.append(WorkerProcess("worker-2", env, tmp_path))
        done = await jobs.wait(job.id, timeout=60, interval=0.2)
        assert done.status == "succeeded", failed_job(done, workers)
        await workflow_closed(temporal, done.workflow_id)  # while worker-2 can run it
    finally:
        for w in workers:
            w.kill()

    endings = await run_endings(temporal, done.workflow_id, WRITE_BACKUP)
    assert endings == ["completed", "completed"], endings
    assert (done.attempts, done.attempts_failed) == (2, 0), done
    assert done.result is not None and Path(done.result["archivePath"]) == final
    assert names_in(backups) == [final.name]
    assert file_facts(final) == (0o600, done.result["sizeBytes"])
    assert done.result["attachmentCount"] == len(created)

    databases = Databases(stack)
    try:
        target_url, target_dir = databases.create(), tmp_path / "restored"
        report = await asyncio.to_thread(restore, final, target_url, target_dir)
        assert report.tables == {t: n for t, (n, _) in source.items()}
        assert await asyncio.to_thread(fingerprint, target_url) == source
        restored = await asyncio.to_thread(
            assert_same_attachments, database_url, folder, target_dir
        )
        assert restored == len(created)
    finally:
        databases.drop_all()
