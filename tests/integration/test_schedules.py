"""Job schedules on the real servers, through the client: an interval schedule fires
again and again, each firing a job of its own linked to the schedule; pause stops the
firings and unpause brings them back; delete removes the Schedule from Temporal (and
from `temporal schedule list`); `keep 1` on a backup schedule leaves one archive; a
firing whose actor was demoted meanwhile is a failed job with the refusal's code."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.devstack.embedded import StackInfo, venv_binary
from hubjobs.errors import InvalidInput
from hubjobs.kinds.backup import backup_folder
from hubjobs.readmodel.reads import JOB_COLUMNS
from hubjobs.readmodel.views import JobView
from hubjobs.schedules.definition import (
    CATCHUP_WINDOW,
    job_id_of_firing,
)
from hubjobs.settings import Settings
from hubjobs.temporal.messages import FiringOutcome, SweepResult
from starter.client import HubJobsClient
from tests.support.helpers import until, with_kind
from tests.support.histories import record
from tests.support.servers import running_worker, seed

T = TypeVar("T")
# Every 2 s: a few firings within a test, with room for a loaded machine.
EVERY = 2


async def runs_of(engine: AsyncEngine, schedule_id: str) -> list[JobView]:
    """The schedule's jobs, oldest first, as the read model holds them."""

    async with engine.connect() as conn:
        rows = await conn.execute(
            text(f"SELECT {JOB_COLUMNS} FROM jobs WHERE schedule_id = :s ORDER BY created_at, id"),
            {"s": schedule_id},
        )
        return [JobView.model_validate(dict(r._mapping)) for r in rows]


