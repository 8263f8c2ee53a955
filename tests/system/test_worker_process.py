"""The worker as a process: SIGTERM drains it within a bound (in-flight work finishes or
is handed back), a fatal worker error ends it, and `hubjobs health` reports what it can
reach."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import running_worker, seed


def _env(settings: Settings, home: Path) -> dict[str, str]:
    return hubjobs_env(
        settings, home, tagging_batch_size=10, tagging_batch_pause_seconds=0.05, log_json=True
    )


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-job"])
async def test_sigterm_drains_the_worker_within_a_bound(
    settings: Settings, engine: AsyncEngine, temporal: Client, tmp_path: Path, busy: bool
) -> None:
    worker = WorkerProcess("worker", _env(settings, tmp_path), tmp_path)
    try:
        deadline = time.monotonic() + 30
        while "worker started" not in worker.log_text() and time.monotonic() < deadline:
            assert worker.alive(), worker.log_text()
            await asyncio.sleep(0.1)
        job = None
        if busy:
            course = await seed(engine, 1000)
            jobs = HubJobsClient(temporal, engine, settings).scope(
                course.workspace_id, course.actor_id
            )
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "t"}
            )
            async for current in jobs.watch(job.id, interval=0.05):
                if current.processed > 0:
                    break
        code, took = worker.terminate(timeout=30)
    finally:
        worker.kill()
    # Drained and gone within the bound: the SDK's graceful period (10 s) plus start-up slack.
    assert code == 0, worker.log_text()[-3000:]
    assert took < 15
    # With HUBJOBS_LOG_JSON every line is one JSON object: the SDK core's too (forwarded
    # into Python logging), a worker's fields typed.
    lines = [json.loads(line) for line in worker.log_text().splitlines() if line.strip()]
    assert any(line["message"] == "worker stopped" for line in lines)
    print("log lines:", *lines, sep="\n  ")
    for line in lines:
        assert isinstance(line.get("attempt", 0), int), line
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


def test_a_fatal_worker_error_ends_the_process(settings: Settings, tmp_path: Path) -> None:
    """What the SDK deems fatal (here: a namespace the server does not know) ends the
    process with exit code 1 and the error logged; before, the process lived on without
    pollers, waiting for a signal. (An unreachable server is not fatal: the SDK retries
    it for as long as it takes, see test_server_restarts.)"""
    env = hubjobs_env(settings, tmp_path, temporal_namespace="no-such-namespace")
    worker = WorkerProcess("worker", env, tmp_path)
    try:
        code = worker.process.wait(timeout=30)
    finally:
        worker.kill()
    log = worker.log_text()
    assert code == 1, log[-3000:]
    assert "exiting on an unexpected error" in log
    assert "Namespace no-such-namespace" in log
