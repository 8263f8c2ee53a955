"""The tests' own ways to stand up what the fixtures stand on: an in-process worker, a
seeded course, a token for the API, the admin database of a server. The fixtures in
tests/conftest.py are built from these; tests call them for a worker or a course of
their own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
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


# How long an in-process worker may take to stop: past its graceful shutdown (10 s) an
# attempt that ignores its cancellation would hold the test until pytest's timeout, and
# the failure that made the test leave early would never be seen.
WORKER_EXIT_SECONDS = 30


@asynccontextmanager
async def running_worker(
    temporal: Client,
    settings: Settings,
    *,
    before_write: BeforeWrite | None = None,
    workflow_classes: Sequence[type] | None = None,
    on_engine: Callable[[AsyncEngine], None] | None = None,
) -> AsyncIterator[None]:
    """An in-process worker with its own pool, as a worker process would have. Its stop
    is bounded (WORKER_EXIT_SECONDS): a worker that does not stop fails the test, named,
    chained to whatever made the test leave. ``on_engine`` sees the worker's engine
    before it serves (a test counting the worker's commits)."""
    engine = async_engine(settings.resolved_database_url(), pool_size=5)
    if on_engine is not None:
        on_engine(engine)
    worker = worker_module.build_worker(
        temporal,
        engine,
        settings,
        hooks={"before_write": before_write},
        workflow_classes=workflow_classes,
    )
    left: BaseException | None = None
    try:
        await worker.__aenter__()
        try:
            await worker_module.announce_version(temporal, settings)
            yield
        except BaseException as err:
            left = err
            raise
        finally:
            try:
                async with asyncio.timeout(WORKER_EXIT_SECONDS):
                    await worker.__aexit__(type(left) if left else None, left, None)
            except TimeoutError:
                raise AssertionError(
                    f"the test's worker did not stop within {WORKER_EXIT_SECONDS} s"
                ) from left
    finally:
        await engine.dispose()


async def seed(engine: AsyncEngine, pages: int) -> DemoCourse:
    async with engine.begin() as conn:
        return await seed_demo(conn, pages)


def bearer(actor: uuid.UUID, settings: Settings) -> dict[str, str]:
    """The Authorization header of a token naming ``actor``."""
    return {"Authorization": f"Bearer {mint(actor, settings)}"}
