"""Job schedules through the command line (real ``hubjobs`` subprocesses) and the HTTP
API (the app over the real servers): every command, and the refusals with their
stable codes; a refusal creates no Temporal Schedule."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, ScheduleActionStartWorkflow
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.kinds import REGISTRY
from hubjobs.schedules.definition import (
    MEMO_KEY,
    ScheduleDefinition,
    new_schedule_id,
    schedule_of,
    search_attributes_of,
    workspace_query,
)
from hubjobs.settings import Settings
from hubjobs.temporal.messages import ScheduledJob
from starter.cli import run_cli
from tests.support.cli_errors import refusal_code
from tests.support.helpers import until
from tests.support.processes import HUBJOBS, cli_env, hubjobs_json, run_hubjobs
from tests.support.servers import bearer, seed
from tests.support.terminal import run_on_terminal

T = TypeVar("T")
# Text output (rich tables) as wide as a terminal of 200 columns: rows stay whole.
WIDE = {"COLUMNS": "200"}
SCHEDULE_KEYS = {
    "id",
    "kind",
    "workspace_id",
    "actor_id",
    "payload",
    "cron",
    "every_seconds",
    "time_zone",
    "timing",
    "keep",
    "paused",
    "next_runs",
    "recent_runs",
    "created_at",
}


async def schedule_ids(temporal: Client, workspace: uuid.UUID) -> set[str]:
    """The workspace's Schedules as Temporal lists them."""
    return {s.id async for s in await temporal.list_schedules(workspace_query(workspace))}


@pytest_asyncio.fixture
async def cleanup(temporal: Client) -> AsyncIterator[list[uuid.UUID]]:
    """Workspaces whose Schedules are deleted after the test."""
    workspaces: list[uuid.UUID] = []
    yield workspaces
    for workspace in workspaces:
        for schedule_id in await schedule_ids(temporal, workspace):
            try:
                await temporal.get_schedule_handle(schedule_id).delete()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise


# --- the command line -------------------------------------------------------------------


