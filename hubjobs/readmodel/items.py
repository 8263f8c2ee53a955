"""The statements of ``job_items``. An item is recorded only while pending, with the
job's counters moved by exactly those in the same statement, so an attempt presumed
dead that records it again changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.db import direct
from hubjobs.db.arrays import int_array
from hubjobs.db.direct import Statement
from hubjobs.readmodel.changes import notify_column
from hubjobs.readmodel.status import ItemState
from hubjobs.readmodel.views import Counters, ItemView

NOTIFY_J = notify_column("j.id")
# A kind's own statements read a job's items through the database's named functions
# (migration 0009): job_pending_items(job, after, up_to, at_most), job_failed_items(job).


@dataclass(frozen=True)
class ItemSnapshot:
    """A kind's snapshot as one named statement: its SELECT yields ``ordinal, ref, label,
    done_at_snapshot, detail`` for each item."""

    name: str
    statement: Statement


def item_snapshot(name: str, select: str) -> ItemSnapshot:
    return ItemSnapshot(
        name,
        Statement.of(
            "WITH inserted AS (INSERT INTO job_items "
            "(job_id, ordinal, ref, label, done_at_snapshot, detail) "
            f"SELECT CAST(:job_id AS uuid), s.* FROM ({select}) AS s RETURNING 1) "
            "SELECT count(*) FROM inserted"
        ),
    )


async def insert_items(
    conn: AsyncConnection, job_id: uuid.UUID, snapshot: ItemSnapshot, params: dict[str, Any]
) -> int:
    """A job's snapshot: one statement, whatever the size, run under the snapshot lock
    and its planner settings (``lock_snapshot``)."""
    (count,), *_ = (await direct.rows(conn, snapshot.statement, {**params, "job_id": job_id}))[0]
    return int(count)


LIST_ITEMS = (
    "SELECT ordinal, ref, label, state, error_code, error_message, processed_at "
    "FROM job_items WHERE job_id = :job AND ordinal > :after "
    "AND (CAST(:state AS text) IS NULL OR state = :state) "
    "ORDER BY ordinal LIMIT :limit"
)


async def list_items(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    state: ItemState | None = None,
    after: int = 0,
    limit: int = 100,
) -> list[ItemView]:
    """A page of a job's items, keyset-paged by ordinal; with ``state``, only those."""
    rows = await conn.execute(
        text(LIST_ITEMS), {"job": job_id, "after": after, "state": state, "limit": limit}
    )
    return [ItemView.model_validate(dict(row._mapping)) for row in rows]


async def analyze_items(conn: AsyncConnection) -> None:
    """Fresh statistics after a big snapshot, which the planner would take for empty."""
    await conn.execute(text("ANALYZE job_items"))


FIRST_PENDING = (
    "SELECT min(ordinal) FROM job_items WHERE job_id = :job AND ordinal > :after "
    f"AND state = {ItemState.pending.sql}"
)


async def first_pending_ordinal(
    conn: AsyncConnection, job_id: uuid.UUID, *, after: int = 0
) -> int | None:
    """The job's first pending item after ordinal ``after``, by key."""
    first = (await conn.execute(text(FIRST_PENDING), {"job": job_id, "after": after})).scalar_one()
    return None if first is None else int(first)


# What the snapshot froze for each item, as a line of JSON in chunks of at most :chunk
# bytes: a reader holds a chunk at a time, never a whole page. OFFSET 0 keeps the planner
# from making the line again for every chunk.
DETAIL_CHUNKS = """
SELECT substring(d.line FROM c.n * :chunk + 1 FOR :chunk) AS chunk
  FROM job_items i
 CROSS JOIN LATERAL (
       SELECT convert_to(coalesce(i.detail::text, 'null') || chr(10), 'UTF8') AS line OFFSET 0
       ) d
 CROSS JOIN LATERAL generate_series(0, (octet_length(d.line) - 1) / :chunk) AS c(n)
 WHERE i.job_id = :job AND i.ordinal BETWEEN :low AND :high
 ORDER BY i.ordinal, c.n
"""


