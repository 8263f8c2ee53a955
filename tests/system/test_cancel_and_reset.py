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
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.devstack import embedded
from hubjobs.settings import Settings
from tests.support.helpers import (
    until,
    wait_until_processed,
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
