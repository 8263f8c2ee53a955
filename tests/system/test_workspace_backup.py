"""A workspace's backup is that workspace's, through real processes (``hubjobs`` CLI
commands, the API they call, a worker process):

* a workspace administrator's ``hubjobs backup`` restored by ``hubjobs restore`` into an
  empty database holds that workspace alone (three seeded, one shared account), and a
  restore into another database without ``--attachments-dir`` is refused, the hub's own
  attachments folder untouched;
* a whole-hub backup asked by a workspace administrator is refused
  ``hub_operator_required`` by the API (a start and a schedule) and the CLI, nothing
  written; a hub operator's (HUBJOBS_HUB_OPERATORS) holds every workspace;
* ``hubjobs restore --replace-workspace`` puts a workspace's archive back into the
  running hub while another workspace's tagging job runs and its pages are read in a
  loop: that job ends exact, its workspace's rows are changed by the job alone (row by
  row), a third workspace's rows and every file of theirs are unchanged, and a reader
  counting the restored workspace's pages and revisions in one statement sees the
  totals before or after, never a mix.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.archive import scope
from hubjobs.archive.format import HUB_TABLES, MANIFEST
from hubjobs.devstack.demo_data import DemoCourse, create_account, create_course, seed_demo
from hubjobs.devstack.embedded import StackInfo
from hubjobs.schedules.definition import workspace_query
from hubjobs.settings import Settings
from starter.api.tokens import mint
from starter.client import HubJobsClient
from tests.support.archive_helpers import (
    Databases,
    add_attachments,
    files_under,
    fingerprint,
    tables_of,
    workspace_fingerprint,
)
from tests.support.cli_errors import refusal_code
from tests.support.helpers import edit
from tests.support.processes import (
    TEST_TOKEN_SECRET,
    WorkerProcess,
    api_url_for,
    cli_env,
    hubjobs_env,
    run_hubjobs,
)

OPERATOR = uuid.UUID("0fe7a70f-0000-4000-8000-00000000000a")


@pytest.fixture
def new_database(stack: StackInfo) -> Iterator[Databases]:
    databases = Databases(stack)
    yield databases
    databases.drop_all()


class Servers:
    """The settings, home and environment of the test's API and worker processes: backups
    and attachments under tmp_path, OPERATOR a hub operator."""

    def __init__(self, settings: Settings, home: Path, **more: str | int | float) -> None:
        self.settings = settings
        self.home = home
        self.backups = home / "backups"
        self.attachments = home / "attachments"
        self.extra = {
            "HUBJOBS_BACKUP_DIR": str(self.backups),
            "HUBJOBS_ATTACHMENTS_DIR": str(self.attachments),
            "HUBJOBS_HUB_OPERATORS": str(OPERATOR),
        }
        self.more = more

    def worker(self, logs: Path) -> WorkerProcess:
        env = hubjobs_env(self.settings, self.home, **self.more) | self.extra
        return WorkerProcess("worker", env, logs)

    async def hubjobs(self, *args: str, timeout: float = 120) -> Any:
        done = await run_hubjobs(
            self.settings, self.home, *args, timeout=timeout, extra_env=self.extra
        )
        assert "Traceback" not in done.stderr + done.stdout
        return done

    async def hubjobs_json(self, *args: str, timeout: float = 120) -> Any:
        done = await self.hubjobs(*args, "--json", timeout=timeout)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def api(self) -> tuple[str, dict[str, str]]:
        """The API the CLI's job commands use, and a way to sign as an actor."""
        env = cli_env(self.settings, self.home, ["backup"], self.extra)
        return api_url_for(env), env

    def bearer(self, actor: uuid.UUID) -> dict[str, str]:
        signing = self.settings.model_copy(update={"api_jwt_secret": SecretStr(TEST_TOKEN_SECRET)})
        return {"Authorization": f"Bearer {mint(actor, signing)}"}


def as_actor(workspace: uuid.UUID, actor: uuid.UUID) -> list[str]:
    return ["--workspace", str(workspace), "--actor", str(actor)]


async def three_workspaces(engine: AsyncEngine, folder: Path, pages: int = 200) -> list[DemoCourse]:
    """A, B and C with pages, revisions and attachments; an account shared by A and B."""
    async with engine.begin() as conn:
        hub = [await seed_demo(conn, pages, name=f"Workspace {n}") for n in "ABC"]
        shared = await create_account(conn, hub[1].workspace_id, name="Sam Shared")
        await conn.execute(
            text(
                "INSERT INTO workspace_memberships (workspace_id, user_id, role) "
                "VALUES (:w, :u, 'editor')"
            ),
            {"w": hub[0].workspace_id, "u": shared},
        )
    for n, course in enumerate(hub):
        await add_attachments(engine, folder, course.page_ids, [10 + n, 5000, 70_000 + n])
    for course in hub:
        for page in course.page_ids[:4]:
            await edit(engine, page, markdown="# edited")
    return hub


