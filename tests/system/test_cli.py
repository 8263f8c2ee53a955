"""The ``hubjobs`` command line as a person or a script runs it: real subprocesses
against the real servers, with an in-process worker doing the work."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.views import API_JOB_FIELDS
from hubjobs.settings import Settings
from tests.support.cli_errors import refusal_code
from tests.support.processes import hubjobs_json, run_hubjobs

# What the CLI prints of a job: the API's record (its resource, and its result).
JOB_KEYS = {*API_JOB_FIELDS, "has_failed_items", "status_url"}


def _scope(workspace: object, actor: object) -> list[str]:
    return ["--workspace", str(workspace), "--actor", str(actor)]


def _assert_one_error_line(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert refusal_code(lines[0]) == code
    assert lines[0].startswith("{") == ("--json" in done.args), lines[0]


async def test_seed_tag_status_list_cancel(
    settings: Settings, tmp_path: Path, worker: None
) -> None:
    seeded = await hubjobs_json(settings, tmp_path, "seed-demo", "--pages", "40")
    assert {"workspace_id", "actor_id", "root_page_id"} <= seeded.keys()
    assert seeded["pages"] == 40
    scope = _scope(seeded["workspace_id"], seeded["actor_id"])

    job = await hubjobs_json(
        settings,
        tmp_path,
        "tag-course",
        *scope,
        "--root-page",
        seeded["root_page_id"],
        "--tag",
        "onboarding",
        "--wait",
    )
    assert {*JOB_KEYS, "result"} <= job.keys()
    assert job["status"] == "succeeded" and job["kind"] == "course_tagging"
    assert (job["total"], job["processed"], job["succeeded"]) == (40, 40, 40)
    assert (job["skipped"], job["failed"], job["error_code"], job["error_message"]) == (
        0,
        0,
        None,
        None,
    )
    assert job["result"]["tag"] == "onboarding" and job["result"]["succeeded"] == 40
    assert job["workflow_id"] == f"course_tagging-{job['id']}"
    assert job["started_at"] and job["finished_at"] and job["created_at"]
    uuid.UUID(job["id"])

    status = await hubjobs_json(settings, tmp_path, "status", job["id"], *scope)
    assert status == job

    listed = await hubjobs_json(settings, tmp_path, "list", *scope)
    assert [j["id"] for j in listed] == [job["id"]]
    assert JOB_KEYS <= listed[0].keys() and listed[0]["status"] == "succeeded"

    cancelled = await hubjobs_json(settings, tmp_path, "cancel", job["id"], *scope)
    assert cancelled["status"] == "succeeded"
    assert cancelled["cancel_requested_at"] is None
    # The record's own fields (its result, its retry's links) are not a cancel's answer.
    record_only = ("result", "retried_by", "source_job_id")
    assert cancelled == {key: value for key, value in job.items() if key not in record_only}
    # The log went to HUBJOBS_HOME, not to the terminal.
    assert (tmp_path / "hubjobs.log").exists()


async def test_errors_are_one_plain_line(
    settings: Settings, tmp_path: Path, course: DemoCourse, worker: None
) -> None:
    scope = _scope(course.workspace_id, course.actor_id)
    root = str(course.root_page_id)

    empty = await run_hubjobs(
        settings, tmp_path, "tag-course", *scope, "--root-page", root, "--tag", "", "--json"
    )
    _assert_one_error_line(empty, "invalid_payload")
    assert empty.returncode == 2 and empty.stdout == ""

    long_tag = await run_hubjobs(
        settings, tmp_path, "tag-course", *scope, "--root-page", root, "--tag", "y" * 80
    )
    _assert_one_error_line(long_tag, "invalid_payload")

    control = await run_hubjobs(
        settings, tmp_path, "tag-course", *scope, "--root-page", root, "--tag", "a\nb"
    )
    _assert_one_error_line(control, "invalid_payload")

    missing = await run_hubjobs(settings, tmp_path, "status", str(uuid.uuid4()), *scope, "--json")
    _assert_one_error_line(missing, "job_not_found")
    assert missing.returncode == 1 and missing.stdout == ""

    stranger = await run_hubjobs(
        settings, tmp_path, "list", *_scope(course.workspace_id, uuid.uuid4()), "--json"
    )
    _assert_one_error_line(stranger, "workspace_not_found")

    bad_status = await run_hubjobs(settings, tmp_path, "list", *scope, "--status", "nope")
    _assert_one_error_line(bad_status, "invalid_status")

    # The failure is in the log for whoever looks into it.
    assert "job_not_found" in (tmp_path / "hubjobs.log").read_text()


async def test_the_same_idempotency_key_gives_the_same_job(
    settings: Settings, tmp_path: Path, course: DemoCourse, worker: None
) -> None:
    args = [
        "tag-course",
        *_scope(course.workspace_id, course.actor_id),
        "--root-page",
        str(course.root_page_id),
        "--tag",
        "exam",
        "--idempotency-key",
        "cli-key",
    ]
    first = await hubjobs_json(settings, tmp_path, *args)
    second = await hubjobs_json(settings, tmp_path, *args, "--wait")
    assert second["id"] == first["id"]
    assert second["status"] == "succeeded" and second["succeeded"] == 30
    # The same key with another tag: refused naming the first job (exit 2: the
    # caller's mistake), in JSON and in the one plain line.
    reused = [*args[: args.index("exam")], "exam-2", *args[args.index("exam") + 1 :]]
    refused = await run_hubjobs(settings, tmp_path, *reused, "--json")
    _assert_one_error_line(refused, "idempotency_key_reused")
    assert refused.returncode == 2 and refused.stdout == ""
    assert json.loads(refused.stderr)["error"]["job_id"] == first["id"]
    plain = await run_hubjobs(settings, tmp_path, *reused)
    _assert_one_error_line(plain, "idempotency_key_reused")
    assert first["id"] in plain.stderr
    # Another key is another job: it finds every page tagged already.
    other = await hubjobs_json(settings, tmp_path, *args[:-1], "another-key", "--wait")
    assert other["id"] != first["id"]
    assert (other["status"], other["skipped"], other["succeeded"]) == ("succeeded", 30, 0)


async def test_watch_prints_each_change_to_the_final_one(
    settings: Settings, tmp_path: Path, worker: None
) -> None:
    """`hubjobs watch --json` follows the read model's change notifications: a line per
    change, the counters never going back, the last line the finished job."""
    seeded = await hubjobs_json(settings, tmp_path, "seed-demo", "--pages", "40")
    scope = _scope(seeded["workspace_id"], seeded["actor_id"])
    job = await hubjobs_json(
        settings,
        tmp_path,
        "tag-course",
        *scope,
        "--root-page",
        seeded["root_page_id"],
        "--tag",
        "watched",
    )
    done = await run_hubjobs(settings, tmp_path, "watch", job["id"], *scope, "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    processed = [line["processed"] for line in lines]
    assert processed == sorted(processed)
    assert lines[-1]["status"] == "succeeded" and processed[-1] == 40
    assert all(line["id"] == job["id"] for line in lines)
