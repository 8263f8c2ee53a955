"""A job's items (keyset-paged) and a finished job's files (an export's, streamed)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from hubjobs.errors import JobNotFound
from hubjobs.kinds import REGISTRY
from hubjobs.readmodel.status import ItemState
from hubjobs.readmodel.views import ItemPage
from starter.api.auth import Jobs
from starter.api.errors import ERRORS
from starter.api.resources import WORKSPACE_ROUTES
from starter.client import MAX_ITEMS_PAGE, MAX_ORDINAL

FILE_CHUNK_BYTES = 256 * 1024
router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["items and files"], responses=ERRORS)


@router.get(
    "/jobs/{job_id}/items",
    response_model=ItemPage,
    summary="The job's items in order (each page's id, title, state, code and "
    "message), keyset-paged: pass `next` as `after` for the following page",
)
async def job_items(
    jobs: Jobs,
    job_id: uuid.UUID,
    state: Annotated[ItemState | None, Query(description="Only items in this state")] = None,
    after: Annotated[
        int,
        Query(ge=0, le=MAX_ORDINAL, description="The ordinal to start after (a `next`)"),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_ITEMS_PAGE)] = 100,
) -> ItemPage:
    return await jobs.items(job_id, state=state, after=after, limit=limit)


@router.get(
    "/jobs/{job_id}/files/{name}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A file a finished job's result lists (an export's: one page a "
            "line), streamed",
            "content": {
                kind.file_content_type: {"schema": {"type": "string"}}
                for kind in REGISTRY
                if kind.file_of is not None
            },
        },
    },
    summary="Download a file a job's result lists (an export's manifest)",
)
async def job_file(
    jobs: Jobs,
    job_id: uuid.UUID,
    name: Annotated[str, Path(description="A file name from the manifest's output")],
) -> StreamingResponse:
    found = await jobs.job_file(job_id, name)
    return await stream_file(found.path, name, found.media_type)


async def stream_file(path: FilePath, name: str, media_type: str) -> StreamingResponse:
    """The file, streamed a chunk at a time. Opened before the answer starts: removed
    after that (its job expired), it is still read whole; removed before, it is gone
    (404, as a job that is)."""
    try:
        handle = await asyncio.to_thread(path.open, "rb")
    except FileNotFoundError:
        raise JobNotFound("no such file of a job in this workspace") from None
    size = os.fstat(handle.fileno()).st_size

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(handle.read, FILE_CHUNK_BYTES):
                yield chunk
        finally:
            handle.close()

    return StreamingResponse(
        chunks(),
        media_type=media_type,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{name}"',
        },
    )
