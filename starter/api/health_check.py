"""Whether PostgreSQL and Temporal answer, and whether PostgreSQL takes writes (a write
probe at most every HUBJOBS_WRITE_PROBE_SECONDS, hubjobs.db.writes): what ``GET /health``
answers and ``hubjobs health`` prints. No FastAPI: a worker-only install (no api extra)
runs the check as its container's health check."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from sqlalchemy import text

from hubjobs.db.deadline import deadline
from hubjobs.db.errors import DATABASE_FULL, DATABASE_READ_ONLY
from starter.api.resources import Health
from starter.client import HubJobsClient

log = logging.getLogger("starter.api")


# The database's state in a health report while it refuses writes, by refusal code.
REFUSING = {DATABASE_FULL: "full", DATABASE_READ_ONLY: "read_only"}
REFUSES_WRITES = "refuses_writes"


async def check_health(hub: HubJobsClient) -> Health:
    """Both servers, asked at once, each within its deadline: one that hangs is
    ``unavailable``; a database that refuses writes is ``full`` or ``read_only``, the
    status ``refuses_writes``."""

    async def database() -> str:
        try:
            with deadline(hub.settings.db_read_timeout_seconds):
                # begin(): ended by COMMIT, which keeps the connection's prepared
                # statements (a ROLLBACK makes psycopg drop them).
                async with hub.engine.begin() as conn:
                    await conn.execute(text("SELECT 1"))
            refusal = await hub.refused_writes()
        except Exception as err:  # Unavailable from the probe included
            log.warning("health: database unreachable: %s", type(err).__name__)
            return "unavailable"
        if refusal is not None:
            log.warning("health: the database refuses writes: %s", refusal)
            return REFUSING.get(refusal, REFUSES_WRITES)
        return "ok"

    async def temporal() -> str:
        try:
            client = await hub.temporal_client()
            timeout = timedelta(seconds=hub.settings.temporal_rpc_timeout_seconds)
            await client.service_client.check_health(timeout=timeout)
        except Exception as err:
            log.warning("health: Temporal unreachable: %s", type(err).__name__)
            return "unavailable"
        return "ok"

    db_state, temporal_state = await asyncio.gather(database(), temporal())
    status = "ok" if db_state == temporal_state == "ok" else "unavailable"
    if temporal_state == "ok" and db_state not in ("ok", "unavailable"):
        status = REFUSES_WRITES
    return Health(status=status, database=db_state, temporal=temporal_state)
