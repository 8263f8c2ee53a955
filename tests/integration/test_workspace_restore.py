"""A workspace's archive on the real database: it holds that workspace alone and restores
so into an empty database; into a running hub (``replace_workspace``) it replaces that
workspace and nothing else: its rows as the archive holds them, every other
workspace's rows unchanged, a shared account kept as the hub has it (and its other
memberships), sequences past every row, the workspace's files replaced and its
removed attachments' files gone. Refused, with nothing changed: a hub's archive, an
archive whose ids another workspace holds now, a hostile one whose rows name another
workspace, and a workspace with a job running."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs import job_rows
from hubjobs.archive.format import ATTACHMENT_INDEX, table_member
from hubjobs.devstack.demo_data import DemoCourse, create_account, create_attachment, seed_demo
from hubjobs.devstack.embedded import StackInfo
from hubjobs.errors import HubJobsError
from hubjobs.ops.restore import restore
from hubjobs.readmodel.overview import Window
from hubjobs.readmodel.status import JobStatus
from tests.support.archive_helpers import (
    Databases,
    Parts,
    add_attachments,
    files_under,
    fingerprint,
    snapshot_archive,
    workspace_fingerprint,
)
from tests.support.helpers import edit
from tests.support.overview_counts import Ended, ended_in_jobs, ended_of, read_overview


@pytest.fixture
def new_database(stack: StackInfo) -> Iterator[Databases]:
    databases = Databases(stack)
    yield databases
    databases.drop_all()


class Hub:
    """Two workspaces, A and B, with pages, revisions and attachments, and an account
    that belongs to both (an editor in A, an administrator in B)."""

    def __init__(self, a: DemoCourse, b: DemoCourse, shared: uuid.UUID) -> None:
        self.a, self.b, self.shared = a, b, shared


async def two_workspaces(engine: AsyncEngine, folder: Path) -> Hub:
    async with engine.begin() as conn:
        a = await seed_demo(conn, 60, name="Workspace A")
        b = await seed_demo(conn, 40, name="Workspace B")
        shared = await create_account(conn, b.workspace_id, name="Sam Shared")
        await conn.execute(
            text(
                "INSERT INTO workspace_memberships (workspace_id, user_id, role) "
                "VALUES (:w, :u, 'editor')"
            ),
            {"w": a.workspace_id, "u": shared},
        )
    await add_attachments(engine, folder, a.page_ids, [0, 10, 5000, 70_000])
    await add_attachments(engine, folder, b.page_ids, [1, 20, 6000])
    for page in a.page_ids[:5] + b.page_ids[:3]:
        await edit(engine, page, markdown="# edited")
    return Hub(a, b, shared)


async def archive_of(url: str, folder: Path, workspace: uuid.UUID | None, path: Path) -> Path:
    with path.open("wb") as out:
        await snapshot_archive(url, folder, out, workspace_id=workspace)
    return path


def scalar(url: str, sql: str, *params: object) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


async def test_a_workspace_archive_into_an_empty_database_holds_that_workspace_alone(
    engine: AsyncEngine, database_url: str, new_database: Databases, tmp_path: Path
) -> None:
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    archive = await archive_of(database_url, folder, hub.a.workspace_id, tmp_path / "a.zip")
    source = await asyncio.to_thread(workspace_fingerprint, database_url, hub.a.workspace_id)

    target, target_dir = new_database.create(), tmp_path / "restored"
    report = await asyncio.to_thread(restore, archive, target, target_dir)
    assert (report.scope, report.workspace_id, report.replaced) == (
        "workspace",
        str(hub.a.workspace_id),
        False,
    )
    assert await asyncio.to_thread(fingerprint, target) == source
    assert scalar(target, "SELECT count(*) FROM workspaces") == 1
    assert (
        scalar(target, "SELECT count(*) FROM pages WHERE workspace_id <> %s", hub.a.workspace_id)
        == 0
    )
    # The shared account comes, its membership of B does not.
    assert (
        scalar(target, "SELECT count(*) FROM workspace_memberships WHERE user_id = %s", hub.shared)
        == 1
    )
    assert report.attachments == 4 and len(files_under(target_dir)) == 4
    # One audit event, on the workspace restored: a hub operator's, from the shell.
    restored = "SELECT workspace_id, actor_id, surface, detail->>'backup_id' FROM audit_events"
    with psycopg.connect(target) as conn:
        events = conn.execute(restored + " WHERE action = 'restore'").fetchall()
    assert events == [(hub.a.workspace_id, None, "cli", report.backup_id)]


async def test_a_workspace_archive_replaces_its_workspace_in_a_running_hub_and_nothing_else(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    a, b = hub.a, hub.b
    archive = await archive_of(database_url, folder, a.workspace_id, tmp_path / "a.zip")
    archived = await asyncio.to_thread(workspace_fingerprint, database_url, a.workspace_id)
    archived_files = files_under(folder)

    # A changes after its backup in every way it can; B changes too, before the restore.
    for page in a.page_ids[10:20]:
        await edit(engine, page, markdown="# after the backup")
    async with engine.begin() as conn:
        newcomer = await create_account(conn, a.workspace_id, name="Nina New")
        await conn.execute(text("DELETE FROM pages WHERE id = :p"), {"p": a.page_ids[-1]})
        # A page with an attachment (the second file), deleted as a hub deleting rows
        # would: its file stays behind, with the very bytes the archive holds.
        await conn.execute(text("DELETE FROM pages WHERE id = :p"), {"p": a.page_ids[37]})
        await conn.execute(
            text("UPDATE user_accounts SET display_name = 'Sam Renamed' WHERE id = :u"),
            {"u": hub.shared},
        )
        await conn.execute(
            text("DELETE FROM workspace_memberships WHERE workspace_id = :w AND user_id = :u"),
            {"w": a.workspace_id, "u": hub.shared},
        )
        late = await create_attachment(conn, folder, a.page_ids[3], "late.txt", b"late\n")
        await create_attachment(conn, folder, b.page_ids[2], "b-late.txt", b"b late\n")
    late_path = str(
        scalar(database_url, "SELECT storage_path FROM attachments WHERE id = %s", late)
    )
    for page in b.page_ids[5:8]:
        await edit(engine, page, markdown="# B after")
    other = await asyncio.to_thread(workspace_fingerprint, database_url, b.workspace_id)
    account_before = scalar(
        database_url, "SELECT u::text FROM user_accounts u WHERE id = %s", hub.shared
    )
    b_files = {
        p: files_under(folder)[p]
        for p in files_under(folder)
        if scalar(
            database_url,
            "SELECT count(*) FROM attachments t JOIN pages p ON p.id = t.page_id "
            "WHERE t.storage_path = %s AND p.workspace_id = %s",
            p,
            b.workspace_id,
        )
    }
    assert len(b_files) == 4

    report = await asyncio.to_thread(restore, archive, database_url, folder, replace_workspace=True)
    assert report.replaced and report.attachments_removed == 1
    # One audit event, on A alone.
    with psycopg.connect(database_url) as conn:
        events = conn.execute(
            "SELECT workspace_id, actor_id, detail->>'scope' FROM audit_events "
            "WHERE action = 'restore'"
        ).fetchall()
    assert events == [(a.workspace_id, None, "workspace")]

    restored = await asyncio.to_thread(workspace_fingerprint, database_url, a.workspace_id)
    # Every table of A as archived, but the shared account: the hub's, kept as it is.
    assert {t: v for t, v in restored.items() if t != "user_accounts"} == {
        t: v for t, v in archived.items() if t != "user_accounts"
    }
    assert restored["user_accounts"][0] == archived["user_accounts"][0]
    account = "SELECT u::text FROM user_accounts u WHERE id = %s"
    assert scalar(database_url, account, hub.shared) == account_before
    assert await asyncio.to_thread(workspace_fingerprint, database_url, b.workspace_id) == other
    # The newcomer's membership of A went with the restore; the account stays.
    assert scalar(database_url, "SELECT count(*) FROM user_accounts WHERE id = %s", newcomer) == 1
    # A's files are the archive's; the late file went; B's files are untouched.
    now = files_under(folder)
    assert late_path not in now
    assert {p: h for p, h in now.items() if p not in b_files} == {
        p: h for p, h in archived_files.items() if p not in b_files
    }
    assert {p: now[p] for p in b_files} == b_files
    # A revision written now takes an id past every restored one.
    top = scalar(database_url, "SELECT max(id) FROM page_revisions")
    await edit(engine, a.page_ids[1], markdown="# after the restore")
    assert scalar(database_url, "SELECT max(id) FROM page_revisions") == int(str(top)) + 1


async def test_a_stray_file_with_other_bytes_at_an_attachments_path_is_never_replaced(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    """A page deleted with its attachment's row, and other bytes written since where its
    file was: no row names the file, and it is not the archive's; the restore refuses."""
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    archive = await archive_of(database_url, folder, hub.a.workspace_id, tmp_path / "a.zip")
    page = hub.a.page_ids[37]
    path = str(
        scalar(database_url, "SELECT storage_path FROM attachments WHERE page_id = %s", page)
    )
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM pages WHERE id = :p"), {"p": page})
    (folder / path).write_bytes(b"someone else's bytes")
    await _refused_and_unchanged(archive, database_url, folder, "attachments_not_empty")


