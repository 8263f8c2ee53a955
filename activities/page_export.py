"""The page-export work: writes a job's export file by file from its snapshot (see
hubjobs.kinds.page_export). Each file: its items read (their frozen pages), written
under a temporary name, fsynced, renamed, and then its items recorded in one statement.
A crash before the record leaves the items pending and the next attempt writes the same
file again from the same snapshot; after it, the file is complete and counted. A
cancellation removes every file of the job."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity

from activities.base import Done, KindActivities, Paused, Stopped, WorkContext, WorkEnd
from activities.storage import storage_refusal
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
from hubjobs.readmodel import store
from hubjobs.readmodel.status import ItemState
from hubjobs.readmodel.store import ItemOutcome, Recorded
from hubjobs.temporal.messages import WorkRequest, WorkResult

log = logging.getLogger(__name__)


class PageExportActivities(KindActivities[PageExportPayload]):
    kind = PAGE_EXPORT

    @activity.defn
    async def export_pages(self, request: WorkRequest) -> WorkResult:
        """One attempt: writes files until none is left (the job succeeds), a
        cancellation request is seen, or the time slice is over."""
        return await self.attempt(request, self.work)

    async def work(self, ctx: WorkContext[PageExportPayload]) -> WorkEnd:
        folder = export_folder(ctx.settings, ctx.job.id)
        await _on_disk(folder, partial(folder.mkdir, mode=0o700, parents=True, exist_ok=True))
        per_file = ctx.payload.pages_per_file
        written = ExportCursor.model_validate(ctx.cursor or {}).files
        while True:
            number = await ctx.db(partial(self._next_file, ctx=ctx, per_file=per_file))
            if number is None:
                return Done(self._output(ctx))
            lines = await ctx.db(partial(self._lines, ctx=ctx, number=number, per_file=per_file))
            await _on_disk(folder, partial(_write_file, folder, file_name(number), lines))
            recorded = await ctx.db(
                partial(self._record, ctx=ctx, number=number, per_file=per_file)
            )
            written = max(written, number)
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
        conn: AsyncConnection, *, ctx: WorkContext[PageExportPayload], per_file: int
    ) -> int | None:
        """The number of the first file that still has pending items."""
        first = await store.first_pending_ordinal(conn, ctx.job.id)
        return None if first is None else file_of(first, per_file)

    @staticmethod
    async def _lines(
        conn: AsyncConnection, *, ctx: WorkContext[PageExportPayload], number: int, per_file: int
    ) -> list[bytes]:
        ordinals = ordinals_of(number, per_file, ctx.job.total)
        details = await store.item_details(conn, ctx.job.id, ordinals.start, ordinals.stop - 1)
        return [json.dumps(detail, ensure_ascii=False).encode() + b"\n" for detail in details]

    @staticmethod
    async def _record(
        conn: AsyncConnection, *, ctx: WorkContext[PageExportPayload], number: int, per_file: int
    ) -> Recorded:
        return await store.record_outcomes(
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
            # When the pages were frozen: the first attempt's snapshot (a job snapshotted
            # at its start, before 0006, has its creation time there).
            transaction_time=ctx.job.snapshot_at or ctx.job.created_at,
            workspace_id=ctx.job.workspace_id,
            job_id=ctx.job.id,
            files=files_of(ctx.job.total, ctx.payload.pages_per_file),
        ).model_dump(mode="json")


async def _on_disk(folder: Path, step: partial[None]) -> None:
    """A step that writes the export's files, on a thread; a full or unwritable file
    system removes every file of the export at once and refuses the job."""
    try:
        await asyncio.to_thread(step)
    except OSError as err:
        refusal = storage_refusal(err)
        if refusal is None:
            raise
        log.warning("export files cannot be written (%s): all removed", refusal.code)
        await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
        raise refusal from None


def _write_file(folder: Path, name: str, lines: list[bytes]) -> None:
    """The file whole or not at all: written aside, fsynced, renamed, folder fsynced; a
    write that fails leaves no partial file."""
    final = folder / name
    partial_path = folder / f".{name}.partial"
    fd = os.open(partial_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        partial_path.unlink(missing_ok=True)
        raise
    os.replace(partial_path, final)
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
