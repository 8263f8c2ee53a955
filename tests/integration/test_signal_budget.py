"""A run's signal budget: a run that took its job's ``run_signal_budget`` signals, its
own progress reports and others' bad ones alike, continues as new at once, its attempt
left to find its run gone and stop; the job ends exact, and every refused signal is counted
across the runs. (The limits themselves, reached with real processes:
tests/system/test_signal_limits.py.)"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from hubjobs.readmodel.status import JobStatus
from hubjobs.settings import Settings
from hubjobs.temporal.messages import PROGRESS_QUERY
from starter.client import HubJobsClient
from tests.support.helpers import (
    all_runs_history,
    assert_every_page_tagged_once,
    signals_of,
    wait_until_final,
    with_kind,
    workflow_closed,
)
from tests.support.histories import record
from tests.support.servers import running_worker, seed

BUDGET = 10
BAD = 60


HANDING_OVER = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}


def signals_when_asked(run: Sequence[HistoryEvent]) -> tuple[int, int] | None:
    """The run's signal count before and after the workflow task whose commands asked
    for the job back (its attempt's cancellation, or continue-as-new with no attempt
    running); None if no task did."""
    taken = before = 0
    for i, event in enumerate(run):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            taken += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            commands = itertools.takewhile(
                lambda e: e.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
                run[i + 1 :],
            )
            if any(e.event_type in HANDING_OVER for e in commands):
                return before, taken
            before = taken
    return None


async def test_a_run_continues_as_new_on_its_signal_count_and_the_job_ends_exact(
    engine: AsyncEngine, temporal: Client, settings: Settings
) -> None:
    busy = with_kind(
        settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.2
    ).model_copy(
        update={
            "progress_report_seconds": 0.01,
            "run_signal_budget": BUDGET,
            "work_slice_seconds": 30,
        }
    )
    course = await seed(engine, 300)
    jobs = HubJobsClient(temporal, engine, busy).scope(course.workspace_id, course.actor_id)
    async with running_worker(temporal, busy):
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "budget"}
        )
        handle = temporal.get_workflow_handle(job.workflow_id)
        for _ in range(BAD):
            await handle.signal("no-such-signal")
        done = await wait_until_final(jobs, job.id, timeout=120)
        await workflow_closed(temporal, job.workflow_id)
        progress = await handle.query(PROGRESS_QUERY)
        runs = await all_runs_history(temporal, job.workflow_id)
    assert done.status == JobStatus.succeeded, done
    await assert_every_page_tagged_once(engine, done, course.page_ids, "budget")
    assert done.attempts_failed == 0
    per_run = [signals_of(run) for run in runs]
    # Each run but the last continued as new once it had taken its budget: the first
    # with the bad signals, the others on the job's own reports. Reports sent before
    # the attempt hears of it land too, however many a loaded machine lets through;
    # what the run decides does not depend on that: a run on reports asks for the job
    # back in the very workflow task that takes it to the budget (the first may wait
    # for its small-job try to end).
    assert len(runs) >= 3 and sum(per_run) > BAD, per_run
    assert all(signals >= BUDGET for signals in per_run[:-1]), per_run
    asked_at = [signals_when_asked(run) for run in runs[:-1]]
    assert asked_at[0] is not None and asked_at[0][1] >= BUDGET, asked_at
    assert all(at is not None and at[0] < BUDGET <= at[1] for at in asked_at[1:]), asked_at
    assert progress["refused_signals"] == BAD, progress
    # No run asked its attempt to stop: it continued as new with the attempt running.
    assert not any(
        e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
        for run in runs
        for e in run
    )
    # The first run, which continued as new on its budget, for the replay test.
    first_run = runs[-1][0].workflow_execution_started_event_attributes.first_execution_run_id
    await record(
        temporal.get_workflow_handle(job.workflow_id, run_id=first_run),
        "course_tagging_signal_budget",
    )
