"""A worker survives its servers restarting at the same address, and so does its job.

Each test has a stack of its own (tests/support/stacks.py), brought up by ``hubjobs up`` while
its preferred ports are held by listeners, as another stack on the machine would hold
them. A real worker process (``python worker.py``) tags a course of 3,000 pages in slow
batches; mid-job one server goes down for a while and ``hubjobs up`` brings it back, on
the recorded address although the preferred ports are still taken. The worker is never
restarted: it must carry on by itself, and the job must finish with every page tagged
exactly once.

- The Temporal dev server is SIGKILLed and kept down for 10 s. The SDK's pollers retry
  the unreachable server by themselves. The running attempt goes on tagging meanwhile,
  its heartbeats failing; once the server is back (with its state, from
  ``temporal.db``) it times that attempt out on its heartbeat, which costs nothing (the
  attempt had made progress), and the next attempt carries on from the last cursor it
  recorded, skipping the pages already done.
- PostgreSQL is stopped with ``pg_ctl stop -m immediate`` (a crash, for the clients)
  and kept down for 5 s. The running attempt waits it out, trying again at most
  HUBJOBS_OUTAGE_RETRY_MAX_SECONDS apart, and carries on where it was: no attempt
  fails.

Either way the job spends none of its attempts (``attempts_failed == 0``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.devstack.embedded import EmbeddedPostgres
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import (
    assert_every_page_tagged_once,
    processed_of,
    wait_until_final,
    wait_until_processed,
)
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import seed
from tests.support.stacks import OwnStack, held_ports, kill_temporal, own_stack

PAGES = 3000
# Pages done before the server goes down: the job is well under way, with most left.
DOWN_AFTER = 500
TEMPORAL_DOWN_SECONDS = 10.0
BATCH_PAUSE_SECONDS = 0.15
POSTGRES_DOWN_SECONDS = 5.0
# The job's bound once its server is back, on a loaded 2-core machine.
FINISH_TIMEOUT = 60.0
# `hubjobs up` brings the server back here, not the stack's supervisor, which would have
# done it at once (tests/system/test_database_disk.py shows that one).
UNSUPERVISED = {"HUBJOBS_STACK_SUPERVISOR": "false"}


@dataclass
class TaggingRun:
    """A course-tagging job run by a worker process on a test's own stack."""

    client: HubJobsClient
    jobs: WorkspaceJobs
    course: DemoCourse
    job: JobView
    worker: WorkerProcess
    tag: str


@asynccontextmanager
async def tagging_run(stack: OwnStack, logs: Path, tag: str) -> AsyncIterator[TaggingRun]:
    """Seeds the course, starts one worker process (which reads the stack's addresses
    from its ``stack.json``, once) and the job; kills the worker and closes the client
    afterwards."""
    settings = Settings(
        home=stack.home,
        task_queue=f"restarts-{uuid.uuid4().hex[:12]}",
        maintenance=False,
        # The lease: a retry comes soon after the server is back.
        heartbeat_timeout_seconds=3,
        max_activity_attempts=5,
    )
    env = hubjobs_env(
        settings,
        stack.home,
        heartbeat_timeout_seconds=3,
        tagging_batch_size=25,
        # Slow batches: the job outlasts the outage with work left however fast the
        # machine, its pauses alone being longer. Past DOWN_AFTER, (PAGES - DOWN_AFTER)
        # / 25 = 100 batches are left, 0.15 s apart: 15 s, against Temporal's 10 s down
        # (during which the attempt goes on tagging). At 0.05 s they were 5 s, and only
        # a slow machine's own pace made up the rest.
        tagging_batch_pause_seconds=BATCH_PAUSE_SECONDS,
    )
    async with await HubJobsClient.connect(settings) as client:
        course = await seed(client.engine, PAGES)
        jobs = client.scope(course.workspace_id, course.actor_id)
        worker = WorkerProcess("worker", env, logs)
        try:
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": tag}
            )
            yield TaggingRun(client, jobs, course, job, worker, tag)
        except BaseException:
            print(f"\n--- {worker.name} ({worker.log_path}):\n{worker.tail(60)}")
            raise
        finally:
            worker.kill()


async def finish_after_outage(run: TaggingRun, went_down: float, what: str) -> JobView:
    """Waits for the job; checks that it succeeded exactly, with its first worker still
    the one running; prints how long after the outage began it finished."""
    done = await wait_until_final(run.jobs, run.job.id, timeout=FINISH_TIMEOUT)
    took = time.monotonic() - went_down
    print(f"{what}: the job finished {took:.1f} s after the server went down")
    assert done.status == "succeeded", (
        f"job ended {done.status} ({done.error_code}: {done.error_message}), "
        f"{done.processed}/{done.total} done"
    )
    assert run.worker.alive(), "the worker carried on: it was never restarted"
    await assert_every_page_tagged_once(run.client.engine, done, run.course.page_ids, run.tag)
    # The outage cost the job none of its attempts.
    assert done.attempts_failed == 0, done
    return done


async def test_the_worker_carries_on_after_temporal_is_killed_and_brought_back(
    tmp_path: Path,
) -> None:
    with held_ports() as preferred, own_stack(preferred, UNSUPERVISED) as stack:
        record = stack.record.read_text()
        async with tagging_run(stack, tmp_path, "temporal-restart") as run:
            at_kill = await wait_until_processed(
                run.client.engine, run.job.id, DOWN_AFTER, run.worker, timeout=60
            )
            kill_temporal(stack.home)
            went_down = time.monotonic()
            print(f"killed Temporal with {at_kill} of {PAGES} pages done")
            await asyncio.sleep(TEMPORAL_DOWN_SECONDS)
            assert run.worker.alive(), "the worker outlives the server being down"
            during = await processed_of(run.client.engine, run.job.id)
            assert during < PAGES, "the job must still have work left when Temporal returns"

            # Back on the recorded address, though the preferred ports are still taken.
            assert await asyncio.to_thread(stack.up) == stack.info
            assert stack.record.read_text() == record
            print(f"Temporal back {time.monotonic() - went_down:.1f} s after the kill")
            await finish_after_outage(run, went_down, "Temporal SIGKILLed")


async def test_the_worker_carries_on_after_postgres_is_stopped_and_started_again(
    tmp_path: Path,
) -> None:
    with held_ports() as preferred, own_stack(preferred, UNSUPERVISED) as stack:
        record = stack.record.read_text()
        async with tagging_run(stack, tmp_path, "postgres-restart") as run:
            at_stop = await wait_until_processed(
                run.client.engine, run.job.id, DOWN_AFTER, run.worker, timeout=60
            )
            await asyncio.to_thread(EmbeddedPostgres(stack.home).stop, "immediate")
            went_down = time.monotonic()
            print(f"stopped PostgreSQL (immediate) with {at_stop} of {PAGES} pages done")
            await asyncio.sleep(POSTGRES_DOWN_SECONDS)
            assert run.worker.alive(), "the worker outlives the database being down"

            # Back on the recorded port, though the preferred ports are still taken.
            assert await asyncio.to_thread(stack.up) == stack.info
            assert stack.record.read_text() == record
            print(f"PostgreSQL back {time.monotonic() - went_down:.1f} s after the stop")
            await finish_after_outage(run, went_down, "PostgreSQL stopped -m immediate")
