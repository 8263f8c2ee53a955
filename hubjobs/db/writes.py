"""Whether the database takes writes, as one process knows it: what a write probe found
at most HUBJOBS_WRITE_PROBE_SECONDS ago, or a refusal one of its own writes met since.
A health check polled every second costs one probe every few seconds.

The probe inserts a row into a temporary table in a savepoint rolled back: the server
must allocate a new file's first block, which a full disk refuses (53100) where an insert
into a page with room may still go through; a read-only server refuses it too (25006).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # SQLAlchemy comes in with a process's first write, not with this
    from sqlalchemy.ext.asyncio import AsyncConnection

# ON COMMIT DROP as well: should the savepoint's rollback not happen (the connection
# lost), the table ends with the transaction whatever way it ends.
_PROBE_TABLE = "CREATE TEMPORARY TABLE hubjobs_write_probe (probe text) ON COMMIT DROP"
_PROBE_ROW = "INSERT INTO hubjobs_write_probe VALUES ('probe')"


async def probe_writes(conn: AsyncConnection) -> None:
    """Makes the server write a new block, then takes it all back; raises what the
    server answered when it refuses."""
    async with conn.begin_nested() as savepoint:
        await conn.exec_driver_sql(_PROBE_TABLE)
        await conn.exec_driver_sql(_PROBE_ROW)
        await savepoint.rollback()


@dataclass(frozen=True)
class Verdict:
    refusal: str | None  # the code a caller hears (database_full…); None: takes writes
    at: float  # time.monotonic() when it was found


class WriteCheck:
    """What this process last found about the database's writes, for ``every`` seconds."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._verdict: Verdict | None = None
        # One probe at a time: the health checks and starts that ask meanwhile share it.
        self.probing = asyncio.Lock()

    def known(self) -> Verdict | None:
        """The verdict, if found within ``every`` seconds."""
        verdict = self._verdict
        if verdict is None or time.monotonic() - verdict.at >= self.every:
            return None
        return verdict

    def refused(self, code: str) -> None:
        """A write of this process (or the probe) met a refusal: ``code``."""
        self._verdict = Verdict(code, time.monotonic())

    def taken(self) -> None:
        """The probe went through: the database takes writes."""
        self._verdict = Verdict(None, time.monotonic())