async def test_a_hub_archive_does_not_replace_a_workspace(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "attachments"
    await two_workspaces(engine, folder)
    archive = await archive_of(database_url, folder, None, tmp_path / "hub.zip")
    before = await asyncio.to_thread(fingerprint, database_url)
    with pytest.raises(HubJobsError) as refused:
        await asyncio.to_thread(restore, archive, database_url, folder, replace_workspace=True)
    assert refused.value.code == "not_a_workspace_archive"
    assert await asyncio.to_thread(fingerprint, database_url) == before


async def _refused_and_unchanged(archive: Path, database_url: str, folder: Path, code: str) -> None:
    before = await asyncio.to_thread(fingerprint, database_url)
    files = files_under(folder)
    with pytest.raises(HubJobsError) as refused:
        await asyncio.to_thread(restore, archive, database_url, folder, replace_workspace=True)
    assert refused.value.code == code, refused.value
    assert await asyncio.to_thread(fingerprint, database_url) == before
    assert files_under(folder) == files
    assert (
        scalar(
            database_url,
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'hubjobs_restore_%%'",
        )
        == 0
    )


async def test_ids_another_workspace_holds_now_are_refused_never_overwritten(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    """A page of A moved to B after the backup: restoring A would take it back from B."""
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    archive = await archive_of(database_url, folder, hub.a.workspace_id, tmp_path / "a.zip")
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE pages SET workspace_id = :b, parent_id = NULL WHERE id = :p"),
            {"b": hub.b.workspace_id, "p": hub.a.page_ids[7]},
        )
    await _refused_and_unchanged(archive, database_url, folder, "archive_conflict")


async def test_a_workspace_archive_whose_rows_name_another_workspace_is_refused(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    """Its checksums made to agree, as an attacker would: the pages of A's archive moved
    to B's workspace id (and B's id under A's name). Nothing of B may change."""
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    archive = await archive_of(database_url, folder, hub.a.workspace_id, tmp_path / "a.zip")
    parts = Parts.of(archive.read_bytes())
    a_id, b_id = str(hub.a.workspace_id).encode(), str(hub.b.workspace_id).encode()
    pages = parts.get(table_member("pages")).replace(a_id, b_id)
    parts.set_table("pages", pages)
    hostile = tmp_path / "hostile.zip"
    hostile.write_bytes(parts.build())
    await _refused_and_unchanged(hostile, database_url, folder, "archive_corrupt")

    parts = Parts.of(archive.read_bytes())
    for table in ("workspaces", "workspace_memberships", "pages"):
        parts.set_table(table, parts.get(table_member(table)).replace(a_id, b_id))
    parts.manifest["workspace_id"] = str(hub.b.workspace_id)
    # Without A's files (whose paths would be refused first, as A's files).
    parts.members = [
        (n, d)
        for n, d in parts.members
        if not n.startswith("attachments/") or n == ATTACHMENT_INDEX
    ]
    parts.set_table("attachments", b"")
    parts.set_index([])
    (tmp_path / "b.zip").write_bytes(parts.build())
    # Now a consistent archive of "B" holding A's pages: those ids are A's now.
    await _refused_and_unchanged(tmp_path / "b.zip", database_url, folder, "archive_conflict")


async def test_a_workspace_with_a_job_running_is_not_replaced(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    archive = await archive_of(database_url, folder, hub.a.workspace_id, tmp_path / "a.zip")
    async with engine.begin() as conn:  # a job queued in A (its workflow not needed here)
        await job_rows.insert_job(
            conn,
            job_id=uuid.uuid4(),
            kind="backup",
            workspace_id=hub.a.workspace_id,
            actor_id=hub.a.actor_id,
            correlation_id="queued-in-a",
            idempotency_key=None,
            payload={},
        )
    await _refused_and_unchanged(archive, database_url, folder, "workspace_busy")


async def test_a_workspace_replaced_from_its_archive_keeps_its_overview(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    """An archive holds no job rows (the read model is operational state, not the hub's)
    and so none of their minutes: the workspace replaced keeps both, and its overview's
    ended counts and buckets are what they were before the restore, as its jobs say."""
    folder = tmp_path / "attachments"
    hub = await two_workspaces(engine, folder)
    a = hub.a
    for status in (JobStatus.succeeded, JobStatus.succeeded, JobStatus.failed):
        async with engine.begin() as conn:
            job = await job_rows.insert_job(
                conn,
                job_id=uuid.uuid4(),
                kind="backup",
                workspace_id=a.workspace_id,
                actor_id=a.actor_id,
                correlation_id="ended-in-a",
                idempotency_key=None,
                payload={},
            )
            assert job is not None
            await job_rows.open_job(conn, job.id, run_id=None, attempts=1, attempts_failed=0)
            ending = job_rows.Ending(status)
            assert await job_rows.finish(conn, job.id, ending, retention=timedelta(hours=1))
    archive = await archive_of(database_url, folder, a.workspace_id, tmp_path / "a.zip")

    async def ended() -> dict[Window, Ended]:
        found = {
            w: await read_overview(database_url, a.workspace_id, a.actor_id, w) for w in Window
        }
        for overview in found.values():
            counted = ended_in_jobs(database_url, a.workspace_id, overview)
            assert ended_of(overview) == counted
        return {w: ended_of(overview) for w, overview in found.items()}

    before = await ended()
    assert before[Window.hour][0] == {"backup": (2, 1, 0)}
    report = await asyncio.to_thread(restore, archive, database_url, folder, replace_workspace=True)
    assert report.replaced
    assert await ended() == before
