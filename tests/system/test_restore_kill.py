"""A restore loads through several connections into a staging schema and swaps it in
with one final transaction (hubjobs/ops/restore.py). Its promise, held here with real
`hubjobs restore` processes on a real PostgreSQL: a restore SIGKILLed at any phase
(during the parallel COPY, while keys and indexes are built, while foreign keys are
validated, just before the final transaction, inside it) leaves the live schema as
it was; its staging schema is invisible to the app's reads and dropped by the next
restore, which succeeds; the same for a workspace's archive replacing its workspace
in a running hub, whose every row stays as it was. A checksum that fails in the
middle of the big table refuses the archive with nothing live changed and no staging
schema left. Whatever the number of connections, the rows land exactly, under the
schema the migrations make.

Each kill waits for the restore to say it reached its phase
(``HUBJOBS_RESTORE_PAUSE_AT``, hubjobs/ops/restore_phases.py), never for a time."""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from hubjobs.archive.format import table_member
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import seed_demo
from hubjobs.devstack.embedded import StackInfo, _pg_bin_path
from hubjobs.errors import HubJobsError
from hubjobs.ops.restore import restore
from hubjobs.ops.staging_schema import PREFIX
from tests.support.archive_helpers import (
    MB,
    Databases,
    Parts,
    add_attachments,
    files_under,
    fingerprint,
    snapshot_archive,
    tables_of,
    workspace_fingerprint,
)
from tests.support.cli_errors import refusal_code
from tests.support.servers import TEMPLATE

HUBJOBS = Path(sys.executable).parent / "hubjobs"
# How long a restore of the test hub may take to reach a phase, or to finish: a bound
# on a wait for a condition, which fails the test when it is passed.
BOUND = 120.0
PAGES = 1500
# Each page's body: 8 KiB of text that does not compress, so the pages table is some
# 12 MB, a dozen of the loaders' chunks.
BODY_SQL = "SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 256) g"


@dataclass(frozen=True)
class Source:
    archive: Path
    fingerprint: dict[str, tuple[int, str]]
    files: dict[str, str]


@pytest.fixture(scope="module")
def databases(stack: StackInfo) -> Iterator[Databases]:
    made = Databases(stack)
    yield made
    made.drop_all()


