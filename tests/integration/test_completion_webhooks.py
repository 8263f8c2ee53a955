"""Completion webhooks end to end, on the real servers: a job started with a notify_url
is POSTed its completion, signed, once it is final, by a child workflow of its own that
retries with backoff; a receiver that fails three times gets four tries with one
idempotency key and the row says delivered; a redirect is not followed (refused); a
destination not allowed, or the metadata address, is refused at the start and leaves
nothing, or fails a direct Temporal start; a cancelled job still closes as Canceled."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.errors import HubJobsError, JobNotFound
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from hubjobs.temporal.messages import JobInput
from hubjobs.webhooks.signing import verify
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import until, workflow_closed
from tests.support.histories import record
from tests.support.servers import bearer, seed
from tests.support.sse import serving
from tests.support.webhooks import WEBHOOK_SECRET, Receiver

TAG = "notified"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A signing secret, and retries fractions of a second apart (the schedule's shape,
    doubling from the first wait, is Temporal's)."""
    return settings.model_copy(
        update={
            "webhook_secret": SecretStr(WEBHOOK_SECRET),
            "webhook_retry_initial_seconds": 0.2,
            "webhook_retry_max_seconds": 1.0,
        }
    )


@contextlib.asynccontextmanager
async def receiving(receiver: Receiver) -> AsyncIterator[str]:
    async with serving(receiver.app()) as base:
        yield f"{base}/hook"


async def _settled(jobs: WorkspaceJobs, job_id: uuid.UUID) -> JobView:
    """The job once its delivery is no longer pending (a direct start's row may not be
    there yet)."""

    async def probe() -> JobView | None:
        try:
            job = await jobs.get(job_id)
        except JobNotFound:
            return None
        return job if job.notify_state not in (None, "pending") else None

    return await until("the delivery to settle", probe, timeout=60)


async def _counts(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        jobs = (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one()
        items = (await conn.execute(text("SELECT count(*) FROM job_items"))).scalar_one()
    return int(jobs), int(items)


async def test_three_failures_then_one_delivery_signed_with_one_key(
    hub: HubJobsClient, course: DemoCourse, worker: None, temporal: Client
) -> None:
    receiver = Receiver(plan=[500, 500, 500])
    jobs = hub.scope(course.workspace_id, course.actor_id)
    async with receiving(receiver) as url:
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": TAG}, notify_url=url
        )
        assert job.notify_url == url and job.notify_state == "pending"
        done = await _settled(jobs, job.id)
    assert done.status == "succeeded"
    assert done.notify_state == "delivered" and done.notify_attempts == 4
    assert done.notified_at is not None and done.notified_at >= done.finished_at  # type: ignore[operator]
    # The last failure is ours to word: a code and the status, never the receiver's body.
    assert done.notify_last_error == "notify_failed: the receiver answered 500"

    assert len(receiver.received) == 4 and len(receiver.accepted()) == 1
    assert {d.key for d in receiver.received} == {f"hubjobs-completion-{job.id}"}
    for delivery in receiver.received:
        assert verify(
            WEBHOOK_SECRET.encode(), delivery.signature, delivery.body, now=int(time.time())
        )
        assert not verify(
            b"another secret", delivery.signature, delivery.body, now=int(time.time())
        )
    assert receiver.accepted()[0].completion == {
        "job_id": str(job.id),
        "kind": "course_tagging",
        "workspace_id": str(course.workspace_id),
        "status": "succeeded",
        "result": done.result,
        "error_code": None,
    }

    # The job's run closed (Completed); the delivery is its own workflow, whose history
    # shows the tries. The delivery settles in the child, whose tries the parent's last
    # workflow task is not ordered with: its closing is waited for, not assumed.
    await workflow_closed(temporal, done.workflow_id)
    parent = temporal.get_workflow_handle(done.workflow_id)
    assert (await parent.describe()).status == WorkflowExecutionStatus.COMPLETED
    # The notify_url lives on the row: the run's input carries none, its outcome says so.
    started = (await parent.fetch_history()).events[0].workflow_execution_started_event_attributes
    (run_input,) = await temporal.data_converter.decode(started.input.payloads, [JobInput])
    assert isinstance(run_input, JobInput) and run_input.notify_url is None
    child = temporal.get_workflow_handle(f"{done.workflow_id}-notify")
    assert (await child.result())["state"] == "delivered"
    await record(parent, "course_tagging_notified")
    await record(child, "completion_delivery_retried")


async def test_a_redirect_is_not_followed_and_the_delivery_is_refused(
    hub: HubJobsClient, course: DemoCourse, worker: None, temporal: Client
) -> None:
    receiver = Receiver(plan=["redirect"])
    jobs = hub.scope(course.workspace_id, course.actor_id)
    async with receiving(receiver) as url:
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": TAG}, notify_url=url
        )
        done = await _settled(jobs, job.id)
    assert done.status == "succeeded"
    assert done.notify_state == "refused" and done.notify_attempts == 1
    assert done.notify_last_error is not None
    assert done.notify_last_error.startswith("notify_refused: the receiver redirected (302)")
    assert len(receiver.received) == 1 and receiver.followed == []
    child = temporal.get_workflow_handle(f"{done.workflow_id}-notify")
    assert (await child.result())["state"] == "refused"
    await record(child, "completion_delivery_refused")


