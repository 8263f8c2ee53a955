"""A PostgreSQL server of a test module's own, for stopping and starting again (the
session's is shared and must live): durable, as `hubjobs up` makes it, migrated."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hubjobs.db.migrate import upgrade
from hubjobs.devstack.embedded import EmbeddedPostgres


@dataclass(frozen=True)
class OwnPostgres:
    """A PostgreSQL server of these tests' own, for stopping: the session's is shared."""

    server: EmbeddedPostgres
    port: int
    database_url: str

    async def stop(self) -> None:
        """``pg_ctl stop -m immediate``: a crash, for its clients."""
        await asyncio.to_thread(self.server.stop, "immediate")
        assert self.server.running_port() is None

    async def start(self) -> None:
        """Started again on its port (crash recovery included)."""
        await asyncio.to_thread(self.server.start_on, self.port)

    async def stop_for(self, seconds: float) -> float:
        """Stopped, ``seconds`` down, then started again on its port; returns how long
        it was down."""
        await self.stop()
        stopped = time.monotonic()
        await asyncio.sleep(seconds)
        await self.start()
        return time.monotonic() - stopped


@contextmanager
def own_postgres_server(prefix: str) -> Iterator[OwnPostgres]:
    """Durable, as `hubjobs up` makes it: the session's server trades crash safety for
    speed (no fsync, asynchronous commits), so a crash there forgets commits it had
    acknowledged, which is not the fault under test."""
    # Outside pytest's tmp folder, as conftest's stack (PostgreSQL may run as another user).
    home = Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedPostgres(home, durable=True)
    try:
        port = server.start(0)
        url = server.ensure_database(port)
        upgrade(url)
        yield OwnPostgres(server, port, url)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