@pytest.fixture(scope="module")
def source(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Source:
    """A hub of 1,500 pages of 8 KiB each and a few attachments, backed up by the
    archive writer."""
    url = databases.create(TEMPLATE)
    folder = tmp_path_factory.mktemp("kill-source") / "attachments"
    archive = tmp_path_factory.mktemp("kill-archive") / "hub.zip"

    async def make() -> None:
        engine = async_engine(url, pool_size=1)
        try:
            async with engine.begin() as conn:
                course = await seed_demo(conn, PAGES)
            await add_attachments(engine, folder, course.page_ids, [0, 10, MB, 5000])
        finally:
            await engine.dispose()
        with psycopg.connect(url, autocommit=True) as plain:
            plain.execute(f"UPDATE pages SET markdown = ({BODY_SQL} WHERE pages.id = pages.id)")
        with archive.open("wb") as out:
            await snapshot_archive(url, folder, out)

    # Its own thread and event loop: the session's loop is pytest-asyncio's.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make()).result()
    assert len(Parts.of(archive.read_bytes()).get(table_member("pages"))) > 10 * MB
    return Source(archive, fingerprint(url), files_under(folder))


def cli_env(home: Path, pause_at: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env["HUBJOBS_HOME"] = str(home)
    if pause_at is not None:
        env["HUBJOBS_RESTORE_PAUSE_AT"] = pause_at
    return env


def command(archive: Path, url: str, folder: Path, connections: int = 2) -> list[str]:
    return [
        str(HUBJOBS),
        "restore",
        str(archive),
        "--database-url",
        url,
        "--attachments-dir",
        str(folder),
        "--connections",
        str(connections),
        "--json",
    ]


class PausedRestore:
    """A `hubjobs restore` process told to pause at ``phase``; ``wait`` returns once it
    says it is there (its stderr, read on a thread)."""

    def __init__(self, args: list[str], env: dict[str, str], phase: str) -> None:
        self.phase = phase
        self.process = subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait(self) -> None:
        expected = f"restore: paused at {self.phase}"
        deadline = time.monotonic() + BOUND
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                self.process.wait()
                pytest.fail(
                    f"the restore ended ({self.process.returncode}) without pausing at "
                    f"{self.phase}: {self.seen}"
                )
            self.seen.append(line)
            if line == expected:
                return

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=BOUND) == -signal.SIGKILL
        self._reader.join(timeout=BOUND)


def staging_schemas(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (PREFIX,)
        ).fetchall()
    return [str(r[0]) for r in rows]


def app_view(url: str, *, read_rows: bool = True) -> tuple[str | None, list[str], int | None]:
    """What the app's own session sees: where ``pages`` resolves, its search path, and
    (unless that would wait for the final transaction's locks) how many pages."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regclass('pages')::text, current_schemas(true)").fetchone()
        assert row is not None
        resolved, path = row[0], list(row[1])
        count = None
        if read_rows and resolved is not None:
            counted = conn.execute("SELECT count(*) FROM pages").fetchone()
            assert counted is not None
            count = int(counted[0])
    return resolved, path, count


def wait_for(condition: str, url: str, params: tuple[object, ...]) -> None:
    """Polls the server until ``condition`` (a query answering true) holds."""
    deadline = time.monotonic() + BOUND
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            found = conn.execute(condition, params).fetchone()
            if found is not None and found[0]:
                return
            assert time.monotonic() < deadline, f"never: {condition}"
            conn.execute("SELECT pg_sleep(0.02)")


def live(url: str) -> set[str]:
    return {t for t in tables_of(url) if t.startswith("public.")}


def restored_files(folder: Path) -> dict[str, str]:
    """The files below ``folder`` but a killed restore's staging folder."""
    return {p: h for p, h in files_under(folder).items() if not p.startswith(".hubjobs-restore-")}


# (phase, live schema: empty, or the archive's without rows)
KILLS = [
    ("load", "empty"),
    ("keys", "empty"),
    ("validate", "empty"),
    ("swap", "empty"),
    ("swapped", "empty"),
    ("swap", "migrated"),
    ("swapped", "migrated"),
]


@pytest.mark.parametrize(("phase", "target"), KILLS)
def test_a_restore_killed_at_any_phase_leaves_the_live_schema_as_it_was(
    phase: str,
    target: str,
    source: Source,
    databases: Databases,
    tmp_path: Path,
) -> None:
    url = databases.create(TEMPLATE if target == "migrated" else None)
    folder = tmp_path / "attachments"
    before = live(url)
    assert (before == set()) == (target == "empty")
    before_rows = fingerprint(url) if target == "migrated" else None

    paused = PausedRestore(
        command(source.archive, url, folder), cli_env(tmp_path / "cli", phase), phase
    )
    try:
        paused.wait()
        if phase == "load":  # the loaders are mid-COPY, the rows not committed
            wait_for(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = %s "
                "AND query LIKE 'COPY %%.pages FROM STDIN')",
                url,
                (url.rsplit("/", 1)[1],),
            )
        assert len(staging_schemas(url)) == 1
        resolved, path, count = app_view(url, read_rows=phase != "swapped")
        assert not any(schema.startswith(PREFIX) for schema in path), path
        if target == "empty":
            assert resolved is None
        else:
            assert resolved == "pages" and count in (0, None)
    finally:
        paused.kill()

    # The live schema as it was; the staging schema left behind, seen by no one.
    assert live(url) == before
    if before_rows is not None:
        assert fingerprint(url) == before_rows
    leftover = staging_schemas(url)
    assert len(leftover) == 1
    resolved, path, count = app_view(url)
    assert not any(schema.startswith(PREFIX) for schema in path)
    assert (resolved, count) == ((None, None) if target == "empty" else ("pages", 0))

    # The next restore drops it and succeeds.
    done = subprocess.run(
        command(source.archive, url, folder),
        env=cli_env(tmp_path / "cli"),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert staging_schemas(url) == []
    assert fingerprint(url) == source.fingerprint
    assert restored_files(folder) == source.files


def test_a_checksum_failing_mid_table_refuses_with_nothing_live_changed(
    source: Source, databases: Databases, tmp_path: Path
) -> None:
    """One character of a page body changed in the middle of the pages table, the
    manifest's checksum left as it was: the loaders have sent rows by then; the stream
    fails at its end, every COPY is aborted, the staging schema dropped."""
    parts = Parts.of(source.archive.read_bytes())
    pages = bytearray(parts.get(table_member("pages")))
    middle = len(pages) // 2
    while not chr(pages[middle]).isalnum():
        middle += 1
    pages[middle] = ord("x") if pages[middle] != ord("x") else ord("y")
    entry = next(t for t in parts.manifest["tables"] if t["name"] == "pages")
    sha = entry["sha256"]
    parts.set_table("pages", bytes(pages))
    entry["sha256"] = sha  # the checksum of the intact table
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(parts.build())

    for target in ("empty", "migrated"):
        url = databases.create(TEMPLATE if target == "migrated" else None)
        before = live(url)
        folder = tmp_path / f"attachments-{target}"
        done = subprocess.run(
            command(corrupt, url, folder),
            env=cli_env(tmp_path / "cli"),
            capture_output=True,
            text=True,
            timeout=BOUND,
            check=False,
        )
        assert done.returncode != 0
        assert refusal_code(done.stderr.strip().splitlines()[-1]) == "archive_corrupt"
        assert live(url) == before
        assert staging_schemas(url) == []
        assert tables_of(url) == before
        assert files_under(folder) == {}


def test_an_object_of_a_staged_name_in_an_empty_live_schema_is_never_dropped(
    source: Source, databases: Databases, tmp_path: Path
) -> None:
    """A live schema without tables counts as empty, but the swap replaces nothing in
    it: a function of its own that a migration's bears the name of fails the final
    transaction (database_failed), and stays."""
    url = databases.create()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION tag_key(tag text) RETURNS text LANGUAGE sql RETURN 'mine'")
    with pytest.raises(HubJobsError) as refused:
        restore(source.archive, url, tmp_path / "attachments")
    assert refused.value.code == "database_failed"
    assert live(url) == set()
    assert staging_schemas(url) == []
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT tag_key('x')").fetchone() == ("mine",)


@pytest.mark.parametrize("connections", [1, 3])
def test_any_number_of_connections_restores_exactly_under_the_migrated_schema(
    connections: int, source: Source, databases: Databases, tmp_path: Path
) -> None:
    url = databases.create()
    folder = tmp_path / "attachments"
    report = restore(source.archive, url, folder, connections=connections)
    assert report.tables["pages"] == PAGES
    assert fingerprint(url) == source.fingerprint
    assert files_under(folder) == source.files
    assert staging_schemas(url) == []
    migrated = databases.create(TEMPLATE)
    assert schema_of(url) == schema_of(migrated)


def schema_of(url: str) -> list[str]:
    """pg_dump's schema of the database (without the random key of its \\restrict)."""
    dump = subprocess.run(
        [str(_pg_bin_path() / "pg_dump"), "--schema-only", "--no-owner", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [
        line for line in dump.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))
    ]


# --- a workspace's archive replacing its workspace in a running hub ----------------------------


@dataclass(frozen=True)
class RunningHub:
    """A database holding workspaces A and B (a template: each test clones it), its
    attachments folder, and A's archive, taken before A changed."""

    template: str
    folder: Path
    archive: Path
    workspace: uuid.UUID
    archived: dict[str, tuple[int, str]]
    other: uuid.UUID


@pytest.fixture(scope="module")
def running_hub(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> RunningHub:
    url = databases.create(TEMPLATE)
    folder = tmp_path_factory.mktemp("kill-hub") / "attachments"
    archive = tmp_path_factory.mktemp("kill-workspace") / "a.zip"

    async def make() -> tuple[uuid.UUID, dict[str, tuple[int, str]], uuid.UUID]:
        engine = async_engine(url, pool_size=1)
        try:
            async with engine.begin() as conn:
                a = await seed_demo(conn, PAGES, name="A")
                b = await seed_demo(conn, 300, name="B")
            await add_attachments(engine, folder, a.page_ids, [0, 10, MB, 5000])
            await add_attachments(engine, folder, b.page_ids, [20, 6000])
        finally:
            await engine.dispose()
        with psycopg.connect(url, autocommit=True) as plain:
            plain.execute(f"UPDATE pages SET markdown = ({BODY_SQL} WHERE pages.id = pages.id)")
        with archive.open("wb") as out:
            await snapshot_archive(url, folder, out, workspace_id=a.workspace_id)
        archived = workspace_fingerprint(url, a.workspace_id)
        with psycopg.connect(url, autocommit=True) as plain:  # A moves on after its backup
            plain.execute(
                "DELETE FROM pages WHERE id IN (SELECT id FROM pages WHERE workspace_id = %s "
                "AND parent_id IS NOT NULL ORDER BY id LIMIT 100)",
                (a.workspace_id,),
            )
            plain.execute(
                "UPDATE pages SET title = 'changed' WHERE workspace_id = %s", (a.workspace_id,)
            )
            # A page with an attachment too: its row goes, its file stays behind.
            plain.execute("DELETE FROM pages WHERE id = %s", (a.page_ids[37],))
        return a.workspace_id, archived, b.workspace_id

    with ThreadPoolExecutor(1) as pool:
        workspace, archived, other = pool.submit(asyncio.run, make()).result()
    return RunningHub(url.rsplit("/", 1)[1], folder, archive, workspace, archived, other)


@pytest.mark.parametrize("phase", ["load", "validate", "swap", "swapped"])
def test_a_workspace_restore_killed_at_any_phase_leaves_the_running_hub_as_it_was(
    phase: str, running_hub: RunningHub, databases: Databases, tmp_path: Path
) -> None:
    url = databases.create(running_hub.template)
    folder = tmp_path / "attachments"
    shutil.copytree(running_hub.folder, folder)
    before, files = fingerprint(url), files_under(folder)
    other = workspace_fingerprint(url, running_hub.other)
    replacing = [*command(running_hub.archive, url, folder), "--replace-workspace"]

    paused = PausedRestore(replacing, cli_env(tmp_path / "cli", phase), phase)
    try:
        paused.wait()
        assert len(staging_schemas(url)) == 1
    finally:
        paused.kill()
    assert fingerprint(url) == before
    assert restored_files(folder) == files

    done = subprocess.run(
        replacing,
        env=cli_env(tmp_path / "cli"),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert staging_schemas(url) == []
    assert workspace_fingerprint(url, running_hub.workspace) == running_hub.archived
    assert workspace_fingerprint(url, running_hub.other) == other
    assert restored_files(folder) == files
