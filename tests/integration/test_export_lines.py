"""An export's lines come from the database in chunks (hubjobs.job_rows.store
``item_detail_lines``, issue 30: a worker never holds a whole page): the bytes are
those the export wrote before, one ``json.dumps(detail, ensure_ascii=False)`` line a
page, for text that JSON escapes (quotes, backslashes, control characters), text it
does not (every script, emoji sequences, U+2028, U+FEFF, DEL) and a page many chunks
long, whatever the chunk size, a chunk cutting through a character's bytes
included."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs import job_rows
from hubjobs.kinds.page_export import PAGE_EXPORT
from hubjobs.readmodel import items as job_items
from tests.support.servers import seed

TEXTS = [
    '"quoted", \\backslashed\\, /slashed/ and {braces}: [1, 2]',
    "controls \x01\x02\x07\x1b\x1f tab\t newline\n return\r backspace\b feed\f",
    "é ß 日本語 العربية 🇫🇷 👩‍👩‍👧 \u2028 \u2029 \ufeff \u007f \u00ad",
    "",
    # Many chunks, with characters of one to four bytes across every boundary.
    ("aé日🙂" * 30_000),
]


async def export_job(engine: AsyncEngine) -> tuple[uuid.UUID, int]:
    """An export of a workspace whose pages hold TEXTS, snapshotted (no workflow)."""
    course = await seed(engine, len(TEXTS))
    async with engine.begin() as conn:
        for page_id, body in zip(course.page_ids, TEXTS, strict=True):
            await conn.execute(
                text("UPDATE pages SET markdown = :body, title = :title WHERE id = :id"),
                {"body": body, "title": body[:50] or "untitled", "id": page_id},
            )
        created = await job_rows.admit(
            conn,
            job_rows.JobRow(
                kind=PAGE_EXPORT.name,
                job_id=uuid.uuid4(),
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="lines",
                payload={"root_page_id": str(course.root_page_id)},
            ),
        )
        assert await job_rows.take_snapshot(conn, created.job)
    return created.job.id, len(TEXTS)


async def details_of(engine: AsyncEngine, job_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT detail FROM job_items WHERE job_id = :job ORDER BY ordinal"),
            {"job": job_id},
        )
        return [row.detail for row in rows]


@pytest.mark.parametrize("chunk_bytes", [7, 4096, 256 * 1024])
async def test_the_streamed_lines_are_the_bytes_json_dumps_wrote(
    engine: AsyncEngine, chunk_bytes: int
) -> None:
    job_id, total = await export_job(engine)
    details = await details_of(engine, job_id)
    expected = b"".join(json.dumps(d, ensure_ascii=False).encode() + b"\n" for d in details)
    chunks: list[bytes] = []
    async with engine.begin() as conn:
        async for chunk in job_items.item_detail_lines(
            conn, job_id, 1, total, chunk_bytes=chunk_bytes
        ):
            assert 0 < len(chunk) <= chunk_bytes
            chunks.append(chunk)
    streamed = b"".join(chunks)
    assert streamed == expected
    lines = streamed.decode().split("\n")
    assert lines[-1] == "" and [json.loads(line) for line in lines[:-1]] == details
    assert {d["markdown"] for d in details} == set(TEXTS)
