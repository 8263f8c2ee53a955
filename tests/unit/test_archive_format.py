"""The backup manifest as hubjobs.archive.format declares it: it reads back what was
written, names its format, and refuses a manifest that lacks a part or holds a count
that is not one. (The reader and writer around it have tests on real servers:
test_backup.)"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from hubjobs.archive.format import (
    FORMAT,
    AttachmentEntry,
    Manifest,
    TableEntry,
    archive_name,
    attachment_member,
    table_member,
)

BACKUP_ID = uuid.UUID("0b7c6a52-7f4e-4f55-9a53-3a4c2f1f0e11")


def manifest() -> Manifest:
    return Manifest(
        backup_id=BACKUP_ID,
        created_at=datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
        schema_version="0002",
        tables=[TableEntry(name="pages", rows=3, bytes=120, sha256="ab" * 32)],
        attachment_count=1,
        attachment_bytes=5,
        attachment_index_sha256="cd" * 32,
    )


def test_a_manifest_reads_back_as_written() -> None:
    written = manifest()
    assert written.format == FORMAT
    assert Manifest.model_validate_json(written.model_dump_json()) == written


@pytest.mark.parametrize(
    "broken",
    [
        {"tables": None},
        {"tables": [{"name": "pages", "rows": "many", "bytes": 1, "sha256": "x"}]},
        {"attachment_count": "one"},
        {"backup_id": "not-an-id"},
        {"created_at": "yesterday"},
    ],
)
def test_a_manifest_with_a_broken_part_is_refused(broken: dict[str, object]) -> None:
    raw = {**manifest().model_dump(mode="json"), **broken}
    with pytest.raises(ValidationError):
        Manifest.model_validate(raw)


def test_a_manifest_without_a_part_is_refused() -> None:
    raw = manifest().model_dump(mode="json")
    for part in ("backup_id", "schema_version", "tables", "attachment_index_sha256"):
        with pytest.raises(ValidationError):
            Manifest.model_validate({k: v for k, v in raw.items() if k != part})


def test_member_and_archive_names() -> None:
    assert table_member("pages") == "tables/pages.copy"
    assert attachment_member(BACKUP_ID) == f"attachments/{BACKUP_ID}"
    assert archive_name(BACKUP_ID) == f"hubjobs-backup-{BACKUP_ID}.zip"
    entry = AttachmentEntry(id=BACKUP_ID, storage_path="a/b", size_bytes=5, sha256="e" * 64)
    assert AttachmentEntry.model_validate_json(entry.model_dump_json()) == entry
