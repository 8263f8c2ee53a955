"""A worker process reports itself to the server every HUBJOBS_WORKER_HEARTBEAT_SECONDS
(the workers view's slots and state): with one second, a heartbeat newer than the first
comes well within the SDK's default minute, and the worker's slots are listed."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from temporalio.client import Client

from hubjobs.settings import Settings
from hubjobs.temporal.pollers import WorkerView, task_queue_workers
from tests.support.helpers import until
from tests.support.processes import WorkerProcess, hubjobs_env

# Shorter than the SDK's default interval (60 s), long for a loaded machine's 1 s.
LATER_WITHIN = 40.0


async def beating(temporal: Client, task_queue: str) -> WorkerView | None:
    """The queue's one worker once a heartbeat of it is listed (its slots are then)."""
    found, _ = await task_queue_workers(temporal, task_queue, timedelta(minutes=5))
    reported = [w for w in found if w.activity_slots is not None]
    return reported[0] if reported else None


async def test_a_worker_process_reports_itself_every_heartbeat_interval(
    settings: Settings, temporal: Client, tmp_path: Path
) -> None:
    env = hubjobs_env(settings, tmp_path, worker_heartbeat_seconds=1)
    worker = WorkerProcess("heartbeats", env, tmp_path)
    try:
        first = await until("a heartbeat", lambda: beating(temporal, settings.task_queue))
        assert first.state == "live" and first.polls == ["activity", "workflow"]

        async def later() -> datetime | None:
            now = await beating(temporal, settings.task_queue)
            return now.last_seen if now is not None and now.last_seen > first.last_seen else None

        await until("a later heartbeat", later, timeout=LATER_WITHIN)
    finally:
        code, _ = worker.terminate()
    assert code == 0, worker.tail()
