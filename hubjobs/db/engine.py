"""Connections: one async engine per process, psycopg 3 underneath.

Statement parameters are hidden from errors (their text goes to logs). Each connection
is opened with hubjobs.db.limits' options and put under the running code's deadline
(hubjobs.db.deadline), its connecting included. The pool's pre-ping is ours for that
reason: SQLAlchemy's runs before the connection is watched. A worker pings only a
connection idle a while (``ping_after_idle``): a ping is a transaction of its own, and
one the server dropped meanwhile fails as a disconnect the unit of work rides out.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by the functions that make engines: URLs need no SQLAlchemy
    import psycopg
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from hubjobs.db.limits import ConnectOptions


def driver_url(url: str) -> str:
    """``postgresql://…`` as given by people and the stack file, with the psycopg driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def plain_url(url: str) -> str:
    """The URL as libpq (and so psql or pg_dump) takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


# No prepared statements by default: PostgreSQL's generic plan for a batch statement
# (``id = ANY(:ids)``) scans the whole workspace, so each is planned with its values.
# (``plan_cache_mode = force_custom_plan`` would also replan every row's foreign-key check.)
NO_PREPARE = {"prepare_threshold": None}
# Except a statement that asks (``text(...).execution_options(**PREPARED)``): one whose
# plan cannot turn on its values (a row by its key, a lock) is planned once per connection.
PREPARED = {"hubjobs_prepared": True}


def async_engine(
    url: str,
    *,
    pool_size: int = 10,
    options: ConnectOptions | None = None,
    ping_after_idle: float = 0.0,
) -> AsyncEngine:
    """An engine whose connections are opened with ``options`` and kept under the running
    code's deadline, pinged when back from more than ``ping_after_idle`` seconds in the
    pool (0: always). It hands out twice ``pool_size`` connections at most, and keeps them."""
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    from hubjobs.db.limits import ConnectOptions

    conninfo = (options or ConnectOptions()).conninfo(plain_url(url))

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await _connect_within_deadline(conninfo)

    engine = create_async_engine(
        driver_url(url),
        # Twice ``pool_size``, every connection kept once opened: an overflow closed on
        # its return was opened again by the next burst, each a backend to fork.
        pool_size=2 * pool_size,
        max_overflow=0,
        # The connection used last goes out first: a busy process keeps reusing a few
        # warm ones (unpinged within ``ping_after_idle``), the rest age in the pool.
        pool_use_lifo=True,
        hide_parameters=True,
        async_creator=connect,
    )
    dialect = engine.dialect

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        _watch_and_ping(dialect, dbapi_connection, record, ping_after_idle)

    event.listen(engine.sync_engine, "before_cursor_execute", _prepare_if_asked)
    event.listen(engine.sync_engine, "after_cursor_execute", _prepare_no_more)
    event.listen(engine.sync_engine.pool, "connect", _fresh)
    event.listen(engine.sync_engine.pool, "checkout", checkout)
    event.listen(engine.sync_engine.pool, "checkin", _unwatch)
    return engine


LOCAL_BUDGET = (
    "SELECT set_config('statement_timeout', %(statement)s, true), "
    "set_config('lock_timeout', %(lock)s, true), "
    "set_config('idle_in_transaction_session_timeout', %(statement)s, true)"
)


async def set_local_budget(conn: Any, seconds: float, lock_seconds: float) -> None:
    """The server-side bounds of the rest of ``conn``'s transaction (a SQLAlchemy
    AsyncConnection): for a unit of work that needs more than its connection was opened
    with (a snapshot in an attempt's opening transaction); 0 is none."""
    from hubjobs.db import direct

    await direct.run(
        conn,
        direct.Statement(LOCAL_BUDGET),
        {"statement": f"{int(seconds * 1000)}", "lock": f"{int(lock_seconds * 1000)}"},
    )


def capacity(engine: AsyncEngine) -> int:
    """How many connections the engine's pool hands out at most: its size and overflow
    (an unbounded overflow counts as none: the size is what it keeps)."""
    pool = engine.sync_engine.pool
    size = pool.size() if hasattr(pool, "size") else 1
    overflow = getattr(pool, "_max_overflow", 0)
    return max(1, int(size) + max(0, int(overflow)))


async def _connect_within_deadline(conninfo: str) -> psycopg.AsyncConnection[Any]:
    """A new connection, within what is left of the running code's deadline (libpq's
    ``connect_timeout`` bounds it too, in whole seconds and at least 2)."""
    import psycopg

    from hubjobs.db.deadline import within

    return await within(psycopg.AsyncConnection.connect(conninfo, prepare_threshold=None))


def _asks(context: Any) -> bool:
    return context is not None and bool(context.execution_options.get("hubjobs_prepared"))


def _prepare_if_asked(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    """psycopg prepares a statement that asks (PREPARED) and no other: the threshold is
    put back after it, so what runs outside SQLAlchemy's statements (the ping) never is."""
    wanted = 0 if _asks(context) else None
    driver = conn.connection.driver_connection
    if driver.prepare_threshold != wanted:
        driver.prepare_threshold = wanted


def _prepare_no_more(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    if _asks(context):
        conn.connection.driver_connection.prepare_threshold = None


def _fresh(dbapi_connection: Any, record: Any) -> None:
    record.info["hubjobs_fresh"] = True


def _watch_and_ping(
    dialect: Any, dbapi_connection: Any, record: Any, ping_after_idle: float
) -> None:
    """On checkout: the connection goes under the current deadline and, idle longer than
    ``ping_after_idle``, is pinged; a failed ping replaces it, one cut by the deadline
    fails the checkout as ``DeadlineExceeded``."""
    from sqlalchemy import exc

    from hubjobs.db.deadline import watch
    from hubjobs.db.errors import DeadlineExceeded

    driver = dbapi_connection.driver_connection
    bound = watch(driver)
    record.info["hubjobs_deadline"] = bound
    if record.info.pop("hubjobs_fresh", False):
        return
    returned = record.info.get("hubjobs_returned_at")
    if returned is not None and time.monotonic() - returned < ping_after_idle:
        return
    try:
        dialect.do_ping(dbapi_connection)  # SQLAlchemy's own pre-ping statement
    except Exception as err:
        if bound is not None and bound.fired:
            raise DeadlineExceeded(bound.seconds) from err
        raise exc.DisconnectionError() from err


def _unwatch(dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        record.info["hubjobs_returned_at"] = time.monotonic()
    bound = record.info.pop("hubjobs_deadline", None) if record is not None else None
    if bound is not None and dbapi_connection is not None:
        bound.unwatch(dbapi_connection.driver_connection)


def sync_engine(url: str, options: ConnectOptions | None = None, pool_size: int = 5) -> Engine:
    """A blocking engine (migrations, restore) whose connections are opened with
    ``options``; libpq itself keeps its connect timeout. ``pool_size``: connections
    kept open at once (SQLAlchemy's default, 5, unless a restore loads through more)."""
    from sqlalchemy import create_engine

    from hubjobs.db.limits import ConnectOptions

    return create_engine(
        driver_url(url),
        pool_pre_ping=True,
        pool_size=pool_size,
        hide_parameters=True,
        connect_args={**NO_PREPARE, **(options or ConnectOptions()).params(plain_url(url))},
    )
