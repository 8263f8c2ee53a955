"""Other services and the Temporal UI get the same job our own client gets: clients nobody
here wrote, on the real dev server.

- A TypeScript service (Temporal's ``@temporalio/client`` from the npm registry, the
  script tests/support/typescript/job.ts) starts a job from the published contract
  alone (docs/contract/), follows it by the ``progress`` query while it runs, and
  cancels another with a bare ``cancel`` signal; the read model agrees each time.
- The Temporal CLI does the same, and cancels a workspace's running jobs with one
  batch signal (``--query``), as the UI's *Batch* page does.
- The progress query follows the read model within 2 s while a job runs.
- A direct start's contract: the field a bad input lacks is named (never its value),
  with a failed row when the job id and workspace can be read; a workflow id of the
  caller's choosing is the one the row records; the job's attempts carry its kind's
  priority and its workspace as fairness key, as a client start's do.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

from hubjobs import job_rows
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.settings import Settings
from hubjobs.temporal.contract import FOLDER as CONTRACT
from starter.client import HubJobsClient
from tests.support.helpers import (
    final_row,
    row_of,
    running_row,
    temporal_cli,
    until,
    with_kind,
    workflow_closed,
)
from tests.support.servers import seed

TYPESCRIPT = Path(__file__).resolve().parents[1] / "support" / "typescript"
TAG = "from-elsewhere"


@pytest.fixture(scope="module")
def typescript_client() -> Path:
    """The TypeScript client, installed from the npm registry (its lock file) and built
    with tsc: the script another service would write from the docs."""
    npm = shutil.which("npm")
    assert npm is not None, "Node.js and npm are needed (Debian's nodejs, or the machine's)"
    for step in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "build"]):
        done = subprocess.run(step, cwd=TYPESCRIPT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    return TYPESCRIPT / "dist" / "job.js"


async def node(script: Path, command: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs the script's command; returns what it said, one object a line."""
    process = await asyncio.create_subprocess_exec(
        shutil.which("node") or "node",
        str(script),
        command,
        json.dumps(args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    return [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]


def said(lines: list[dict[str, Any]], key: str) -> Any:
    found = [line[key] for line in lines if key in line]
    assert found, f"the client never said {key!r}: {lines}"
    return found[-1]


@pytest.fixture
def slow_settings(settings: Settings) -> Settings:
    """Small batches with a pause between them: a 1,000-page course takes 10 s at the
    least (100 batches, two lanes, 0.2 s pauses), however fast the machine, so that it
    is seen running; the tests wait for states, never for times."""
    return with_kind(
        settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.2
    )


def direct_input(course: DemoCourse, **fields: Any) -> dict[str, Any]:
    """What a newcomer sends, from job-input.schema.json: the two required ids and the
    kind's payload; the rest left to the contract's defaults."""
    return {
        "workspace_id": str(course.workspace_id),
        "actor_id": str(course.actor_id),
        "payload": {"root_page_id": str(course.root_page_id), "tag": TAG},
        **fields,
    }


# --- TypeScript --------------------------------------------------------------------------


async def test_a_typescript_service_starts_follows_and_cancels_from_the_contract(
    typescript_client: Path,
    temporal: Client,
    engine: AsyncEngine,
    slow_settings: Settings,
    slow_worker: None,
    hub: HubJobsClient,
) -> None:
    course = await seed(engine, 1000)
    address = slow_settings.resolved_temporal_address()
    job_id = uuid.uuid4()
    lines = await node(
        typescript_client,
        "start",
        {
            "address": address,
            "contract": str(CONTRACT),
            "kind": "course_tagging",
            "jobId": str(job_id),
            "workspaceId": str(course.workspace_id),
            "actorId": str(course.actor_id),
            "payload": {"root_page_id": str(course.root_page_id), "tag": TAG},
            "taskQueue": slow_settings.task_queue,
        },
    )
    workflow_id = f"course_tagging-{job_id}"
    assert said(lines, "started") == workflow_id
    midway = said(lines, "midway")  # seen by the progress query while it ran
    assert 0 < midway["counters"]["processed"] < midway["counters"]["total"] == 1000
    result = said(lines, "result")
    row = await final_row(engine, job_id)
    # The read model agrees: the job id from the workflow id, the correlation id the
    # workflow id (the contract's defaults), the counters the workflow's own.
    assert row.status == "succeeded" == result["status"]
    assert row.workflow_id == workflow_id and row.correlation_id == workflow_id
    assert row.counters.model_dump() == result["counters"]
    assert row.succeeded == 1000

    # A second job, cancelled by a bare signal from TypeScript.
    jobs = hub.scope(course.workspace_id, course.actor_id)
    other = await jobs.start(
        "course_tagging", {"root_page_id": course.root_page_id, "tag": "second"}
    )
    await running_row(engine, other.id)
    lines = await node(
        typescript_client, "cancel", {"address": address, "workflowId": other.workflow_id}
    )
    assert said(lines, "closed") == "CancelledFailure"
    done = await final_row(engine, other.id)
    assert done.status == "cancelled" and done.cancel_requested_by is None
    assert 0 < done.processed < done.total
    progress = said(lines, "progress")
    assert progress["status"] == "cancelled"
    assert progress["counters"] == done.counters.model_dump()


# --- the Temporal CLI ----------------------------------------------------------------------


async def cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = await asyncio.to_thread(temporal_cli, address, *args)
    assert done.returncode == 0, done.stderr
    return done


async def test_the_temporal_cli_starts_queries_and_cancels_a_job(
    temporal: Client,
    engine: AsyncEngine,
    slow_settings: Settings,
    slow_worker: None,
) -> None:
    course = await seed(engine, 1000)
    address = slow_settings.resolved_temporal_address()
    job_id = uuid.uuid4()
    workflow_id = f"course_tagging-{job_id}"
    await cli(
        address,
        *("workflow", "start", "--type", COURSE_TAGGING.workflow_type),
        *("--task-queue", slow_settings.task_queue, "--workflow-id", workflow_id),
        *("--input", json.dumps(direct_input(course))),
    )
    await running_row(engine, job_id)

    async def queried_midway() -> dict[str, Any] | None:
        done = await cli(
            address,
            *("workflow", "query", "--workflow-id", workflow_id, "--name", "progress"),
            *("--output", "json"),
        )
        answer = json.loads(done.stdout)["queryResult"][0]
        processed = answer["counters"]["processed"]
        return answer if answer["status"] == "running" and processed > 0 else None

    answer = await until("the progress query mid-way", queried_midway)
    assert answer["counters"]["total"] == 1000
    # `--name cancel` and no input: a bare signal.
    await cli(address, "workflow", "signal", "--workflow-id", workflow_id, "--name", "cancel")
    done = await final_row(engine, job_id)
    assert done.status == "cancelled" and done.cancel_requested_by is None
    assert 0 < done.processed < done.total
    await workflow_closed(temporal, workflow_id)
    described = await temporal.get_workflow_handle(workflow_id).describe()
    assert described.status == WorkflowExecutionStatus.CANCELED


async def test_one_batch_signal_cancels_every_running_job_of_a_workspace(
    temporal: Client,
    engine: AsyncEngine,
    slow_settings: Settings,
    slow_worker: None,
    hub: HubJobsClient,
) -> None:
    """``temporal workflow signal --query … --name cancel``: Temporal's batch operation,
    as the UI's Batch page runs it; another workspace's job runs on."""
    course, bystander = await seed(engine, 1000), await seed(engine, 1000)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    started = [
        await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": f"t{n}"})
        for n in range(3)
    ]
    other = await hub.scope(bystander.workspace_id, bystander.actor_id).start(
        "course_tagging", {"root_page_id": bystander.root_page_id, "tag": "kept"}
    )
    for job in started:
        await running_row(engine, job.id)
    query = f"WorkspaceId = '{course.workspace_id}' AND JobStatus = 'running'"

    async def all_visible() -> bool:
        return (await temporal.count_workflows(query)).count == len(started)

    await until("the running jobs in Temporal's visibility", all_visible)
    await cli(
        slow_settings.resolved_temporal_address(),
        *("workflow", "signal", "--query", query, "--name", "cancel"),
        *("--reason", "stop this workspace's jobs", "--yes"),
    )
    for job in started:
        assert (await final_row(engine, job.id)).status == "cancelled"
    assert (await final_row(engine, other.id)).status == "succeeded"


# --- progress --------------------------------------------------------------------------------


async def test_the_progress_query_follows_the_read_model_within_two_seconds(
    temporal: Client,
    engine: AsyncEngine,
    slow_settings: Settings,
    slow_worker: None,
    hub: HubJobsClient,
) -> None:
    """While a job runs, whatever the read model says at a moment, the query says at
    least as much within 2 s (a report a second, without a database round trip)."""
    course = await seed(engine, 1000)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    handle = temporal.get_workflow_handle(job.workflow_id)
    checked = 0
    while True:
        row = await row_of(engine, job.id)
        assert row is not None
        if row.is_final or (row.snapshot_at is not None and row.processed >= row.total * 0.8):
            break
        if row.processed == 0:
            await asyncio.sleep(0.05)
            continue
        seen = time.monotonic()

        async def caught_up(at_least: int = row.processed) -> dict[str, Any] | None:
            progress: dict[str, Any] = await handle.query("progress")
            return progress if progress["counters"]["processed"] >= at_least else None

        progress = await until("the query caught up", caught_up, timeout=10)
        lag = time.monotonic() - seen
        assert lag <= 2.0, f"the query was {lag:.1f} s behind the read model"
        assert progress["counters"]["total"] == 1000
        checked += 1
    assert checked >= 2, "the job ran too fast to be followed: slow it down"
    done = await jobs.wait(job.id, timeout=60)
    assert done.status == "succeeded"


# --- a direct start's contract -------------------------------------------------------------------


async def test_a_bad_direct_start_names_the_field_and_leaves_a_failed_row(
    temporal: Client, engine: AsyncEngine, settings: Settings, worker: None, course: DemoCourse
) -> None:
    job_id = uuid.uuid4()
    raw = direct_input(course, job_id=str(job_id))
    del raw["actor_id"]
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        raw,
        id=f"course_tagging-{job_id}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "invalid_payload"
    assert "actor_id" in cause.message and "Field required" in cause.message
    row = await final_row(engine, job_id)
    assert row.status == "failed" and row.error_code == "invalid_payload"
    assert row.error_message == cause.message
    assert row.actor_id == job_rows.UNKNOWN_ACTOR

    # A payload that does not validate: the field, never the value sent.
    job_id = uuid.uuid4()
    raw = direct_input(course, job_id=str(job_id))
    raw["payload"]["tag"] = "bad\x07tag"
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        raw,
        id=f"course_tagging-{job_id}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "invalid_payload"
    assert "tag" in cause.message and "bad" not in cause.message
    assert (await final_row(engine, job_id)).error_code == "invalid_payload"

    # No workspace to read: no row, and still a workflow failed at once.
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        {"actor_id": str(course.actor_id)},
        id=f"course_tagging-{uuid.uuid4()}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert isinstance(failed.value.cause, ApplicationError)
    assert "workspace_id" in failed.value.cause.message


async def test_a_direct_start_gets_what_a_client_start_gets(
    temporal: Client, engine: AsyncEngine, settings: Settings, worker: None, course: DemoCourse
) -> None:
    """Under a workflow id of the caller's choosing, with no priority of its own: the row
    records the workflow id Temporal has, and each attempt carries the kind's priority
    and the workspace as fairness key."""
    workflow_id = f"partner-start-{uuid.uuid4().hex[:8]}"
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        direct_input(course),
        id=workflow_id,
        task_queue=settings.task_queue,
    )
    outcome = await handle.result()
    job_id = uuid.UUID(outcome["job_id"])
    row = await final_row(engine, job_id)
    assert row.status == "succeeded" and row.succeeded == 30
    assert row.workflow_id == workflow_id and row.correlation_id == workflow_id
    priorities = [
        event.activity_task_scheduled_event_attributes.priority
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert priorities
    for priority in priorities:
        assert priority.priority_key == COURSE_TAGGING.priority
        assert priority.fairness_key == str(course.workspace_id)
    # The same start again is the same job: nothing new.
    again = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        direct_input(course),
        id=workflow_id,
        task_queue=settings.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )
    assert (await again.result())["job_id"] == str(job_id)
