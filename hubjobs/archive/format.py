"""The backup archive: one zip file (deflate), readable member by member.

    tables/<table>.copy      each hub table, as PostgreSQL COPY text, in key order
    attachments/<id>         each attachment's bytes
    attachments/index.jsonl  one line per attachment: id, storage path, size, sha256
    manifest.json            written last: backup id, created at, schema version
                             (Alembic's), per-table rows/bytes/sha256, index checksum

Every checksum is sha256 over the member's bytes as written; restore verifies them all
before it touches the target database.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel

FORMAT = "hubjobs-backup/1"
MANIFEST = "manifest.json"
ATTACHMENT_INDEX = "attachments/index.jsonl"

# The hub's tables in an order that satisfies their foreign keys, each with the key it
# is dumped in. The job read model is operational state, not the hub's: not included.
HUB_TABLES: tuple[tuple[str, str], ...] = (
    ("workspaces", "id"),
    ("user_accounts", "id"),
    ("workspace_memberships", "workspace_id, user_id"),
    ("pages", "id"),
    ("page_revisions", "id"),
    ("attachments", "id"),
)
# Serial columns whose sequences must follow the restored rows.
SEQUENCES: tuple[tuple[str, str], ...] = (("page_revisions", "id"),)


def table_member(table: str) -> str:
    return f"tables/{table}.copy"


def attachment_member(attachment_id: uuid.UUID | str) -> str:
    return f"attachments/{attachment_id}"


def archive_name(backup_id: uuid.UUID) -> str:
    return f"hubjobs-backup-{backup_id}.zip"


class TableEntry(BaseModel):
    name: str
    rows: int
    bytes: int
    sha256: str


class AttachmentEntry(BaseModel):
    id: uuid.UUID
    storage_path: str
    size_bytes: int
    sha256: str


class Manifest(BaseModel):
    format: str = FORMAT
    backup_id: uuid.UUID
    created_at: datetime
    schema_version: str
    tables: list[TableEntry]
    attachment_count: int
    attachment_bytes: int
    attachment_index_sha256: str
