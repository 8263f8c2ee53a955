"""The queue gauges' refresh while the database does not answer: one line when the
outage starts, no traceback every tick (a PostgreSQL stopped for minutes filled the
worker's log with one every 10 s)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from hubjobs.db.engine import async_engine
from hubjobs.devstack.embedded import choose_port
from hubjobs.observability import telemetry


async def test_an_outage_is_one_line_not_a_traceback_a_tick(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "QUEUE_REFRESH_SECONDS", 0.05)
    # Nothing listens there: every connection is refused, as with PostgreSQL stopped.
    engine = async_engine(f"postgresql://postgres@127.0.0.1:{choose_port(0)}/hub", pool_size=1)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger=telemetry.log.name)
    refresh = asyncio.create_task(
        telemetry.refresh_queue_state(engine, cast(Any, None), stop)  # never reached
    )
    try:
        await asyncio.sleep(0.6)  # about ten ticks
    finally:
        stop.set()
        await refresh
        await engine.dispose()
    records = [r for r in caplog.records if r.name == telemetry.log.name]
    assert [r.getMessage() for r in records] == [
        "queue state refresh: database unavailable (OperationalError)"
    ]
    assert all(r.exc_info is None for r in records)