# Chunks a fetch of DETAIL_CHUNKS' cursor brings at a time (2 MB at most).
CHUNKS_PER_FETCH = 8


async def item_detail_lines(
    conn: AsyncConnection, job_id: uuid.UUID, low: int, high: int, *, chunk_bytes: int
) -> AsyncGenerator[bytes, None]:
    """What the snapshot froze for ``low``…``high``, a JSON line each, in chunks."""
    result = await conn.stream(
        text(DETAIL_CHUNKS).execution_options(yield_per=CHUNKS_PER_FETCH),
        {"job": job_id, "low": low, "high": high, "chunk": chunk_bytes},
    )
    try:
        async for row in result:
            yield row.chunk
    finally:
        await result.close()


@dataclass(frozen=True)
class ItemOutcome:
    ordinal: int
    state: ItemState
    code: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Recorded:
    """The counters after a batch, the items it recorded, and whether a cancel is asked."""

    counters: Counters
    recorded: int
    cancel_requested: bool


# A batch's outcomes, each recorded while pending, and their counts by state.
RECORDING = f"""WITH o AS (
                    SELECT * FROM unnest(CAST(:ordinals AS int[]), CAST(:states AS text[]),
                                         CAST(:codes AS text[]), CAST(:messages AS text[]))
                        AS o(ordinal, state, code, message)
                ), recorded AS (
                    UPDATE job_items i
                       SET state = o.state, error_code = o.code, error_message = o.message,
                           processed_at = now(),
                           detail = CASE WHEN :clear THEN NULL ELSE i.detail END
                      FROM o
                     WHERE i.job_id = :job AND i.ordinal = o.ordinal
                       AND i.ordinal BETWEEN :low AND :high AND i.state = {ItemState.pending.sql}
                 RETURNING i.state
                ), counted AS (
                    SELECT count(*) AS n,
                           count(*) FILTER (WHERE state = {ItemState.succeeded.sql}) AS n_ok,
                           count(*) FILTER (WHERE state = {ItemState.skipped.sql}) AS n_skip,
                           count(*) FILTER (WHERE state = {ItemState.failed.sql}) AS n_bad
                      FROM recorded
                )"""


def _recording(
    job_id: uuid.UUID, outcomes: Sequence[ItemOutcome], clear_detail: bool
) -> dict[str, Any]:
    ordinals = [o.ordinal for o in outcomes]
    return {
        "job": job_id,
        "ordinals": int_array(ordinals),
        "states": [o.state.value for o in outcomes],
        "codes": [o.code for o in outcomes],
        "messages": [o.message for o in outcomes],
        "low": min(ordinals, default=0),
        "high": max(ordinals, default=0),
        "clear": clear_detail,
    }


RECORD_OUTCOMES = Statement.of(
    f"""
    {RECORDING}
    UPDATE jobs j
       SET processed = j.processed + c.n, succeeded = j.succeeded + c.n_ok,
           skipped = j.skipped + c.n_skip, failed = j.failed + c.n_bad,
           updated_at = now()
      FROM counted c
     WHERE j.id = :job
 RETURNING j.total, j.processed, j.succeeded, j.skipped, j.failed, c.n AS recorded,
           j.cancel_requested_at IS NOT NULL AS cancel_requested, {NOTIFY_J}
    """
)


async def record_outcomes(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    outcomes: Sequence[ItemOutcome],
    *,
    clear_detail: bool = False,
) -> Recorded:
    """Records each still-pending item and moves the counters by exactly those.
    ``clear_detail`` drops what the snapshot froze for them."""
    row = await direct.first(conn, RECORD_OUTCOMES, _recording(job_id, outcomes, clear_detail))
    assert row is not None, "the job's row is there while its items are"
    return Recorded(
        counters=Counters.model_validate(row),
        recorded=int(row["recorded"]),
        cancel_requested=bool(row["cancel_requested"]),
    )
