"""Writing a backup archive (hubjobs.archive.format) from one database snapshot.

COPY output is read straight from libpq and gathered into blocks; each block is hashed,
compressed and written on a thread of its own (zlib and hashlib let go of the GIL) while
the loop reads the next, at most ``IN_FLIGHT`` waiting, so memory stays flat. Attachment
files are opened below their folder one component at a time, never following a link.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import stat
import tempfile
import uuid
import zipfile
import zlib
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing, suppress
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg
from psycopg import pq

from hubjobs.archive import scope
from hubjobs.archive.format import (
    ATTACHMENT_INDEX,
    FORMAT,
    HUB,
    HUB_TABLES,
    MANIFEST,
    WORKSPACE,
    AttachmentEntry,
    Manifest,
    TableEntry,
    attachment_member,
    storage_path_parts,
    table_member,
)
from hubjobs.errors import HubJobsError

log = logging.getLogger(__name__)

BLOCK = 1 << 20
IN_FLIGHT = 3
ABANDON_SECONDS = 5.0
COMPRESS_LEVEL = 1
# An attachment whose first block deflates to more than this share of its size is
# stored instead (images, archives, anything already compressed).
STORE_ABOVE = 0.97
PROBE = 64 << 10

Progress = Callable[[int, bool, str], Awaitable[None]]
T = TypeVar("T")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class AttachmentUnavailable(HubJobsError):
    """An attachment row whose file cannot be read as it was recorded: missing (or not a
    plain file below the attachments folder), or different in size or checksum."""

    code = "attachment_missing"


async def planned_steps(
    conn: psycopg.AsyncConnection[Any], workspace_id: uuid.UUID | None = None
) -> int:
    """How many steps the archive takes (tables, then attachment files), counted on the
    caller's snapshot; a workspace's archive (``workspace_id``) counts its own."""
    row = await (await conn.execute(scope.count_attachments(workspace_id))).fetchone()
    assert row is not None
    return len(HUB_TABLES) + int(row[0])


async def write_archive(
    conn: psycopg.AsyncConnection[Any],
    attachments_root: Path,
    out: IO[bytes],
    progress: Progress,
    *,
    backup_id: uuid.UUID,
    workspace_id: uuid.UUID | None = None,
    compress_level: int = COMPRESS_LEVEL,
) -> Manifest:
    """Writes the hub's archive (or ``workspace_id``'s alone) to ``out``; returns its
    manifest. ``progress(nbytes, step_done, stage)`` is awaited about once per MiB and may
    take its time: a caller that paces the backup waits there."""
    await _require_snapshot(conn)
    head = await (
        await conn.execute("SELECT (SELECT version_num FROM alembic_version), now()")
    ).fetchone()
    assert head is not None
    schema_version, created_at = head
    sink = _Sink(out, compress_level)
    try:
        tables = [
            await _dump_table(conn, sink, table, workspace_id, progress) for table, _ in HUB_TABLES
        ]
        count, nbytes, index_sha, index_size = await _dump_attachments(
            conn, sink, attachments_root, workspace_id, progress
        )
        manifest = Manifest(
            scope=HUB if workspace_id is None else WORKSPACE,
            workspace_id=workspace_id,
            format=FORMAT,
            backup_id=backup_id,
            created_at=created_at,
            schema_version=schema_version,
            tables=tables,
            attachment_count=count,
            attachment_bytes=nbytes,
            attachment_index_sha256=index_sha,
            attachment_index_bytes=index_size,
        )
        await sink.call(sink.finish, manifest.model_dump_json(indent=2).encode())
    finally:
        await sink.shutdown()
    return manifest


async def _require_snapshot(conn: psycopg.AsyncConnection[Any]) -> None:
    """One snapshot or nothing: a READ COMMITTED transaction would mix moments."""
    row = await (
        await conn.execute(
            "SELECT current_setting('transaction_isolation'), "
            "current_setting('transaction_read_only')"
        )
    ).fetchone()
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS or row != (
        "repeatable read",
        "on",
    ):
        raise ValueError("write_archive needs a REPEATABLE READ, READ ONLY transaction")


async def _dump_table(
    conn: psycopg.AsyncConnection[Any],
    sink: _Sink,
    table: str,
    workspace_id: uuid.UUID | None,
    progress: Progress,
) -> TableEntry:
    columns = [] if workspace_id is None else await _columns(conn, table)
    await sink.call(sink.open_member, table_member(table), True)
    async with aclosing(_copy_out(conn, scope.copy_out(table, workspace_id, columns))) as blocks:
        async for block in blocks:
            await sink.submit(sink.write, block)
            await progress(len(block), False, table)
    sha, size, rows = await sink.call(sink.close_member)
    await progress(0, True, table)
    return TableEntry(name=table, rows=rows, bytes=size, sha256=sha)


async def _columns(conn: psycopg.AsyncConnection[Any], table: str) -> list[str]:
    """The table's columns in their order (COPY's), as the snapshot sees them."""
    cursor = await conn.execute(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (table,),
    )
    return [str(row[0]) for row in await cursor.fetchall()]


async def _copy_out(
    conn: psycopg.AsyncConnection[Any], statement: str
) -> AsyncGenerator[bytes | bytearray, None]:
    """``COPY … TO STDOUT`` in blocks of about BLOCK bytes, read through psycopg's ``pq``
    wrapper: one call per row, where psycopg's own COPY iteration takes a coroutine per
    row. Errors are psycopg's, by SQLSTATE."""
    pgconn = conn.pgconn
    block = bytearray()
    async with conn.lock:
        pgconn.send_query(statement.encode())
        while pgconn.flush():
            await _ready(pgconn.socket, write=True)
        await _expect(pgconn, pq.ExecStatus.COPY_OUT)
        get_copy_data = pgconn.get_copy_data
        try:
            while True:
                size, data = get_copy_data(1)
                if size > BLOCK:
                    # A row bigger than a block (a page of megabytes) goes on in blocks
                    # of its own, never copied whole: what waits for the writer's
                    # thread stays IN_FLIGHT blocks, whatever the rows.
                    if block:
                        yield block
                        block = bytearray()
                    for at in range(0, size, BLOCK):
                        yield bytes(data[at : at + BLOCK])
                elif size > 0:
                    block += data
                    if len(block) >= BLOCK:
                        yield block
                        block = bytearray()
                elif size == 0:  # nothing buffered: wait for the server
                    await _ready(pgconn.socket)
                    pgconn.consume_input()
                else:  # the end of the data
                    break
        except BaseException:
            # Stopped midway (an error, a cancellation, the consumer gone): have the
            # server stop sending, so the connection can roll back (bounded: its owner
            # closes it anyway).
            with suppress(TimeoutError):
                await asyncio.wait_for(_abandon(pgconn), ABANDON_SECONDS)
            raise
        if block:
            yield block
        await _expect(pgconn, pq.ExecStatus.COMMAND_OK)
        await _expect(pgconn, None)


