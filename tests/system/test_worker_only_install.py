"""A worker-only install: `pip install hubjobs` without extras, in a fresh venv, carries
neither the HTTP API's packages nor OpenTelemetry, runs a job with its worker, and
refuses `hubjobs api` in one line naming the extra. The course is seeded and the job
started from the test's own process; only the worker runs from the new venv."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.processes import REPO, WorkerProcess, hubjobs_env
from tests.support.servers import seed

# What the Dockerfile copies: the project as an install sees it (no tests, no venv).
SOURCES = ("pyproject.toml", "README.md", "worker.py")
PACKAGES = ("hubjobs", "workflows", "activities", "starter")
UV = Path(sys.executable).parent / "uv"


def worker_only_venv(where: Path) -> Path:
    """A venv holding the project installed without extras, by uv from its cache (as
    `make install` installs); its path."""
    source = where / "source"
    source.mkdir()
    for name in SOURCES:
        shutil.copy2(REPO / name, source / name)
    for name in PACKAGES:
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = where / "venv"
    for step in (
        [str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)],
        [str(UV), "pip", "install", "--quiet", "--python", f"{venv}/bin/python", str(source)],
    ):
        done = subprocess.run(step, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
    return venv


def in_venv(
    venv: Path, *args: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# Each of the extras' modules, imported in the venv: what it finds, and whose worker it is.
IMPORTS = """
import importlib, json, worker
found = []
for module in ("fastapi", "uvicorn", "starlette", "sse_starlette", "opentelemetry"):
    try:
        importlib.import_module(module)
        found.append(module)
    except ModuleNotFoundError:
        pass
print(json.dumps({"found": found, "worker": worker.__file__}))
"""
# Generous: on a loaded machine the worker's first start compiles every module it imports.
WAIT_SECONDS = 240


@pytest.mark.timeout(600)
async def test_a_worker_only_install_runs_a_job_and_refuses_the_api(
    settings: Settings, engine: AsyncEngine, temporal: Client, tmp_path: Path
) -> None:
    started = time.monotonic()
    venv = worker_only_venv(tmp_path)
    print(f"worker-only venv installed in {time.monotonic() - started:.1f} s")
    home = tmp_path / "home"
    home.mkdir()
    # Its modules compiled as first imported (this machine sets PYTHONDONTWRITEBYTECODE),
    # not at every import of every process and workflow run.
    env = hubjobs_env(settings, home, tagging_batch_size=10)
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    # Run outside the repository: nothing of the test's tree on the venv's path.
    probe = in_venv(venv, "python", "-c", IMPORTS, env=env, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    imported = json.loads(probe.stdout)
    assert imported["found"] == [] and imported["worker"].startswith(str(venv)), imported

    api = in_venv(venv, "hubjobs", "api", env=env, cwd=tmp_path)
    assert api.returncode == 1 and api.stdout == "", api
    assert api.stderr.strip() == (
        "error: the HTTP API needs the api extra: pip install 'hubjobs[api]' [missing_extra]"
    )

    course = await seed(engine, 30)
    jobs = HubJobsClient(temporal, engine, settings).scope(course.workspace_id, course.actor_id)
    worker = WorkerProcess(
        "worker-only",
        env,
        tmp_path,
        python=str(venv / "bin" / "python"),
        args=(str(venv / "bin" / "hubjobs"), "worker"),
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while "worker started" not in worker.log_text():
            assert worker.alive() and time.monotonic() < deadline, worker.tail()
            await asyncio.sleep(0.2)
        print(f"its worker started at {time.monotonic() - started:.1f} s")
        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": "t"})
        done = await jobs.wait(job.id, timeout=WAIT_SECONDS)
        assert worker.alive(), worker.tail()
    finally:
        worker.kill()
    assert done.status == "succeeded", worker.tail()
    assert done.processed == done.succeeded == done.total == 30
    print(f"the whole test: {time.monotonic() - started:.1f} s")
