"""Completion webhooks with real processes: a delivery outlives the worker delivering it
(the worker process, ``python worker.py``, SIGKILLed while the receiver holds its first
delivery open; a new worker delivers it, with the same idempotency key and a valid
signature, and the row says delivered on the second try); and the ``hubjobs`` CLI's
``--notify-url``, refused as one error line with its code, or delivered and shown by
``hubjobs status``."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from hubjobs.webhooks.signing import verify
from starter.client import HubJobsClient
from tests.support.cli_errors import refusal_code
from tests.support.helpers import until
from tests.support.processes import WorkerProcess, hubjobs_env, hubjobs_json, run_hubjobs
from tests.support.servers import running_worker, seed
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
            job = await jobs.start(
                "course_tagging",
                {"root_page_id": course.root_page_id, "tag": "killed"},
                notify_url=f"{base}/hook",
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


async def test_the_cli_takes_a_notify_url_or_refuses_it_with_its_code(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    course = await seed(engine, 10)
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    signed = {"HUBJOBS_WEBHOOK_SECRET": WEBHOOK_SECRET}
    cases = [
        ("http://169.254.169.254/latest/meta-data/", signed, "invalid_notify_url"),
        ("http://10.0.0.5/hook", signed, "invalid_notify_url"),
        ("http://127.0.0.1:9/hook", {}, "webhooks_not_configured"),
    ]
    for url, env, code in cases:
        done = await run_hubjobs(
            settings, tmp_path, "backup", *scope, "--notify-url", url, extra_env=env
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr
        [line] = done.stderr.splitlines()
        assert refusal_code(line) == code
    worker_settings = settings.model_copy(update={"webhook_secret": SecretStr(WEBHOOK_SECRET)})
    receiver = Receiver()
    async with serving(receiver.app()) as base, running_worker(temporal, worker_settings):
        job = await hubjobs_json(
            settings,
            tmp_path,
            "tag-course",
            *scope,
            "--root-page",
            str(course.root_page_id),
            "--tag",
            "cli",
            "--notify-url",
            f"{base}/hook",
            "--wait",
            extra_env=signed,
        )
        assert job["status"] == "succeeded"

        async def delivered() -> dict[str, object] | None:
            shown = await hubjobs_json(settings, tmp_path, "status", job["id"], *scope)
            return shown if shown["notify_state"] == "delivered" else None

        shown = await until("hubjobs status to show the delivery", delivered)
    assert shown["notify_attempts"] == 1 and shown["notified_at"]
    assert [d.completion["job_id"] for d in receiver.accepted()] == [job["id"]]