async def _abandon(pgconn: pq.abc.PGconn) -> None:
    try:
        await asyncio.to_thread(pgconn.get_cancel().cancel)
        while (size := pgconn.get_copy_data(1)[0]) >= 0:
            if size == 0:
                await _ready(pgconn.socket)
                pgconn.consume_input()
        while await _result(pgconn) is not None:
            pass
    except (psycopg.Error, OSError, ValueError) as err:  # past saving: its owner closes it
        log.debug("abandoning a COPY: %s", err)


async def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            return pgconn.get_result()
        await _ready(pgconn.socket)


async def _expect(pgconn: pq.abc.PGconn, status: pq.ExecStatus | None) -> None:
    """The next result has this status (None: there is none left); otherwise every
    result left is read, so that the connection is free again, and the first one's
    error raised as psycopg's class for its SQLSTATE."""
    result = await _result(pgconn)
    if (None if result is None else result.status) == status:
        return
    while await _result(pgconn) is not None:
        pass
    if result is None:
        raise psycopg.OperationalError("the server sent no result")
    state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (result.error_message or b"an unexpected result").decode(errors="replace")
    try:
        error = psycopg.errors.lookup(state)
    except KeyError:
        error = psycopg.DatabaseError
    raise error(message.strip())


async def _ready(fd: int, *, write: bool = False) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def _dump_attachments(
    conn: psycopg.AsyncConnection[Any],
    sink: _Sink,
    root: Path,
    workspace_id: uuid.UUID | None,
    progress: Progress,
) -> tuple[int, int, str, int]:
    """Each file into the archive, checked against its row; the index goes last (zip
    takes one member at a time, so it waits in a spooled file)."""
    count = nbytes = 0
    # Opened at the first attachment: a hub without any needs no attachments folder.
    root_fd: int | None = None
    try:
        with tempfile.SpooledTemporaryFile(max_size=BLOCK) as index:
            async with conn.cursor(name="backup_attachments") as cursor:
                await cursor.execute(scope.attachment_rows(workspace_id))
                async for row in cursor:
                    entry = AttachmentEntry(
                        id=row[0], storage_path=row[1], size_bytes=row[2], sha256=row[3]
                    )
                    if root_fd is None:
                        root_fd = _open_root(root, entry)
                    await _dump_file(sink, root_fd, entry, progress)
                    index.write(entry.model_dump_json().encode() + b"\n")
                    count += 1
                    nbytes += entry.size_bytes
            index.seek(0)
            index_sha, index_size = await sink.call(sink.copy_member, index, ATTACHMENT_INDEX)
    finally:
        if root_fd is not None:
            os.close(root_fd)
    return count, nbytes, index_sha, index_size


