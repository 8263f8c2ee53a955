"""No input from outside fails a workflow task: every workflow the worker runs, started
with a bad input, and every signal and query handler, sent nothing, ``null``, a string,
a number, a list and a wrong-typed object, through Temporal's time-skipping test
environment. Each run either goes on or fails as a workflow (``invalid_payload``); its
history never holds a failed workflow task. A bare ``cancel`` (no argument, ``null``,
``{}``) then cancels: recorded with the actor unknown, the run closed as Canceled.

No database here: the activities are one stand-in that answers each by its name (the
read model's part is the tests' on real servers, tests/test_other_services.py)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import worker as worker_module
from hubjobs.kinds import REGISTRY
from hubjobs.schedules.definition import SCHEDULED_START_WORKFLOW
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.client import data_converter
from hubjobs.temporal.maintenance import (
    MAINTENANCE_PLAN_SIGNAL,
    MAINTENANCE_WORKFLOW,
    RECONCILER_WORKFLOW,
    RETENTION_SWEEP_WORKFLOW,
)
from hubjobs.temporal.messages import CANCEL_SIGNAL, PROGRESS_QUERY, PROGRESS_SIGNAL, JobInput
from hubjobs.temporal.sandbox import sandbox_runner

TASK_QUEUE = "hostile"
NOTHING = object()  # no argument at all
WRONG_TYPED = {
    "job_id": True,
    "workspace_id": 7,
    "actor_id": ["someone"],
    "counters": "many",
    "message": [],
    "sweep_seconds": "soon",
    "payload": "x",
}
HOSTILE: list[Any] = [NOTHING, None, "cancel it", 42, [1, 2], WRONG_TYPED]
IDS = ["nothing", "null", "string", "number", "list", "wrong-typed"]
JOB_WORKFLOWS = [kind.workflow_type for kind in REGISTRY]
WORK_ACTIVITIES = {"tag_course", "write_backup", "export_pages"}

# What the stand-in activities saw, by job id: the cancellation requests recorded.
cancels: dict[str, dict[str, Any]] = {}


def stand_in(client: Client) -> Any:
    """Every activity the workflows call, answered by name: a kind's work runs until its
    job's cancellation is recorded, then ends it cancelled, as a real attempt would."""

    @activity.defn(dynamic=True)
    async def answer(args: Sequence[RawValue]) -> Any:
        name = activity.info().activity_type
        values = [activity.payload_converter().from_payload(arg.payload) for arg in args]
        if name in WORK_ACTIVITIES:
            if values[0].get("whole"):
                # A small job's first attempt, done whole: here it never finds the job
                # small, and hands it to the ordinary attempts having done nothing.
                return {}
            job_id = values[0]["job"]["job_id"]
            while job_id not in cancels:
                activity.heartbeat()
                await asyncio.sleep(0.02)
            return {"outcome": {"job_id": job_id, "status": "cancelled", "counters": {}}}
        if name == "record_cancel_request":
            cancels[str(values[0])] = values[1]
            return None
        if name == "cancel_run":
            await client.get_workflow_handle(values[0], run_id=values[1]).cancel()
            return None
        if name == "finish_job":
            return {"job_id": values[0]["job_id"], "status": values[0]["status"], "counters": {}}
        if name in ("record_refused_start", "durable_progress"):
            return 0 if name == "durable_progress" else None
        if name == "sweep_expired":
            return {"removed": 0, "kept": 0}
        if name == "reconcile":
            return {"checked": 0, "finished": 0, "restarted": 0}
        raise ApplicationError(f"no stand-in for {name}", non_retryable=True)

    return answer


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(Path(sys.executable).parent / "temporal-test-server"),
        data_converter=data_converter(Settings(payload_codec=False)),
    )
    try:
        await environment.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default",
                search_attributes=sa.registration(),
            )
        )
        worker = Worker(
            environment.client,
            task_queue=TASK_QUEUE,
            workflows=worker_module.workflows(versioned=False),
            activities=[stand_in(environment.client)],
            workflow_runner=sandbox_runner(),
        )
        async with worker:
            yield environment
    finally:
        await environment.shutdown()


def _args(value: Any) -> list[Any]:
    return [] if value is NOTHING else [value]


async def _no_failed_task(handle: WorkflowHandle[Any, Any]) -> None:
    async for event in handle.fetch_history_events():
        assert event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED, (
            f"{handle.id}: a workflow task failed: {event.workflow_task_failed_event_attributes}"
        )


async def _start(env: WorkflowEnvironment, workflow: str, value: Any) -> WorkflowHandle[Any, Any]:
    return await env.client.start_workflow(
        workflow, args=_args(value), id=f"{workflow}-{uuid.uuid4()}", task_queue=TASK_QUEUE
    )


