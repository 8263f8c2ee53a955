"""Hostile text through every text field, on the real servers: property-based tests
(hypothesis) of the HTTP API (path ids, payload fields and unknown keys, raw bodies,
Idempotency-Key, X-Correlation-Id, Authorization, query parameters, a schedule's id,
kind, cron expression, interval and time zone) and of the CLI (every option taking
text, and bytes that are not UTF-8).

Whatever comes in: never a 5xx, never a traceback, a stable error code, no echo of the
value in the error, and nothing written when refused (no job row, no item, no page
changed, no workflow without its row).

The hypothesis loop runs in a worker thread and hands each request to the test's event
loop, so that the checks after it (Temporal's list of workflows) run once per test."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.schedules.definition import SCHEDULED_START_WORKFLOW, workspace_query
from hubjobs.settings import Settings
from starter.api.tokens import mint
from starter.cli import run_cli
from tests.support.cli_errors import refusal_code
from tests.support.helpers import until
from tests.support.hostile import CANONICAL, hostile_text, invalid_utf8
from tests.support.processes import cli_env
from tests.support.servers import API_SECRET, bearer

T = TypeVar("T")
HUBJOBS = Path(sys.executable).parent / "hubjobs"

# Every code a refusal may carry here. A code outside it (invalid_data: the database
# refused what validation let through; internal_error) fails the test.
API_CODES = frozenset(
    {
        "invalid_request",
        "invalid_payload",
        "unknown_kind",
        "invalid_idempotency_key",
        "invalid_correlation_id",
        "unauthorized",
        "workspace_not_found",
        "job_not_found",
        "page_not_found",
        "not_found",
        "method_not_allowed",
        "payload_too_large",
        "invalid_cron",
        "invalid_interval",
        "invalid_time_zone",
        "invalid_schedule_id",
        "schedule_not_found",
    }
)
CLI_CODES = API_CODES | {
    "invalid_argument",
    "invalid_encoding",
    "invalid_status",
    "invalid_reason",
    "invalid_state",
}
# Examples per field: every field gets its own run, so none is left out by chance.
PROPERTY = hypothesis_settings(
    max_examples=25,
    deadline=timedelta(seconds=10),
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CLI_PROPERTY = hypothesis_settings(PROPERTY, max_examples=6)


def canonical(test: Callable[[str], None]) -> Callable[[str], None]:
    """Each canonical hostile value (one per refusing rule) is always tried."""
    for value in CANONICAL:
        test = example(value=value)(test)
    return test


async def fingerprint(engine: AsyncEngine) -> tuple[int, ...]:
    """What a refused request must leave as it was: job rows, items, pages, revisions."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_items), "
                    "(SELECT count(*) FROM pages), (SELECT coalesce(sum(version), 0) FROM pages), "
                    "(SELECT count(*) FROM page_revisions)"
                )
            )
        ).one()
    return tuple(int(v) for v in row)


async def assert_no_workflow_without_its_row(
    temporal: Client, engine: AsyncEngine, task_queue: str, workspace_id: uuid.UUID
) -> None:
    """Every job workflow on the test's queue belongs to a job row; then they are ended,
    and any schedule a value that happened to be valid created is deleted (a firing is
    not a job: it makes its row when a worker runs it)."""
    async for schedule in await temporal.list_schedules(workspace_query(workspace_id)):
        await temporal.get_schedule_handle(schedule.id).delete()
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT id, workflow_id FROM jobs"))).all()
    ids = {str(row.id) for row in rows}
    # Visibility lags a start a little: the list is read once it shows every row's
    # workflow Temporal has (a start withdrawn before Temporal took it has none).
    started = set()
    for row in rows:
        try:
            await temporal.get_workflow_handle(row.workflow_id).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        else:
            started.add(row.workflow_id)
    query = f'TaskQueue = "{task_queue}"'

    async def listed() -> tuple[list[WorkflowExecution]] | None:
        found = [wf async for wf in temporal.list_workflows(query)]
        return (found,) if started <= {wf.id for wf in found} else None

    (workflows,) = await until(
        f"visibility to list the {len(started)} workflows of the rows", listed, timeout=30
    )
    for wf in workflows:
        if wf.workflow_type != SCHEDULED_START_WORKFLOW:
            assert wf.id.split("-", 1)[1] in ids, wf.id  # <kind>-<job id>
        if wf.status is not None and wf.status.name == "RUNNING":
            await temporal.get_workflow_handle(wf.id).terminate("test over")


