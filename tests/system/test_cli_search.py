"""``hubjobs list`` searching, as a script runs it (a subprocess, through the API): by a
payload field, an id's start, who started the job and a date range; an unknown field or
kind one error line with its code, never an empty list."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.settings import Settings
from tests.support.cli_errors import refusal_code
from tests.support.helpers import create_tagging_job
from tests.support.processes import hubjobs_json, run_hubjobs


async def test_list_searches_and_refuses_with_codes(
    settings: Settings, tmp_path: Path, course: DemoCourse, engine: AsyncEngine
) -> None:
    exam = [await create_tagging_job(engine, course, "exam") for _ in range(2)]
    other = await create_tagging_job(engine, course, "other")
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]

    async def ids(*args: str) -> set[str]:
        return {job["id"] for job in await hubjobs_json(settings, tmp_path, "list", *scope, *args)}

    tagged = await ids("--kind", "course_tagging", "--field", "payload.tag=exam")
    assert tagged == {str(job) for job in exam}
    assert await ids("--id", str(other)[:13]) == {str(other)}
    assert await ids("--started-by", str(course.actor_id)) == {str(j) for j in [*exam, other]}
    assert await ids("--started-by", str(uuid.uuid4())) == set()
    assert await ids("--since", "2000-01-01", "--until", "2000-01-02T00:00:00Z") == set()
    assert len(await ids("--status", "queued", "--status", "running", "--sort", "created_asc")) == 3

    for args, code in [
        (["--kind", "course_tagging", "--field", "payload.colour=red"], "unknown_field"),
        (["--kind", "no_such_kind"], "unknown_kind"),
        (["--field", "payload.tag=exam"], "invalid_field_filter"),
        (["--id", "not-hex"], "invalid_job_id"),
    ]:
        done = await run_hubjobs(settings, tmp_path, "list", *scope, *args)
        assert done.returncode != 0 and done.stdout == ""
        assert "Traceback" not in done.stderr
        (line,) = done.stderr.splitlines()
        assert refusal_code(line) == code
