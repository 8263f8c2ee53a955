"""The tests' own ways to stand up what the fixtures stand on: an in-process worker, a
seeded course, a token for the API, the admin database of a server. The fixtures in
tests/conftest.py are built from these; tests call them for a worker or a course of
their own."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.runtime import Runtime

import worker as worker_module
from activities.course_tagging import BeforeWrite
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import DemoCourse, seed_demo
from hubjobs.devstack.embedded import EmbeddedTemporal, choose_port
from hubjobs.settings import Settings
from hubjobs.temporal.client import data_converter
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


@asynccontextmanager
async def own_temporal(
    dynamic_config: dict[str, str], *, prefix: str = "hubjobs-temporal-"
) -> AsyncIterator[Client]:
    """A Temporal dev server of a test's own, with ``dynamic_config`` on top of the dev
    stack's (a limit lowered, so that a test reaches it with little work), in memory,
    and a client of it. The session's server must keep Temporal's real limits."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedTemporal(home, persistent=False)
    port = choose_port(0)
    ui_port = choose_port(0, taken={port})
    try:
        await asyncio.to_thread(server.start, port, ui_port, dynamic_config=dynamic_config)
        yield await temporal_at(f"127.0.0.1:{port}")
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(home, ignore_errors=True)


async def temporal_at(
    address: str, *, identity: str | None = None, runtime: Runtime | None = None
) -> Client:
    """A client of the Temporal server at ``address``, as the session's ``temporal``
    fixture makes one (the same data converter and namespace); ``identity`` names the
    workers built on it, ``runtime`` their heartbeats' interval."""
    return await Client.connect(
        address,
        data_converter=data_converter(Settings(payload_codec=False)),
        identity=identity,
        runtime=runtime,
    )
