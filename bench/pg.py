"""PostgreSQL instruments shared by the benchmarks and the peers' venv (psycopg only, no
hubjobs): the completion signal every contender's final row sends, and the counters of
one database (commits, rows, WAL) read around a run.

Completion: a trigger on ``jobs`` NOTIFYs ``bench_final`` with the job's id when its
row turns final. The notification is delivered when the writing transaction commits,
so every contender (hubjobs, the Temporal floor, the peers) is timed to the same event
-- its final row durable -- and nobody polls the read model meanwhile (a poll would be
a transaction of its own in the commit counts).

Counters: ``pg_stat_database`` of one database (each contender has its own). Backends
flush their statistics when they go idle, at most once a second, else within 10 s
(PostgreSQL 15+: PGSTAT_MIN_INTERVAL / PGSTAT_IDLE_INTERVAL), so a reading waits
``SETTLE`` seconds first; the background rate (the worker's 10 s queue-gauge refresh,
a peer's pollers) is measured over an idle window and subtracted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace

import psycopg

CHANNEL = "bench_final"
FINAL_STATUSES = ("succeeded", "failed", "cancelled")
# Past PostgreSQL's idle-flush interval of backend statistics (10 s).
SETTLE = 11.0

TRIGGER = f"""
CREATE OR REPLACE FUNCTION bench_notify_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', NEW.id::text);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS bench_final ON jobs;
CREATE TRIGGER bench_final AFTER UPDATE OF status ON jobs FOR EACH ROW
  WHEN (NEW.status IN {FINAL_STATUSES!r} AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION bench_notify_final();
"""


def install_final_trigger(url: str) -> None:
    """The completion signal on ``url``'s jobs table (idempotent)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TRIGGER)


class FinalWatcher:
    """LISTENs on ``bench_final``: ``wait(ids)`` returns when every id's row is final,
    with the monotonic time each was seen."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: dict[str, float] = {}
        self._conn: psycopg.AsyncConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def __aenter__(self) -> FinalWatcher:
        self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        await self._conn.execute(f"LISTEN {CHANNEL}")
        self._task = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
        # The listener first, awaited: a reader left registered on the closed socket's
        # fd breaks the next connection that gets the same fd number.
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._task
        if self._conn is not None:
            await self._conn.close()

    async def _listen(self) -> None:
        assert self._conn is not None
        async for note in self._conn.notifies():
            self.seen.setdefault(note.payload, time.perf_counter())
            self._changed.set()

    async def wait(self, ids: Iterable[str], timeout: float = 600) -> dict[str, float]:
        wanted = set(ids)
        deadline = time.monotonic() + timeout
        while not wanted <= self.seen.keys():
            if self._task is not None and self._task.done():
                self._task.result()  # the listener died: say why
            left = deadline - time.monotonic()
            if left <= 0:
                missing = len(wanted - self.seen.keys())
                raise TimeoutError(f"{missing} of {len(wanted)} jobs not final in {timeout:.0f} s")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass
        return {i: self.seen[i] for i in wanted}


@dataclass(frozen=True)
class Counters:
    """What one database did, from ``pg_stat_database`` (and the server's WAL position,
    which is server-wide: read it with nothing else running)."""

    xact_commit: float = 0
    tup_inserted: float = 0
    tup_updated: float = 0
    tup_deleted: float = 0
    tup_fetched: float = 0
    wal_bytes: float = 0
    seconds: float = 0

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )

    def __add__(self, other: Counters) -> Counters:
        return Counters(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def scaled(self, factor: float) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) * factor for f in fields(self)})

    def per(self, count: float) -> Counters:
        return self.scaled(1 / count)


def read_counters(admin_url: str, database: str) -> Counters:
    """The counters now, read from another database (the reading is no commit of
    ``database``'s)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_fetched, "
            "pg_current_wal_insert_lsn() - '0/0'::pg_lsn "
            "FROM pg_stat_database WHERE datname = %s",
            (database,),
        ).fetchone()
    assert row is not None, f"no database {database}"
    commits, inserted, updated, deleted, fetched, wal = (float(v) for v in row)
    return Counters(commits, inserted, updated, deleted, fetched, wal, time.perf_counter())


async def settled_counters(admin_url: str, database: str) -> Counters:
    """The counters once every backend has flushed what it did before this call."""
    await asyncio.sleep(SETTLE)
    return await asyncio.to_thread(read_counters, admin_url, database)


async def background_rate(admin_url: str, database: str, seconds: float = SETTLE) -> Counters:
    """What ``database`` does per second while nobody runs a job (pollers, gauges)."""
    before = await settled_counters(admin_url, database)
    await asyncio.sleep(seconds)
    after = await settled_counters(admin_url, database)
    spent = after - before
    return spent.per(spent.seconds)


def net(before: Counters, after: Counters, idle_per_second: Counters) -> Counters:
    """``after - before`` less the background over the same window."""
    spent = after - before
    return replace(spent - idle_per_second.scaled(spent.seconds), seconds=spent.seconds)
