"""A kind is declared once, and everything a caller uses comes from that declaration: the
toy kind (tests/support/toy_kind.py and toy_impl.py, named only in
HUBJOBS_KIND_MODULES) gets a start route with its payload's schema in the OpenAPI
document, a CLI command with an option a field, the client's start, and settings of
its own (HUBJOBS_TOY_ECHO_PREFIX), with no file of the product changed for it."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.kinds import REGISTRY, JobKind, load_kinds
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
# The product's files; those that are no kind's own module are shared by every kind.
PRODUCT = ("hubjobs/", "starter/", "activities/", "workflows/", "worker.py")
# Callers that start one of hubjobs' own kinds by name, as any service may: the demo
# tags a course. They may name the kind, never its settings.
CALLERS = {"starter/cli/stack.py": {"course_tagging"}}


def module_of(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def own_modules(kind: JobKind[Any]) -> set[str]:
    """Where a kind lives: its declaration (where its ``prepare`` is), its workflow's
    and its activities' modules."""
    return {kind.prepare.__module__, kind.workflow_module, kind.activities_module}


def what_names(kind: JobKind[Any]) -> dict[str, re.Pattern[str]]:
    """What would name the kind in a file: its name as a string, its modules, and each
    of its own settings, as a field and as an environment variable."""
    found = {f"the name {kind.name!r}": re.compile(rf"[\"']{re.escape(kind.name)}[\"']")}
    for module in own_modules(kind):
        found[f"the module {module}"] = re.compile(rf"\b{re.escape(module)}\b")
    if kind.settings is not None:
        prefix = str(kind.settings.model_config.get("env_prefix", ""))
        for field in kind.settings.model_fields:
            variable = (prefix + field).upper()
            found[f"the field {field}"] = re.compile(rf"\b{re.escape(field)}\b")
            found[f"the variable {variable}"] = re.compile(rf"\b{re.escape(variable)}\b")
    return found


def product_files() -> dict[str, str]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name: (REPO / name).read_text() for name in tracked if name.startswith(PRODUCT)}


def test_no_shared_file_names_a_kind_or_its_settings() -> None:
    """Every registered kind (hubjobs' own and the toy kind, which HUBJOBS_KIND_MODULES
    adds) against every product file that is none of a kind's own modules nor the
    registry (which lists hubjobs' own kinds, one line each): none names the kind, its
    modules or any of its settings, so adding or changing a kind changes no shared
    file (hubjobs/settings.py, worker.py, the lifecycle, the starter...)."""
    load_kinds([MODULE])
    kinds = list(REGISTRY)
    assert {"course_tagging", "backup", "page_export", "toy_echo"} <= {k.name for k in kinds}
    files = product_files()
    owned = {type(REGISTRY).__module__} | {module for k in kinds for module in own_modules(k)}
    shared = {name: text for name, text in files.items() if module_of(name) not in owned}
    assert {"hubjobs/settings.py", "worker.py", "activities/attempt.py"} <= set(shared)
    assert "hubjobs/kinds/course_tagging.py" not in shared
    leaks = []
    callers_naming = set()
    for kind in kinds:
        for what, pattern in what_names(kind).items():
            # The patterns find what they look for: each field in its kind's module.
            if what.startswith("the field"):
                assert kind.settings is not None
                source = inspect.getsource(sys.modules[kind.settings.__module__])
                assert pattern.search(source), what
            for name, text in shared.items():
                if not pattern.search(text):
                    continue
                if kind.name in CALLERS.get(name, ()) and what.startswith(
                    ("the name", "the module")
                ):
                    callers_naming.add(name)
                    continue
                leaks.append(f"{name} names {what} of kind {kind.name}")
    assert leaks == [], "a shared file knows a kind:\n" + "\n".join(leaks)
    # Each caller still needs its exception.
    assert callers_naming == set(CALLERS)


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