async def test_a_receiver_that_never_takes_it_is_recorded_failed_at_the_deadline(
    temporal: Client, engine: AsyncEngine, course: DemoCourse, settings: Settings, worker: None
) -> None:
    """The deadline is the start's (its options): two seconds here, a day by default."""
    brief = settings.model_copy(update={"webhook_deadline_hours": 2 / 3600})
    jobs = HubJobsClient(temporal, engine, brief).scope(course.workspace_id, course.actor_id)
    receiver = Receiver(plan=[503] * 1000)
    async with receiving(receiver) as url:
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": TAG}, notify_url=url
        )
        done = await _settled(jobs, job.id)
    assert done.status == "succeeded" and done.notify_state == "failed"
    assert done.notify_last_error == "notify_failed: not delivered within 2 s"
    assert done.notify_attempts == len(receiver.received) >= 2
    assert receiver.accepted() == [] and done.notified_at is None
    child = temporal.get_workflow_handle(f"{done.workflow_id}-notify")
    assert (await child.result())["state"] == "failed"
    await record(child, "completion_delivery_failed")


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://10.0.0.5/hook", "invalid_notify_url"),  # a host the list does not name
        ("http://169.254.169.254/latest/meta-data/", "invalid_notify_url"),
        ("http://[fd00:ec2::254]/", "invalid_notify_url"),
        ("ftp://127.0.0.1/hook", "invalid_notify_url"),
        ("http://user:secret@127.0.0.1/hook", "invalid_notify_url"),
    ],
)
async def test_a_destination_not_allowed_is_refused_at_the_start_and_leaves_nothing(
    hub: HubJobsClient,
    course: DemoCourse,
    engine: AsyncEngine,
    temporal: Client,
    settings: Settings,
    url: str,
    code: str,
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    with pytest.raises(HubJobsError) as refused:
        await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": TAG}, notify_url=url
        )
    assert refused.value.code == code
    assert "169.254" not in refused.value.message and "Traceback" not in refused.value.message
    assert await _counts(engine) == (0, 0)
    queue = f'TaskQueue = "{settings.task_queue}"'
    assert [wf async for wf in temporal.list_workflows(queue)] == []


async def test_without_a_secret_a_notify_url_is_refused(
    temporal: Client, engine: AsyncEngine, course: DemoCourse, settings: Settings
) -> None:
    unsigned = settings.model_copy(update={"webhook_secret": None})
    jobs = HubJobsClient(temporal, engine, unsigned).scope(course.workspace_id, course.actor_id)
    with pytest.raises(HubJobsError) as refused:
        await jobs.start("backup", {}, notify_url="http://127.0.0.1:9/hook")
    assert refused.value.code == "webhooks_not_configured"
    assert await _counts(engine) == (0, 0)


