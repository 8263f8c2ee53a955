"""Two small ones of issue 30, with real processes (a worker process, ``hubjobs api``,
the Temporal CLI):

- a repeated cancel answers as the first did: 50 DELETEs of one running job at once,
  then 50 more once it is cancelled, every one 202 with the job. Before: the DELETE of
  a job already cancelled answered 404 ``job_cancelled``, as if there were no job.
- a run made by ``temporal workflow reset`` is followed by the row: its ``run_id`` is
  the run Temporal shows, for a job reset while it runs and for one reset once
  finished (a small job done whole at once, and one done by attempts). Before: a
  finished job's row kept the old run's id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.devstack import embedded
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.helpers import (
    temporal_cli,
    until,
    wait_until_final,
    wait_until_processed,
    workflow_closed,
)
from tests.support.processes import WorkerProcess, api_process, hubjobs_env
from tests.support.servers import API_SECRET, bearer, seed

AT_ONCE = 50


async def final_status(http: httpx.AsyncClient, location: str, auth: dict[str, str]) -> int:
    """The status of the job's own URL once the job is final (202 while it runs)."""

    async def answer() -> int | None:
        got = await http.get(location, headers=auth)
        return None if got.status_code == 202 else got.status_code

    return await until("the job to be final", answer, 60)


async def test_concurrent_and_repeated_cancels_all_answer_202_with_the_job(
    engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    port = embedded.choose_port(0)
    env = hubjobs_env(
        settings,
        tmp_path,
        api_jwt_secret=API_SECRET,
        api_port=port,
        tagging_batch_size=10,
        tagging_batch_pause_seconds=0.05,
    )
    course = await seed(engine, 1000)
    auth = bearer(
        course.actor_id, settings.model_copy(update={"api_jwt_secret": SecretStr(API_SECRET)})
    )
    worker = WorkerProcess("worker", env, tmp_path)
    try:
        with api_process(env, tmp_path / "api.log"):
            limits = httpx.Limits(max_connections=AT_ONCE)
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30
            ) as http:
                started = await http.post(
                    f"/workspaces/{course.workspace_id}/jobs/course_tagging",
                    json={"root_page_id": str(course.root_page_id), "tag": "cancels"},
                    headers=auth,
                )
                assert started.status_code == 202, started.text
                job_id = uuid.UUID(started.json()["id"])
                location = started.headers["Content-Location"]
                await wait_until_processed(engine, job_id, 20, worker, 60)

                async def cancel_at_once() -> list[tuple[int, str | None, str | None]]:
                    answers = await asyncio.gather(
                        *(http.delete(location, headers=auth) for _ in range(AT_ONCE))
                    )
                    return [
                        (a.status_code, a.json().get("id"), a.json().get("status")) for a in answers
                    ]

                first = await cancel_at_once()
                done = await final_status(http, location, auth)
                again = await cancel_at_once()
    finally:
        worker.kill()
    print(f"{AT_ONCE} DELETEs at once: {Counter(first)}; once cancelled: {Counter(again)}")
    assert done == 404  # the job's own URL: cancelled (FHIR bulk data's answer)
    assert {(code, ident) for code, ident, _ in first} == {(202, str(job_id))}, first
    assert {status for _, _, status in first} <= {"running", "cancelled"}, first
    assert set(again) == {(202, str(job_id), "cancelled")}, again


async def run_id_of(engine: AsyncEngine, job_id: uuid.UUID) -> str | None:
    async with engine.connect() as conn:
        found = await conn.execute(text("SELECT run_id FROM jobs WHERE id = :id"), {"id": job_id})
        return found.scalar_one()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("pages", "when"),
    [(30, "finished"), (1000, "finished"), (1000, "running")],
    ids=["small-finished", "attempts-finished", "running"],
)
async def test_a_reset_run_is_followed_by_the_row(
    temporal: Client,
    engine: AsyncEngine,
    settings: Settings,
    stack: embedded.StackInfo,
    tmp_path: Path,
    pages: int,
    when: str,
) -> None:
    """``temporal workflow reset --type FirstWorkflowTask``: the new run does the job
    again from its start, finds what is done (the row final, or the items recorded) and
    ends as the job did; the row names it."""
    env = hubjobs_env(settings, tmp_path, tagging_batch_size=10, tagging_batch_pause_seconds=0.05)
    course = await seed(engine, pages)
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    worker = WorkerProcess("worker", env, tmp_path)
    try:
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "reset"}
        )
        if when == "running":
            await wait_until_processed(engine, job.id, 100, worker, 60)
        else:
            assert (await wait_until_final(jobs, job.id, 60)).status == "succeeded"
            await workflow_closed(temporal, job.workflow_id)
        old_run = await run_id_of(engine, job.id)
        reset = temporal_cli(
            stack.temporal_address,
            "workflow",
            "reset",
            "--workflow-id",
            job.workflow_id,
            "--type",
            "FirstWorkflowTask",
            "--reason",
            "issue 30: a reset run is followed",
            "--yes",
        )
        assert reset.returncode == 0, reset.stderr
        handle = temporal.get_workflow_handle(job.workflow_id)

        async def new_run_closed() -> str | None:
            described = await handle.describe()
            closed = described.run_id != old_run and described.close_time is not None
            return described.run_id if closed else None

        new_run = await until("the reset run to close", new_run_closed, 120)
        done = await wait_until_final(jobs, job.id, 60)
        followed = await run_id_of(engine, job.id)
    finally:
        worker.kill()
    assert done.status == "succeeded" and done.processed == pages, done
    assert old_run is not None and new_run != old_run
    assert followed == new_run, (old_run, new_run, followed)
