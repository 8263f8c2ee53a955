"""Which rows a backup holds: every hub table whole, or a workspace's rows alone (its
row, memberships and the accounts they name, pages, revisions, attachments).

A page whose parent lies in another workspace is written as a root, so the archive
names no row outside it. Workspace ids are inlined as UUID literals (``uuid.UUID``
renders only hex and dashes): COPY takes no parameters.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from hubjobs.archive.format import HUB_TABLES

# Per hub table, the condition on its row ``t`` that makes it the workspace's ({w}: the
# workspace's id, {s}: the schema prefix).
WORKSPACE_ROWS: dict[str, str] = {
    "workspaces": "t.id = {w}",
    "user_accounts": (
        "t.id IN (SELECT m.user_id FROM {s}workspace_memberships m WHERE m.workspace_id = {w})"
    ),
    "workspace_memberships": "t.workspace_id = {w}",
    "pages": "t.workspace_id = {w}",
    "page_revisions": "t.page_id IN (SELECT p.id FROM {s}pages p WHERE p.workspace_id = {w})",
    "attachments": "t.page_id IN (SELECT p.id FROM {s}pages p WHERE p.workspace_id = {w})",
}
# Columns written otherwise in a workspace's archive: a parent outside it, none.
WORKSPACE_COLUMNS: dict[tuple[str, str], str] = {
    ("pages", "parent_id"): (
        "(SELECT p.id FROM {s}pages p WHERE p.id = t.parent_id AND p.workspace_id = {w})"
    ),
}
_KEYS = dict(HUB_TABLES)


def literal(workspace: uuid.UUID) -> str:
    return f"'{uuid.UUID(str(workspace))}'::uuid"


def _prefix(schema: str | None) -> str:
    return f'"{schema}".' if schema else ""


def condition(table: str, workspace: uuid.UUID, schema: str | None = None) -> str:
    """The SQL condition on ``t`` (a row of ``table``) that makes it the workspace's."""
    return WORKSPACE_ROWS[table].format(w=literal(workspace), s=_prefix(schema))


def select_rows(table: str, workspace: uuid.UUID, columns: Sequence[str]) -> str:
    """The rows a workspace's archive holds of ``table``, its columns in order."""
    w = literal(workspace)
    shown = [
        WORKSPACE_COLUMNS[(table, c)].format(w=w, s="") + f" AS {c}"
        if (table, c) in WORKSPACE_COLUMNS
        else f"t.{c}"
        for c in columns
    ]
    return (
        f"SELECT {', '.join(shown)} FROM {table} t "
        f"WHERE {condition(table, workspace)} ORDER BY {_KEYS[table]}"
    )


def copy_out(table: str, workspace: uuid.UUID | None, columns: Sequence[str]) -> str:
    """The COPY statement that writes the table's member."""
    if workspace is None:
        return f"COPY {table} TO STDOUT"
    return f"COPY ({select_rows(table, workspace, columns)}) TO STDOUT"


def count_attachments(workspace: uuid.UUID | None) -> str:
    if workspace is None:
        return "SELECT count(*) FROM attachments"
    return f"SELECT count(*) FROM attachments t WHERE {condition('attachments', workspace)}"


def attachment_rows(workspace: uuid.UUID | None) -> str:
    """The attachments the archive holds, by id: id, storage path, size, sha256."""
    where = "" if workspace is None else f" WHERE {condition('attachments', workspace)}"
    return f"SELECT id, storage_path, size_bytes, sha256 FROM attachments t{where} ORDER BY id"
