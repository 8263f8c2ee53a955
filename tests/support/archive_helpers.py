"""Helpers for the archive tests: empty databases, full listings of a folder, and
archives taken apart and put together again (the way an attacker would, with every
checksum recomputed so that only the check under test can catch the change)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import stat
import struct
import time
import uuid
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.archive import scope
from hubjobs.archive.format import (
    ATTACHMENT_INDEX,
    HUB_TABLES,
    MANIFEST,
    SEQUENCES,
    Manifest,
    table_member,
)
from hubjobs.archive.writer import Progress, write_archive
from hubjobs.devstack.demo_data import create_attachment
from hubjobs.devstack.embedded import StackInfo
from tests.support.processes import WorkerProcess


async def _no_progress(nbytes: int, step_done: bool, stage: str) -> None:
    pass


async def snapshot_archive(
    url: str,
    attachments: Path,
    out: IO[bytes],
    progress: Progress = _no_progress,
    *,
    workspace_id: uuid.UUID | None = None,
) -> Manifest:
    """An archive of the database at ``url`` (or of one workspace of it) written to
    ``out`` by the backup's writer, from one REPEATABLE READ, READ ONLY snapshot as the
    backup activity takes it."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await conn.set_read_only(True)
        async with conn.transaction():
            return await write_archive(
                conn, attachments, out, progress, backup_id=uuid.uuid4(), workspace_id=workspace_id
            )


