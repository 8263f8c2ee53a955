"""One workspace of a running hub replaced by its archive's rows, staged and checked
beforehand by hubjobs.ops.restore. Everything here runs in the restore's final
transaction: readers see the workspace as it was or as restored, never half, and no row
of another workspace changes (a conflict refuses the restore instead).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.engine import Connection

from hubjobs.archive import scope
from hubjobs.archive.format import HUB_TABLES, SEQUENCES
from hubjobs.archive.reader import ArchiveError
from hubjobs.errors import HubJobsError
from hubjobs.readmodel.status import UNFINISHED_STATUSES, sql_list

log = logging.getLogger(__name__)

LIVE = "public"


class ReplaceRefused(HubJobsError):
    code = "archive_conflict"


def quoted(name: str) -> str:
    return f'"{name}"'


def columns(conn: Connection, table: str, schema: str = LIVE) -> list[str]:
    return [
        str(c)
        for c in conn.execute(
            text(
                "SELECT column_name::text FROM information_schema.columns "
                "WHERE table_schema = :schema AND table_name = :table ORDER BY ordinal_position"
            ),
            {"schema": schema, "table": table},
        ).scalars()
    ]


def _scalar(conn: Connection, sql: str) -> object:
    return conn.execute(text(sql)).scalar()


def check_scope(conn: Connection, staging: str, workspace: uuid.UUID) -> None:
    """Raises ArchiveError (archive_corrupt) unless every staged row is the workspace's."""
    s, w = quoted(staging), scope.literal(workspace)
    checks = {
        "a workspace other than its own": (
            f"SELECT count(*) <> 1 OR bool_or(id <> {w}) FROM {s}.workspaces"
        ),
        "memberships of another workspace": (
            f"SELECT EXISTS (SELECT 1 FROM {s}.workspace_memberships WHERE workspace_id <> {w})"
        ),
        "pages of another workspace": (
            f"SELECT EXISTS (SELECT 1 FROM {s}.pages WHERE workspace_id <> {w})"
        ),
        "accounts no membership names": (
            f"SELECT EXISTS (SELECT 1 FROM {s}.user_accounts a WHERE NOT EXISTS "
            f"(SELECT 1 FROM {s}.workspace_memberships m WHERE m.user_id = a.id))"
        ),
    }
    for what, sql in checks.items():
        if _scalar(conn, sql):
            raise ArchiveError(f"the workspace's archive holds {what}", code="archive_corrupt")


def require_idle(conn: Connection, workspace: uuid.UUID) -> None:
    """Refused (workspace_busy) while a job of the workspace is queued or running: it
    would go on over rows the restore replaces."""
    busy = _scalar(
        conn,
        f"SELECT EXISTS (SELECT 1 FROM {LIVE}.jobs WHERE workspace_id = "
        f"{scope.literal(workspace)} AND status IN {sql_list(UNFINISHED_STATUSES)})",
    )
    if busy:
        raise ReplaceRefused(
            "the workspace has jobs queued or running: cancel them or let them finish, "
            "then restore",
            code="workspace_busy",
        )


def find_conflicts(conn: Connection, staging: str, workspace: uuid.UUID) -> None:
    """Raises ReplaceRefused (archive_conflict) when restoring would touch a row or a file
    of another workspace; the ids go to the log only."""
    s, w, live = quoted(staging), scope.literal(workspace), LIVE
    other = f"p.workspace_id <> {w}"
    checks = {
        "pages that another workspace holds now": (
            f"SELECT x.id::text FROM {s}.pages x JOIN {live}.pages p ON p.id = x.id "
            f"WHERE {other} LIMIT 1"
        ),
        "revisions of another workspace's pages": (
            f"SELECT x.id::text FROM {s}.page_revisions x "
            f"JOIN {live}.page_revisions r ON r.id = x.id "
            f"JOIN {live}.pages p ON p.id = r.page_id WHERE {other} LIMIT 1"
        ),
        "attachments of another workspace's pages": (
            f"SELECT x.id::text FROM {s}.attachments x JOIN {live}.attachments a ON a.id = x.id "
            f"JOIN {live}.pages p ON p.id = a.page_id WHERE {other} LIMIT 1"
        ),
        "attachment files that another workspace's attachments use": (
            f"SELECT x.id::text FROM {s}.attachments x "
            f"JOIN {live}.attachments a ON a.storage_path = x.storage_path "
            f"JOIN {live}.pages p ON p.id = a.page_id WHERE {other} LIMIT 1"
        ),
        "accounts whose email another account has": (
            f"SELECT x.id::text FROM {s}.user_accounts x "
            f"JOIN {live}.user_accounts a ON a.email = x.email AND a.id <> x.id "
            f"WHERE NOT EXISTS (SELECT 1 FROM {live}.user_accounts k WHERE k.id = x.id) LIMIT 1"
        ),
        "pages another workspace's pages hang below, which the archive lacks": (
            f"SELECT c.id::text FROM {live}.pages c JOIN {live}.pages p ON p.id = c.parent_id "
            f"WHERE c.workspace_id <> {w} AND p.workspace_id = {w} "
            f"AND NOT EXISTS (SELECT 1 FROM {s}.pages x WHERE x.id = p.id) LIMIT 1"
        ),
    }
    for what, sql in checks.items():
        found = _scalar(conn, sql)
        if found is not None:
            log.info("restore: the archive conflicts with the hub (%s: %s)", what, found)
            raise ReplaceRefused(
                f"the archive's workspace conflicts with the hub: it names {what}; "
                "nothing was changed"
            )