def temporal_schedule_ids(stack: StackInfo) -> set[str]:
    """The schedule ids `temporal schedule list` shows (the venv's CLI)."""
    done = subprocess.run(
        [
            venv_binary("temporal"),
            "schedule",
            "list",
            "--address",
            stack.temporal_address,
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = json.loads(done.stdout or "[]")
    return {entry["scheduleId"] for entry in listed or []}


async def running_firings(temporal: Client, schedule_id: str) -> int:
    description = await temporal.get_schedule_handle(schedule_id).describe()
    return len(description.info.running_actions)


@pytest_asyncio.fixture
async def cleanup(temporal: Client) -> AsyncIterator[list[str]]:
    """Schedule ids to delete after the test (Schedules outlive a test's database)."""
    created: list[str] = []
    yield created
    for schedule_id in created:
        try:
            await temporal.get_schedule_handle(schedule_id).delete()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise


async def test_a_paused_schedule_lists_no_upcoming_run_and_keeps_its_note(
    hub: HubJobsClient, course: DemoCourse, cleanup: list[str]
) -> None:
    """Paused, a schedule has no upcoming run (``get`` and ``list``) and its note still
    says what it does, and who paused it; unpaused, both as before. Before: its next
    runs still listed (the UI's upcoming runs going by in the past) and its note
    replaced by "paused by …"."""
    schedules = hub.schedules(course.workspace_id, course.actor_id)
    created = await schedules.create("backup", cron="0 3 * * *", keep=7)
    cleanup.append(created.id)
    what = "backup cron 0 3 * * * (UTC), keeping the newest 7"
    assert (created.note, created.paused) == (what, False) and created.next_runs

    paused = await schedules.pause(created.id)
    assert paused.paused and paused.next_runs == []
    assert paused.note == f"{what}; paused by {course.actor_id}"

    async def listed_paused() -> bool:
        [listed] = await schedules.list()
        return listed.paused and listed.next_runs == [] and listed.note == paused.note

    await until("the paused schedule listed so", listed_paused)

    unpaused = await schedules.unpause(created.id)
    assert (unpaused.paused, unpaused.note) == (False, what) and unpaused.next_runs


async def test_an_interval_schedule_fires_jobs_that_pause_unpause_and_delete_govern(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    stack: StackInfo,
    worker: None,
    cleanup: list[str],
) -> None:
    schedules = hub.schedules(course.workspace_id, course.actor_id)
    created = await schedules.create(
        "course_tagging",
        every=f"{EVERY}s",
        payload={"root_page_id": str(course.root_page_id), "tag": "weekly"},
    )
    cleanup.append(created.id)
    assert created.id.startswith("course_tagging-schedule-")
    assert (created.kind, created.every_seconds, created.cron, created.keep) == (
        "course_tagging",
        EVERY,
        None,
        None,
    )
    assert created.workspace_id == course.workspace_id and created.actor_id == course.actor_id
    assert not created.paused and created.next_runs

    # The Temporal Schedule: overlap skip, the stated catch-up window, on the CLI's list.
    described = await temporal.get_schedule_handle(created.id).describe()
    assert described.schedule.policy.overlap.name == "SKIP"
    assert described.schedule.policy.catchup_window == CATCHUP_WINDOW
    assert created.id in await until(
        "the schedule in `temporal schedule list`",
        lambda: _with(asyncio.to_thread(temporal_schedule_ids, stack), created.id),
    )

    # It fires at least twice; each firing is a job of its own, linked to the schedule.
    async def two_done() -> list[JobView] | None:
        runs = await runs_of(engine, created.id)
        done = [job for job in runs if job.is_final]
        return runs if len(done) >= 2 else None

    runs = await until("two finished runs", two_done, timeout=90)
    assert len({job.id for job in runs}) == len(runs) >= 2
    for job in runs:
        assert job.schedule_id == created.id and job.kind == "course_tagging"
        assert job.workflow_id == f"course_tagging-{job.id}"
        assert job.correlation_id.startswith(created.id + "-")  # the firing's workflow id
        assert job.id == job_id_of_firing(job.correlation_id)
    finished = [job for job in runs if job.is_final]
    assert [job.status for job in finished] == ["succeeded"] * len(finished)
    assert finished[0].succeeded == 30 and finished[1].skipped == 30  # tagged by the first

    # The runs are found by the schedule: in the read model and in Temporal.
    listed = await hub.scope(course.workspace_id, course.actor_id).list(schedule_id=created.id)
    assert {job.id for job in finished} <= {job.id for job in listed}
    found = {wf.id async for wf in temporal.list_workflows(f'JobScheduleId = "{created.id}"')}
    assert {job.workflow_id for job in finished} <= found
    shown = await schedules.get(created.id)
    assert {run.job_id for run in shown.recent_runs} >= {job.id for job in finished}

    # Pause: no firing while paused (a run under way may finish).
    paused = await schedules.pause(created.id)
    assert paused.paused
    await until("no firing running", lambda: _none(running_firings(temporal, created.id)))
    count = len(await runs_of(engine, created.id))
    actions = (await temporal.get_schedule_handle(created.id).describe()).info.num_actions
    await asyncio.sleep(3 * EVERY + 1)
    assert len(await runs_of(engine, created.id)) == count
    assert (await temporal.get_schedule_handle(created.id).describe()).info.num_actions == actions

    # Unpause: it fires again.
    assert not (await schedules.unpause(created.id)).paused
    await until(
        "a firing after unpause",
        lambda: _more(runs_of(engine, created.id), count),
        timeout=60,
    )

    # Delete: gone from Temporal; the jobs stay.
    await schedules.delete(created.id)
    with pytest.raises(RPCError) as missing:
        await temporal.get_schedule_handle(created.id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
    await until(
        "the schedule gone from `temporal schedule list`",
        lambda: _without(asyncio.to_thread(temporal_schedule_ids, stack), created.id),
    )
    assert len(await runs_of(engine, created.id)) > count


async def _with(ids: Awaitable[set[str]], wanted: str) -> set[str] | None:
    found = await ids
    return found if wanted in found else None


async def _without(ids: Awaitable[set[str]], unwanted: str) -> bool:
    return unwanted not in await ids


async def _none(count: Awaitable[int]) -> bool:
    return await count == 0


async def _more(runs: Awaitable[list[JobView]], than: int) -> bool:
    return len(await runs) > than


async def test_a_firing_whose_actor_was_demoted_is_a_failed_job_with_its_code(
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    worker: None,
    cleanup: list[str],
) -> None:
    schedules = hub.schedules(course.workspace_id, course.actor_id)
    created = await schedules.create(
        "course_tagging",
        cron="0 3 * * *",
        time_zone="Europe/Amsterdam",
        payload={"root_page_id": str(course.root_page_id), "tag": "nightly"},
    )
    cleanup.append(created.id)
    assert (created.cron, created.time_zone) == ("0 3 * * *", "Europe/Amsterdam")
    async with engine.begin() as conn:  # still a member, no longer an administrator
        await conn.execute(
            text("UPDATE workspace_memberships SET role = 'editor' WHERE user_id = :id"),
            {"id": course.actor_id},
        )
    # The demoted actor may no longer trigger it; another administrator does.
    async with engine.begin() as conn:
        other_admin = await create_account(conn, course.workspace_id, name="Otto Admin")
    with pytest.raises(Exception) as refused:
        await schedules.trigger(created.id)
    assert getattr(refused.value, "code", None) == "actor_not_administrator"
    await hub.schedules(course.workspace_id, other_admin).trigger(created.id)

    runs = await until("the refused firing's row", lambda: runs_of(engine, created.id))
    assert len(runs) == 1
    job = runs[0]
    assert (job.status, job.error_code) == ("failed", "actor_not_administrator")
    assert job.schedule_id == created.id and job.actor_id == course.actor_id
    assert job.finished_at is not None and job.expires_at is not None
    # The firing failed with the same code, and no job workflow was started.
    firing = temporal.get_workflow_handle(job.correlation_id)
    with pytest.raises(WorkflowFailureError) as failed:
        await firing.result()
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == "actor_not_administrator"
    await record(firing, "scheduled_start_refused")
    with pytest.raises(RPCError) as missing:
        await temporal.get_workflow_handle(job.workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


async def test_cancelling_a_firing_in_temporal_cancels_its_job(
    temporal: Client, engine: AsyncEngine, settings: Settings, cleanup: list[str]
) -> None:
    slow = with_kind(
        settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.05
    )
    course = await seed(engine, 1000)
    schedules = HubJobsClient(temporal, engine, slow).schedules(
        course.workspace_id, course.actor_id
    )
    async with running_worker(temporal, slow):
        created = await schedules.create(
            "course_tagging",
            cron="0 3 * * *",
            payload={"root_page_id": str(course.root_page_id), "tag": "x"},
        )
        cleanup.append(created.id)
        await schedules.trigger(created.id)

        async def under_way() -> list[JobView] | None:
            runs = await runs_of(engine, created.id)
            return runs if runs and runs[0].processed >= 50 else None

        job = (await until("the run under way", under_way))[0]
        # A manual trigger now would be skipped by the overlap policy: refused, said why.
        with pytest.raises(InvalidInput) as busy:
            await schedules.trigger(created.id)
        assert busy.value.code == "schedule_running"
        firing = temporal.get_workflow_handle(job.correlation_id)
        await firing.cancel()  # as the UI's Cancel on the firing does

        async def finished() -> list[JobView] | None:
            runs = await runs_of(engine, created.id)
            return runs if runs[0].is_final else None

        job = (await until("the run finished", finished))[0]
        assert job.status == "cancelled" and 50 <= job.processed < 1000  # work done kept
        with pytest.raises(WorkflowFailureError) as ended:
            await firing.result()
        assert isinstance(ended.value.cause, CancelledError)
        assert (await firing.describe()).status == WorkflowExecutionStatus.CANCELED


# --- keep -------------------------------------------------------------------------------


@pytest.fixture
def backup_settings(settings: Settings, tmp_path: Path) -> Settings:
    return with_kind(
        settings.model_copy(update={"attachments_dir": tmp_path / "attachments"}),
        "backup",
        backup_dir=tmp_path / "backups",
    )


async def test_keep_one_on_a_backup_schedule_leaves_one_archive(
    temporal: Client,
    engine: AsyncEngine,
    backup_settings: Settings,
    cleanup: list[str],
) -> None:
    course = await seed(engine, 5)
    hub = HubJobsClient(temporal, engine, backup_settings)
    schedules = hub.schedules(course.workspace_id, course.actor_id)
    backups = backup_folder(backup_settings)
    async with running_worker(temporal, backup_settings):
        created = await schedules.create("backup", every=f"{EVERY}s", keep=1)
        cleanup.append(created.id)
        assert created.keep == 1

        async def two_succeeded() -> list[JobView] | None:
            done = [j for j in await runs_of(engine, created.id) if j.status == "succeeded"]
            return done if len(done) >= 2 else None

        await until("two successful backups", two_succeeded, timeout=120)
        await schedules.pause(created.id)
        await until("no firing running", lambda: _none(running_firings(temporal, created.id)))
        runs = [j for j in await runs_of(engine, created.id) if j.status == "succeeded"]
        newest = max(runs, key=lambda j: (j.finished_at, j.id))
        # Every firing's keep step ran: all but the newest success expire now.
        for job in runs:
            outcome = await temporal.get_workflow_handle(
                job.correlation_id, result_type=FiringOutcome
            ).result()
            assert outcome.job_id == job.id and outcome.status == "succeeded"
        await record(temporal.get_workflow_handle(newest.correlation_id), "scheduled_start_kept")
        older = [j for j in runs if j.id != newest.id]
        async with engine.connect() as conn:
            now = (await conn.execute(text("SELECT now()"))).scalar_one()
        assert older and all(j.expires_at is not None and j.expires_at <= now for j in older)
        assert newest.expires_at is not None and newest.expires_at > now  # its retention
        assert len(sorted(backups.glob("*.zip"))) == len(runs)  # not swept yet

        swept = await temporal.execute_workflow(
            "RetentionSweep",
            100,
            id=f"sweep-{uuid.uuid4().hex[:8]}",
            task_queue=backup_settings.task_queue,
            result_type=SweepResult,
        )
    assert (swept.removed, swept.kept) == (len(older), 0)
    assert newest.result is not None
    assert sorted(p.name for p in backups.iterdir()) == [Path(newest.result["archivePath"]).name]
    left = await runs_of(engine, created.id)
    assert [j.id for j in left if j.status == "succeeded"] == [newest.id]


async def test_a_hub_backup_schedule_is_a_hub_operators_at_creation_and_at_every_firing(
    temporal: Client,
    engine: AsyncEngine,
    settings: Settings,
    course: DemoCourse,
    cleanup: list[str],
) -> None:
    """A workspace administrator may not schedule the whole hub's backup; a hub
    operator may, and each firing checks again: once the deployment no longer names
    them (the worker's HUBJOBS_HUB_OPERATORS), the firing is a failed job with the code,
    and no backup runs."""
    async with engine.begin() as conn:
        operator = await create_account(conn, course.workspace_id, name="Otto Operator")
    starter = HubJobsClient(
        temporal, engine, settings.model_copy(update={"hub_operators": [operator]})
    )
    hub_wide = {"scope": "hub"}
    with pytest.raises(Exception) as refused:
        await starter.schedules(course.workspace_id, course.actor_id).create(
            "backup", every="1h", payload=hub_wide
        )
    assert getattr(refused.value, "code", None) == "hub_operator_required"
    schedules = starter.schedules(course.workspace_id, operator)
    created = await schedules.create("backup", every="1h", payload=hub_wide)
    cleanup.append(created.id)
    assert created.payload == hub_wide

    async with running_worker(temporal, settings):  # a worker that names no operator
        await schedules.trigger(created.id)
        runs = await until("the refused firing's row", lambda: runs_of(engine, created.id))
    assert [(job.status, job.error_code) for job in runs] == [("failed", "hub_operator_required")]
    assert runs[0].actor_id == operator and runs[0].result is None