def _run_in_process(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``hubjobs ARGS`` through ``run_cli``, its output captured as a process's would be."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(args)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _kept(schedule: dict[str, Any]) -> tuple[Any, Any]:
    return schedule["payload"], schedule["keep"]


def _refused(done: subprocess.CompletedProcess[str], code: str, exit_code: int) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert refusal_code(lines[0]) == code
    assert done.returncode == exit_code and done.stdout == ""


async def test_every_schedule_command_on_the_command_line(
    settings: Settings,
    tmp_path: Path,
    course: DemoCourse,
    engine: AsyncEngine,
    temporal: Client,
    worker: None,
    cleanup: list[uuid.UUID],
) -> None:
    cleanup.append(course.workspace_id)
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    payload = json.dumps({"root_page_id": str(course.root_page_id), "tag": "nightly"})
    created = await hubjobs_json(
        settings,
        tmp_path,
        "schedule",
        "create",
        "course_tagging",
        *scope,
        "--cron",
        "0 3 * * *",
        "--time-zone",
        "Europe/Amsterdam",
        "--payload",
        payload,
        "--keep",
        "7",
    )
    assert SCHEDULE_KEYS <= created.keys()
    assert (created["kind"], created["cron"], created["time_zone"], created["keep"]) == (
        "course_tagging",
        "0 3 * * *",
        "Europe/Amsterdam",
        7,
    )
    assert created["timing"] == "cron 0 3 * * * (Europe/Amsterdam)"
    assert created["payload"] == json.loads(payload) and created["paused"] is False
    assert created["next_runs"] and created["recent_runs"] == []
    schedule = created["id"]
    assert schedule.startswith("course_tagging-schedule-")

    async def listed() -> list[Any] | None:
        found = await hubjobs_json(settings, tmp_path, "schedule", "list", *scope)
        return found if [s["id"] for s in found] == [schedule] else None

    assert (await until("the schedule listed", listed))[0]["keep"] == 7
    shown = await hubjobs_json(settings, tmp_path, "schedule", "show", schedule, *scope)
    assert shown == created

    triggered = await hubjobs_json(settings, tmp_path, "schedule", "trigger", schedule, *scope)
    assert triggered["id"] == schedule

    async def run_done() -> list[Any] | None:
        jobs = await hubjobs_json(settings, tmp_path, "list", *scope, "--schedule", schedule)
        return jobs if jobs and jobs[0]["status"] == "succeeded" else None

    jobs = await until("the triggered run", run_done)
    assert len(jobs) == 1 and jobs[0]["schedule_id"] == schedule and jobs[0]["succeeded"] == 30
    shown = await hubjobs_json(settings, tmp_path, "schedule", "show", schedule, *scope)
    assert [run["job_id"] for run in shown["recent_runs"]] == [jobs[0]["id"]]

    paused = await hubjobs_json(settings, tmp_path, "schedule", "pause", schedule, *scope)
    assert paused["paused"] is True
    unpaused = await hubjobs_json(settings, tmp_path, "schedule", "unpause", schedule, *scope)
    assert unpaused["paused"] is False

    text_list = await run_hubjobs(settings, tmp_path, "schedule", "list", *scope, extra_env=WIDE)
    assert text_list.returncode == 0 and schedule in text_list.stdout

    # An edit: the cron and its zone, the rest as it was; its next firings in the zone.
    edit = ["schedule", "update", schedule, *scope, "--cron", "45 5 * * *"]
    updated = await hubjobs_json(settings, tmp_path, *edit, "--timezone", "Asia/Tokyo")
    assert (updated["id"], updated["payload"], updated["keep"]) == (schedule, *_kept(created))
    assert updated["timing"] == "cron 45 5 * * * (Asia/Tokyo)"
    assert updated["next_runs"] and all(t.endswith("T05:45:00+09:00") for t in updated["next_runs"])
    # Piped, a value a line, whole (its cells padded); on a 40-column terminal, nothing wider.
    piped = await run_hubjobs(settings, tmp_path, *edit, "--time-zone", "Asia/Tokyo")
    assert piped.returncode == 0, piped.stderr
    assert re.search(r"^ *timing +cron 45 5 \* \* \* \(Asia/Tokyo\) *$", piped.stdout, re.M)
    assert re.search(rf"^ *id +{schedule} *$", piped.stdout, re.M), piped.stdout
    env = {
        k: v
        for k, v in cli_env(settings, tmp_path, ["schedule"], {}).items()
        if k not in ("COLUMNS", "LINES")
    }
    narrow = await asyncio.to_thread(
        run_on_terminal, [str(HUBJOBS), *edit], env, str(tmp_path), columns=40, lines=50
    )
    shown = re.sub(r"\x1b\[[0-9;]*m", "", narrow.written.decode())  # colours aside
    assert narrow.code == 0, shown
    assert "Asia/Tokyo" in shown and max(len(line) for line in shown.splitlines()) <= 40, shown
    # The id folds onto the lines below it, whole: nothing cut with an ellipsis.
    assert "…" not in shown and schedule in re.sub(r"\s+", "", shown), shown

    deleted = await hubjobs_json(settings, tmp_path, "schedule", "delete", schedule, *scope)
    assert deleted == {"deleted": schedule}
    gone = await run_hubjobs(
        settings, tmp_path, "schedule", "show", schedule, *scope, extra_env=WIDE
    )
    _refused(gone, "schedule_not_found", 1)
    with_runs = await hubjobs_json(settings, tmp_path, "list", *scope, "--schedule", schedule)
    assert [job["id"] for job in with_runs] == [jobs[0]["id"]]  # the jobs stay


async def test_schedule_commands_refuse_with_stable_codes(
    settings: Settings,
    tmp_path: Path,
    course: DemoCourse,
    engine: AsyncEngine,
    temporal: Client,
    cleanup: list[uuid.UUID],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cleanup.append(course.workspace_id)
    other = await seed(engine, 2)
    cleanup.append(other.workspace_id)
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    as_reader = ["--workspace", str(course.workspace_id), "--actor", str(reader)]
    stranger = ["--workspace", str(course.workspace_id), "--actor", str(other.actor_id)]
    payload = json.dumps({"root_page_id": str(course.root_page_id), "tag": "t"})
    tagging = ["schedule", "create", "course_tagging", "--payload", payload]
    # The one valid schedule, in the other workspace.
    theirs = await hubjobs_json(
        settings,
        tmp_path,
        "schedule",
        "create",
        "backup",
        "--workspace",
        str(other.workspace_id),
        "--actor",
        str(other.actor_id),
        "--every",
        "1d",
    )
    missing = f"backup-schedule-{uuid.uuid4()}"
    cases: list[tuple[list[str], str, int]] = [
        ([*tagging, *scope, "--cron", "not a cron"], "invalid_cron", 2),
        ([*tagging, *scope, "--cron", "61 3 * * *"], "invalid_cron", 2),  # Temporal's word
        ([*tagging, *scope, "--cron", "0 3 * * *", "--every", "1h"], "invalid_schedule", 2),
        ([*tagging, *scope], "invalid_schedule", 2),
        ([*tagging, *scope, "--every", "5 minutes"], "invalid_interval", 2),
        ([*tagging, *scope, "--every", "0s"], "invalid_interval", 2),
        (
            [*tagging, *scope, "--cron", "0 3 * * *", "--time-zone", "Mars/Olympus"],
            "invalid_time_zone",
            2,
        ),
        ([*tagging, *scope, "--every", "1h", "--keep", "0"], "invalid_keep", 2),
        (["schedule", "create", "no_such_kind", *scope, "--every", "1h"], "unknown_kind", 2),
        (
            ["schedule", "create", "backup", *scope, "--every", "1h", "--payload", "{"],
            "invalid_payload",
            2,
        ),
        (
            ["schedule", "create", "backup", *scope, "--every", "1h", "--payload", "[1]"],
            "invalid_payload",
            2,
        ),
        (
            ["schedule", "create", "backup", *scope, "--every", "1h", "--payload", '{"x": 1}'],
            "invalid_payload",
            2,
        ),
        (["schedule", "create", "course_tagging", *scope, "--every", "1h"], "invalid_payload", 2),
        ([*tagging, *as_reader, "--every", "1h"], "actor_not_administrator", 1),
        ([*tagging, *stranger, "--every", "1h"], "workspace_not_found", 1),
        (["schedule", "list", *stranger], "workspace_not_found", 1),
        (["schedule", "show", missing, *scope], "schedule_not_found", 1),
        (["schedule", "show", "not-a-schedule", *scope], "invalid_schedule_id", 2),
        (["schedule", "show", theirs["id"], *scope], "schedule_not_found", 1),  # not ours
        (["schedule", "pause", theirs["id"], *scope], "schedule_not_found", 1),
        (["schedule", "trigger", missing, *scope], "schedule_not_found", 1),
        (["schedule", "delete", theirs["id"], *as_reader], "actor_not_administrator", 1),
        (["list", *scope, "--schedule", "nope"], "invalid_schedule_id", 2),
        (["schedule", "update", missing, *scope, "--cron", "0 4 * * *"], "schedule_not_found", 1),
        (["schedule", "update", theirs["id"], *scope, "--every", "2h"], "schedule_not_found", 1),
        (
            ["schedule", "update", theirs["id"], *as_reader, "--cron", "0 4 * * *"],
            "actor_not_administrator",
            1,
        ),
        (["schedule", "update", missing, *scope, "--payload", "{"], "invalid_payload", 2),
        (
            ["schedule", "update", "not-a-schedule", *scope, "--every", "2h"],
            "invalid_schedule_id",
            2,
        ),
    ]
    # The environment a job command gets: the API of these servers, the tests' secret.
    for name, value in cli_env(settings, tmp_path, ["schedule"], {}).items():
        monkeypatch.setenv(name, value)
    for args, code, exit_code in cases:
        # In this process (the entry point the script calls), in a thread: it runs its
        # own event loop. The happy path above ran the real script.
        result = await asyncio.to_thread(_run_in_process, args)
        _refused(result, code, exit_code)
    # A reader lists and shows; nothing was created here by any refusal.
    assert await hubjobs_json(settings, tmp_path, "schedule", "list", *as_reader) == []
    assert await schedule_ids(temporal, course.workspace_id) == set()
    assert await schedule_ids(temporal, other.workspace_id) == {theirs["id"]}
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one() == 0


# --- the HTTP API ---------------------------------------------------------------------------


async def test_every_schedule_route_of_the_api(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    worker: None,
    cleanup: list[uuid.UUID],
) -> None:
    cleanup.append(course.workspace_id)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    body = {
        "kind": "course_tagging",
        "cron": "30 2 * * MON",
        "payload": {"root_page_id": str(course.root_page_id), "tag": "weekly"},
        "keep": 2,
    }
    created = await http.post(base, json=body, headers=auth)
    assert created.status_code == 201, created.text
    schedule = created.json()
    location = created.headers["Location"]
    assert location == f"{base}/{schedule['id']}" == schedule["url"]
    assert SCHEDULE_KEYS <= schedule.keys()
    assert (schedule["cron"], schedule["time_zone"], schedule["keep"]) == ("30 2 * * MON", None, 2)
    assert schedule["timing"] == "cron 30 2 * * MON (UTC)" and schedule["paused"] is False

    got = await http.get(location, headers=auth)
    assert got.status_code == 200 and got.json() == schedule

    async def listed() -> list[Any] | None:
        answer = await http.get(base, headers=auth)
        assert answer.status_code == 200
        found = answer.json()
        return found if [s["id"] for s in found] == [schedule["id"]] else None

    await until("the schedule listed", listed)

    paused = await http.post(f"{location}/pause", headers=auth)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    unpaused = await http.post(f"{location}/unpause", headers=auth)
    assert unpaused.status_code == 200 and unpaused.json()["paused"] is False

    triggered = await http.post(f"{location}/trigger", headers=auth)
    assert triggered.status_code == 202 and triggered.json()["id"] == schedule["id"]

    async def run_done() -> list[Any] | None:
        answer = await http.get(schedule["jobs_url"], headers=auth)
        assert answer.status_code == 200
        jobs = answer.json()["jobs"]  # a page of the list: {jobs, next}
        return jobs if jobs and jobs[0]["status"] == "succeeded" else None

    jobs = await until("the triggered run", run_done)
    assert len(jobs) == 1 and jobs[0]["schedule_id"] == schedule["id"]
    result = await http.get(jobs[0]["status_url"], headers=auth)
    assert result.status_code == 200 and result.json()["succeeded"] == 30
    shown = (await http.get(location, headers=auth)).json()
    assert [run["job_id"] for run in shown["recent_runs"]] == [jobs[0]["id"]]
    assert shown["recent_runs"][0]["job_url"] == jobs[0]["status_url"]

    deleted = await http.delete(location, headers=auth)
    assert deleted.status_code == 204 and deleted.content == b""
    gone = await http.get(location, headers=auth)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "schedule_not_found"
    again = await http.delete(location, headers=auth)
    assert again.status_code == 404


async def test_schedule_routes_refuse_with_stable_codes(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    engine: AsyncEngine,
    temporal: Client,
    cleanup: list[uuid.UUID],
) -> None:
    cleanup.append(course.workspace_id)
    other = await seed(engine, 2)
    cleanup.append(other.workspace_id)
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    auth = bearer(course.actor_id, api_settings)
    as_reader = bearer(reader, api_settings)
    outsider = bearer(other.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    tagging = {
        "kind": "course_tagging",
        "payload": {"root_page_id": str(course.root_page_id), "tag": "t"},
    }

    refusals: list[tuple[dict[str, Any], str]] = [
        ({**tagging, "cron": "not a cron"}, "invalid_cron"),
        ({**tagging, "cron": "0 3 32 * *"}, "invalid_cron"),  # Temporal's word
        ({**tagging, "cron": "0 3 * * *", "every": "1h"}, "invalid_schedule"),
        (tagging, "invalid_schedule"),
        ({**tagging, "every": "soon"}, "invalid_interval"),
        ({**tagging, "every": "400d"}, "invalid_interval"),
        ({**tagging, "every": "1h", "time_zone": "UTC"}, "invalid_schedule"),
        ({**tagging, "cron": "0 3 * * *", "time_zone": "../../etc/passwd"}, "invalid_time_zone"),
        ({**tagging, "every": "1h", "keep": 0}, "invalid_keep"),
        ({**tagging, "every": "1h", "keep": 1001}, "invalid_keep"),
        ({"kind": "no_such_kind", "every": "1h"}, "unknown_kind"),
        ({"kind": "backup", "every": "1h", "payload": {"x": 1}}, "invalid_payload"),
        ({"kind": "course_tagging", "every": "1h"}, "invalid_payload"),
        ({**tagging, "every": "1h", "colour": "red"}, "invalid_request"),
        ({"every": "1h"}, "invalid_request"),
    ]
    for body, code in refusals:
        answer = await http.post(base, json=body, headers=auth)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"]["code"] == code, (body, answer.json())
        assert "Traceback" not in answer.text and "passwd" not in answer.text
    # Authorised like jobs.
    assert (await http.post(base, json={**tagging, "every": "1h"})).status_code == 401
    forbidden = await http.post(base, json={**tagging, "every": "1h"}, headers=as_reader)
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "actor_not_administrator"
    hidden = await http.post(base, json={**tagging, "every": "1h"}, headers=outsider)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "workspace_not_found"
    assert await schedule_ids(temporal, course.workspace_id) == set()  # nothing created

    created = await http.post(base, json={**tagging, "every": "1d"}, headers=auth)
    assert created.status_code == 201
    location = created.headers["Location"]
    for action in ("pause", "unpause", "trigger"):
        refused = await http.post(f"{location}/{action}", headers=as_reader)
        assert refused.status_code == 403, action
        assert refused.json()["error"]["code"] == "actor_not_administrator"
    assert (await http.delete(location, headers=as_reader)).status_code == 403
    # A member reads them.
    assert (await http.get(location, headers=as_reader)).status_code == 200
    assert (await http.get(base, headers=as_reader)).status_code == 200
    # Not a member: the workspace is not there for it, nor are its schedules.
    for url in (base, location):
        probe = await http.get(url, headers=outsider)
        assert probe.status_code == 404 and probe.json()["error"]["code"] == "workspace_not_found"
    # Its own workspace in the path, our schedule's id: not found, and left alone.
    foreign = location.replace(str(course.workspace_id), str(other.workspace_id))
    for method, url in (("GET", foreign), ("POST", f"{foreign}/pause"), ("DELETE", foreign)):
        probe = await http.request(method, url, headers=outsider)
        assert probe.status_code == 404 and probe.json()["error"]["code"] == "schedule_not_found"
    assert (await http.get(location, headers=auth)).json()["paused"] is False
    malformed = await http.get(f"{base}/not-a-schedule", headers=auth)
    assert malformed.status_code == 422
    assert malformed.json()["error"]["code"] == "invalid_schedule_id"
    bad_filter = await http.get(
        f"/workspaces/{course.workspace_id}/jobs?schedule_id=x", headers=auth
    )
    assert bad_filter.status_code == 422
    assert bad_filter.json()["error"]["code"] == "invalid_schedule_id"


# --- an edit (PATCH) ------------------------------------------------------------------------


def firings(schedule: dict[str, Any]) -> list[datetime]:
    return [datetime.fromisoformat(moment) for moment in schedule["next_runs"]]


async def edits_recorded(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings
) -> list[dict[str, Any]]:
    """The workspace's schedule_update events, newest first."""
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/audit", headers=bearer(course.actor_id, settings)
    )
    assert answer.status_code == 200, answer.text
    return [e for e in answer.json()["events"] if e["action"] == "schedule_update"]


async def test_an_edit_changes_the_schedule_in_place(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    temporal: Client,
    cleanup: list[uuid.UUID],
) -> None:
    """Cron and zone edited: the same Temporal schedule fires at the new time, its next
    firings given in its own zone; a payload edited reaches the firings' input; each
    edit is one audit event with what it changed, before and after; an edit changing
    nothing records nothing."""
    cleanup.append(course.workspace_id)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    payload = {"root_page_id": str(course.root_page_id), "tag": "weekly"}
    body = {"kind": "course_tagging", "cron": "0 3 * * *", "payload": payload}
    created = (await http.post(base, json=body, headers=auth)).json()
    location = created["url"]
    assert {(t.utcoffset(), t.hour, t.minute) for t in firings(created)} == {(timedelta(0), 3, 0)}

    edited = await http.patch(
        location, json={"cron": "30 6 * * *", "time_zone": "Asia/Tokyo"}, headers=auth
    )
    assert edited.status_code == 200, edited.text
    after = edited.json()
    assert (after["id"], after["payload"], after["paused"]) == (created["id"], payload, False)
    assert (after["cron"], after["time_zone"], after["timing"]) == (
        "30 6 * * *",
        "Asia/Tokyo",
        "cron 30 6 * * * (Asia/Tokyo)",
    )
    assert after["note"] == "course_tagging cron 30 6 * * * (Asia/Tokyo)"
    # Its next firings moved, and read in its own zone: 06:30 in Tokyo, a day apart.
    moved = firings(after)
    assert len(moved) >= 3 and moved != firings(created)
    assert {(t.utcoffset(), t.hour, t.minute) for t in moved} == {(timedelta(hours=9), 6, 30)}
    assert all(b - a == timedelta(days=1) for a, b in pairwise(moved))
    assert (await http.get(location, headers=auth)).json() == after
    described = await temporal.get_schedule_handle(created["id"]).describe()
    assert described.schedule.spec.time_zone_name == "Asia/Tokyo"
    [calendar] = described.schedule.spec.calendars
    assert (calendar.hour[0].start, calendar.minute[0].start) == (6, 30)

    async def listed_edited() -> list[Any] | None:
        found = (await http.get(base, headers=auth)).json()
        return found if found and found[0]["cron"] == "30 6 * * *" else None

    assert (await until("the edit listed", listed_edited))[0] == after

    # The payload, whole: the firings' input changes with it, the timing stays.
    retagged = {**payload, "tag": "monthly"}
    again = await http.patch(location, json={"payload": retagged}, headers=auth)
    assert again.status_code == 200, again.text
    assert (again.json()["payload"], again.json()["cron"]) == (retagged, "30 6 * * *")
    action = (await temporal.get_schedule_handle(created["id"]).describe()).schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    [firing] = await temporal.data_converter.decode(list(action.args), [ScheduledJob])
    assert firing.payload == retagged and firing.schedule_id == created["id"]

    same = await http.patch(location, json={"time_zone": "Asia/Tokyo"}, headers=auth)
    assert same.status_code == 200 and same.json() == again.json()

    events = await edits_recorded(http, course, api_settings)
    assert [e["detail"] for e in events] == [
        {"before": {"payload": payload}, "after": {"payload": retagged}},
        {
            "before": {"cron": "0 3 * * *", "time_zone": None},
            "after": {"cron": "30 6 * * *", "time_zone": "Asia/Tokyo"},
        },
    ]
    assert {(e["schedule_id"], e["surface"], e["actor_id"]) for e in events} == {
        (created["id"], "api", str(course.actor_id))
    }


async def test_a_paused_schedule_stays_paused_through_an_edit(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    temporal: Client,
    cleanup: list[uuid.UUID],
) -> None:
    cleanup.append(course.workspace_id)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    created = (await http.post(base, json={"kind": "backup", "every": "1d"}, headers=auth)).json()
    location = created["url"]
    assert (await http.post(f"{location}/pause", headers=auth)).json()["paused"] is True

    edited = await http.patch(
        location, json={"cron": "15 4 * * *", "time_zone": "America/New_York"}, headers=auth
    )
    assert edited.status_code == 200, edited.text
    after = edited.json()
    assert (after["paused"], after["next_runs"], after["every_seconds"]) == (True, [], None)
    what = "backup cron 15 4 * * * (America/New_York)"
    assert after["note"] == f"{what}; paused by {course.actor_id}"
    assert (await temporal.get_schedule_handle(created["id"]).describe()).schedule.state.paused

    resumed = (await http.post(f"{location}/unpause", headers=auth)).json()
    assert (resumed["paused"], resumed["note"]) == (False, what)
    assert {(t.hour, t.minute, str(t.tzinfo)) for t in firings(resumed)} <= {
        (4, 15, "UTC-05:00"),
        (4, 15, "UTC-04:00"),
    }


async def test_an_edit_is_refused_with_the_creates_codes(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    engine: AsyncEngine,
    cleanup: list[uuid.UUID],
) -> None:
    """Each refusal changes nothing and records nothing; a reader is refused as at
    creation (403); another workspace's schedule is not found (404)."""
    cleanup.append(course.workspace_id)
    other = await seed(engine, 2)
    cleanup.append(other.workspace_id)
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    payload = {"root_page_id": str(course.root_page_id), "tag": "t"}
    body = {"kind": "course_tagging", "cron": "0 3 * * *", "payload": payload}
    created = (await http.post(base, json=body, headers=auth)).json()
    location = created["url"]
    interval = (await http.post(base, json={"kind": "backup", "every": "1h"}, headers=auth)).json()

    refusals: list[tuple[str, dict[str, Any], str]] = [
        (location, {"payload": {"x": 1}}, "invalid_payload"),
        (location, {"payload": {"tag": "t"}}, "invalid_payload"),
        (location, {"payload": [1]}, "invalid_request"),
        (location, {"cron": "not a cron"}, "invalid_cron"),
        (location, {"cron": "0 3 32 * *"}, "invalid_cron"),  # Temporal's word
        (location, {"cron": "0 3 * * *", "every": "1h"}, "invalid_schedule"),
        (location, {"every": "soon"}, "invalid_interval"),
        (location, {"every": "1h", "time_zone": "UTC"}, "invalid_schedule"),
        (location, {"time_zone": "../../etc/passwd"}, "invalid_time_zone"),
        (location, {"keep": 3}, "invalid_request"),
        (location, {"kind": "backup"}, "invalid_request"),
        (location, {"colour": "red"}, "invalid_request"),
        (interval["url"], {"time_zone": "Europe/Amsterdam"}, "invalid_schedule"),
        (f"{base}/not-a-schedule", {"cron": "0 4 * * *"}, "invalid_schedule_id"),
    ]
    for url, change, code in refusals:
        answer = await http.patch(url, json=change, headers=auth)
        assert answer.status_code == 422, (change, answer.text)
        assert answer.json()["error"]["code"] == code, (change, answer.json())
        assert "Traceback" not in answer.text and "passwd" not in answer.text

    forbidden = await http.patch(
        location, json={"cron": "0 4 * * *"}, headers=bearer(reader, api_settings)
    )
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "actor_not_administrator"
    outsider = bearer(other.actor_id, api_settings)
    foreign = location.replace(str(course.workspace_id), str(other.workspace_id))
    hidden = await http.patch(foreign, json={"cron": "0 4 * * *"}, headers=outsider)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "schedule_not_found"
    missing = f"{base}/backup-schedule-{uuid.uuid4()}"
    gone = await http.patch(missing, json={"cron": "0 4 * * *"}, headers=auth)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "schedule_not_found"

    assert (await http.get(location, headers=auth)).json() == created
    assert await edits_recorded(http, course, api_settings) == []


async def test_edits_at_once_each_keep_the_others_change(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    cleanup: list[uuid.UUID],
) -> None:
    """Two edits of one schedule at once, one of its cron and one of its payload: both
    are kept (neither writes the schedule back as it read it before the other), and the
    audit's events chain, each one's before the previous one's after."""
    cleanup.append(course.workspace_id)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/schedules"
    payload = {"root_page_id": str(course.root_page_id), "tag": "t"}
    body = {"kind": "course_tagging", "cron": "0 3 * * *", "payload": payload}
    location = (await http.post(base, json=body, headers=auth)).json()["url"]
    rounds = 5
    for turn in range(1, rounds + 1):
        tagged = {**payload, "tag": f"t{turn}"}
        answers = await asyncio.gather(
            http.patch(location, json={"cron": f"{turn} 3 * * *"}, headers=auth),
            http.patch(location, json={"payload": tagged}, headers=auth),
        )
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        now = (await http.get(location, headers=auth)).json()
        assert (now["cron"], now["payload"]) == (f"{turn} 3 * * *", tagged), turn
    events = list(reversed(await edits_recorded(http, course, api_settings)))
    assert len(events) == 2 * rounds
    state = {"cron": "0 3 * * *", "payload": payload}
    for event in events:
        before, after = event["detail"]["before"], event["detail"]["after"]
        assert {name: state[name] for name in before} == before, events
        state.update(after)


async def test_a_schedule_made_before_edits_existed_is_edited(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    temporal: Client,
    cleanup: list[uuid.UUID],
) -> None:
    """A schedule whose action carries no definition (made before edits existed) reads
    from its memo, and its first edit starts from that."""
    cleanup.append(course.workspace_id)
    auth = bearer(course.actor_id, api_settings)
    definition = ScheduleDefinition(
        id=new_schedule_id("backup"),
        kind="backup",
        workspace_id=course.workspace_id,
        actor_id=course.actor_id,
        payload=REGISTRY.get("backup").validate({}).model_dump(mode="json"),
        cron="0 3 * * *",
        created_at=datetime.now(UTC),
    )
    schedule = schedule_of(definition, api_settings, "Backup")
    assert isinstance(schedule.action, ScheduleActionStartWorkflow)
    schedule.action.memo = None
    await temporal.create_schedule(
        definition.id,
        schedule,
        memo={MEMO_KEY: definition},
        search_attributes=search_attributes_of(definition),
    )
    location = f"/workspaces/{course.workspace_id}/schedules/{definition.id}"
    assert (await http.get(location, headers=auth)).json()["cron"] == "0 3 * * *"
    edited = await http.patch(location, json={"cron": "0 5 * * *"}, headers=auth)
    assert edited.status_code == 200, edited.text
    after = edited.json()
    assert (after["cron"], after["payload"]) == ("0 5 * * *", definition.payload)
    assert (await http.get(location, headers=auth)).json() == after
    [event] = await edits_recorded(http, course, api_settings)
    assert event["detail"] == {"before": {"cron": "0 3 * * *"}, "after": {"cron": "0 5 * * *"}}