def advance_sequences(conn: Connection, staging: str) -> None:
    """Each serial column's live sequence past the archive's rows too (never back: other
    workspaces draw from it)."""
    for table, column in SEQUENCES:
        seq = f"pg_get_serial_sequence('{LIVE}.{table}', '{column}')::regclass"
        conn.execute(
            text(
                f"SELECT setval({seq}, m) FROM (SELECT max({column}) AS m "
                f"FROM {quoted(staging)}.{table}) x "
                f"WHERE m > coalesce(pg_sequence_last_value({seq}), 0)"
            )
        )


def _upsert(table: str, cols: Sequence[str], staging: str, key: str, update: str) -> str:
    return f"{_insert(table, cols, staging)} ON CONFLICT ({key}) {update}"


def _insert(table: str, cols: Sequence[str], staging: str) -> str:
    names = ", ".join(cols)
    return f"INSERT INTO {LIVE}.{table} ({names}) SELECT {names} FROM {quoted(staging)}.{table}"


def replace(conn: Connection, staging: str, workspace: uuid.UUID) -> list[str]:
    """Replaces the workspace's rows by the staged ones, accounts the hub has kept as
    they are; returns the storage paths of removed attachments that no row names now."""
    w, s = scope.literal(workspace), quoted(staging)
    cols = {table: columns(conn, table) for table, _ in HUB_TABLES}
    for table, names in cols.items():
        if columns(conn, table, staging) != names:
            raise ReplaceRefused(
                f"the archive's {table} do not have the hub's columns", code="database_failed"
            )

    def set_all(table: str, key: set[str]) -> str:
        return ", ".join(f"{c} = EXCLUDED.{c}" for c in cols[table] if c not in key)

    conn.execute(
        text(
            _upsert("workspaces", cols["workspaces"], staging, "id", "DO UPDATE SET ")
            + set_all("workspaces", {"id"})
        )
    )
    conn.execute(text(_upsert("user_accounts", cols["user_accounts"], staging, "id", "DO NOTHING")))
    conn.execute(text(f"DELETE FROM {LIVE}.workspace_memberships WHERE workspace_id = {w}"))
    conn.execute(text(_insert("workspace_memberships", cols["workspace_memberships"], staging)))
    # In place: a page of another workspace whose parent it is keeps it. The WHERE keeps
    # another workspace's page from being taken over; the counts below would tell.
    conn.execute(
        text(
            _upsert("pages", cols["pages"], staging, "id", "DO UPDATE SET ")
            + set_all("pages", {"id"})
            + f" WHERE pages.workspace_id = {w}"
        )
    )
    mine = f"SELECT p.id FROM {LIVE}.pages p WHERE p.workspace_id = {w}"
    conn.execute(text(f"DELETE FROM {LIVE}.page_revisions WHERE page_id IN ({mine})"))
    conn.execute(text(_insert("page_revisions", cols["page_revisions"], staging)))
    removed = [
        str(p)
        for p in conn.execute(
            text(f"DELETE FROM {LIVE}.attachments WHERE page_id IN ({mine}) RETURNING storage_path")
        ).scalars()
    ]
    conn.execute(text(_insert("attachments", cols["attachments"], staging)))
    # A file goes only when no attachment row names its path any more (the archive's
    # own, or one of another workspace sharing it).
    removed = [
        str(p)
        for p in conn.execute(
            text(
                "SELECT p FROM unnest(CAST(:paths AS text[])) AS p WHERE NOT EXISTS "
                f"(SELECT 1 FROM {LIVE}.attachments a WHERE a.storage_path = p)"
            ),
            {"paths": removed},
        ).scalars()
    ]
    conn.execute(
        text(
            f"DELETE FROM {LIVE}.pages p WHERE p.workspace_id = {w} "
            f"AND NOT EXISTS (SELECT 1 FROM {s}.pages x WHERE x.id = p.id)"
        )
    )
    _require_counts(conn, staging, workspace)
    return removed


def _require_counts(conn: Connection, staging: str, workspace: uuid.UUID) -> None:
    """The workspace's rows, table by table, are as many as the archive's."""
    for table, _ in HUB_TABLES:
        mine = scope.condition(table, workspace, LIVE)
        live = _scalar(conn, f"SELECT count(*) FROM {LIVE}.{table} t WHERE {mine}")
        staged = _scalar(conn, f"SELECT count(*) FROM {quoted(staging)}.{table}")
        if live != staged:
            log.warning(
                "restore: %s holds %s rows of the workspace, the archive %s", table, live, staged
            )
            raise ReplaceRefused(
                "the hub changed under the restore (the workspace's rows do not add up); "
                "nothing was changed"
            )


def live_attachment_paths(conn: Connection, workspace: uuid.UUID) -> set[str]:
    """The storage paths of the workspace's attachments now: files the restore may replace."""
    return {
        str(p)
        for p in conn.execute(
            text(
                f"SELECT t.storage_path FROM {LIVE}.attachments t "
                f"WHERE {scope.condition('attachments', workspace, LIVE)}"
            )
        ).scalars()
    }
