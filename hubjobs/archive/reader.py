"""Reading a backup archive: every structure checked before use, every read bounded.

``open_archive`` checks the zip's directory, the manifest, the attachment index and every
storage path without expanding the data; a member's stream never reads past its declared
size and verifies size and sha256 at its end. Every refusal is an ``ArchiveError`` with
one of ARCHIVE_ERROR_CODES (docs/guides/backup.md says when).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import struct
import zipfile
import zlib
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from isal import isal_zlib
from pydantic import ValidationError

from hubjobs.archive.format import (
    ATTACHMENT_INDEX,
    FORMAT,
    FORMAT_1,
    HUB,
    HUB_TABLES,
    INDEX_LINE_MAX_BYTES,
    MANIFEST,
    MANIFEST_MAX_BYTES,
    READABLE_FORMATS,
    AttachmentEntry,
    Manifest,
    TableEntry,
    attachment_member,
    storage_path_parts,
    table_member,
)
from hubjobs.errors import InvalidInput

log = logging.getLogger(__name__)

BLOCK = 1 << 20
_INPUT_BLOCK = 1 << 20
# A zip local file header: signature, method, name and extra field lengths (the rest,
# version, flags, time, CRC and sizes, is the central directory's to say).
_LOCAL_HEADER = struct.Struct("<4s2x2xH4x4x4x4xHH")
DEFAULT_RATIO = 100
DEFAULT_MIN_LIMIT = 1 << 30

# What a damaged deflate stream raises (isal's stub calls its error an instance).
_INFLATE_ERRORS = (zlib.error, cast("type[Exception]", isal_zlib.error))

ARCHIVE_ERROR_CODES = (
    "archive_unreadable",
    "archive_corrupt",
    "archive_too_large",
    "archive_path_invalid",
    "schema_unsupported",
)


class ArchiveError(InvalidInput):
    """An archive refused; ``code`` is one of ARCHIVE_ERROR_CODES."""

    code = "archive_corrupt"


def _unreadable(message: str) -> ArchiveError:
    return ArchiveError(message, code="archive_unreadable")


def _corrupt(message: str) -> ArchiveError:
    return ArchiveError(message, code="archive_corrupt")


@dataclass(frozen=True, slots=True)
class Attachment:
    """One attachment of the index, checked: its storage path split into components."""

    id: str
    storage_path: str
    parts: tuple[str, ...]
    size: int
    sha256: str

    @property
    def member(self) -> str:
        return attachment_member(self.id)


def default_limit(archive_size: int) -> int:
    return max(DEFAULT_MIN_LIMIT, DEFAULT_RATIO * archive_size)


def open_archive(
    path: Path,
    *,
    max_bytes: int | None = None,
    known_schema_versions: Collection[str] | None = None,
) -> Archive:
    """Opens and checks ``path`` (see the module's docstring); raises ArchiveError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        log.info("archive %s: %s", path, err)
        raise _unreadable(f"{path} is not a readable backup archive") from None
    file = os.fdopen(fd, "rb")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _unreadable(f"{path} is not a readable backup archive (not a file)")
        limit = max_bytes if max_bytes is not None else default_limit(info.st_size)
        return Archive(path, file, limit, known_schema_versions)
    except BaseException:
        file.close()
        raise


class Archive:
    def __init__(
        self,
        path: Path,
        file: IO[bytes],
        limit: int,
        known_schema_versions: Collection[str] | None,
    ) -> None:
        self.path = path
        self.limit = limit
        self._file = file
        self._members = MemberReader(path, file)
        try:
            # zipfile parses the directory; members are read by MemberReader (with
            # pread: one member from each thread at once, no shared position).
            self._zf = zipfile.ZipFile(file)
        except OSError as err:
            log.info("archive %s: %s", path, err)
            raise _unreadable(f"{path} could not be read") from None
        except Exception as err:  # anything the zip parser says about a bad file
            log.info("archive %s is not a zip: %r", path, err)
            raise _unreadable(f"{path} is not a readable backup archive") from None
        infos = self._zf.infolist()
        # zipfile cuts a name at a NUL ("tables/pages.copy\x00.txt" reads as the table):
        # a name that is not what the archive says it is is damage, not that member.
        if any(i.filename != i.orig_filename for i in infos):
            raise _corrupt("the archive holds a member name with a NUL character")
        names = Counter(i.filename for i in infos)
        twice = sorted(name for name, n in names.items() if n > 1)
        if twice:
            raise _corrupt(f"the archive holds {twice[0]!r} more than once")
        self._infos = {i.filename: i for i in infos}
        self.expanded_bytes = sum(i.file_size for i in infos)
        if self.expanded_bytes > limit:
            raise ArchiveError(
                f"the archive would expand to {self.expanded_bytes} bytes, more than the "
                f"limit of {limit} (HUBJOBS_RESTORE_MAX_BYTES)",
                code="archive_too_large",
            )
        self.manifest = self._read_manifest(known_schema_versions)
        self.tables = self._check_tables()
        self.attachments = self._read_index()
        self._check_members()

    # --- the checks -----------------------------------------------------------------

    def _read_manifest(self, known_schema_versions: Collection[str] | None) -> Manifest:
        info = self._infos.get(MANIFEST)
        if info is None or info.file_size > MANIFEST_MAX_BYTES:
            raise _unreadable("the archive has no readable manifest")
        try:
            data = b"".join(self._members.read(info, info.file_size, crc=True))
            manifest = Manifest.model_validate_json(data)
        except (ArchiveError, ValidationError) as err:
            log.info("archive %s: manifest: %s", self.path, err)
            raise _unreadable("the archive has no readable manifest") from None
        if manifest.format not in READABLE_FORMATS:
            raise ArchiveError(
                f"archive format {manifest.format!r} is not one this version reads",
                code="schema_unsupported",
            )
        if known_schema_versions is not None and (
            manifest.schema_version not in known_schema_versions
        ):
            raise ArchiveError(
                f"the archive's schema version {manifest.schema_version!r} is unknown to "
                "this version",
                code="schema_unsupported",
            )
        if manifest.format != FORMAT_1 and manifest.attachment_index_bytes is None:
            raise _corrupt("the manifest does not give the attachment index's size")
        if manifest.format != FORMAT and manifest.scope != HUB:
            raise _corrupt(f"a {manifest.format} archive holds a whole hub")
        return manifest

    def _check_tables(self) -> dict[str, TableEntry]:
        tables = {entry.name: entry for entry in self.manifest.tables}
        if len(tables) != len(self.manifest.tables) or set(tables) != {
            table for table, _ in HUB_TABLES
        }:
            raise _corrupt("the manifest does not list every hub table exactly once")
        return tables

    def _read_index(self) -> list[Attachment]:
        manifest = self.manifest
        info = self._infos.get(ATTACHMENT_INDEX)
        if info is None:
            raise _corrupt(f"the archive lacks {ATTACHMENT_INDEX}")
        if manifest.attachment_index_bytes is not None:
            bound = manifest.attachment_index_bytes
            if info.file_size != bound:
                raise _corrupt(f"{ATTACHMENT_INDEX} is not the size the manifest gives")
        else:  # format 1: bounded by its line count
            bound = manifest.attachment_count * INDEX_LINE_MAX_BYTES
            if info.file_size > bound:
                raise _corrupt(f"{ATTACHMENT_INDEX} is larger than its entries can be")
        entries: list[AttachmentEntry] = []
        rest = b""
        sha = manifest.attachment_index_sha256
        for block in self._verified(info, info.file_size, sha):
            lines = (rest + block).split(b"\n")
            rest = lines.pop()
            if max([len(rest), *map(len, lines)]) > INDEX_LINE_MAX_BYTES:
                raise _corrupt(f"{ATTACHMENT_INDEX} has a line too long")
            entries.extend(self._entry(line, len(entries) + i) for i, line in enumerate(lines))
            if len(entries) > manifest.attachment_count:
                raise _corrupt(f"{ATTACHMENT_INDEX} has more entries than the manifest says")
        if rest:
            raise _corrupt(f"{ATTACHMENT_INDEX} does not end with a whole line")
        if len(entries) != manifest.attachment_count:
            raise _corrupt(f"{ATTACHMENT_INDEX} has fewer entries than the manifest says")
        if sum(e.size_bytes for e in entries) != manifest.attachment_bytes:
            raise _corrupt(f"{ATTACHMENT_INDEX} does not add up to the manifest's bytes")
        if len({e.id for e in entries}) != len(entries):
            raise _corrupt(f"{ATTACHMENT_INDEX} names an attachment twice")
        return _checked_paths(entries)

    def _entry(self, line: bytes, number: int) -> AttachmentEntry:
        try:
            return AttachmentEntry.model_validate_json(line)
        except ValidationError:
            raise _corrupt(f"line {number + 1} of {ATTACHMENT_INDEX} is malformed") from None

    def _check_members(self) -> None:
        expected = {MANIFEST: -1, ATTACHMENT_INDEX: -1}
        expected |= {table_member(t.name): t.bytes for t in self.tables.values()}
        for attachment in self.attachments:
            if attachment.member in expected:
                raise _corrupt(f"attachment {attachment.id} is in the index twice")
            expected[attachment.member] = attachment.size
        missing = sorted(set(expected) - set(self._infos))
        if missing:
            raise _corrupt(f"the archive lacks {missing[0]}")
        extra = sorted(set(self._infos) - set(expected))
        if extra:
            raise _corrupt(f"the archive holds {extra[0]!r}, which no backup writes")
        for name, size in expected.items():
            info = self._infos[name]
            if info.flag_bits & 0x1 or info.compress_type not in (
                zipfile.ZIP_STORED,
                zipfile.ZIP_DEFLATED,
            ):
                raise _corrupt(f"{name} is encrypted or compressed in a way no backup writes")
            if size >= 0 and info.file_size != size:
                raise _corrupt(f"{name} is not the size the manifest gives")

    # --- reading ------------------------------------------------------------------------

    def table_blocks(self, table: str) -> Iterator[bytes]:
        """The table's COPY text, block by block; raises ArchiveError at the end (or as
        soon as it reads past its size) unless size and checksum match."""
        entry = self.tables[table]
        info = self._infos[table_member(table)]
        return self._verified(info, entry.bytes, entry.sha256)

    def attachment_blocks(self, attachment: Attachment) -> Iterator[bytes]:
        info = self._infos[attachment.member]
        return self._verified(info, attachment.size, attachment.sha256)

    def _verified(self, info: zipfile.ZipInfo, size: int, sha256: str) -> Iterator[bytes]:
        digest, seen = hashlib.sha256(), 0
        for data in self._members.read(info, size):
            digest.update(data)
            seen += len(data)
            yield data
        if seen != size or digest.hexdigest() != sha256:
            raise _corrupt(f"{info.filename} does not match its size or checksum")

    def close(self) -> None:
        self._zf.close()
        self._file.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemberReader:
    """Reads members of a zip file by its directory's entries, on its own: see read."""

    def __init__(self, path: Path, file: IO[bytes]) -> None:
        self.path = path
        self._file = file
        self._size = os.fstat(file.fileno()).st_size

    def read(self, info: zipfile.ZipInfo, size: int, *, crc: bool = False) -> Iterator[bytes]:
        """A member's bytes, never more than ``size``, by pread (one member per thread at
        once) and ISA-L's inflate (a restore spends much of its CPU there); any damage is
        archive_corrupt. CRC-32 only when asked: the manifest has no sha256 of its own."""
        try:
            yield from self._inflate(info, size, crc)
        except ArchiveError:
            raise
        except OSError as err:
            log.info("archive %s: reading %s: %s", self.path, info.filename, err)
            raise _unreadable(f"{self.path} could not be read") from None
        except _INFLATE_ERRORS as err:
            log.info("archive %s: %s is damaged: %r", self.path, info.filename, err)
            raise _corrupt(f"the archive is corrupted ({info.filename})") from None

    def _inflate(self, info: zipfile.ZipInfo, size: int, check_crc: bool) -> Iterator[bytes]:
        """The member's bytes, never past ``size`` (what the manifest or the index
        declared), its CRC checked when asked."""
        damaged = _corrupt(f"the archive is corrupted ({info.filename})")
        at, left, method = self._data_span(info, damaged)
        inflater = isal_zlib.decompressobj(-15) if method == zipfile.ZIP_DEFLATED else None
        crc, produced = 0, 0
        for data in self._decoded(at, left, inflater, size, damaged):
            produced += len(data)
            if produced > size:
                raise _corrupt(f"{info.filename} is larger than declared")
            if check_crc:
                crc = zlib.crc32(data, crc)
            if data:
                yield data
        if produced != size or (inflater is not None and not inflater.eof):
            raise damaged
        if check_crc and crc != info.CRC:
            raise damaged

    def _data_span(self, info: zipfile.ZipInfo, damaged: ArchiveError) -> tuple[int, int, int]:
        """Where the member's data starts, how long it is and its method, from its local
        header, which must agree with the central directory."""
        fd = self._file.fileno()
        if not 0 <= info.header_offset <= self._size - _LOCAL_HEADER.size:
            raise damaged
        header = os.pread(fd, _LOCAL_HEADER.size, info.header_offset)
        if len(header) != _LOCAL_HEADER.size:
            raise damaged
        signature, method, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        name = os.pread(fd, name_length, info.header_offset + _LOCAL_HEADER.size)
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        if (
            signature != b"PK\x03\x04"
            or method != info.compress_type
            or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
            or name.decode(encoding, "replace") != info.orig_filename
        ):
            raise damaged
        at = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        if at + info.compress_size > self._size:
            raise damaged  # the data would run past the end of the file
        return at, info.compress_size, method

    def _decoded(
        self,
        at: int,
        left: int,
        inflater: Any,
        size: int,
        damaged: ArchiveError,
    ) -> Iterator[bytes]:
        """The data from ``at`` on (``left`` bytes of it), inflated when ``inflater``,
        never asking zlib for more than ``size`` and one byte (to see a lie)."""
        fd = self._file.fileno()
        pending, produced = b"", 0
        while True:
            if not pending and left > 0:
                pending = os.pread(fd, min(_INPUT_BLOCK, left), at)
                if not pending:
                    raise damaged
                at += len(pending)
                left -= len(pending)
            if inflater is None:
                if not pending:
                    return
                data, pending = pending, b""
            else:
                # With the input all read, zlib may still hold output: asked again, it
                # gives it.
                data = inflater.decompress(pending, min(BLOCK, size - produced + 1))
                pending = inflater.unconsumed_tail
                if not data and not pending and left <= 0 and not inflater.eof:
                    raise damaged  # the stream stops before its end
            produced += len(data)
            yield data
            if inflater is not None and inflater.eof:
                if pending or inflater.unused_data or left > 0:
                    raise damaged  # something after the end of the stream
                return


def _checked_paths(entries: list[AttachmentEntry]) -> list[Attachment]:
    """Every storage path in normal form, none twice, none a folder of another."""
    attachments: list[Attachment] = []
    paths: set[str] = set()
    folders: set[str] = set()
    for entry in entries:
        try:
            parts = storage_path_parts(entry.storage_path)
        except ValueError as why:
            raise ArchiveError(
                f"attachment {entry.id} has a storage path that is {why}",
                code="archive_path_invalid",
            ) from None
        if entry.storage_path in paths:
            raise ArchiveError(
                f"attachment {entry.id} has a storage path that another one has",
                code="archive_path_invalid",
            )
        paths.add(entry.storage_path)
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        attachments.append(
            Attachment(
                id=str(entry.id),
                storage_path=entry.storage_path,
                parts=parts,
                size=entry.size_bytes,
                sha256=entry.sha256,
            )
        )
    nested = sorted(paths & folders)
    if nested:
        raise ArchiveError(
            f"the storage path {nested[0]!r} is a folder of another attachment's",
            code="archive_path_invalid",
        )
    return attachments
