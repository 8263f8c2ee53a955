"""A database that answers but refuses writes, for real: the test's database made
read-only (``default_transaction_read_only``, as a managed service sets it when its
disk fills, and as a standby is), on the session's PostgreSQL. A health check says
``refuses_writes`` (database ``read_only``), a start is refused at once with
``database_read_only`` and leaves nothing; once the database takes writes again the
next probe (``HUBJOBS_WRITE_PROBE_SECONDS`` later at most) says so and a start goes
through. Before: the health check said ``ok`` and the start failed ``internal_error``.

The full disk itself is tests/system/test_database_disk.py."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.errors import HubJobsError
from hubjobs.settings import Settings
from starter.api.health_check import check_health
from starter.client import HubJobsClient
from tests.support.helpers import until
from tests.support.servers import admin_url


def read_only(database_url: str, on: bool) -> None:
    name = database_url.rsplit("/", 1)[1]
    change = (
        "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    )
    with psycopg.connect(admin_url(database_url), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" {change}')


async def jobs_recorded(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one())


async def test_a_read_only_database_is_said_and_refuses_starts_at_once(
    temporal: Client, engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    read_only(settings.resolved_database_url(), True)
    # A client of its own: its connections open after the change, as a fresh process's.
    client = HubJobsClient(
        temporal, settings=settings.model_copy(update={"write_probe_seconds": 0.2})
    )
    try:
        health = await check_health(client)
        assert (health.status, health.database, health.temporal) == (
            "refuses_writes",
            "read_only",
            "ok",
        )
        jobs = client.scope(course.workspace_id, course.actor_id)
        with pytest.raises(HubJobsError) as refused:
            await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "read-only"}
            )
        assert refused.value.code == "database_read_only"
        assert "read-only" in refused.value.message and "SQL" not in refused.value.message
        assert await jobs_recorded(engine) == 0

        read_only(settings.resolved_database_url(), False)
        await client.engine.dispose()  # its connections read the setting when they opened

        async def ok_again() -> bool:
            return (await check_health(client)).status == "ok"

        await until("the health check to say ok again", ok_again, timeout=30)
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "writable"}
        )
        assert job.status == "queued" and await jobs_recorded(engine) == 1
    finally:
        read_only(settings.resolved_database_url(), False)
        await client.close()