def on_loop(loop: asyncio.AbstractEventLoop) -> Callable[[Coroutine[Any, Any, T]], T]:
    """From the hypothesis thread: run a coroutine on the test's loop and wait for it."""

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    return run


def _as_header(value: str) -> bytes:
    """The value as header bytes (UTF-8, surrogates kept as their bytes), less what no
    HTTP message can carry in a header (CR, LF, NUL) and the spaces a server trims."""
    raw = value.encode("utf-8", "surrogatepass")
    return raw.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"").strip(b" \t")


def _segment(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


API_FIELDS = [
    "workspace",
    "kind",
    "job",
    "delete_job",
    "tag",
    "root_page_id",
    "unknown_key",
    "unknown_value",
    "raw_body",
    "idempotency_key",
    "correlation_id",
    "authorization",
    "bearer",
    "status_query",
    "limit_query",
    "other_query",
    "schedule",
    "schedule_kind",
    "cron",
    "every",
    "time_zone",
    "items_state",
    "items_after",
    "items_limit",
    "file_name",
    "retry_job",
]


def api_request(
    field: str, value: str, course: DemoCourse, token: str
) -> tuple[str, str, dict[str, Any]]:
    """The request that carries ``value`` in ``field``; every other part is valid."""
    ws = str(course.workspace_id)
    headers: dict[str, Any] = {"Authorization": f"Bearer {token}"}
    options: dict[str, Any] = {"headers": headers}
    for build in (_in_the_path, _in_a_schedule, _in_a_header):
        request = build(field, value, ws, options)
        if request is not None:
            return request
    return _in_the_payload(field, value, course, options)


Request = tuple[str, str, dict[str, Any]]


def _in_the_path(field: str, value: str, ws: str, options: dict[str, Any]) -> Request | None:
    segment = _segment(value)
    job = f"/workspaces/{ws}/jobs/{uuid.uuid4()}"
    paths: dict[str, tuple[str, str, dict[str, Any]]] = {
        "workspace": ("GET", f"/workspaces/{segment}/jobs", options),
        "schedule": ("GET", f"/workspaces/{ws}/schedules/{segment}", options),
        "kind": ("POST", f"/workspaces/{ws}/jobs/{segment}", {**options, "json": {}}),
        "items_state": ("GET", f"{job}/items?state={segment}", options),
        "items_after": ("GET", f"{job}/items?after={segment}", options),
        "items_limit": ("GET", f"{job}/items?limit={segment}", options),
        "file_name": ("GET", f"{job}/files/{segment}", options),
        "retry_job": ("POST", f"/workspaces/{ws}/jobs/{segment}/retry", options),
        "job": ("GET", f"/workspaces/{ws}/jobs/{segment}", options),
        "delete_job": ("DELETE", f"/workspaces/{ws}/jobs/{segment}", options),
        "status_query": ("GET", f"/workspaces/{ws}/jobs?status={segment}", options),
        "limit_query": ("GET", f"/workspaces/{ws}/jobs?limit={segment}", options),
        "other_query": ("GET", f"/workspaces/{ws}/jobs?q={segment}", options),
    }
    return paths.get(field)


def _in_a_schedule(field: str, value: str, ws: str, options: dict[str, Any]) -> Request | None:
    schedule = {
        "schedule_kind": {"kind": value, "every": "1d"},
        "cron": {"kind": "backup", "cron": value},
        "every": {"kind": "backup", "every": value},
        "time_zone": {"kind": "backup", "cron": "0 3 * * *", "time_zone": value},
    }.get(field)
    if schedule is None:
        return None
    body = json.dumps(schedule, ensure_ascii=True).encode()
    options["headers"]["Content-Type"] = "application/json"
    return "POST", f"/workspaces/{ws}/schedules", {**options, "content": body}


def _in_a_header(field: str, value: str, ws: str, options: dict[str, Any]) -> Request | None:
    headers = options["headers"]
    if field == "idempotency_key":
        headers["Idempotency-Key"] = _as_header(value)
    elif field == "correlation_id":
        headers["X-Correlation-Id"] = _as_header(value)
    elif field == "authorization":
        headers["Authorization"] = _as_header(value)
    elif field == "bearer":
        headers["Authorization"] = b"Bearer " + _as_header(value)
    return None  # the header set, the request is a start's


def _in_the_payload(field: str, value: str, course: DemoCourse, options: dict[str, Any]) -> Request:
    start = f"/workspaces/{course.workspace_id}/jobs/course_tagging"
    headers = options["headers"]
    payload: dict[str, Any] = {"root_page_id": str(course.root_page_id), "tag": "hostile"}
    if field == "raw_body":
        raw = value.encode("utf-8", "surrogatepass")
        return (
            "POST",
            start,
            {**options, "content": raw, "headers": {**headers, "Content-Type": "application/json"}},
        )
    if field == "tag":
        payload["tag"] = value
    elif field == "root_page_id":
        payload["root_page_id"] = value
    elif field == "unknown_key":
        payload[value] = "x"
    elif field == "unknown_value":
        payload["note"] = value
    # As an attacker sends it: JSON with \uXXXX escapes (lone surrogates too).
    body = json.dumps(payload, ensure_ascii=True).encode()
    headers["Content-Type"] = "application/json"
    return "POST", start, {**options, "content": body}


def _json_body(value: str) -> str:
    """A body that is JSON in shape, whatever the value holds (lone surrogates escaped)."""
    return json.dumps(value)


async def test_hostile_text_in_any_field_of_the_api(
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
) -> None:
    run = on_loop(asyncio.get_running_loop())
    token = mint(course.actor_id, api_settings)
    seen: dict[str, int] = {}

    def check(field: str) -> None:
        @PROPERTY
        @given(value=st.one_of(hostile_text(), hostile_text().map(_json_body)))
        @canonical
        def examples(value: str) -> None:
            check_one(field, value)

        examples()

    def check_one(field: str, value: str) -> None:
        method, url, options = api_request(field, value, course, token)
        before = run(fingerprint(engine))
        answer = run(http.request(method, url, **options))
        after = run(fingerprint(engine))
        seen[field] = seen.get(field, 0) + 1
        assert answer.status_code < 500, (field, answer.status_code, answer.text[:300])
        assert "Traceback" not in answer.text
        if answer.status_code >= 400:
            error = answer.json()["error"]
            assert error["code"] in API_CODES, (field, error)
            assert isinstance(error["message"], str) and error["message"]
            assert "SELECT" not in error["message"] and "INSERT" not in error["message"]
            if len(value) >= 8:
                assert value not in error["message"], (field, error)
        if method == "POST" and answer.status_code == 202:
            assert after[0] == before[0] + 1  # one job, as any valid start
        else:
            assert after == before, (field, answer.status_code)  # a refusal writes nothing

    for field in API_FIELDS:
        await asyncio.to_thread(check, field)
    assert set(seen) == set(API_FIELDS), seen  # every field got hostile text
    await assert_no_workflow_without_its_row(
        temporal, engine, api_settings.task_queue, course.workspace_id
    )


async def test_json_oddities_in_the_body(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    """Bodies a JSON parser may choke on: deep nesting, huge numbers, NaN, duplicate
    keys, a BOM, not an object, invalid UTF-8, over the size limit."""
    auth = bearer(course.actor_id, api_settings)
    url = f"/workspaces/{course.workspace_id}/jobs/course_tagging"
    root = str(course.root_page_id)
    bodies = [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
        b'{"root_page_id": "%s", "tag": 1e999999}' % root.encode(),
        b'{"root_page_id": "%s", "tag": NaN}' % root.encode(),
        b'{"root_page_id": "%s", "tag": "a", "tag": "\\ud800"}' % root.encode(),
        b'{"root_page_id": "%s", "tag": "\xff\xfe"}' % root.encode(),
        b'"just a string"',
        b"null",
        b"",
        b"{" + b" " * (2 * 1024 * 1024) + b"}",
    ]
    before = await fingerprint(engine)
    for body in bodies:
        answer = await http.post(
            url, content=body, headers={**auth, "Content-Type": "application/json"}
        )
        assert answer.status_code in (400, 413, 422), (body[:40], answer.status_code)
        assert answer.json()["error"]["code"] in API_CODES
    assert await fingerprint(engine) == before
    # A byte order mark before the JSON is read past (as RFC 8259 allows): a valid start.
    bom = b'\xef\xbb\xbf{"root_page_id": "%s", "tag": "bom"}' % root.encode()
    answer = await http.post(url, content=bom, headers={**auth, "Content-Type": "application/json"})
    assert answer.status_code == 202


# --- the CLI ---------------------------------------------------------------------------


def _run_in_process(args: list[str]) -> tuple[int, str, str]:
    """``hubjobs ARGS`` in this process (the same ``run_cli`` the script calls)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(args)
    return code, out.getvalue(), err.getvalue()


def cli_command(field: str, value: str, course: DemoCourse) -> list[str]:
    """A command line that carries ``value`` in ``field``; every other part is valid."""
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    tag = ["tag-course", *scope, "--root-page", str(course.root_page_id)]
    job = str(uuid.uuid4())
    create = ["schedule", "create", "backup", *scope]
    return {
        "tag": [*tag, "--tag", value],
        "idempotency_key": [*tag, "--tag", "t", "--idempotency-key", value],
        "correlation_id": [*tag, "--tag", "t", "--correlation-id", value],
        "backup_idempotency_key": ["backup", *scope, "--idempotency-key", value],
        "list_status": ["list", *scope, "--status", value],
        "list_kind": ["list", *scope, "--kind", value],
        "list_limit": ["list", *scope, "--limit", value],
        "cancel_reason": ["cancel", job, *scope, "--reason", value],
        "workspace": ["list", "--workspace", value, "--actor", str(course.actor_id)],
        "actor": ["status", job, "--workspace", str(course.workspace_id), "--actor", value],
        "root_page": ["tag-course", *scope, "--root-page", value, "--tag", "t"],
        "job": ["status", value, *scope],
        "token_ttl": ["token", "--actor", str(course.actor_id), "--ttl", value],
        "unknown_option": ["list", *scope, f"--{value}", "x"],
        "schedule_cron": [*create, "--cron", value],
        "schedule_every": [*create, "--every", value],
        "schedule_payload": [*create, "--every", "1d", "--payload", value],
        "schedule_id": ["schedule", "pause", value, *scope],
        "items_state": ["items", job, *scope, "--state", value],
        "items_after": ["items", job, *scope, "--after", value],
        "export_pages_per_file": ["export", *scope, "--pages-per-file", value],
        "retry_job": ["retry", value, *scope],
    }[field]


CLI_FIELDS = [
    "tag",
    "idempotency_key",
    "correlation_id",
    "backup_idempotency_key",
    "list_status",
    "list_kind",
    "list_limit",
    "cancel_reason",
    "workspace",
    "actor",
    "root_page",
    "job",
    "token_ttl",
    "unknown_option",
    "schedule_cron",
    "schedule_every",
    "schedule_payload",
    "schedule_id",
    "items_state",
    "items_after",
    "export_pages_per_file",
    "retry_job",
]


def _assert_clean_cli_answer(code: int, out: str, err: str, what: object) -> str | None:
    """Exit 0, or one ``error: … [code]`` line with a known code; never a traceback.
    Returns the code of a refusal."""
    assert "Traceback" not in out and "Traceback" not in err, (what, err[-500:])
    if code == 0:
        return None
    lines = err.splitlines()
    assert code in (1, 2) and len(lines) == 1, (what, code, err[-500:])
    refusal = refusal_code(lines[0])
    assert refusal in CLI_CODES, (what, lines)
    assert code == (2 if refusal.startswith("invalid") or refusal == "unknown_kind" else 1)
    return refusal


async def test_hostile_text_in_every_cli_option(
    settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
    temporal: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in cli_env(settings, tmp_path, ["list"], {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HUBJOBS_API_JWT_SECRET", API_SECRET)
    monkeypatch.setenv("COLUMNS", "200")
    run = on_loop(asyncio.get_running_loop())
    seen: dict[str, int] = {}

    def check(field: str) -> None:
        @CLI_PROPERTY
        @given(value=st.one_of(hostile_text(max_size=40), invalid_utf8()))
        @canonical
        def examples(value: str) -> None:
            check_one(field, value)

        examples()

    def check_one(field: str, value: str) -> None:
        args = cli_command(field, value, course)
        before = run(fingerprint(engine))
        code, out, err = _run_in_process(args)
        after = run(fingerprint(engine))
        seen[field] = seen.get(field, 0) + 1
        refusal = _assert_clean_cli_answer(code, out, err, (field, value))
        if refusal is not None:
            assert after == before, (field, refusal)
        if any("\udc80" <= ch <= "\udcff" for ch in value) and field not in (
            "workspace",
            "actor",
            "root_page",
            "job",
            "list_limit",
            "list_status",  # one of the statuses, refused as invalid_status before its text
            "token_ttl",
            "unknown_option",
            "items_after",
            "export_pages_per_file",
            "retry_job",
        ):
            assert refusal == "invalid_encoding", (field, err)

    for field in CLI_FIELDS:
        await asyncio.to_thread(check, field)
    assert set(seen) == set(CLI_FIELDS), seen
    await assert_no_workflow_without_its_row(
        temporal, engine, settings.task_queue, course.workspace_id
    )


async def test_bytes_that_are_not_utf8_from_a_real_command_line(
    settings: Settings, engine: AsyncEngine, course: DemoCourse, tmp_path: Path
) -> None:
    """Real argv bytes, through the installed ``hubjobs`` script: each a one-line
    refusal with a stable code and exit 2, nothing written."""
    scope = [b"--workspace", str(course.workspace_id).encode(), b"--actor"]
    scope.append(str(course.actor_id).encode())
    tag = [b"tag-course", *scope, b"--root-page", str(course.root_page_id).encode()]
    cases: list[tuple[list[bytes], str]] = [
        ([*tag, b"--tag", b"exam\xff"], "invalid_encoding"),
        ([*tag, b"--tag", b"t", b"--idempotency-key", b"k\xc3"], "invalid_encoding"),
        ([*tag, b"--tag", b"t", b"--correlation-id", b"\xed\xa0\x80"], "invalid_encoding"),
        ([b"list", b"--workspace", b"\xff" * 36, b"--actor", b"x"], "invalid_argument"),
    ]
    before = await fingerprint(engine)

    async def one(args: list[bytes]) -> subprocess.CompletedProcess[bytes]:
        return await asyncio.to_thread(
            subprocess.run,
            [bytes(HUBJOBS), *args],
            env=cli_env(settings, tmp_path, ["list"], {}),
            capture_output=True,
            timeout=60,
            check=False,
        )

    done = await asyncio.gather(*(one(args) for args, _ in cases))
    for (args, code), result in zip(cases, done, strict=True):
        out = result.stdout.decode(errors="replace")
        err = result.stderr.decode(errors="replace")
        assert _assert_clean_cli_answer(result.returncode, out, err, args) == code, err
        assert result.returncode == 2 and out == ""
    assert await fingerprint(engine) == before
