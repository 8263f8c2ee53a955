"""The page-export work: each file streamed in chunks from the snapshot into a temporary
file, fsynced, renamed, then its items recorded: a crash before the record rewrites the
same file. Memory stays flat whatever the pages."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from collections.abc import Awaitable
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity

from activities.attempt import KindActivities
from activities.context import WorkContext
from activities.endings import Done, Paused, Stopped, WorkEnd
from activities.storage import storage_refusal
from hubjobs.db.deadline import current as current_deadline
from hubjobs.kinds.page_export import (
    PAGE_EXPORT,
    ExportCursor,
    ExportOutput,
    PageExportPayload,
    export_folder,
    file_name,
    file_of,
    files_of,
    ordinals_of,
)
from hubjobs.readmodel import items as job_items
from hubjobs.readmodel.items import ItemOutcome, Recorded
from hubjobs.readmodel.status import ItemState
from hubjobs.temporal.messages import WorkRequest, WorkResult

log = logging.getLogger(__name__)
T = TypeVar("T")
# What an attempt holds of a file's lines at a time (a few a fetch).
CHUNK_BYTES = 256 * 1024


class PageExportActivities(KindActivities[PageExportPayload]):
    kind = PAGE_EXPORT

    @activity.defn
    async def export_pages(self, request: WorkRequest) -> WorkResult:
        """One attempt: writes files until none is left (the job succeeds), a
        cancellation request is seen, or the time slice is over."""
        return await self.attempt(request, self.work)

    async def work(self, ctx: WorkContext[PageExportPayload]) -> WorkEnd:
        folder = export_folder(ctx.settings, ctx.job.id)
        mkdir = partial(folder.mkdir, mode=0o700, parents=True, exist_ok=True)
        await _on_disk(folder, asyncio.to_thread(mkdir))
        per_file = ctx.payload.pages_per_file
        written = ExportCursor.model_validate(ctx.cursor or {}).files
        # The next file's search starts after what this attempt recorded.
        recorded_upto = 0
        while True:
            number = await ctx.db(
                partial(self._next_file, ctx=ctx, per_file=per_file, after=recorded_upto)
            )
            if number is None:
                await asyncio.to_thread(_sweep_partials, folder)
                return Done(self._output(ctx))
            write = partial(self._write, ctx=ctx, folder=folder, number=number, per_file=per_file)
            await _on_disk(folder, ctx.db(write, transaction=True))
            recorded = await ctx.db(
                partial(self._record, ctx=ctx, number=number, per_file=per_file)
            )
            written = max(written, number)
            recorded_upto = ordinals_of(number, per_file, ctx.job.total).stop - 1
            ctx.counters = recorded.counters
            ctx.beat(
                cursor=ExportCursor(files=written).model_dump(), progress=ctx.counters.processed
            )
            if recorded.cancel_requested:
                return Stopped()  # the kind's discard hook removes the files
            if ctx.time_to_pause():
                return Paused()

    @staticmethod
    async def _next_file(
        conn: AsyncConnection, *, ctx: WorkContext[PageExportPayload], per_file: int, after: int
    ) -> int | None:
        """The number of the first file that still has pending items after ``after``."""
        first = await job_items.first_pending_ordinal(conn, ctx.job.id, after=after)
        return None if first is None else file_of(first, per_file)

    @staticmethod
    async def _write(
        conn: AsyncConnection,
        *,
        ctx: WorkContext[PageExportPayload],
        folder: Path,
        number: int,
        per_file: int,
    ) -> None:
        """File ``number`` whole (again whole after an outage), bounded by how long its
        stream may stall, not by one unit's deadline."""
        ordinals = ordinals_of(number, per_file, ctx.job.total)
        bound = current_deadline()
        lines = job_items.item_detail_lines(
            conn, ctx.job.id, ordinals.start, ordinals.stop - 1, chunk_bytes=CHUNK_BYTES
        )
        with WholeFile(folder, file_name(number)) as out:
            async with aclosing(lines) as chunks:
                async for chunk in chunks:
                    await asyncio.to_thread(out.write, chunk)
                    if bound is not None:
                        bound.extend(ctx.settings.db_batch_timeout_seconds)
                    ctx.beat()
            await asyncio.to_thread(out.commit)

    @staticmethod
    async def _record(
        conn: AsyncConnection, *, ctx: WorkContext[PageExportPayload], number: int, per_file: int
    ) -> Recorded:
        return await job_items.record_outcomes(
            conn,
            ctx.job.id,
            [
                ItemOutcome(o, ItemState.succeeded)
                for o in ordinals_of(number, per_file, ctx.job.total)
            ],
            clear_detail=True,
        )

    @staticmethod
    def _output(ctx: WorkContext[PageExportPayload]) -> dict[str, Any]:
        return ExportOutput(
            # When the pages were frozen (a job snapshotted at its start: its creation).
            transaction_time=ctx.job.snapshot_at or ctx.job.created_at,
            workspace_id=ctx.job.workspace_id,
            job_id=ctx.job.id,
            files=files_of(ctx.job.total, ctx.payload.pages_per_file),
        ).model_dump(mode="json")


async def _on_disk(folder: Path, step: Awaitable[T]) -> T:
    """A full or unwritable file system removes the export's files and refuses the job."""
    try:
        return await step
    except OSError as err:
        refusal = storage_refusal(err)
        if refusal is None:
            raise
        log.warning("export files cannot be written (%s): all removed", refusal.code)
        await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
        raise refusal from None


def _sweep_partials(folder: Path) -> None:
    """Once every file is written: what killed attempts left aside goes."""
    for leftover in folder.glob(".*.partial"):
        leftover.unlink(missing_ok=True)


class WholeFile:
    """A file whole or not at all. Aside under a name of its own: an attempt presumed dead
    must not take or remove its successor's."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.final = folder / name
        self.partial = folder / f".{name}.{secrets.token_hex(6)}.partial"
        fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self.out = os.fdopen(fd, "wb")

    def __enter__(self) -> WholeFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.out.closed:
            self.out.close()
            self.partial.unlink(missing_ok=True)

    def write(self, chunk: bytes) -> None:
        self.out.write(chunk)

    def commit(self) -> None:
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        try:
            os.replace(self.partial, self.final)
        except FileNotFoundError:
            if not self.final.exists():
                raise
            return  # swept by the attempt that finished the export: the file is whole
        directory = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
