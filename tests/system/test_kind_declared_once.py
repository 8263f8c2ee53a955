"""A kind is declared once, and everything a caller uses comes from that declaration: the
toy kind (tests/support/toy_kind.py and toy_impl.py, named only in
HUBJOBS_KIND_MODULES) gets a start route with its payload's schema in the OpenAPI
document, a CLI command with an option a field, the client's start, and settings of
its own (HUBJOBS_TOY_ECHO_PREFIX), with no file of the product changed for it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.processes import (
    REPO,
    TEST_TOKEN_SECRET,
    api_url_for,
    hubjobs_env,
    run_hubjobs,
)
from tests.support.servers import running_worker, seed

MODULE = "tests.support.toy_kind"
CODE_SUFFIXES = {".py", ".toml", ".yml", ".yaml", ".json", ".cfg", ".ini", ".ts", ".js"}
# What would name the kind or its modules in a file that had to change for it.
NAMES = ("toy_echo", "toy-echo", "toy_kind", "toy_impl", "EchoPayload")


def files_naming_the_kind() -> set[str]:
    """The tracked code and configuration files that name the toy kind (the docs may
    cite it as an example)."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    found = set()
    for name in tracked:
        path = REPO / name
        if path.is_file() and path.suffix in {
            ".py",
            ".toml",
            ".yml",
            ".yaml",
            ".json",
            ".cfg",
            ".ini",
        }:
            text = path.read_text(errors="replace")
            if any(word in text for word in NAMES):
                found.add(name)
    return found


def test_the_toy_kind_touches_no_shared_file() -> None:
    touched = files_naming_the_kind()
    print("files naming the toy kind:", sorted(touched))
    shared = {name for name in touched if not name.startswith("tests/")}
    assert shared == set(), f"a shared file had to know the toy kind: {sorted(shared)}"
    assert {"tests/support/toy_kind.py", "tests/support/toy_impl.py"} <= touched


async def test_a_kind_declared_outside_gets_a_route_a_command_and_a_start(
    settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    course = await seed(engine, 1)
    toy_settings = settings.model_copy(update={"kind_modules": [MODULE]})
    api_env = hubjobs_env(
        settings, tmp_path, kind_modules=MODULE, api_jwt_secret=TEST_TOKEN_SECRET
    ) | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    url = api_url_for(api_env)

    # The API: its kinds, and the start route's schema in the OpenAPI document.
    async with httpx.AsyncClient(base_url=url) as http:
        served = (await http.get("/kinds")).json()["kinds"]
        openapi = (await http.get("/openapi.json")).json()
    kinds = {k["name"]: k for k in served}
    assert kinds["toy_echo"]["command"] == "toy-echo"
    assert kinds["toy_echo"]["payload"]["required"] == ["message"]
    start = openapi["paths"]["/workspaces/{workspace_id}/jobs/{kind}"]["post"]
    payloads = start["requestBody"]["content"]["application/json"]["schema"]["x-kind-payloads"]
    ref = payloads["toy_echo"]["$ref"].rsplit("/", 1)[-1]
    assert set(openapi["components"]["schemas"][ref]["properties"]) == {
        "message",
        "fail_attempts",
        "fail_expire",
    }

    cli_extra = {
        "HUBJOBS_API_URL": url,
        "HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET,
        "HUBJOBS_WORKSPACE": str(course.workspace_id),
        "HUBJOBS_ACTOR": str(course.actor_id),
    }
    helped = await run_hubjobs(settings, tmp_path, "toy-echo", "--help", extra_env=cli_extra)
    assert helped.returncode == 0, helped.stderr
    for option in ("--message", "--fail-attempts", "--fail-expire", "--no-fail-expire", "--wait"):
        assert option in helped.stdout, option
    refused = await run_hubjobs(
        settings,
        tmp_path,
        "toy-echo",
        "--message",
        "x",
        "--fail-attempts",
        "many",
        extra_env=cli_extra,
    )
    assert refused.returncode == 2 and "invalid_argument" in refused.stderr, refused.stderr

    # Its own setting, under its own prefix: the worker (in this process) reads it.
    monkeypatch.setenv("HUBJOBS_TOY_ECHO_PREFIX", "toy: ")
    async with running_worker(temporal, toy_settings):
        # The CLI's command, through the API.
        done = await run_hubjobs(
            settings,
            tmp_path,
            "toy-echo",
            "--message",
            "from the CLI",
            "--wait",
            "--json",
            extra_env=cli_extra,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        job = json.loads(done.stdout)
        assert (job["kind"], job["status"]) == ("toy_echo", "succeeded")
        assert job["result"] == {"echo": "toy: from the CLI"}

        # The client's start, in process.
        jobs = HubJobsClient(temporal, engine, toy_settings).scope(
            course.workspace_id, course.actor_id
        )
        started = await jobs.start("toy_echo", {"message": "from the client"})
        finished = await jobs.wait(started.id, timeout=60)
        assert finished.status == "succeeded"
        assert finished.result == {"echo": "toy: from the client"}