class Databases:
    """Databases on the stack's server, EMPTY (no schema) unless cloned from a template;
    all dropped by ``drop_all``."""

    def __init__(self, stack: StackInfo) -> None:
        self.server = stack.database_url.rsplit("/", 1)[0]
        self.names: list[str] = []

    def create(self, template: str | None = None) -> str:
        name = f"r_{uuid.uuid4().hex[:16]}"
        clause = f' TEMPLATE "{template}"' if template else ""
        with psycopg.connect(self.server + "/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{clause}')
        self.names.append(name)
        return f"{self.server}/{name}"

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.server + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_all(self) -> None:
        for name in self.names:
            self.drop(f"{self.server}/{name}")


def fingerprint(url: str) -> dict[str, tuple[int, str]]:
    """Per hub table: row count and md5 over every row's text, in key order."""
    return _fingerprint(url, lambda table: "true")


def workspace_fingerprint(url: str, workspace: uuid.UUID) -> dict[str, tuple[int, str]]:
    """``fingerprint`` of one workspace's rows (hubjobs.archive.scope says which)."""
    return _fingerprint(url, lambda table: scope.condition(table, workspace))


def _fingerprint(url: str, where: Callable[[str], str]) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    with psycopg.connect(url) as conn:
        for table, key in HUB_TABLES:
            row = conn.execute(
                f"SELECT count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY {key}), '')) "
                f"FROM {table} AS t WHERE {where(table)}"
            ).fetchone()
            assert row is not None
            out[table] = (int(row[0]), str(row[1]))
    return out


def tables_of(url: str) -> set[str]:
    """Every table of the database, in any schema but the system's."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    return {str(r[0]) for r in rows}


def tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything below ``root`` (and root itself), links never followed: per path its
    kind and mode, and a file's size and sha256 or a link's target."""
    out: dict[str, tuple[Any, ...]] = {}
    if not os.path.lexists(root):
        return out

    def describe(path: Path) -> tuple[Any, ...]:
        info = os.lstat(path)
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            return ("link", os.readlink(path))
        if stat.S_ISREG(info.st_mode):
            return ("file", mode, info.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        if stat.S_ISDIR(info.st_mode):
            return ("dir", mode)
        return ("other", stat.S_IFMT(info.st_mode))

    out["."] = describe(root)
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = describe(path)
    return out


def bytes_under(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root, followlinks=False):
        for name in files:
            try:
                total += os.lstat(Path(folder) / name).st_size
            except FileNotFoundError:
                pass
    return total


@dataclass
class Parts:
    """An archive taken apart: its members in order, its manifest and index lines."""

    members: list[tuple[str, bytes]]
    manifest: dict[str, Any] = field(default_factory=dict)
    index: list[bytes] = field(default_factory=list)

    @classmethod
    def of(cls, archive: bytes) -> Parts:
        with zipfile.ZipFile(io.BytesIO(archive)) as zf:
            members = [(i.filename, zf.read(i)) for i in zf.infolist()]
        parts = cls(members)
        parts.manifest = json.loads(parts.get(MANIFEST))
        parts.index = parts.get(ATTACHMENT_INDEX).splitlines(keepends=True)
        return parts

    def get(self, name: str) -> bytes:
        return next(data for n, data in self.members if n == name)

    def put(self, name: str, data: bytes) -> None:
        self.members = [(n, data if n == name else d) for n, d in self.members]

    def set_table(self, table: str, data: bytes, *, rows: int | None = None) -> None:
        """New COPY text for a table, its manifest entry made to agree."""
        self.put(table_member(table), data)
        for entry in self.manifest["tables"]:
            if entry["name"] == table:
                entry["bytes"] = len(data)
                entry["sha256"] = hashlib.sha256(data).hexdigest()
                entry["rows"] = data.count(b"\n") if rows is None else rows

    def set_index(self, lines: list[bytes], *, count: bool = True) -> None:
        """New index lines, the manifest's index size and checksum (and, when the
        lines parse, its count and bytes) made to agree."""
        data = b"".join(lines)
        self.index = lines
        self.put(ATTACHMENT_INDEX, data)
        self.manifest["attachment_index_sha256"] = hashlib.sha256(data).hexdigest()
        self.manifest["attachment_index_bytes"] = len(data)
        if count:
            self.manifest["attachment_count"] = len(lines)
            try:
                sizes = [json.loads(line)["size_bytes"] for line in lines]
            except (ValueError, KeyError, TypeError):
                return
            if all(type(size) is int for size in sizes):
                self.manifest["attachment_bytes"] = sum(sizes)

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.index]

    def set_entries(self, entries: list[dict[str, Any]]) -> None:
        self.set_index([json.dumps(e).encode() + b"\n" for e in entries])

    def build(self, *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
        members = [
            (n, json.dumps(self.manifest, indent=2).encode() if n == MANIFEST else d)
            for n, d in self.members
        ]
        return build_zip(members, compression=compression)


def build_zip(
    members: list[tuple[str, bytes]], *, compression: int = zipfile.ZIP_DEFLATED
) -> bytes:
    out = io.BytesIO(b"")
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression=compression) as zf:
        warnings.simplefilter("ignore")  # "Duplicate name": that is the point, at times
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.filename = name  # as given: ZipInfo would cut it at a NUL
            info.compress_type = compression
            with zf.open(info, "w", force_zip64=True) as member:
                member.write(data)
    return out.getvalue()


def raw_zip(entries: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip written by hand, for what zipfile will not write: each entry is (name,
    raw member data, method, CRC, declared uncompressed size). No zip64."""
    body = b""
    central = b""
    for name, data, method, crc, size in entries:
        encoded = name.encode()
        offset = len(body)
        header = struct.pack(
            "<4sHHHHHIIIHH",
            b"PK\x03\x04",
            20,
            0,
            method,
            0,
            0x21,
            crc,
            len(data),
            size,
            len(encoded),
            0,
        )
        body += header + encoded + data
        central += (
            struct.pack(
                "<4sHHHHHHIIIHHHHHII",
                b"PK\x01\x02",
                20,
                20,
                0,
                method,
                0,
                0x21,
                crc,
                len(data),
                size,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), len(body), 0
    )
    return body + central + end


def deflate_zeros(mebibytes: int) -> bytes:
    """A raw deflate stream of ``mebibytes`` MiB of zeros, made in no time by repeating
    one fully flushed MiB (about a KiB of output each)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return piece * mebibytes + b"\x03\x00"


MB = 1 << 20


def file_facts(path: Path) -> tuple[int, int] | None:
    """(permission bits, size) of a file, None when there is none."""
    if not path.is_file():
        return None
    info = path.stat()
    return stat.S_IMODE(info.st_mode), info.st_size


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def files_under(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` (relative path -> sha256)."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def assert_same_attachments(source_url: str, source_dir: Path, target_dir: Path) -> int:
    """Every attachment of the source has the same bytes in the target folder, and the
    target folder holds nothing else. Returns how many were checked."""
    with psycopg.connect(source_url) as conn:
        rows = conn.execute("SELECT storage_path, size_bytes, sha256 FROM attachments").fetchall()
    for storage_path, size, sha in rows:
        original = (source_dir / storage_path).read_bytes()
        restored = (target_dir / storage_path).read_bytes()
        assert len(restored) == size
        assert hashlib.sha256(restored).hexdigest() == sha
        assert restored == original, f"attachment {storage_path} differs"
    assert set(files_under(target_dir)) == {str(Path(r[0])) for r in rows}
    return len(rows)


def assert_sequences_continue(url: str) -> None:
    """A row inserted after the restore takes the next id after the restored ones."""
    with psycopg.connect(url) as conn:
        for table, column in SEQUENCES:
            assert table == "page_revisions" and column == "id"
            top, page = conn.execute(
                "SELECT max(id), (SELECT id FROM pages ORDER BY id LIMIT 1) FROM page_revisions"
            ).fetchone() or (None, None)
            assert top is not None and page is not None
            new_id = conn.execute(
                "INSERT INTO page_revisions (page_id, version, actor_id, change_summary, "
                "title, tags) VALUES (%s, 100000, %s, 'after restore', 't', '{}') RETURNING id",
                (page, uuid.UUID(int=0)),
            ).fetchone()
            assert new_id is not None and new_id[0] == top + 1
            conn.rollback()


async def add_attachments(
    engine: AsyncEngine, folder: Path, page_ids: list[uuid.UUID], sizes: list[int]
) -> dict[uuid.UUID, bytes]:
    """Random bytes (a few compressible ones) of the given sizes, spread over pages."""
    created: dict[uuid.UUID, bytes] = {}
    async with engine.begin() as conn:
        for i, size in enumerate(sizes):
            content = os.urandom(size) if i % 5 else (b"hub " * (size // 4 + 1))[:size]
            page = page_ids[(i * 37) % len(page_ids)]
            attachment_id = await create_attachment(conn, folder, page, f"file-{i}.bin", content)
            created[attachment_id] = content
    return created


def temporary_archives(folder: Path) -> dict[str, int]:
    """The backup folder's temporary archives (one an attempt), by name: their sizes."""
    if not folder.exists():
        return {}
    return {p.name: p.stat().st_size for p in folder.glob("*.partial") if p.is_file()}


async def archive_being_written(
    folder: Path, worker: WorkerProcess, beyond: dict[str, int] | None = None
) -> Path:
    """Until an attempt on ``worker`` has written 2 MB of a temporary archive (one not in
    ``beyond``, or grown 2 MB past its size there): that file."""
    beyond = beyond or {}
    # Generous: a worker stopped while it held the job's workflow task keeps the run
    # waiting for the task's timeout before another worker takes the next attempt.
    deadline = time.monotonic() + 180
    while True:
        for name, size in temporary_archives(folder).items():
            if size > 2 * MB and (name not in beyond or size > beyond[name] + 2 * MB):
                return folder / name
        assert worker.alive(), f"{worker.name} exited early:\n{worker.tail()}"
        assert time.monotonic() < deadline, f"no archive grew on {worker.name}:\n{worker.tail()}"
        await asyncio.sleep(0.01)
