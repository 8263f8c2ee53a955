"""The tests' own ways to stand up what the fixtures stand on: an in-process worker, a
seeded course, a token for the API, the admin database of a server. The fixtures in
tests/conftest.py are built from these; tests call them for a worker or a course of
their own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

import worker as worker_module
from activities.course_tagging import BeforeWrite
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import DemoCourse, seed_demo
from hubjobs.settings import Settings
from starter.api.tokens import mint

# The migrated database each test's database is cloned from.
TEMPLATE = "hubjobs_template"
# Small enough that the long tests continue as new and cross chunk boundaries.
SUGGEST_CONTINUE_AS_NEW = 400
# The signing secret of the API tests' bearer tokens (HS256 wants 32 bytes or more).
API_SECRET = "api-test-secret-" + "x" * 32


def admin_url(url: str) -> str:
    """The server's maintenance database, beside the one ``url`` names."""
    return url.rsplit("/", 1)[0] + "/postgres"


@asynccontextmanager
async def running_worker(
    temporal: Client,
    settings: Settings,
    *,
    before_write: BeforeWrite | None = None,
    workflow_classes: Sequence[type] | None = None,
) -> AsyncIterator[None]:
    """An in-process worker with its own pool, as a worker process would have."""
    engine = async_engine(settings.resolved_database_url(), pool_size=5)
    try:
        async with worker_module.build_worker(
            temporal,
            engine,
            settings,
            hooks={"before_write": before_write},
            workflow_classes=workflow_classes,
        ):
            await worker_module.announce_version(temporal, settings)
            yield
    finally:
        await engine.dispose()


async def seed(engine: AsyncEngine, pages: int) -> DemoCourse:
    async with engine.begin() as conn:
        return await seed_demo(conn, pages)


def bearer(actor: uuid.UUID, settings: Settings) -> dict[str, str]:
    """The Authorization header of a token naming ``actor``."""
    return {"Authorization": f"Bearer {mint(actor, settings)}"}
