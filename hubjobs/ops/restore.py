"""Restore: rebuild an empty database (and its attachment files) from a backup archive.

Nothing is touched before every checksum of the archive has been verified. The
schema is created at the archive's version, the rows loaded with COPY and the schema
brought to today's head, all in one transaction; attachment files are staged beside
their final names and moved into place only once that transaction has committed. A
refused or failed restore leaves the database and the attachment folder as they were.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.engine import Connection

from hubjobs.archive.format import (
    ATTACHMENT_INDEX,
    FORMAT,
    HUB_TABLES,
    MANIFEST,
    SEQUENCES,
    AttachmentEntry,
    Manifest,
    attachment_member,
    table_member,
)
from hubjobs.db.engine import sync_engine
from hubjobs.db.migrate import head_revision, known_revisions, upgrade_on
from hubjobs.errors import HubJobsError, InvalidInput

log = logging.getLogger(__name__)
CHUNK = 1 << 20
STAGED = ".restoring"


class RestoreRefused(HubJobsError):
    code = "restore_refused"


@dataclass
class RestoreReport:
    backup_id: str
    created_at: str
    archive_schema_version: str
    schema_version: str
    tables: dict[str, int] = field(default_factory=dict)
    attachments: int = 0
    attachment_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def restore(archive: Path, database_url: str, attachments_dir: Path) -> RestoreReport:
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile):
        raise InvalidInput(
            f"{archive} is not a readable backup archive", code="archive_unreadable"
        ) from None
    with zf:
        manifest = _manifest(zf)
        index = _verify(zf, manifest)
        report = RestoreReport(
            backup_id=str(manifest.backup_id),
            created_at=manifest.created_at.isoformat(),
            archive_schema_version=manifest.schema_version,
            schema_version=head_revision(),
            attachments=len(index),
            attachment_bytes=sum(e.size_bytes for e in index),
        )
        root = attachments_dir.resolve()
        staged: list[tuple[Path, Path]] = []
        engine = sync_engine(database_url)
        try:
            with engine.begin() as conn:
                _require_empty(conn, manifest)
                for table, _ in HUB_TABLES:
                    report.tables[table] = _load(conn, zf, table, manifest)
                for table, column in SEQUENCES:
                    conn.execute(
                        text(
                            f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                            f"COALESCE((SELECT max({column}) FROM {table}), 0) + 1, false)"
                        )
                    )
                upgrade_on(conn, "head")
                staged = _stage_attachments(zf, index, root)
        except BaseException:
            for temporary, _ in staged:
                temporary.unlink(missing_ok=True)
            raise
        finally:
            engine.dispose()
        for temporary, final in staged:
            os.replace(temporary, final)
    log.info("restored backup %s into %s", report.backup_id, database_url.rsplit("@", 1)[-1])
    return report


def _manifest(zf: zipfile.ZipFile) -> Manifest:
    try:
        manifest = Manifest.model_validate_json(zf.read(MANIFEST))
    except (KeyError, ValidationError, zipfile.BadZipFile, zlib.error):
        raise InvalidInput(
            "the archive has no readable manifest", code="archive_unreadable"
        ) from None
    if manifest.format != FORMAT:
        raise RestoreRefused(
            f"archive format {manifest.format!r} is not one this version reads",
            code="schema_unsupported",
        )
    if manifest.schema_version not in known_revisions():
        raise RestoreRefused(
            f"the archive's schema version {manifest.schema_version!r} is unknown to this version",
            code="schema_unsupported",
        )
    return manifest


def _stream(zf: zipfile.ZipFile, name: str) -> Iterator[bytes]:
    """A member's bytes; zip's own CRC and deflate checks fail as a corrupt archive."""
    try:
        with zf.open(name) as member:
            while data := member.read(CHUNK):
                yield data
    except KeyError:
        raise RestoreRefused(f"the archive lacks {name}", code="archive_corrupt") from None
    except (zipfile.BadZipFile, zlib.error, EOFError):
        raise RestoreRefused(f"the archive is corrupted ({name})", code="archive_corrupt") from None


def _checksum(zf: zipfile.ZipFile, name: str) -> tuple[str, int, int]:
    digest, size, lines = hashlib.sha256(), 0, 0
    for data in _stream(zf, name):
        digest.update(data)
        size += len(data)
        lines += data.count(b"\n")
    return digest.hexdigest(), size, lines


def _corrupt(name: str) -> RestoreRefused:
    return RestoreRefused(
        f"the checksum of {name} does not match the manifest", code="archive_corrupt"
    )


def _verify(zf: zipfile.ZipFile, manifest: Manifest) -> list[AttachmentEntry]:
    """Every checksum, before anything is written anywhere."""
    tables = {entry.name: entry for entry in manifest.tables}
    if set(tables) != {table for table, _ in HUB_TABLES}:
        raise RestoreRefused("the archive does not hold every hub table", code="archive_corrupt")
    for name, expected in tables.items():
        if _checksum(zf, table_member(name)) != (expected.sha256, expected.bytes, expected.rows):
            raise _corrupt(table_member(name))
    if _checksum(zf, ATTACHMENT_INDEX)[0] != manifest.attachment_index_sha256:
        raise _corrupt(ATTACHMENT_INDEX)
    index = [
        AttachmentEntry.model_validate_json(line)
        for line in b"".join(_stream(zf, ATTACHMENT_INDEX)).splitlines()
    ]
    if len(index) != manifest.attachment_count:
        raise _corrupt(ATTACHMENT_INDEX)
    for entry in index:
        sha, size, _ = _checksum(zf, attachment_member(entry.id))
        if (sha, size) != (entry.sha256, entry.size_bytes):
            raise _corrupt(attachment_member(entry.id))
    return index


def _require_empty(conn: Connection, manifest: Manifest) -> None:
    tables = set(
        conn.execute(
            text(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ).scalars()
    )
    if not tables:
        upgrade_on(conn, manifest.schema_version)
        return
    version = (
        conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        if ("alembic_version" in tables)
        else None
    )
    if version != manifest.schema_version:
        raise RestoreRefused(
            f"the database already has a schema ({version or 'unknown'}); restore needs an "
            f"empty database, or an empty one at the archive's version {manifest.schema_version}",
            code="database_not_empty",
        )
    for table in sorted(tables - {"alembic_version"}):
        if conn.execute(text(f'SELECT EXISTS (SELECT 1 FROM "{table}")')).scalar():
            raise RestoreRefused(
                f"the database is not empty (table {table} has rows)", code="database_not_empty"
            )


def _load(conn: Connection, zf: zipfile.ZipFile, table: str, manifest: Manifest) -> int:
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cursor:
        with cursor.copy(f"COPY {table} FROM STDIN") as copy:
            for data in _stream(zf, table_member(table)):
                copy.write(data)
        rows = int(cursor.rowcount)
    expected = next(entry.rows for entry in manifest.tables if entry.name == table)
    if rows != expected:
        raise RestoreRefused(
            f"{table}: loaded {rows} rows, the manifest says {expected}", code="archive_corrupt"
        )
    return rows


def _stage_attachments(
    zf: zipfile.ZipFile, index: list[AttachmentEntry], root: Path
) -> list[tuple[Path, Path]]:
    staged: list[tuple[Path, Path]] = []
    try:
        for entry in index:
            final = (root / entry.storage_path).resolve()
            if not final.is_relative_to(root):
                raise RestoreRefused(
                    f"attachment {entry.id} has a path outside the folder", code="archive_corrupt"
                )
            if final.exists():
                raise RestoreRefused(
                    f"attachment file {final} exists already", code="attachments_not_empty"
                )
            final.parent.mkdir(parents=True, exist_ok=True)
            temporary = final.with_name(final.name + STAGED)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            staged.append((temporary, final))
            with os.fdopen(fd, "wb") as out:
                for data in _stream(zf, attachment_member(entry.id)):
                    out.write(data)
                out.flush()
                os.fsync(out.fileno())
    except BaseException:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise
    return staged
