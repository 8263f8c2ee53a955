"""Temporal's count of signals a run may take (issue 30), reached with real processes: a
worker process, the Temporal CLI, and a dev server of the test's own where a test must
reach the limit with less work than 10,000 signals.

- 20,000 bad signals (unknown names, malformed arguments) to a running job: its runs
  continue as new well before 10,000 each, no workflow task fails (but the server's
  retry of a continue-as-new that signals overtook), each refusal is counted and few
  are logged, and a bare ``cancel`` from the Temporal CLI then ends the job. Before,
  every refusal logged a warning, the replay of ten thousand overran the deadlock
  detector, and past 10,000 the server refused the cancel.
- a job whose own progress reports pass the run's limit continues as new and finishes
  exact.
- a run that takes no more signals is still cancelled: the client's cancel, refused by
  Temporal, is left to the attempt, which reads the recorded request.
- a worker whose workflow task is stuck in workflow code exits within its bound on
  SIGTERM (before, it waited on that task for good).
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.readmodel.status import JobStatus
from hubjobs.settings import Settings
from hubjobs.temporal.messages import CANCEL_SIGNAL, PROGRESS_QUERY, PROGRESS_SIGNAL
from hubjobs.temporal.process import STUCK_EXIT
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import (
    all_runs_history,
    assert_every_page_tagged_once,
    signals_of,
    temporal_cli,
    until,
    wait_until_final,
    wait_until_processed,
    workflow_closed,
)
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import own_temporal, seed
from tests.system.test_faults import failed_job, wait_started
from worker import STOP_BOUND_SECONDS

TEMPORAL_SIGNAL_LIMIT = 10_000
FLOOD = 20_000
# Senders at once, and the flood's rate, whatever the machine: a run's continue-as-new
# takes 1-8 s to be taken while signals keep landing, so at 400 a second a run takes
# at most a few thousand (docs/operations/failures.md has the figures).
FLOOD_SENDERS = 25
FLOOD_RATE = 400
# What a flood sends: names no handler has, and the job's own signals malformed.
BAD_SIGNALS: list[tuple[str, list[Any]]] = [
    ("no-such-signal", []),
    (CANCEL_SIGNAL, ["not an object"]),
    (CANCEL_SIGNAL, [{"actor_id": "not a uuid"}]),
    (PROGRESS_SIGNAL, [{}]),
    (CANCEL_SIGNAL, [1, 2]),
]


def signal_names(runs: list[list[Any]]) -> Counter[str]:
    return Counter(
        e.workflow_execution_signaled_event_attributes.signal_name
        for run in runs
        for e in run
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )


def failed_task_causes(runs: list[list[Any]]) -> Counter[str]:
    return Counter(
        WorkflowTaskFailedCause.Name(e.workflow_task_failed_event_attributes.cause)
        for run in runs
        for e in run
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    )


@asynccontextmanager
async def worker_on(
    temporal: Client, settings: Settings, tmp_path: Path, **overrides: Any
) -> AsyncIterator[WorkerProcess]:
    address = temporal.service_client.config.target_host
    env = hubjobs_env(settings, tmp_path, temporal_address=address, **overrides)
    worker = WorkerProcess("worker", env, tmp_path)
    try:
        await wait_started(worker)
        yield worker
    finally:
        worker.kill()


async def flood(temporal: Client, workflow_id: str, count: int) -> int:
    """``count`` bad signals from FLOOD_SENDERS senders, at most FLOOD_RATE a second;
    returns how many the server refused (a run that took its limit)."""
    handle = temporal.get_workflow_handle(workflow_id)
    kinds = itertools.cycle(BAD_SIGNALS)
    left = iter(range(count))
    refused = 0
    began = time.monotonic()

    async def sender() -> None:
        nonlocal refused
        for sent in left:
            await asyncio.sleep(max(0.0, began + sent / FLOOD_RATE - time.monotonic()))
            name, args = next(kinds)
            while True:
                try:
                    await handle.signal(name, args=args)
                    break
                except RPCError as err:
                    # "workflow is closing": a run continuing as new takes no signal until
                    # the new run's first task; the client's own retries may run out
                    # first on a loaded machine. Sent again, as any sender would.
                    if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                        await asyncio.sleep(0.2)
                        continue
                    assert err.status == RPCStatusCode.INVALID_ARGUMENT, err
                    refused += 1
                    break

    await asyncio.gather(*(sender() for _ in range(FLOOD_SENDERS)))
    return refused


@pytest.mark.timeout(600)
async def test_a_bare_cancel_from_the_temporal_cli_ends_a_job_after_20000_bad_signals(
    engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    course = await seed(engine, 2000)
    async with own_temporal({}) as temporal:
        # A batch of ten a second: the job outlasts any flood this test sends.
        async with worker_on(
            temporal,
            settings,
            tmp_path,
            tagging_batch_size=10,
            tagging_batch_pause_seconds=1,
            work_slice_seconds=30,
        ) as worker:
            jobs = HubJobsClient(temporal, engine, settings).scope(
                course.workspace_id, course.actor_id
            )
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "flood"}
            )
            await wait_until_processed(engine, job.id, 10, worker, timeout=60)
            began = time.monotonic()
            refused_by_server = await flood(temporal, job.workflow_id, FLOOD)
            flooded = time.monotonic() - began
            running = await jobs.get(job.id)
            assert running.status == JobStatus.running, failed_job(running, [worker])

            # A signal that lands while a run continues as new is refused, retryably,
            # with "workflow is closing" (until the new run's first task: Temporal's SDK
            # clients retry it, its CLI does not): sent again, as a person would, it
            # reaches the new run.
            async def cancel_sent() -> subprocess.CompletedProcess[str] | None:
                sent = await asyncio.to_thread(
                    temporal_cli,
                    temporal.service_client.config.target_host,
                    "workflow",
                    "signal",
                    "--workflow-id",
                    job.workflow_id,
                    "--name",
                    CANCEL_SIGNAL,
                )
                if "workflow is closing" in sent.stderr:
                    await asyncio.sleep(0.5)
                    return None
                return sent

            cancelled = await until("the bare cancel to be taken", cancel_sent, 60)
            assert cancelled.returncode == 0, cancelled.stderr
            final = await wait_until_final(jobs, job.id, timeout=120)
            assert final.status == JobStatus.cancelled, failed_job(final, [worker])
            await workflow_closed(temporal, job.workflow_id, timeout=60)
            description = await temporal.get_workflow_handle(job.workflow_id).describe()
            assert description.status == WorkflowExecutionStatus.CANCELED

            runs = await all_runs_history(temporal, job.workflow_id)
            per_run = [signals_of(run) for run in runs]
            print(
                f"\n{FLOOD} bad signals in {flooded:.1f} s ({FLOOD / flooded:.0f} a second): "
                f"{len(runs)} runs, at most {max(per_run)} signals in one"
            )
            assert len(runs) > FLOOD // TEMPORAL_SIGNAL_LIMIT, per_run
            assert max(per_run) < TEMPORAL_SIGNAL_LIMIT // 2, per_run
            assert refused_by_server == 0, per_run
            # The only failed tasks: a continue-as-new overtaken by signals, retried.
            causes = failed_task_causes(runs)
            assert set(causes) <= {"WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND"}, causes
            # Every bad signal counted, across the runs; a log line for few of them.
            progress = await temporal.get_workflow_handle(job.workflow_id).query(PROGRESS_QUERY)
            names = signal_names(runs)
            assert progress["refused_signals"] == FLOOD, (progress["refused_signals"], names)
            logged = worker.log_text().count("refused in all)")
            assert 0 < logged <= 2 * len(runs) + 20, logged


async def test_a_job_whose_own_progress_reports_pass_the_runs_limit_finishes_exact(
    engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    # A run's signals, as 10,000 is: 6,000 pages a batch of ten make 180 to 300 reports
    # (fewer on a loaded machine, where each report waits on the one before).
    limit = 100
    budget = 30
    course = await seed(engine, 6000)
    async with own_temporal({"history.maximumSignalsPerExecution": str(limit)}) as temporal:
        async with worker_on(
            temporal,
            settings,
            tmp_path,
            tagging_batch_size=10,
            progress_report_seconds=0.01,
            run_signal_budget=budget,
            work_slice_seconds=30,
        ) as worker:
            # The budget is the job's, chosen by the starter.
            starter = settings.model_copy(update={"run_signal_budget": budget})
            jobs = HubJobsClient(temporal, engine, starter).scope(
                course.workspace_id, course.actor_id
            )
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "reports"}
            )
            final = await wait_until_final(jobs, job.id, timeout=300)
            assert final.status == JobStatus.succeeded, failed_job(final, [worker])
            await assert_every_page_tagged_once(engine, final, course.page_ids, "reports")
            await workflow_closed(temporal, job.workflow_id, timeout=60)
            description = await temporal.get_workflow_handle(job.workflow_id).describe()
            assert description.status == WorkflowExecutionStatus.COMPLETED

            runs = await all_runs_history(temporal, job.workflow_id)
            per_run = [signals_of(run) for run in runs]
            assert sum(per_run) > limit, per_run  # one run could not have taken them
            assert max(per_run) < limit, per_run
            assert final.attempts_failed == 0
            assert not failed_task_causes(runs), failed_task_causes(runs)


async def test_a_cancel_the_run_can_no_longer_take_is_ended_by_the_attempt(
    engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    limit = 30
    course = await seed(engine, 2000)
    async with own_temporal({"history.maximumSignalsPerExecution": str(limit)}) as temporal:
        async with worker_on(
            temporal, settings, tmp_path, tagging_batch_size=10, tagging_batch_pause_seconds=1
        ) as worker:
            # The budget past the limit: the run takes signals until Temporal refuses them.
            starter = settings.model_copy(update={"run_signal_budget": 5000})
            jobs: WorkspaceJobs = HubJobsClient(temporal, engine, starter).scope(
                course.workspace_id, course.actor_id
            )
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "full"}
            )
            await wait_until_processed(engine, job.id, 10, worker, timeout=60)
            assert await flood(temporal, job.workflow_id, 2 * limit) > 0

            asked = await jobs.cancel(job.id, reason="the run takes no signals")
            assert asked.cancel_requested_at is not None
            final = await wait_until_final(jobs, job.id, timeout=120)
            assert final.status == JobStatus.cancelled, failed_job(final, [worker])
            assert final.processed < final.total
            await workflow_closed(temporal, job.workflow_id, timeout=60)


async def test_a_worker_whose_workflow_task_is_stuck_exits_within_its_bound_on_sigterm(
    temporal: Client, settings: Settings, tmp_path: Path
) -> None:
    env = hubjobs_env(settings, tmp_path)
    worker = WorkerProcess("stuck", env, tmp_path, args=["-m", "tests.support.stuck_worker"])
    workflow_id = f"stuck-{uuid.uuid4()}"
    try:
        await wait_started(worker)
        await temporal.start_workflow(
            "StuckWorkflow", id=workflow_id, task_queue=settings.task_queue
        )

        async def stuck() -> bool | None:
            return True if "stuck in workflow code" in worker.log_text() else None

        await until("the workflow task to be stuck", stuck, 60)
        code, took = worker.terminate(timeout=60)
        assert code == STUCK_EXIT, worker.tail()
        assert took < STOP_BOUND_SECONDS + 2, took
    finally:
        worker.kill()
        await temporal.get_workflow_handle(workflow_id).terminate()
