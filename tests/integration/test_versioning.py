"""Worker Deployment versioning on the real dev server, as the README's deploy procedure
runs it: a job started on build 1 keeps running there after build 2 becomes current
(through `temporal worker deployment set-current-version`), a new job runs on build 2,
and once the old job is done build 1 drains.

Each test has a deployment of its own (the session's namespace is shared) and the
session's dev server checks drainage every second (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.enums.v1 import VersioningBehavior as BehaviorMessage
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import VersioningBehavior
from temporalio.workflow import _Definition

from activities.maintenance import STUCK_ATTEMPTS
from hubjobs import job_rows
from hubjobs.devstack import embedded
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.settings import Settings
from hubjobs.temporal.deployment import describe, describe_version, pinned_query
from hubjobs.temporal.maintenance import RECONCILER_WORKFLOW
from hubjobs.temporal.messages import ReconcileRequest, ReconcileResult
from starter.client import HubJobsClient
from tests.support.helpers import all_runs_history, temporal_cli, with_kind, workflow_closed
from tests.support.servers import running_worker, seed
from tests.support.wedged_build import WedgingCourseTaggingWorkflow
from worker import implementations, workflows
from workflows.course_tagging import CourseTaggingWorkflow
from workflows.job_lifecycle import kind_workflow
from workflows.maintenance import MAINTENANCE_WORKFLOWS

T = TypeVar("T")
# The longest wait for a failing workflow task's next retry this test allows: the server
# backs them off (10 s, 15, 19, 29, 49, 80 s ... as they keep failing).
FAILING_TASK_RETRY_SECONDS = 150
PINNED = BehaviorMessage.VERSIONING_BEHAVIOR_PINNED


def test_every_workflow_states_its_versioning_behaviour() -> None:
    """Job workflows are pinned, the maintenance workflows auto-upgrade, and a kind's
    workflow that states no behaviour is refused where it is declared."""
    behaviours = {
        _Definition.must_from_class(cls).name: _Definition.must_from_class(cls).versioning_behavior
        for cls in workflows()
    }
    for implementation in implementations():
        assert behaviours[implementation.kind.workflow_type] == VersioningBehavior.PINNED
    for cls in MAINTENANCE_WORKFLOWS:
        name = _Definition.must_from_class(cls).name
        assert behaviours[name] == VersioningBehavior.AUTO_UPGRADE
    with pytest.raises(ValueError, match="must state its versioning behaviour"):
        kind_workflow(COURSE_TAGGING, versioning=VersioningBehavior.UNSPECIFIED)


async def eventually(
    check: Callable[[], Awaitable[T | None]],
    timeout: float,
    what: str,
    every: float = 0.25,
    explain: Callable[[], Awaitable[str]] | None = None,
) -> T:
    """``check``'s first answer that is not None; past ``timeout`` the test fails with
    ``what`` and, if given, ``explain``'s account of where things stand."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            account = await explain() if explain is not None else ""
            raise AssertionError(f"{what}: not within {timeout:.0f} s. {account}")
        await asyncio.sleep(every)


async def pending_task(handle: WorkflowHandle[Any, Any]) -> str:
    """A run's pending workflow task and versioning, as `temporal workflow describe`
    shows them: what a failed wait for a build to take a run over needs to say."""
    raw = (await handle.describe()).raw_description
    task = raw.pending_workflow_task
    versioning = raw.workflow_execution_info.versioning_info
    return (
        f"pending workflow task: attempt {task.attempt}, state {task.state}, "
        f"scheduled {task.scheduled_time.ToJsonString()}; versioning: "
        f"{versioning.deployment_version.build_id or '-'} "
        f"override {versioning.versioning_override.pinned.version.build_id or '-'}"
    )


class Gate:
    """Holds build 1's tagging batches (before their write) until released, so that its
    job is still running, for sure, when build 2 takes over. While it holds it
    heartbeats, as the batch would."""

    def __init__(self) -> None:
        self.held = asyncio.Event()
        self.released = asyncio.Event()

    async def __call__(self, _: AsyncConnection, __: Sequence[uuid.UUID], ___: int) -> None:

        self.held.set()
        while not self.released.is_set():
            activity.heartbeat()
            try:
                await asyncio.wait_for(self.released.wait(), timeout=0.5)
            except TimeoutError:
                pass


def builds_of(runs: list[list[Any]]) -> tuple[set[str], set[int], set[str]]:
    """Across every run of a workflow: the build ids that completed its workflow tasks,
    the behaviours they reported, and the identities of the workers that started its
    activities."""
    builds: set[str] = set()
    behaviours: set[int] = set()
    identities: set[str] = set()
    for events in runs:
        for event in events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                done = event.workflow_task_completed_event_attributes
                builds.add(done.deployment_version.build_id)
                behaviours.add(done.versioning_behavior)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                identities.add(event.activity_task_started_event_attributes.identity)
    return builds, behaviours, identities


