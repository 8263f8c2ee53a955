"""The read pool (``hubjobs.db.pool``) and the reads that use it: a connection that died
while idle costs the caller nothing, a database that does not answer is ``unavailable``
at once (no pool timeout to wait out), and the pool never holds more connections than
its size. Against the real PostgreSQL of the session."""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.db.errors import is_outage
from hubjobs.db.pool import Connection, ReadPool
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.devstack.embedded import choose_port
from hubjobs.errors import Unavailable
from hubjobs.settings import Settings
from starter.client import HubJobsClient


async def backend_pid(conn: Connection) -> int:
    row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_connection_that_died_while_idle_is_replaced_unseen(database_url: str) -> None:
    pool = ReadPool(database_url, size=2)
    try:
        first = await pool.run(backend_pid)
        with psycopg.connect(database_url, autocommit=True) as admin:
            # Waits (up to 10 s) for the backend to have exited, not only been told to.
            row = admin.execute("SELECT pg_terminate_backend(%s, 10000)", (first,)).fetchone()
        assert row == (True,), f"backend {first} still alive 10 s after its termination"
        second = await pool.run(backend_pid)
        assert second != first
        assert await pool.run(backend_pid) == second  # the fresh one is kept
    finally:
        await pool.close()


async def test_a_database_that_does_not_answer_is_unavailable_at_once(
    settings: Settings, course: DemoCourse
) -> None:
    pool = ReadPool(f"postgresql://postgres@127.0.0.1:{choose_port(0)}/nothing")
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError) as refused:
        await pool.run(backend_pid)
    assert is_outage(refused.value)

    dead = settings.model_copy(
        update={"database_url": f"postgresql://postgres@127.0.0.1:{choose_port(0)}/nothing"}
    )
    client = HubJobsClient(settings=dead)
    with pytest.raises(Unavailable):
        await client.scope(course.workspace_id, course.actor_id).get(uuid.uuid4())
    await client.close()
    assert time.monotonic() - started < 5


async def test_the_pool_holds_at_most_its_size(database_url: str) -> None:
    pool = ReadPool(database_url, size=2)
    running = peak = 0

    async def slow(conn: Connection) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await conn.execute("SELECT pg_sleep(0.05)")
        running -= 1
        return await backend_pid(conn)

    try:
        pids = await asyncio.gather(*(pool.run(slow) for _ in range(8)))
    finally:
        await pool.close()
    assert peak == 2
    assert len(set(pids)) == 2


async def test_reads_without_sqlalchemy_or_temporal(
    engine: AsyncEngine, settings: Settings, course: DemoCourse
) -> None:
    """A client that only reads connects to neither a Temporal server nor through the
    SQLAlchemy engine: Temporal may be down (here: an address where nothing listens)."""
    offline = settings.model_copy(update={"temporal_address": f"127.0.0.1:{choose_port(0)}"})
    client = HubJobsClient(settings=offline)
    jobs = client.scope(course.workspace_id, course.actor_id)
    assert await jobs.list() == []
    with pytest.raises(RuntimeError):
        client.temporal  # noqa: B018 (never connected)
    assert client._engine is None
    await client.close()
