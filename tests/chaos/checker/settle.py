"""Settling: the faults have stopped; wait until every job row is final, no completion
webhook is pending and no run of the load is open in Temporal, for at most the settle
bound (what is still unsettled by then is a violation of invariants 3, 6 and 8)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from temporalio.client import Client

from tests.chaos.checker.facts import StackAddresses, open_runs

UNSETTLED = """
SELECT count(*) FILTER (WHERE status IN ('queued', 'running')),
       count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'cancelled')
                          AND notify_url IS NOT NULL
                          AND notify_state IS DISTINCT FROM 'delivered'
                          AND notify_state IS DISTINCT FROM 'failed'
                          AND notify_state IS DISTINCT FROM 'refused')
  FROM jobs
"""
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Unsettled:
    rows: int
    webhooks: int
    runs: int

    def __bool__(self) -> bool:
        return bool(self.rows or self.webhooks or self.runs)

    def __str__(self) -> str:
        return (
            f"{self.rows} rows unfinished, {self.webhooks} webhooks pending, {self.runs} runs open"
        )


async def unsettled(addresses: StackAddresses, client: Client, task_queue: str) -> Unsettled:
    async with await psycopg.AsyncConnection.connect(
        addresses.database_url, autocommit=True, connect_timeout=5
    ) as conn:
        cursor = await conn.execute(UNSETTLED)
        row = await cursor.fetchone()
    rows, webhooks = (int(row[0]), int(row[1])) if row else (0, 0)
    return Unsettled(rows, webhooks, len(await open_runs(client, task_queue)))


async def settle(
    home: Path, bound_until: float, task_queue: str = "hubjobs", say: object = print
) -> tuple[float | None, str]:
    """The epoch at which everything had settled (None when the bound passed first), and
    what was left last seen."""
    addresses = StackAddresses.of(home)
    client: Client | None = None
    last = "nothing read yet"
    said_at = 0.0
    while time.time() < bound_until:
        try:
            async with asyncio.timeout(20):
                if client is None:
                    client = await Client.connect(addresses.temporal_address)
                left = await unsettled(addresses, client, task_queue)
            if not left:
                return time.time(), "settled"
            last = str(left)
        except Exception as err:  # a server still coming back: look again
            last = f"not readable: {type(err).__name__}"
        if time.monotonic() - said_at > 15 and callable(say):
            say(f"settling: {last}")
            said_at = time.monotonic()
        await asyncio.sleep(POLL_SECONDS)
    return None, last
