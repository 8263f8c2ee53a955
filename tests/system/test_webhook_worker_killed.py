"""A completion webhook outlives the worker delivering it: the worker process (``python
worker.py``) is SIGKILLed while the receiver holds its first delivery open, a new worker
is started, and the delivery still arrives, with the same idempotency key and a valid
signature; the row says delivered on the second try."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from hubjobs.webhooks.signing import verify
from starter.client import HubJobsClient
from tests.support.helpers import until
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import seed
from tests.support.sse import serving
from tests.support.webhooks import WEBHOOK_SECRET, Receiver


async def test_a_worker_killed_mid_delivery_still_delivers(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    signed = settings.model_copy(update={"webhook_secret": SecretStr(WEBHOOK_SECRET)})
    env = hubjobs_env(
        settings, tmp_path, webhook_secret=WEBHOOK_SECRET, webhook_retry_initial_seconds=0.2
    )
    course = await seed(engine, 10)
    jobs = HubJobsClient(temporal, engine, signed).scope(course.workspace_id, course.actor_id)
    receiver = Receiver(hold_first=True)
    first = WorkerProcess("first", env, tmp_path)
    second: WorkerProcess | None = None
    try:
        async with serving(receiver.app()) as base:
            job = await jobs.start_course_tagging(
                root_page_id=course.root_page_id, tag="killed", notify_url=f"{base}/hook"
            )

            async def held() -> bool:
                assert first.alive(), first.tail()
                return receiver.holding.is_set()

            await until("the first delivery to be held open", held)
            first.kill()
            receiver.release.set()  # its answer goes to a socket nobody holds
            second = WorkerProcess("second", env, tmp_path)

            async def delivered() -> bool:
                current = await jobs.get(job.id)
                return current.notify_state == "delivered"

            await until("the delivery through the second worker", delivered, timeout=90)
        done = await jobs.get(job.id)
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert done.status == "succeeded" and done.notify_attempts == 2
    assert len(receiver.received) == 2 and len(receiver.accepted()) == 1
    assert {d.key for d in receiver.received} == {f"hubjobs-completion-{job.id}"}
    assert receiver.received[0].body == receiver.received[1].body
    now = int(time.time())
    assert all(
        verify(WEBHOOK_SECRET.encode(), d.signature, d.body, now=now) for d in receiver.received
    )
