"""The worker as a process: SIGTERM drains it within a bound (in-flight work finishes or
is handed back), and `hubjobs health` reports what it can reach."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.conftest import running_worker, seed

ROOT = Path(__file__).resolve().parent.parent


def _env(settings: Settings, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env.update(
        HUBJOBS_DATABASE_URL=settings.resolved_database_url(),
        HUBJOBS_TEMPORAL_ADDRESS=settings.resolved_temporal_address(),
        HUBJOBS_TASK_QUEUE=settings.task_queue,
        HUBJOBS_TAGGING_BATCH_SIZE="10",
        HUBJOBS_TAGGING_BATCH_PAUSE_SECONDS="0.05",
        HUBJOBS_MAINTENANCE_SCHEDULES="false",
        HUBJOBS_METRICS_PORT="0",
        HUBJOBS_LOG_JSON="true",
        HUBJOBS_HOME=str(home),
        PYTHONUNBUFFERED="1",
    )
    return env


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "worker.py"], cwd=ROOT, env=env, stdout=out, stderr=out
        )


def _stop(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=30)
    return code, time.monotonic() - started


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-job"])
async def test_sigterm_drains_the_worker_within_a_bound(
    settings: Settings, engine: AsyncEngine, temporal: Client, tmp_path: Path, busy: bool
) -> None:
    env = _env(settings, tmp_path)
    log = tmp_path / "worker.log"
    process = _start_worker(env, log)
    try:
        deadline = time.monotonic() + 30
        while b"worker started" not in log.read_bytes() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            await asyncio.sleep(0.1)
        job = None
        if busy:
            course = await seed(engine, 1000)
            jobs = HubJobsClient(temporal, engine, settings).scope(
                course.workspace_id, course.actor_id
            )
            job = await jobs.start_course_tagging(root_page_id=course.root_page_id, tag="t")
            async for current in jobs.watch(job.id, interval=0.05):
                if current.processed > 0:
                    break
        code, took = _stop(process)
    finally:
        if process.poll() is None:
            process.kill()
    # Drained and gone within the bound: the SDK's graceful period (10 s) plus start-up slack.
    assert code == 0, log.read_text()[-3000:]
    assert took < 15
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(line["message"] == "worker stopped" for line in lines)
    if job is not None:
        # What the stopped worker did not finish, another worker does: nothing is lost.
        async with running_worker(temporal, settings):
            done = await jobs.wait(job.id, timeout=60)
        assert done.status == "succeeded" and done.processed == done.total == 1000


def test_health_reports_both_servers(settings: Settings, tmp_path: Path) -> None:
    env = _env(settings, tmp_path)
    hubjobs = str(Path(sys.executable).parent / "hubjobs")
    healthy = subprocess.run(
        [hubjobs, "health", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert healthy.returncode == 0, healthy.stderr
    assert json.loads(healthy.stdout) == {"status": "ok", "database": "ok", "temporal": "ok"}
    env["HUBJOBS_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/nothing"
    sick = subprocess.run(
        [hubjobs, "health", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert sick.returncode == 1
    assert json.loads(sick.stdout)["database"] == "unavailable"
