"""The console's workers view through the API, on the real servers: two in-process
workers of their own identities listed live, the one stopped shown gone while the other
stays live, the job the live one runs named under it for a member of the job's workspace
and not for a member of another, who reading the job's workspace is answered as for one that
does not exist. A short threshold and one-second heartbeats by
settings; every step waits for its condition."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.helpers import until, with_kind
from tests.support.servers import API_SECRET, bearer, running_worker, seed, temporal_at


@pytest.fixture
def api_settings(settings: Settings) -> Settings:
    # Batches of ten: the test's course is no small job done by one local activity.
    tuned = with_kind(settings, "course_tagging", tagging_batch_size=10)
    return tuned.model_copy(
        update={"api_jwt_secret": SecretStr(API_SECRET), "workers_gone_seconds": 20.0}
    )


@functools.cache
def beating_runtime() -> Runtime:
    """A runtime whose workers send a heartbeat every second (the SDK's default: 60 s)."""
    return Runtime(telemetry=TelemetryConfig(), worker_heartbeat_interval=timedelta(seconds=1))


async def workers(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings
) -> dict[str, dict[str, Any]]:
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/workers", headers=bearer(course.actor_id, settings)
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["task_queue"], body["heartbeats"]) == (settings.task_queue, True)
    return {w["identity"]: w for w in body["workers"]}


async def test_workers_lists_two_then_one_gone_and_the_job_it_runs(
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    temporal: Client,
) -> None:
    course = await seed(engine, 200)
    outsider = await seed(engine, 1)
    first, second = f"worker-a-{uuid.uuid4().hex[:8]}", f"worker-b-{uuid.uuid4().hex[:8]}"
    address = api_settings.temporal_address
    assert address is not None
    a = await temporal_at(address, identity=first, runtime=beating_runtime())
    b = await temporal_at(address, identity=second, runtime=beating_runtime())
    release = asyncio.Event()

    async def hold(conn: AsyncConnection, page_ids: Sequence[uuid.UUID], attempt: int) -> None:
        await release.wait()

    async def listed(
        wanted: dict[str, str], member: DemoCourse = course
    ) -> dict[str, dict[str, Any]] | None:
        found = await workers(http, member, api_settings)
        states = {identity: found[identity]["state"] for identity in wanted if identity in found}
        return found if states == wanted else None

    async def heartbeat_of(identity: str) -> bool:
        found = await workers(http, course, api_settings)
        return found[identity]["activity_slots"] is not None

    async with running_worker(a, api_settings, before_write=hold):
        async with running_worker(b, api_settings):
            # A worker's two pollers start apart; the server names each once it has polled.
            async def both_polling() -> dict[str, dict[str, Any]] | None:
                found = await listed({first: "live", second: "live"})
                if found is None:
                    return None
                polls = [found[name]["polls"] for name in (first, second)]
                return found if polls == [["activity", "workflow"]] * 2 else None

            await until("both workers live and polling both queues", both_polling)
            # Slots come with the heartbeats, the first a second after the polls.
            await until("a heartbeat's slots", lambda: heartbeat_of(first))
        await until("the stopped worker gone", lambda: listed({first: "live", second: "gone"}))

        jobs = HubJobsClient(temporal, engine, api_settings).scope(
            course.workspace_id, course.actor_id
        )
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "workers"}
        )

        async def running_job() -> bool:
            found = await workers(http, course, api_settings)
            return bool(found[first]["running"] == [str(job.id)])

        try:
            await until("the live worker running the job", running_job)
            seen = await until(
                "the workers seen by another workspace", lambda: listed({first: "live"}, outsider)
            )
            assert seen[first]["running"] == []
            assert str(job.id) not in str(seen)
            refused = await http.get(
                f"/workspaces/{course.workspace_id}/workers",
                headers=bearer(outsider.actor_id, api_settings),
            )
            assert refused.status_code == 404
            assert refused.json()["error"]["code"] == "workspace_not_found"
        finally:
            release.set()
        await jobs.wait(job.id, timeout=60)
