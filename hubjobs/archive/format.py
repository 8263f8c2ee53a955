"""The backup archive: one zip file, readable member by member.

    tables/<table>.copy      each hub table as COPY text
    attachments/<id>         each attachment's bytes (stored when they do not compress)
    attachments/index.jsonl  a line per attachment: id, storage path, size, sha256
    manifest.json            written last: format, ids, schema version, scope, each
                             table's rows, size and sha256, the index's size and sha256

Format 3 says its scope (hub, or one workspace); formats 1 and 2 (a whole hub) are still
read, format 1 without the index's size (bounded by its line count instead).
"""

from __future__ import annotations

import glob
import unicodedata
import uuid
from datetime import datetime
from pathlib import Path
from typing import Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

FORMAT = "hubjobs-backup/3"
FORMAT_1 = "hubjobs-backup/1"
FORMAT_2 = "hubjobs-backup/2"
READABLE_FORMATS = (FORMAT_1, FORMAT_2, FORMAT)
# What an archive holds: the whole hub, or one workspace.
HUB: Final = "hub"
WORKSPACE: Final = "workspace"
MANIFEST = "manifest.json"
ATTACHMENT_INDEX = "attachments/index.jsonl"

# The largest manifest a reader takes (it holds six table entries and a few fields).
MANIFEST_MAX_BYTES = 1 << 20
# The longest line of the attachment index (a storage path is at most STORAGE_PATH_MAX).
INDEX_LINE_MAX_BYTES = 8 << 10
# Storage paths: relative, at most this long in UTF-8 and this deep.
STORAGE_PATH_MAX = 1024
STORAGE_PATH_MAX_DEPTH = 32
NAME_MAX = 255
SHA256_PATTERN = r"^[0-9a-f]{64}$"
# No storage path may begin with this: restore stages its files in a folder so named.
RESERVED_PREFIX = ".hubjobs-restore-"

# The hub's tables in an order that satisfies their foreign keys. The job read model
# is operational state, not the hub's: not included.
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


def temporary_name(backup_id: uuid.UUID, writer: str) -> str:
    """One attempt's archive before it commits: a name of its own, so that an attempt
    presumed dead that wakes up never touches its successor's file."""
    return f"{archive_name(backup_id)}.{writer}.partial"


def temporary_files(folder: Path, backup_id: uuid.UUID) -> list[Path]:
    """Every attempt's temporary archive of a backup (and the one name all attempts
    shared before, ``<archive>.partial``)."""
    return sorted(folder.glob(f"{glob.escape(archive_name(backup_id))}.*partial"))


class TableEntry(BaseModel):
    name: str
    rows: int = Field(ge=0)
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=SHA256_PATTERN)


class AttachmentEntry(BaseModel):
    """One line of the attachment index."""

    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    storage_path: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=SHA256_PATTERN)


class Manifest(BaseModel):
    format: str = FORMAT
    backup_id: uuid.UUID
    created_at: datetime
    schema_version: str
    tables: list[TableEntry]
    attachment_count: int = Field(ge=0)
    attachment_bytes: int = Field(ge=0)
    attachment_index_sha256: str = Field(pattern=SHA256_PATTERN)
    # Format 2 on; None in a format 1 archive.
    attachment_index_bytes: int | None = Field(default=None, ge=0)
    # Format 3 on (earlier formats hold the whole hub).
    scope: Literal["hub", "workspace"] = HUB
    workspace_id: uuid.UUID | None = None

    @model_validator(mode="after")
    def _scope_names_its_workspace(self) -> Self:
        if (self.scope == WORKSPACE) != (self.workspace_id is not None):
            raise ValueError("a workspace's archive, and only one, names its workspace")
        return self


def storage_path_parts(path: str) -> tuple[str, ...]:
    """The components of a storage path already in normal form, else ValueError saying
    why: the backup reads no file by any other path, and restore writes none."""
    if not path:
        raise ValueError("empty")
    encoded = path.encode("utf-8", "strict")  # lone surrogates raise (a ValueError)
    if len(encoded) > STORAGE_PATH_MAX:
        raise ValueError("too long")
    if path.startswith("/"):
        raise ValueError("absolute")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in path):
        raise ValueError("a control character or a backslash")
    if unicodedata.normalize("NFC", path) != path:
        raise ValueError("not in Unicode normal form C")
    parts = tuple(path.split("/"))
    if len(parts) > STORAGE_PATH_MAX_DEPTH:
        raise ValueError("too deep")
    if parts[0].startswith(RESERVED_PREFIX):
        raise ValueError(f"reserved (it begins with {RESERVED_PREFIX})")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"a component {part!r}")
        if len(part.encode()) > NAME_MAX:
            raise ValueError("a component too long")
    return parts