async def test_a_running_job_finishes_on_its_build_while_new_jobs_run_on_the_next(
    stack: embedded.StackInfo, temporal: Client, engine: AsyncEngine, settings: Settings
) -> None:
    name = f"test-{uuid.uuid4().hex[:10]}"
    build_1 = with_kind(settings, "course_tagging", tagging_batch_size=10).model_copy(
        update={"worker_versioning": True, "deployment_name": name, "build_id": "1"}
    )
    build_2 = build_1.model_copy(update={"build_id": "2"})
    hub = HubJobsClient(temporal, engine, build_1)
    old_course, new_course = await seed(engine, 40), await seed(engine, 20)
    old_jobs = hub.scope(old_course.workspace_id, old_course.actor_id)
    new_jobs = hub.scope(new_course.workspace_id, new_course.actor_id)
    gate = Gate()

    async with running_worker(temporal, build_1, before_write=gate):
        # A fresh deployment: its first worker made its build current (as `make run`'s).
        state = await describe(temporal, build_1)
        assert state is not None and state.current_build_id == "1"
        old = await old_jobs.start(
            "course_tagging", {"root_page_id": old_course.root_page_id, "tag": "b1"}
        )
        await asyncio.wait_for(gate.held.wait(), 30)

        async with running_worker(temporal, build_2):
            # Started, build 2 does not take over by itself (HUBJOBS_DEPLOYMENT_SET_CURRENT
            # is if_unset): the operator makes it current, as the README's procedure says.
            state = await describe(temporal, build_2)
            assert state is not None and state.current_build_id == "1"

            async def set_current() -> bool | None:
                done = await asyncio.to_thread(
                    temporal_cli,
                    stack.temporal_address,
                    "worker",
                    "deployment",
                    "set-current-version",
                    "--deployment-name",
                    name,
                    "--build-id",
                    "2",
                    "--yes",
                )
                return True if done.returncode == 0 else None

            switched = time.monotonic()
            await eventually(set_current, 30, "build 2 set current", every=0.5)
            print(f"\nbuild 2 current after {time.monotonic() - switched:.1f} s")

            new = await new_jobs.start(
                "course_tagging", {"root_page_id": new_course.root_page_id, "tag": "b2"}
            )
            new_done = await new_jobs.wait(new.id, timeout=60, interval=0.1)
            assert new_done.status == "succeeded" and new_done.succeeded == 20
            # Its row is final a step before its run closes: the history read after the
            # workers stop must be whole, so build 2 closes it first.
            await workflow_closed(temporal, new.workflow_id)
            # The old job is still running, held on build 1.
            assert not (await old_jobs.get(old.id)).is_final

            described_new = await temporal.get_workflow_handle(new.workflow_id).describe()
            info = described_new.raw_description.workflow_execution_info.versioning_info
            assert (info.behavior, info.deployment_version.build_id) == (PINNED, "2")
            described_old = await temporal.get_workflow_handle(old.workflow_id).describe()
            info = described_old.raw_description.workflow_execution_info.versioning_info
            assert (info.behavior, info.deployment_version.build_id) == (PINNED, "1")
            version_1 = await describe_version(temporal, build_1, "1")
            assert version_1.status == "DRAINING", version_1
            pinned = await temporal.count_workflows(pinned_query(build_1, "1"))
            assert pinned.count == 1

            gate.released.set()
            old_done = await old_jobs.wait(old.id, timeout=60, interval=0.1)
            assert old_done.status == "succeeded" and old_done.succeeded == 40

            # Build 1 drains: no workflow pinned to it is open any more.
            async def drained() -> str | None:
                state = await describe_version(temporal, build_1, "1")
                return state.drainage if state.drainage == "DRAINED" else None

            waited = time.monotonic()
            await eventually(drained, 30, "build 1 drained")
            print(f"build 1 drained {time.monotonic() - waited:.1f} s after its last job")
            assert (await temporal.count_workflows(pinned_query(build_1, "1"))).count == 0
            cli = await asyncio.to_thread(
                temporal_cli,
                stack.temporal_address,
                "worker",
                "deployment",
                "describe-version",
                "--deployment-name",
                name,
                "--build-id",
                "1",
                "--output",
                "json",
            )
            assert cli.returncode == 0, cli.stderr
            assert "DRAINED" in json.dumps(json.loads(cli.stdout)).upper()

    # The histories say which build ran what: the old job's every workflow task on
    # build 1 (before and after the switch), its attempts on build 1's worker; the new
    # job's on build 2.
    old_builds, old_behaviours, old_workers = builds_of(
        await all_runs_history(temporal, old.workflow_id)
    )
    assert old_builds == {"1"} and old_behaviours == {PINNED}
    assert old_workers and all(w.endswith(f"{name}:1") for w in old_workers), old_workers
    new_builds, new_behaviours, new_workers = builds_of(
        await all_runs_history(temporal, new.workflow_id)
    )
    assert new_builds == {"2"} and new_behaviours == {PINNED}
    assert new_workers and all(w.endswith(f"{name}:2") for w in new_workers), new_workers
    # The old job's work did carry on after build 2 became current.
    assert old_done.finished_at is not None and new_done.finished_at is not None
    assert old_done.finished_at > new_done.finished_at


