"""The job commands reach the jobs through the HTTP API alone: with the CLI's own
database and Temporal addresses pointed at closed ports, a start, its follow, status,
list, items and cancel all work against an API that has the real ones. And a token
acts as its subject only: the CLI refuses to send it as another actor, and another
actor's token (a member of no workspace of ours) cannot cancel our job."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from hubjobs.settings import Settings
from tests.support.cli_errors import refusal_code
from tests.support.processes import (
    HUBJOBS,
    TEST_TOKEN_SECRET,
    api_url_for,
    cli_env,
    hubjobs_env,
    hubjobs_json,
    run_hubjobs,
)
from tests.support.terminal import run_on_terminal

CLOSED = {
    "HUBJOBS_DATABASE_URL": "postgresql://hubjobs@127.0.0.1:1/hubjobs",
    "HUBJOBS_TEMPORAL_ADDRESS": "127.0.0.1:1",
}


async def test_the_job_commands_need_only_the_api(
    settings: Settings, tmp_path: Path, worker: None
) -> None:
    seeded = await hubjobs_json(settings, tmp_path, "seed-demo", "--pages", "25")
    server_env = hubjobs_env(settings, tmp_path) | {"HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET}
    only_api = CLOSED | {
        "HUBJOBS_API_URL": api_url_for(server_env),
        "HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET,
    }
    job = await hubjobs_json(
        settings, tmp_path, "tag-course", "--tag", "api-only", "--wait", extra_env=only_api
    )
    assert job["status"] == "succeeded" and job["succeeded"] == 25, job
    assert job["result"]["tag"] == "api-only"
    status = await hubjobs_json(settings, tmp_path, "status", job["id"], extra_env=only_api)
    assert status == job
    listed = await hubjobs_json(settings, tmp_path, "list", extra_env=only_api)
    assert [found["id"] for found in listed] == [job["id"]]
    items = await hubjobs_json(settings, tmp_path, "items", job["id"], extra_env=only_api)
    assert [item["state"] for item in items["items"]] == ["succeeded"] * 25

    # Another actor's token: not a member of the workspace, so no such job for it.
    stranger = await hubjobs_json(settings, tmp_path / "other", "seed-demo", "--pages", "1")
    token = (
        await run_hubjobs(
            settings,
            tmp_path,
            "token",
            "--actor",
            stranger["actor_id"],
            extra_env={"HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET},
        )
    ).stdout.strip()
    as_stranger = only_api | {"HUBJOBS_API_TOKEN": token}
    workspace = ["--workspace", seeded["workspace_id"]]
    refused = await run_hubjobs(
        settings, tmp_path, "cancel", job["id"], *workspace, "--json", extra_env=as_stranger
    )
    assert refused.returncode == 1, refused.stderr
    assert refusal_code(refused.stderr.strip()) == "workspace_not_found", refused.stderr
    # Nor can the CLI be told to send that token as our actor.
    posing = await run_hubjobs(
        settings,
        tmp_path,
        "cancel",
        job["id"],
        *workspace,
        "--actor",
        seeded["actor_id"],
        "--json",
        extra_env=as_stranger,
    )
    assert posing.returncode == 2, posing.stderr
    assert refusal_code(posing.stderr.strip()) == "invalid_argument", posing.stderr
    assert (await hubjobs_json(settings, tmp_path, "status", job["id"], extra_env=only_api)) == job


async def test_an_api_that_does_not_answer_is_unavailable_at_once(
    settings: Settings, tmp_path: Path
) -> None:
    await hubjobs_json(settings, tmp_path, "seed-demo", "--pages", "1")
    nowhere = {"HUBJOBS_API_URL": "http://127.0.0.1:1", "HUBJOBS_API_JWT_SECRET": "s" * 40}
    done = await run_hubjobs(settings, tmp_path, "list", "--json", extra_env=nowhere, timeout=10)
    assert done.returncode == 1
    assert refusal_code(done.stderr.strip()) == "unavailable"
    assert "http://127.0.0.1:1" in done.stderr


async def test_the_clis_actions_are_audited_as_from_the_cli(
    settings: Settings, tmp_path: Path
) -> None:
    """A start and a cancel with a reason through the CLI are on the job's trail as the
    CLI's (``hubjobs audit --job``), with the actor and the reason; the table fits a
    narrow terminal and piped output, every value whole."""
    seeded = await hubjobs_json(settings, tmp_path, "seed-demo", "--pages", "5")
    server_env = hubjobs_env(settings, tmp_path) | {"HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET}
    only_api = CLOSED | {
        "HUBJOBS_API_URL": api_url_for(server_env),
        "HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET,
    }
    # No worker: the job stays queued, so the cancel is a cancel.
    job = await hubjobs_json(settings, tmp_path, "tag-course", "--tag", "cli", extra_env=only_api)
    await hubjobs_json(
        settings, tmp_path, "cancel", job["id"], "--reason", "wrong tag", extra_env=only_api
    )
    trail = await hubjobs_json(settings, tmp_path, "audit", "--job", job["id"], extra_env=only_api)
    assert [(e["action"], e["surface"]) for e in trail] == [("cancel", "cli"), ("start", "cli")]
    assert trail[0]["actor_id"] == seeded["actor_id"]
    assert (trail[0]["reason"], trail[0]["job_ids"]) == ("wrong tag", [job["id"]])
    # Piped, a row a line, every value whole; on a 40-column terminal, the columns that
    # fit, none cut.
    piped = await run_hubjobs(settings, tmp_path, "audit", extra_env=only_api)
    assert piped.returncode == 0, piped.stderr
    [cancel_line] = [line for line in piped.stdout.splitlines() if "wrong tag" in line]
    assert job["id"] in cancel_line and seeded["actor_id"] in cancel_line, piped.stdout
    # The terminal's size, not a COLUMNS this process may have inherited.
    env = {
        k: v
        for k, v in cli_env(settings, tmp_path, ["audit"], only_api).items()
        if k not in ("COLUMNS", "LINES")
    }
    narrow = await asyncio.to_thread(
        run_on_terminal, [str(HUBJOBS), "audit"], env, str(tmp_path), columns=40, lines=50
    )
    shown = re.sub(r"\x1b\[[0-9;]*m", "", narrow.written.decode())  # colours aside
    assert narrow.code == 0, shown
    assert "cancel" in shown and "start" in shown, shown
    assert max(len(line) for line in shown.splitlines()) <= 40, shown


async def test_overview_and_workers_read_the_queue_as_the_console_does(
    settings: Settings, tmp_path: Path
) -> None:
    """``hubjobs overview`` counts a queued job and names it the oldest waiting, piped and
    on a 40-column terminal; ``hubjobs workers`` answers the job task queue's pollers; a
    window the API does not know is one error line with its code."""
    await hubjobs_json(settings, tmp_path, "seed-demo", "--pages", "5")
    server_env = hubjobs_env(settings, tmp_path) | {"HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET}
    only_api = CLOSED | {
        "HUBJOBS_API_URL": api_url_for(server_env),
        "HUBJOBS_API_JWT_SECRET": TEST_TOKEN_SECRET,
    }
    # No worker: the job stays queued.
    job = await hubjobs_json(settings, tmp_path, "tag-course", "--tag", "q", extra_env=only_api)
    found = await hubjobs_json(
        settings, tmp_path, "overview", "--window", "day", extra_env=only_api
    )
    [tagging] = [kind for kind in found["kinds"] if kind["kind"] == "course_tagging"]
    assert (tagging["queued"], tagging["running"]) == (1, 0), found
    assert found["oldest_queued"]["job_id"] == job["id"]
    piped = await run_hubjobs(settings, tmp_path, "overview", extra_env=only_api)
    assert piped.returncode == 0, piped.stderr
    [row] = [line for line in piped.stdout.splitlines() if "course_tagging" in line]
    assert row.split("│")[2].strip() == "1", piped.stdout
    assert job["id"] in piped.stderr
    env = {
        k: v
        for k, v in cli_env(settings, tmp_path, ["overview"], only_api).items()
        if k not in ("COLUMNS", "LINES")
    }
    narrow = await asyncio.to_thread(
        run_on_terminal, [str(HUBJOBS), "overview"], env, str(tmp_path), columns=40, lines=50
    )
    shown = re.sub(r"\x1b\[[0-9;]*m", "", narrow.written.decode())
    assert narrow.code == 0, shown
    assert "course_tagging" in shown and "queued" in shown, shown
    assert max(len(line) for line in shown.splitlines()) <= 40, shown

    pollers = await hubjobs_json(settings, tmp_path, "workers", extra_env=only_api)
    assert pollers["task_queue"] == settings.task_queue
    assert isinstance(pollers["workers"], list)
    refused = await run_hubjobs(
        settings, tmp_path, "overview", "--window", "week", extra_env=only_api
    )
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    (line,) = refused.stderr.splitlines()
    assert refusal_code(line) == "invalid_request", line