def workspace_files(url: str, folder: Path, workspace: uuid.UUID) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        paths = {
            str(r[0])
            for r in conn.execute(
                "SELECT t.storage_path FROM attachments t JOIN pages p ON p.id = t.page_id "
                "WHERE p.workspace_id = %s",
                (workspace,),
            )
        }
    return {p: h for p, h in files_under(folder).items() if p in paths}


def assert_refused(done: Any, code: str) -> None:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert refusal_code(lines[0]) == code


# --- 1. a workspace's backup, restored into an empty database -------------------------------


async def test_a_workspace_administrators_backup_restored_holds_that_workspace_alone(
    settings: Settings,
    engine: AsyncEngine,
    database_url: str,
    new_database: Databases,
    tmp_path: Path,
) -> None:
    servers = Servers(settings, tmp_path / "home")
    a, b, c = await three_workspaces(engine, servers.attachments)
    expected = await asyncio.to_thread(workspace_fingerprint, database_url, a.workspace_id)
    a_files = workspace_files(database_url, servers.attachments, a.workspace_id)
    live_files = files_under(servers.attachments)
    worker = servers.worker(tmp_path)
    try:
        job = await servers.hubjobs_json("backup", *as_actor(a.workspace_id, a.actor_id), "--wait")
    except BaseException:
        print(f"\n--- worker:\n{worker.tail()}")
        raise
    finally:
        worker.kill()
    assert job["status"] == "succeeded", job
    archive = Path(job["result"]["archivePath"])

    target, target_dir = new_database.create(), tmp_path / "restored"
    report = await servers.hubjobs_json(
        "restore", str(archive), "--database-url", target, "--attachments-dir", str(target_dir)
    )
    assert await asyncio.to_thread(fingerprint, target) == expected
    assert (report["scope"], report["workspace_id"], report["replaced"]) == (
        "workspace",
        str(a.workspace_id),
        False,
    )
    with psycopg.connect(target) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM workspaces), (SELECT count(*) FROM workspaces "
            "WHERE id IN (%s, %s))",
            (b.workspace_id, c.workspace_id),
        ).fetchone()
    assert row == (1, 0)
    assert files_under(target_dir) == a_files and len(a_files) == 3

    # Into another database without --attachments-dir: refused, the hub's folder as it was.
    elsewhere = new_database.create()
    refused = await servers.hubjobs("restore", str(archive), "--database-url", elsewhere)
    assert_refused(refused, "attachments_dir_required")
    assert tables_of(elsewhere) == set()
    assert files_under(servers.attachments) == live_files

    # And it says so: in its result and its manifest.
    assert job["result"]["scope"] == "workspace"
    with zipfile.ZipFile(archive) as zf:
        manifest = json.loads(zf.read(MANIFEST))
    assert (manifest["format"], manifest["scope"], manifest["workspace_id"]) == (
        "hubjobs-backup/3",
        "workspace",
        str(a.workspace_id),
    )


# --- 2. a whole hub is a hub operator's --------------------------------------------------------


async def test_a_hub_backup_asked_by_a_workspace_administrator_is_refused(
    settings: Settings,
    engine: AsyncEngine,
    temporal: Client,
    tmp_path: Path,
) -> None:
    servers = Servers(settings, tmp_path / "home")
    a, _, _ = await three_workspaces(engine, servers.attachments, pages=20)
    admin = as_actor(a.workspace_id, a.actor_id)

    by_cli = await servers.hubjobs("backup", *admin, "--scope", "hub")
    assert_refused(by_cli, "hub_operator_required")
    url, _ = servers.api()
    async with httpx.AsyncClient(base_url=url, headers=servers.bearer(a.actor_id)) as api:
        started = await api.post(f"/workspaces/{a.workspace_id}/jobs/backup", json={"scope": "hub"})
        assert started.status_code == 403, started.text
        assert started.json()["error"]["code"] == "hub_operator_required"
        scheduled = await api.post(
            f"/workspaces/{a.workspace_id}/schedules",
            json={"kind": "backup", "every": "1h", "payload": {"scope": "hub"}},
        )
        assert scheduled.status_code == 403, scheduled.text
        assert scheduled.json()["error"]["code"] == "hub_operator_required"
        # The workspace's own backup is the administrator's to take.
        own = await api.post(f"/workspaces/{a.workspace_id}/jobs/backup", json={})
        assert own.status_code == 202, own.text
    async with engine.connect() as conn:
        kinds = (await conn.execute(text("SELECT payload FROM jobs"))).scalars().all()
    assert kinds == [{"scope": "workspace"}]
    assert [s async for s in await temporal.list_schedules(workspace_query(a.workspace_id))] == []

    # A hub operator (an administrator of A too) takes the whole hub.
    async with engine.begin() as conn:
        await create_account(conn, a.workspace_id, name="Otto Operator", account_id=OPERATOR)
    worker = servers.worker(tmp_path)
    try:
        job = await servers.hubjobs_json(
            "backup", *as_actor(a.workspace_id, OPERATOR), "--scope", "hub", "--wait"
        )
    finally:
        worker.kill()
    assert job["status"] == "succeeded" and job["result"]["scope"] == "hub", job
    with zipfile.ZipFile(job["result"]["archivePath"]) as zf:
        manifest = json.loads(zf.read(MANIFEST))
    assert manifest["scope"] == "hub" and manifest["workspace_id"] is None
    assert {t["name"]: t["rows"] for t in manifest["tables"]}["workspaces"] == 3