async def reconcile_once(temporal: Client, settings: Settings) -> ReconcileResult:
    result: ReconcileResult = await temporal.execute_workflow(
        RECONCILER_WORKFLOW,
        ReconcileRequest(grace_seconds=0),
        id=f"reconcile-{uuid.uuid4()}",
        task_queue=settings.task_queue,
        result_type=ReconcileResult,
        # Bounded: this test hung 300 s twice on a loaded machine (2026-12-02), with no
        # line saying where; a reconciliation that does not end fails here, named.
        execution_timeout=timedelta(seconds=60),
    )
    return result


async def test_a_run_wedged_on_an_old_build_is_flagged_and_moved_to_a_fixed_one(
    stack: embedded.StackInfo, temporal: Client, engine: AsyncEngine, settings: Settings
) -> None:
    """Issue 18's bug, put back in build 1 (tests/support/wedged_build.py): a bare ``cancel``
    fails every workflow task of its pinned run. The reconciler flags the job stuck
    (read model, queue state, log) with the failure's type; the README's procedure, a
    versioning override (`temporal workflow update-options`) onto fixed build 2, moves
    the run there, where the signal cancels it; the flag goes with the job's end."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    build_1 = with_kind(settings, "course_tagging", tagging_batch_size=10).model_copy(
        update={"worker_versioning": True, "deployment_name": name, "build_id": "1"}
    )
    build_2 = build_1.model_copy(update={"build_id": "2"})
    wedging = [
        WedgingCourseTaggingWorkflow if cls is CourseTaggingWorkflow else cls for cls in workflows()
    ]
    course = await seed(engine, 200)
    jobs = HubJobsClient(temporal, engine, build_1).scope(course.workspace_id, course.actor_id)
    gate = Gate()
    async with (
        running_worker(temporal, build_1, before_write=gate, workflow_classes=wedging),
        # The fixed build's workers run before the run wedges (step 2 of the procedure):
        # how long they take to start adds nothing to the wait after the override.
        running_worker(temporal, build_2),
    ):
        try:
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "wedge"}
            )
            await asyncio.wait_for(gate.held.wait(), 30)
            handle = temporal.get_workflow_handle(job.workflow_id)
            await handle.signal("cancel")  # bare: build 1's typed handler raises

            async def failing_task() -> int | None:
                raw = (await handle.describe()).raw_description
                attempt = raw.pending_workflow_task.attempt
                return attempt if attempt >= STUCK_ATTEMPTS else None

            await eventually(failing_task, 60, "the workflow task failing on build 1")
            await reconcile_once(temporal, build_1)
            stuck = await jobs.get(job.id)
            assert stuck.status == "running" and stuck.stuck_since is not None
            assert stuck.stuck_reason is not None and "TypeError" in stuck.stuck_reason
            async with engine.connect() as conn:
                assert (await job_rows.queue_state(conn)).stuck == 1

            moved = await asyncio.to_thread(
                temporal_cli,
                stack.temporal_address,
                *("workflow", "update-options", "--workflow-id", job.workflow_id),
                *("--versioning-override-behavior", "pinned"),
                *("--versioning-override-deployment-name", name),
                *("--versioning-override-build-id", "2"),
            )
            assert moved.returncode == 0, moved.stderr

            async def cancel_recorded() -> bool | None:
                return (await jobs.get(job.id)).cancel_requested_at is not None or None

            # The run moves at its next workflow-task retry, and the server spaces those
            # out as they keep failing (measured on the dev server: 10 s apart, then 15,
            # 19, 29, 49 s): the bound covers the retry due after a loaded machine's
            # slowest way here, whatever attempt the override meets.
            await eventually(
                cancel_recorded,
                FAILING_TASK_RETRY_SECONDS,
                "build 2 handling the signal",
                explain=lambda: pending_task(handle),
            )
        finally:
            gate.released.set()
        done = await jobs.wait(job.id, timeout=60, interval=0.1)
        assert done.status == "cancelled" and done.stuck_since is None
        await workflow_closed(temporal, job.workflow_id)
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.CANCELED
    builds, _, _ = builds_of(await all_runs_history(temporal, job.workflow_id))
    assert builds == {"1", "2"}  # its first tasks on build 1, the rest on build 2
    async with engine.connect() as conn:
        assert (await job_rows.queue_state(conn)).stuck == 0