def _bad_starts() -> list[Any]:
    """Every workflow with every hostile input, but no input at all or null for
    maintenance: that is a valid start of it (its defaults)."""
    return [
        pytest.param(workflow, value, id=f"{name}-{workflow}")
        for workflow in [*JOB_WORKFLOWS, SCHEDULED_START_WORKFLOW, MAINTENANCE_WORKFLOW]
        for value, name in zip(HOSTILE, IDS, strict=True)
        if not (workflow == MAINTENANCE_WORKFLOW and value in (NOTHING, None))
    ]


@pytest.mark.parametrize(("workflow", "value"), _bad_starts())
async def test_a_bad_input_fails_the_workflow_never_its_task(
    env: WorkflowEnvironment, workflow: str, value: Any
) -> None:
    handle = await _start(env, workflow, value)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == "invalid_payload"
    assert "cancel it" not in str(failed.value.cause.message)  # the field, never the value
    await _no_failed_task(handle)


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
@pytest.mark.parametrize("workflow", [RETENTION_SWEEP_WORKFLOW, RECONCILER_WORKFLOW])
async def test_a_one_shot_maintenance_run_takes_any_input_without_failing_its_task(
    env: WorkflowEnvironment, workflow: str, value: Any
) -> None:
    handle = await _start(env, workflow, value)
    try:
        await handle.result()
    except WorkflowFailureError as failed:
        assert isinstance(failed.cause, ApplicationError)
        assert failed.cause.type == "invalid_payload"
    await _no_failed_task(handle)


def _job_input(workflow: str) -> dict[str, Any]:
    kind = next(k for k in REGISTRY if k.workflow_type == workflow)
    return JobInput(
        job_id=uuid.uuid4(),
        kind=kind.name,
        workspace_id=uuid.uuid4(),
        actor_id=uuid.uuid4(),
        correlation_id="hostile",
        payload={},
    ).model_dump(mode="json")


async def _until_running(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    for _ in range(500):
        progress: dict[str, Any] = await handle.query(PROGRESS_QUERY)
        if progress["status"] == "running":
            return progress
        await asyncio.sleep(0.02)
    raise AssertionError("the job never ran")


@pytest.mark.parametrize("bare", [NOTHING, None, {}], ids=["nothing", "null", "empty-object"])
@pytest.mark.parametrize("workflow", JOB_WORKFLOWS)
async def test_every_job_handler_takes_anything_and_a_bare_cancel_cancels(
    env: WorkflowEnvironment, workflow: str, bare: Any
) -> None:
    job = _job_input(workflow)
    handle = await env.client.start_workflow(
        workflow, job, id=f"{workflow}-{job['job_id']}", task_queue=TASK_QUEUE
    )
    await _until_running(handle)
    refused = 0
    for value in HOSTILE:
        await handle.signal(PROGRESS_SIGNAL, *_args(value))
        refused += 1
        progress = await handle.query(PROGRESS_QUERY, *_args(value))
        assert progress["status"] == "running"
        if value not in (NOTHING, None):  # those two are a bare cancel, sent below
            await handle.signal(CANCEL_SIGNAL, *_args(value))
            refused += 1
    # Every one refused, none cancelling: the job runs on.
    for _ in range(500):
        progress = await handle.query(PROGRESS_QUERY)
        if progress["refused_signals"] == refused:
            break
        await asyncio.sleep(0.02)
    assert progress["refused_signals"] == refused
    assert progress["status"] == "running" and not progress["cancel_requested"]
    assert job["job_id"] not in cancels

    await handle.signal(CANCEL_SIGNAL, *_args(bare))
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert cancels[job["job_id"]]["actor_id"] is None  # the actor unknown, recorded so
    await _no_failed_task(handle)


async def test_the_maintenance_plan_signal_and_state_query_take_anything(
    env: WorkflowEnvironment,
) -> None:
    handle = await _start(env, MAINTENANCE_WORKFLOW, None)
    for value in HOSTILE:
        await handle.signal(MAINTENANCE_PLAN_SIGNAL, *_args(value))
        state = await handle.query("state", *_args(value))
        assert state["plan"]["sweep_seconds"] == 60.0  # refused: the plan is unchanged
    await handle.signal(MAINTENANCE_PLAN_SIGNAL, {"sweep_seconds": 3600})
    for _ in range(500):
        if (await handle.query("state"))["plan"]["sweep_seconds"] == 3600:
            break
        await asyncio.sleep(0.02)
    assert (await handle.query("state"))["plan"]["sweep_seconds"] == 3600
    await _no_failed_task(handle)
    await handle.terminate("test over")