# --- 3. a workspace's archive into the running hub ---------------------------------------------

TAG = "restore-under-load"


def a_totals(url: str, workspace: uuid.UUID) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        return a_totals_on(conn, workspace)


def a_totals_on(conn: psycopg.Connection[Any], workspace: uuid.UUID) -> tuple[int, int]:
    """The workspace's pages and their revisions, counted in one statement (one snapshot)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pages WHERE workspace_id = %(w)s), "
        "(SELECT count(*) FROM page_revisions r JOIN pages p ON p.id = r.page_id "
        "WHERE p.workspace_id = %(w)s)",
        {"w": workspace},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def rows_by_key(url: str, workspace: uuid.UUID) -> dict[str, dict[str, str]]:
    """Per table, each row of the workspace by its key -> md5 of the row, for pages and
    revisions without what a tagging job changes (tags, version, updated_at) apart."""
    out: dict[str, dict[str, str]] = {}
    with psycopg.connect(url) as conn:
        for table, key in HUB_TABLES:
            rows = conn.execute(
                f"SELECT concat_ws(',', {key}), md5(t::text) "
                f"FROM {table} t WHERE {scope.condition(table, workspace)}"
            ).fetchall()
            out[table] = {str(k): str(h) for k, h in rows}
        out["pages_untagged"] = {
            str(k): str(h)
            for k, h in conn.execute(
                "SELECT id::text, md5((to_jsonb(t) - 'tags' - 'version' - 'updated_at')::text) "
                "FROM pages t WHERE workspace_id = %s",
                (workspace,),
            ).fetchall()
        }
    return out


class Reader(threading.Thread):
    """Reads in a loop until stopped: ``sample()`` once per statement, recording what it
    returns and the longest a read took."""

    def __init__(self, url: str, sample: Any) -> None:
        super().__init__(daemon=True)
        self.url, self.sample = url, sample
        self.seen: list[Any] = []
        self.longest = 0.0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.stop.is_set():
                    began = time.monotonic()
                    self.seen.append(self.sample(conn))
                    self.longest = max(self.longest, time.monotonic() - began)
        except BaseException as err:
            self.errors.append(err)


async def test_a_workspace_archive_replaces_it_in_the_running_hub_while_another_works(
    settings: Settings,
    engine: AsyncEngine,
    temporal: Client,
    database_url: str,
    tmp_path: Path,
) -> None:
    servers = Servers(
        settings, tmp_path / "home", tagging_batch_size=10, tagging_batch_pause_seconds=0.1
    )
    folder = servers.attachments
    a, b, c = await three_workspaces(engine, folder, pages=1500)
    async with engine.begin() as conn:  # B's course for its job: 3,000 pages more
        course = await create_course(conn, b.workspace_id, 3000, title="Load")
    worker = servers.worker(tmp_path)
    readers: list[Reader] = []
    try:
        backup = await servers.hubjobs_json(
            "backup", *as_actor(a.workspace_id, a.actor_id), "--wait"
        )
        assert backup["status"] == "succeeded", backup
        archive = Path(backup["result"]["archivePath"])
        archived = await asyncio.to_thread(workspace_fingerprint, database_url, a.workspace_id)
        archived_files = workspace_files(database_url, folder, a.workspace_id)
        old_totals = a_totals(database_url, a.workspace_id)

        # A moves on after its backup: pages edited, added and removed.
        for page in a.page_ids[20:60]:
            await edit(engine, page, markdown="# after the backup")
        async with engine.begin() as conn:
            await create_course(conn, a.workspace_id, 200, title="Later")
            await conn.execute(
                text("DELETE FROM pages WHERE id = ANY(:ids)"), {"ids": a.page_ids[-50:]}
            )
        new_totals = a_totals(database_url, a.workspace_id)
        assert new_totals != old_totals

        c_before = await asyncio.to_thread(rows_by_key, database_url, c.workspace_id)
        c_files = workspace_files(database_url, folder, c.workspace_id)
        b_before = await asyncio.to_thread(rows_by_key, database_url, b.workspace_id)
        b_files = workspace_files(database_url, folder, b.workspace_id)

        # B's tagging job runs, B's pages are read, A's totals are read, all through it.
        jobs = HubJobsClient(temporal, engine, settings).scope(b.workspace_id, b.actor_id)
        job = await jobs.start("course_tagging", {"root_page_id": str(course[0]), "tag": TAG})
        b_reader = Reader(
            database_url,
            lambda conn: conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE %s = ANY(tags)) FROM pages "
                "WHERE workspace_id = %s",
                (TAG, b.workspace_id),
            ).fetchone(),
        )
        a_reader = Reader(database_url, lambda conn: a_totals_on(conn, a.workspace_id))
        readers = [b_reader, a_reader]
        for reader in readers:
            reader.start()
        async for current in jobs.watch(job.id, interval=0.1):
            if current.processed >= 100:
                break
        began = time.monotonic()
        restored = await servers.hubjobs_json(
            "restore", str(archive), "--database-url", database_url, "--replace-workspace"
        )
        took = time.monotonic() - began
        during = await jobs.get(job.id)
        for reader in readers:
            reader.stop.set()
            reader.join(30)
        done = await jobs.wait(job.id, timeout=300, interval=0.2)
    except BaseException:
        print(f"\n--- worker:\n{worker.tail()}")
        raise
    finally:
        for reader in readers:
            reader.stop.set()
        worker.kill()

    print(
        f"\nrestore of A ({old_totals[0]} pages) in {took:.1f} s while B's job ran "
        f"({during.processed} of {during.total} at the restore's end); reads of B: "
        f"{len(b_reader.seen)}, longest {b_reader.longest * 1000:.0f} ms; reads of A: "
        f"{len(a_reader.seen)}, longest {a_reader.longest * 1000:.0f} ms"
    )
    assert restored["replaced"] is True and restored["workspace_id"] == str(a.workspace_id)
    assert not during.is_final, "B's job was over before the restore ended"
    assert b_reader.errors == [] and a_reader.errors == []

    # A: as archived; its readers saw the totals before or after, never a mix, in order.
    assert await asyncio.to_thread(workspace_fingerprint, database_url, a.workspace_id) == archived
    assert workspace_files(database_url, folder, a.workspace_id) == archived_files
    assert set(a_reader.seen) <= {new_totals, old_totals}, set(a_reader.seen) - {
        new_totals,
        old_totals,
    }
    first_old = a_reader.seen.index(old_totals)
    assert new_totals not in a_reader.seen[first_old:]
    assert a_reader.seen[0] == new_totals

    # B's job: exact, every page of its course tagged once.
    assert done.status == "succeeded", (done.status, done.error_code, done.error_message)
    assert done.succeeded == done.total == 3000 and done.failed == 0
    b_after = await asyncio.to_thread(rows_by_key, database_url, b.workspace_id)
    tagged = set(map(str, course))
    for table in ("workspaces", "user_accounts", "workspace_memberships", "attachments"):
        assert b_after[table] == b_before[table], table
    assert b_after["pages_untagged"] == b_before["pages_untagged"]
    changed = {k for k, h in b_after["pages"].items() if b_before["pages"].get(k) != h}
    assert changed == tagged
    revisions = b_after["page_revisions"]
    assert {k: revisions[k] for k in b_before["page_revisions"]} == b_before["page_revisions"]
    assert len(revisions) - len(b_before["page_revisions"]) == 3000
    with psycopg.connect(database_url) as check:
        once = check.execute(
            "SELECT count(*) FROM pages WHERE workspace_id = %s AND %s = ANY(tags)",
            (b.workspace_id, TAG),
        ).fetchone()
    assert once == (3000,)
    assert workspace_files(database_url, folder, b.workspace_id) == b_files
    # C: row for row, file for file, as it was.
    assert await asyncio.to_thread(rows_by_key, database_url, c.workspace_id) == c_before
    assert workspace_files(database_url, folder, c.workspace_id) == c_files