async def test_the_api_refuses_a_bad_notify_url_with_its_code_and_takes_a_good_one(
    http: httpx.AsyncClient, course: DemoCourse, api_settings: Settings, engine: AsyncEngine
) -> None:
    headers = bearer(course.actor_id, api_settings)
    path = f"/workspaces/{course.workspace_id}/jobs/course_tagging"
    body = {"root_page_id": str(course.root_page_id), "tag": TAG}
    answer = await http.post(
        path, params={"notify_url": "http://169.254.169.254/"}, json=body, headers=headers
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_notify_url"
    assert await _counts(engine) == (0, 0)
    answer = await http.post(
        path, params={"notify_url": "http://127.0.0.1:9/hook"}, json=body, headers=headers
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["notify_state"] == "pending"


def _direct_input(course: DemoCourse, job_id: uuid.UUID, notify_url: str) -> dict[str, Any]:
    return JobInput(
        job_id=job_id,
        kind="course_tagging",
        workspace_id=course.workspace_id,
        actor_id=course.actor_id,
        correlation_id="other-service",
        payload={"root_page_id": str(course.root_page_id), "tag": TAG},
        notify_url=notify_url,
    ).model_dump(mode="json", exclude={"options", "checkpoint"})


async def test_a_direct_temporal_start_with_a_bad_notify_url_fails_with_its_code(
    hub: HubJobsClient, course: DemoCourse, worker: None, temporal: Client, settings: Settings
) -> None:
    job_id = uuid.uuid4()
    handle = await temporal.start_workflow(
        COURSE_TAGGING.workflow_type,
        _direct_input(course, job_id, "http://169.254.169.254/"),
        id=f"course_tagging-{job_id}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "invalid_notify_url"
    row = await hub.scope(course.workspace_id, course.actor_id).get(job_id)
    assert row.status == "failed" and row.error_code == "invalid_notify_url"
    assert row.notify_url is None and row.notify_state is None


async def test_a_direct_temporal_start_with_a_good_notify_url_is_delivered(
    hub: HubJobsClient, course: DemoCourse, worker: None, temporal: Client, settings: Settings
) -> None:
    receiver = Receiver()
    job_id = uuid.uuid4()
    async with receiving(receiver) as url:
        await temporal.start_workflow(
            COURSE_TAGGING.workflow_type,
            _direct_input(course, job_id, url),
            id=f"course_tagging-{job_id}",
            task_queue=settings.task_queue,
        )
        done = await _settled(hub.scope(course.workspace_id, course.actor_id), job_id)
    assert done.notify_state == "delivered" and done.notify_attempts == 1
    assert [d.completion["status"] for d in receiver.received] == ["succeeded"]


@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_a_cancelled_job_still_closes_canceled_and_is_notified(
    hub: HubJobsClient, engine: AsyncEngine, slow_worker: None, temporal: Client, how: str
) -> None:
    course = await seed(engine, 1000)
    receiver = Receiver()
    jobs = hub.scope(course.workspace_id, course.actor_id)
    async with receiving(receiver) as url:
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": TAG}, notify_url=url
        )
        async for current in jobs.watch(job.id, interval=0.05):
            if current.processed >= 20:
                break
        handle = temporal.get_workflow_handle(job.workflow_id)
        if how == "signal":
            await jobs.cancel(job.id)
        else:
            await handle.cancel()
        done = await _settled(jobs, job.id)
    assert done.status == "cancelled" and done.notify_state == "delivered"
    assert [d.completion["status"] for d in receiver.received] == ["cancelled"]
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    await record(handle, f"course_tagging_cancelled_by_{how}_notified")