def _open_root(root: Path, first: AttachmentEntry) -> int:
    """The attachments folder; missing, the first attachment is missing from storage."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise AttachmentUnavailable(f"attachment {first.id} is missing from storage") from None


async def _dump_file(sink: _Sink, root_fd: int, entry: AttachmentEntry, progress: Progress) -> None:
    fd = await sink.call(_open_below, root_fd, entry)
    try:
        done = await sink.call(sink.open_file_member, fd, attachment_member(entry.id))
        while done:
            await progress(done, False, "attachments")
            done = await sink.call(sink.copy_file_block, fd)
        sha, size, _ = await sink.call(sink.close_member)
    finally:
        os.close(fd)
    if size != entry.size_bytes or sha != entry.sha256:
        raise AttachmentUnavailable(
            f"attachment {entry.id} does not match its recorded size and checksum",
            code="attachment_corrupt",
        )
    await progress(0, True, "attachments")


def _open_below(root_fd: int, entry: AttachmentEntry) -> int:
    """The attachment's file, reached from the root without following any link."""
    missing = AttachmentUnavailable(f"attachment {entry.id} is missing from storage")
    try:
        parts = storage_path_parts(entry.storage_path)
    except ValueError:
        raise missing from None
    fds: list[int] = []
    try:
        parent = root_fd
        for part in parts[:-1]:
            parent = os.open(part, _DIR_FLAGS, dir_fd=parent)
            fds.append(parent)
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            raise missing from None
        raise
    finally:
        for opened in fds:
            os.close(opened)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise missing
    return fd


class _Sink:
    """The zip file and everything CPU-bound about it, on one thread, calls in order:
    ``submit`` returns at once while fewer than IN_FLIGHT wait; ``call`` waits for its
    result (and so for all before it)."""

    def __init__(self, out: IO[bytes], level: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive-writer")
        self._pending: deque[asyncio.Future[Any]] = deque()
        self._level = level
        self.zf = zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=level)
        self._member: IO[bytes] | None = None
        self._digest = hashlib.sha256()
        self._size = 0
        self._rows = 0

    # --- on the event loop -----------------------------------------------------------

    async def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = asyncio.get_running_loop()
        self._pending.append(loop.run_in_executor(self._executor, fn, *args))
        while len(self._pending) > IN_FLIGHT:
            await self._pending.popleft()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        while self._pending:
            await self._pending.popleft()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    async def shutdown(self) -> None:
        """Waits for the thread to stop touching the file, whatever happened: calls not
        yet started are dropped, the running one ends (a block's work at most), and an
        unfinished zip is closed so that nothing writes to the file later on."""
        for pending in self._pending:
            if not pending.done():
                pending.cancel()
            elif not pending.cancelled():
                pending.exception()  # seen: the first failure was raised already
        self._pending.clear()
        self._executor.submit(self._abandon)
        self._executor.shutdown(wait=False)
        stopped = asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        try:
            await asyncio.shield(stopped)
        except asyncio.CancelledError:
            await asyncio.shield(stopped)
            raise

    # --- on the thread ---------------------------------------------------------------

    def open_member(self, name: str, deflate: bool) -> None:
        self.zf.compression = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
        self._member = self.zf.open(name, "w", force_zip64=True)
        self._digest, self._size, self._rows = hashlib.sha256(), 0, 0

    def write(self, data: bytes | bytearray) -> None:
        assert self._member is not None
        self._member.write(data)
        self._digest.update(data)
        self._size += len(data)
        self._rows += data.count(b"\n")

    def close_member(self) -> tuple[str, int, int]:
        assert self._member is not None
        self._member.close()
        self._member = None
        return self._digest.hexdigest(), self._size, self._rows

    def open_file_member(self, fd: int, name: str) -> int:
        first = os.read(fd, BLOCK)
        probe = first[:PROBE]
        deflate = len(probe) < 4096 or len(zlib.compress(probe, 1)) <= STORE_ABOVE * len(probe)
        self.open_member(name, deflate)
        if first:
            self.write(first)
        return len(first)

    def copy_file_block(self, fd: int) -> int:
        data = os.read(fd, BLOCK)
        if data:
            self.write(data)
        return len(data)

    def copy_member(self, source: IO[bytes], name: str) -> tuple[str, int]:
        self.open_member(name, True)
        while data := source.read(BLOCK):
            self.write(data)
        sha, size, _ = self.close_member()
        return sha, size

    def finish(self, manifest: bytes) -> None:
        self.zf.compression = zipfile.ZIP_DEFLATED
        self.zf.writestr(MANIFEST, manifest)
        self.zf.close()

    def _abandon(self) -> None:
        """After a failure the archive is garbage (the caller removes the file); close
        what is open so that no later garbage collection writes to the file."""
        for close in (self._member.close if self._member else None, self.zf.close):
            if close is not None:
                try:
                    close()
                except Exception:  # the file may be full or closed: nothing left to save
                    pass
        self._member = None
