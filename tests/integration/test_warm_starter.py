"""The warm starter on the real servers (starter/warm): a start and a cancel the CLI
hands to the stack's worker are made there as the CLI would have made them (the row,
the workflow, the refusals), and a caller whose settings differ makes its call itself."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
import pytest_asyncio
from temporalio.client import Client

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.errors import HubJobsError
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient, WorkspaceJobs
from starter.warm import relay
from starter.warm.protocol import socket_path
from starter.warm.relay import NotServed, Relay
from starter.warm.server import serve

T = TypeVar("T")


async def call_warm(jobs: WorkspaceJobs, call: Callable[[WorkspaceJobs], Awaitable[T]]) -> T:
    """As the CLI calls (starter/cli/common.py's scoped_call): through the worker, else
    on ``jobs``."""
    try:
        return await call(
            cast(WorkspaceJobs, Relay(jobs.client.settings, jobs.workspace_id, jobs.actor_id))
        )
    except NotServed:
        return await call(jobs)


@pytest_asyncio.fixture
async def serving(settings: Settings) -> AsyncIterator[asyncio.Event]:
    """The worker's side, on the test's home, until the test ends."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, stop))
    path = socket_path(settings)
    for _ in range(200):
        if path.is_socket():
            break
        await asyncio.sleep(0.05)
    assert path.is_socket(), "the warm starter did not bind its socket"
    yield stop
    stop.set()
    await task
    assert not path.exists()


def _sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls the relay hands over (the worker then makes them, or sends them back)."""
    calls: list[str] = []
    send = relay.Relay._send

    async def spy(
        self: relay.Relay, call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> JobView | list[JobView]:
        calls.append(call)
        return await send(self, call, args, kwargs)

    monkeypatch.setattr(relay.Relay, "_send", spy)
    return calls


async def test_a_start_and_a_cancel_made_by_the_worker(
    serving: asyncio.Event,
    settings: Settings,
    course: DemoCourse,
    temporal: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = _sent(monkeypatch)
    async with HubJobsClient(settings=settings) as client:
        jobs = client.scope(course.workspace_id, course.actor_id)
        job = await call_warm(
            jobs, lambda j: j.start_course_tagging(root_page_id=course.root_page_id, tag="t")
        )
        assert job.status == JobStatus.queued and job.total == 0  # its first attempt snapshots
        assert await jobs.get(job.id) == job  # the row, as read here
        assert await call_warm(jobs, lambda j: j.get(job.id)) == job  # and by the worker
        assert await call_warm(jobs, lambda j: j.list(status=JobStatus.queued)) == [job]
        description = await temporal.get_workflow_handle(job.workflow_id).describe()
        assert description.task_queue == settings.task_queue

        cancelled = await call_warm(jobs, lambda j: j.cancel(job.id, reason="r"))
        assert cancelled.cancel_requested_at is not None
        assert sent == ["start_course_tagging", "get", "list", "cancel"]


async def test_a_refusal_reaches_the_caller_as_raised(
    serving: asyncio.Event, settings: Settings, course: DemoCourse
) -> None:
    async with HubJobsClient(settings=settings) as client:
        jobs = client.scope(course.workspace_id, course.actor_id)
        with pytest.raises(HubJobsError) as refused:
            await call_warm(
                jobs, lambda j: j.start_course_tagging(root_page_id=uuid.uuid4(), tag="t")
            )
        assert refused.value.code == "page_not_found"
        assert await jobs.list() == []


async def test_a_caller_with_other_settings_calls_itself(
    serving: asyncio.Event, settings: Settings, course: DemoCourse, temporal: Client
) -> None:
    other = settings.model_copy(update={"db_read_timeout_seconds": 4.0})
    made_here: list[str] = []

    class Here(WorkspaceJobs):
        async def cancel(self, job_id: uuid.UUID, *, reason: str | None = None) -> JobView:
            made_here.append("cancel")
            return await super().cancel(job_id, reason=reason)

    async with HubJobsClient(temporal, settings=other) as client:
        jobs = Here(client, course.workspace_id, course.actor_id)
        with pytest.raises(HubJobsError) as refused:
            await call_warm(jobs, lambda j: j.cancel(uuid.uuid4()))
        assert refused.value.code == "job_not_found"
        assert made_here == ["cancel"]
