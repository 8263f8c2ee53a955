"""Statements of the hot path run on the driver's own connection (psycopg), inside the
unit of work a SQLAlchemy engine opened (its transaction, deadline and pool): SQLAlchemy's
async layer (a greenlet hop, the statement compiled, its result wrapped) costs more CPU.

A statement is written with SQLAlchemy's ``:name`` parameters and turned into psycopg's
form once, at import. A failure is raised as SQLAlchemy raises it (``DBAPIError``, a lost
connection invalidated), so callers tell errors apart as ever (hubjobs.db.errors).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg import pq
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection

# ``:name`` but not a ``::type`` cast; a literal ``%`` doubled for psycopg.
_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement in psycopg's form. ``prepared``: only where the plan cannot turn
    on the values (a row by its key, a lock): see hubjobs/db/engine.py PREPARED."""

    sql: str
    prepared: bool = False

    @classmethod
    def of(cls, sql: str, *, prepared: bool = False) -> Statement:
        return cls(_PARAMETER.sub(r"%(\1)s", sql.replace("%", "%%")), prepared)


Row = tuple[Any, ...]


def driver_of(conn: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection under ``conn``, checked out already (``begin``/``connect``
    did): no I/O, no greenlet."""
    return cast("psycopg.AsyncConnection[Any]", _proxied(conn).driver_connection)


def _proxied(conn: AsyncConnection) -> Any:
    sync = conn.sync_connection
    assert sync is not None, "a connection begun or connected"
    return sync.connection


async def _begun(conn: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The driver connection, in the transaction SQLAlchemy would have begun for a
    statement of its own (its autobegin), unless it is in autocommit."""
    driver = driver_of(conn)
    if not driver.autocommit and not conn.in_transaction():
        await conn.begin()
    return driver


async def _failed(conn: AsyncConnection, err: psycopg.Error) -> BaseException:
    """``err`` as SQLAlchemy raises a driver's error; a connection it says is lost is
    invalidated, so the pool never hands it out again."""
    dialect = conn.sync_engine.dialect
    lost = dialect.is_disconnect(cast(Any, err), None, None)
    if lost:
        await conn.invalidate()
    return exc.DBAPIError.instance(
        None,
        None,
        err,
        psycopg.Error,
        hide_parameters=True,
        connection_invalidated=lost,
        dialect=dialect,
    )


async def _execute(
    driver: psycopg.AsyncConnection[Any],
    cursor: psycopg.AsyncCursor[Any],
    statement: Statement,
    params: Mapping[str, Any] | None,
) -> None:
    """Connections keep psycopg's preparing off (hubjobs/db/engine.py): it is turned on
    for a statement that asks, and off again after it."""
    if not statement.prepared:
        await cursor.execute(statement.sql, params)
        return
    driver.prepare_threshold = 0
    try:
        await cursor.execute(statement.sql, params, prepare=True)
    finally:
        driver.prepare_threshold = None


def _returns_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


def _names(cursor: psycopg.AsyncCursor[Any]) -> list[str]:
    """The result's column names, read off the result itself: ``description`` makes a
    ``Column`` a column, a noticeable share of a start's CPU for a job's wide row."""
    result = cursor.pgresult
    if result is None:
        return []
    encoding = cursor.connection.info.encoding
    return [(result.fname(i) or b"").decode(encoding) for i in range(result.nfields)]


async def rows(
    conn: AsyncConnection, statement: Statement, params: Mapping[str, Any] | None = None
) -> tuple[list[Row], list[str]]:
    """Every row ``statement`` returns, and the names of its columns."""
    driver = await _begun(conn)
    try:
        async with driver.cursor() as cursor:
            await _execute(driver, cursor, statement, params)
            if not _returns_rows(cursor):
                return [], []
            return await cursor.fetchall(), _names(cursor)
    except psycopg.Error as err:
        raise await _failed(conn, err) from err


async def first(
    conn: AsyncConnection, statement: Statement, params: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The first row ``statement`` returns, by column name, or None."""
    found, names = await rows(conn, statement, params)
    return dict(zip(names, found[0], strict=True)) if found else None


async def run(
    conn: AsyncConnection, statement: Statement, params: Mapping[str, Any] | None = None
) -> None:
    await rows(conn, statement, params)


async def each(
    conn: AsyncConnection, work: Sequence[tuple[Statement, Mapping[str, Any] | None]]
) -> list[list[Row]]:
    """Statements that do not wait on each other's results, sent at once in psycopg's
    pipeline mode (one round trip), run in order; the rows of each."""
    driver = await _begun(conn)
    cursors = [driver.cursor() for _ in work]
    try:
        async with driver.pipeline() as pipeline:
            for cursor, (statement, params) in zip(cursors, work, strict=True):
                await _execute(driver, cursor, statement, params)
            await pipeline.sync()
            return [await c.fetchall() if _returns_rows(c) else [] for c in cursors]
    except psycopg.Error as err:
        raise await _failed(conn, err) from err
    finally:
        for cursor in cursors:
            await cursor.close()
