"""Connections for the reads a caller waits on (a job's status, a workspace's jobs):
plain psycopg, autocommit, kept open between calls.

Not SQLAlchemy's pool (its checkout costs more CPU than the read, and importing it slows
every command), nor psycopg_pool (it connects in the background: with the database down
a caller would wait out its timeout instead of hearing ``unavailable`` at once). A
reused connection that fails as an outage drops every idle one and the read runs once
more on a fresh one; every read runs under the pool's deadline, which is never retried.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import TupleRow

from hubjobs.db.deadline import deadline, watch, within
from hubjobs.db.errors import is_outage, is_timeout, server_answered
from hubjobs.db.limits import ConnectOptions

T = TypeVar("T")
Connection = psycopg.AsyncConnection[TupleRow]


def _finish(idle: list[Connection]) -> None:
    """Closes idle connections without a loop (the pool was dropped unclosed)."""
    while idle:
        conn = idle.pop()  # held while it closes: its __del__ must find it closed
        conn.pgconn.finish()


class ReadPool:
    """At most ``size`` connections at once; those that come back sound stay open."""

    def __init__(
        self,
        url: str,
        *,
        size: int = 5,
        options: ConnectOptions | None = None,
        timeout: float = 5.0,
    ) -> None:
        self._url = (options or ConnectOptions()).conninfo(url)
        self._timeout = timeout
        self._idle: list[Connection] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False
        weakref.finalize(self, _finish, self._idle)

    @property
    def url(self) -> str:
        return self._url

    async def _connect(self) -> Connection:
        return await within(psycopg.AsyncConnection.connect(self._url, autocommit=True))

    async def run(self, read: Callable[[Connection], Awaitable[T]]) -> T:
        """``read`` on a connection of the pool (autocommit: each statement on its own),
        within the pool's deadline, its wait for a free slot included."""
        with deadline(self._timeout):
            await within(self._slots.acquire())
            try:
                return await self._read(read)
            finally:
                self._slots.release()

    async def _read(self, read: Callable[[Connection], Awaitable[T]]) -> T:
        reused = bool(self._idle)
        conn = self._idle.pop() if reused else await self._connect()
        bound = watch(conn)
        try:
            try:
                return await read(conn)
            except Exception as err:
                cut = is_timeout(err) or (bound is not None and bound.fired)
                # A server that answered (full, read-only) left the connection sound.
                if not reused or cut or not is_outage(err) or server_answered(err):
                    raise
                # The connection died while idle; its siblings most likely did too.
                await conn.close()
                await self._drop_idle()
                conn = await self._connect()
                watch(conn)
                return await read(conn)
        finally:
            if bound is not None:
                bound.unwatch(conn)
            self._give_back(conn)

    def _give_back(self, conn: Connection) -> None:
        sound = conn.info.transaction_status == pq.TransactionStatus.IDLE
        if sound and not self._closed:
            self._idle.append(conn)
        elif not conn.closed:
            # Broken, or left mid-statement by a cancelled caller: not worth saving.
            conn.pgconn.finish()

    async def _drop_idle(self) -> None:
        while self._idle:
            await self._idle.pop().close()

    async def close(self) -> None:
        self._closed = True
        await self._drop_idle()
