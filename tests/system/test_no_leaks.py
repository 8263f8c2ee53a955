"""What an attacker must not learn or plant, on the real servers.

- **Logs**: a hostile session through a real ``hubjobs api`` process (DEBUG, text and
  JSON lines) and the real ``hubjobs`` command line, with every log captured to a
  file, leaves no trace of the hostile values: each carries a unique marker, and
  neither the marker nor any escaped form of the value (repr, JSON, percent-encoded)
  is in any log. The same for database errors whose messages quote the values sent
  (PostgreSQL's ``invalid input syntax … "<value>"``), and for an exception whose own
  message carries one.
- **Workspace ids**: a workspace the actor is not an enabled member of answers exactly
  as one that does not exist, through the client, the CLI and the API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.client import Client

from hubjobs.devstack.demo_data import DemoCourse, create_account, create_workspace
from hubjobs.devstack.embedded import choose_port, wait_for_port
from hubjobs.errors import HubJobsError
from hubjobs.observability.logs import TextFormatter
from hubjobs.settings import Settings
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient
from tests.support.processes import cli_env, hubjobs_env

SECRET = "no-leaks-test-secret-" + "x" * 32
HUBJOBS = Path(sys.executable).parent / "hubjobs"
PIECES = [
    "a\ud800b",
    "\udcff",
    "admin\u202egnp.exe",
    "nul\x00byte",
    "\x1b[31mred\x1b]0;t\x07",
    "line\r\nbreak\u2028",
    "zero\u200bwidth\ufeff",
    "'; DROP TABLE jobs; --",
    "$(reboot) `id`",
    '{"__proto__": 1} %s {0}',
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 valid emoji",
    "x" * 3000,
]


class Hostile:
    """Hostile values, each starting with a marker of its own, ``zqx<run>n<n>`` (letters
    and digits: the same in every escaped form)."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:8]
        self.values: list[str] = []
        self.markers: dict[str, str] = {}

    def marker(self) -> str:
        return f"zqx{self.run}n{len(self.values)}"

    def make(self, piece: str) -> str:
        marker = self.marker()
        self.add(marker + piece, marker)
        return marker + piece

    def add(self, value: str, marker: str) -> None:
        self.values.append(value)
        self.markers[value] = marker

    def forms(self, value: str) -> set[str]:
        """The value as a log could hold it: raw, repr-escaped, JSON-escaped (ASCII or
        not), percent-encoded; and its marker alone, which every form contains."""
        utf8 = value.encode("utf-8", "surrogatepass")
        return {
            self.markers[value],
            value,
            ascii(value)[1:-1],
            repr(value)[1:-1],
            json.dumps(value)[1:-1],
            json.dumps(value, ensure_ascii=False)[1:-1],
            quote(utf8, safe=""),
            quote(utf8, safe="/"),
            utf8.decode("utf-8", "replace"),
        }

    def assert_absent(self, log: str, where: str) -> None:
        assert log.strip(), f"{where}: the log is empty, so the check proves nothing"
        for value in self.values:
            for form in self.forms(value):
                if len(form) >= 6:
                    assert form not in log, f"{where} holds {form[:60]!r}"


def seg(value: str) -> str:
    """``value`` percent-encoded for a URL (its UTF-8 bytes, surrogates included)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _header(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return raw.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"")


async def _hostile_api_session(
    base_url: str, hostile: Hostile, course: DemoCourse, token: str, pieces: list[str]
) -> None:
    ws = str(course.workspace_id)
    root = str(course.root_page_id)
    auth = {"Authorization": f"Bearer {token}"}
    start = f"/workspaces/{ws}/jobs/course_tagging"
    json_type = {"Content-Type": "application/json"}

    def body(payload: dict[str, Any]) -> bytes:
        return json.dumps(payload).encode()  # ASCII with \\uXXXX escapes, as sent by anyone

    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        for piece in pieces:
            requests: list[tuple[str, str, dict[str, Any]]] = [
                (
                    "POST",
                    start,
                    {"content": body({"root_page_id": root, "tag": hostile.make(piece)})},
                ),
                (
                    "POST",
                    start,
                    {"content": body({"root_page_id": hostile.make(piece), "tag": "t"})},
                ),
                (
                    "POST",
                    start,
                    {"content": body({"root_page_id": root, "tag": "t", hostile.make(piece): 1})},
                ),
                (
                    "POST",
                    start,
                    {"content": body({"root_page_id": root, "tag": "t", "x": hostile.make(piece)})},
                ),
                ("POST", start, {"content": hostile.make(piece).encode("utf-8", "surrogatepass")}),
                (
                    "POST",
                    f"/workspaces/{ws}/jobs/{seg(hostile.make(piece))}",
                    {"content": b"{}"},
                ),
                (
                    "GET",
                    f"/workspaces/{seg(hostile.make(piece))}/jobs",
                    {},
                ),
                (
                    "GET",
                    f"/workspaces/{ws}/jobs/{seg(hostile.make(piece))}",
                    {},
                ),
                (
                    "DELETE",
                    f"/workspaces/{ws}/jobs/{seg(hostile.make(piece))}",
                    {},
                ),
                (
                    "GET",
                    f"/workspaces/{ws}/jobs?status={seg(hostile.make(piece))}&limit={seg(hostile.make(piece))}",
                    {},
                ),
                (
                    "GET",
                    f"/workspaces/{ws}/jobs/{uuid.uuid4()}/items?state={seg(hostile.make(piece))}"
                    f"&after={seg(hostile.make(piece))}&limit={seg(hostile.make(piece))}",
                    {},
                ),
                (
                    "GET",
                    f"/workspaces/{ws}/jobs/{uuid.uuid4()}/files/{seg(hostile.make(piece))}",
                    {},
                ),
                ("POST", f"/workspaces/{ws}/jobs/{seg(hostile.make(piece))}/retry", {}),
            ]
            for method, url, options in requests:
                answer = await http.request(method, url, headers={**auth, **json_type}, **options)
                assert answer.status_code < 500, (url[:80], answer.text[:200])
            headers: list[dict[str, Any]] = [
                {**auth, "Idempotency-Key": _header(hostile.make(piece))},
                {**auth, "X-Correlation-Id": _header(hostile.make(piece))},
                {"Authorization": b"Bearer " + _header(hostile.make(piece))},
                {"Authorization": _header(hostile.make(piece))},
            ]
            for extra in headers:
                answer = await http.post(
                    start,
                    content=body({"root_page_id": root, "tag": "t"}),
                    headers={**json_type, **extra},
                )
                # (A key that lost its NUL on the way may be valid: 202, not logged either.)
                assert answer.status_code in (202, 401, 422), answer.text[:200]


def _start_api(
    settings: Settings, home: Path, *, json_lines: bool
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A real ``hubjobs api`` at DEBUG, its log (stderr) in a file."""
    port = choose_port(0)
    log_path = home / f"api-json-{str(json_lines).lower()}.log"
    env = hubjobs_env(
        settings,
        home,
        api_jwt_secret=SECRET,
        api_port=port,
        log_level="DEBUG",
        log_json=str(json_lines).lower(),
    )
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [str(HUBJOBS), "api"], env=env, stdout=subprocess.DEVNULL, stderr=log
        )
    wait_for_port(port, 30, "the API")
    return server, f"http://127.0.0.1:{port}", log_path


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


async def test_a_hostile_session_leaves_no_trace_in_the_logs(
    settings: Settings, engine: AsyncEngine, course: DemoCourse, temporal: Client, tmp_path: Path
) -> None:
    hostile = Hostile()
    token = mint(course.actor_id, settings.model_copy(update={"api_jwt_secret": SecretStr(SECRET)}))
    logs: list[Path] = []
    servers: list[subprocess.Popen[bytes]] = []
    try:
        bases = []
        for json_lines in (False, True):
            server, base, log_path = await asyncio.to_thread(
                _start_api, settings, tmp_path, json_lines=json_lines
            )
            servers.append(server)
            bases.append(base)
            logs.append(log_path)
        # Every piece through the plain-text log; a few through the JSON one (its
        # escaping is the same code whatever the piece).
        await _hostile_api_session(bases[0], hostile, course, token, PIECES)
        await _hostile_api_session(bases[1], hostile, course, token, PIECES[:4])
        await asyncio.gather(*(_hostile_cli_session(settings, tmp_path, hostile, course)))
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=20)

    for log_path in logs:
        log = await asyncio.to_thread(_read, log_path)
        hostile.assert_absent(log, log_path.name)
        assert "hubjobs.api.access" in log and "/workspaces/{workspace_id}/jobs" in log
        assert "Traceback" not in log
    cli_log = await asyncio.to_thread(_read, tmp_path / "hubjobs.log")
    hostile.assert_absent(cli_log, "hubjobs.log")
    assert "invalid_payload" in cli_log and "invalid_idempotency_key" in cli_log
    # Accepted hostile-looking tags (SQL-ish, emoji) made jobs; refusals made none.
    async with engine.connect() as conn:
        tags = list((await conn.execute(text("SELECT payload->>'tag' FROM jobs"))).scalars())
    assert tags and all(tag in hostile.values or tag == "t" for tag in tags)
    async for wf in temporal.list_workflows(f'TaskQueue = "{settings.task_queue}"'):
        await temporal.get_workflow_handle(wf.id).terminate("test over")


def _hostile_cli_session(
    settings: Settings, home: Path, hostile: Hostile, course: DemoCourse
) -> list[Any]:
    """CLI runs with hostile options (argv cannot hold NUL: those pieces are skipped)."""
    scope = ["--workspace", str(course.workspace_id), "--actor", str(course.actor_id)]
    tag = ["tag-course", *scope, "--root-page", str(course.root_page_id)]
    runs: list[list[str]] = []
    for piece in ("admin\u202egnp.exe", "'; DROP TABLE jobs; --"):
        for args in (
            [*tag, "--tag", hostile.make(piece)],
            [*tag, "--tag", "t", "--idempotency-key", hostile.make(piece)],
            [*tag, "--tag", "t", "--correlation-id", hostile.make(piece)],
            ["list", *scope, "--kind", hostile.make(piece)],
            ["list", *scope, "--status", hostile.make(piece)],
            ["cancel", str(uuid.uuid4()), *scope, "--reason", hostile.make(piece)],
            ["status", hostile.make(piece), *scope],
            ["items", str(uuid.uuid4()), *scope, "--state", hostile.make(piece)],
            ["retry", hostile.make(piece), *scope],
        ):
            runs.append(args)
    marker = hostile.marker()
    invalid_utf8 = [[os.fsencode(a) for a in tag] + [b"--tag", marker.encode() + b"\xff"]]
    hostile.add(f"{marker}\udcff", marker)

    async def one(args: list[str] | list[bytes]) -> None:
        done = await asyncio.to_thread(
            subprocess.run,
            [os.fsencode(HUBJOBS), *(os.fsencode(a) if isinstance(a, str) else a for a in args)],
            env=cli_env(settings, home, ["list"], {}),  # an API of these servers
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert b"Traceback" not in done.stderr, done.stderr[-400:]

    # Two at a time: the machine has two cores.
    semaphore = asyncio.Semaphore(2)

    async def bounded(args: list[str] | list[bytes]) -> None:
        async with semaphore:
            await one(args)

    every: list[list[str] | list[bytes]] = [*runs, *invalid_utf8]
    return [bounded(args) for args in every]


# --- database errors and failures, in process --------------------------------------------


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """Every log line of this process (DEBUG and up) in a file, as a deployment's
    text formatter writes it (exception tracebacks included)."""
    path = tmp_path / "process.log"
    handler = logging.FileHandler(path, encoding="utf-8", errors="backslashreplace")
    handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield path
    root.removeHandler(handler)
    root.setLevel(old_level)
    handler.close()


async def test_database_errors_are_classified_and_logged_without_values(
    hub: HubJobsClient, log_file: Path
) -> None:
    hostile = Hostile()
    uuid_text = hostile.make("not-a-uuid \u202e")
    nul_text = hostile.make("nul\x00")
    surrogate_text = hostile.make("\ud800")
    sql_marker = hostile.make("")

    async def cast_uuid(conn: AsyncConnection) -> Any:
        return await conn.execute(text("SELECT CAST(:v AS uuid)"), {"v": uuid_text})

    async def nul(conn: AsyncConnection) -> Any:
        return await conn.execute(text("SELECT CAST(:v AS text)"), {"v": nul_text})

    async def surrogate(conn: AsyncConnection) -> Any:
        return await conn.execute(text("SELECT CAST(:v AS text)"), {"v": surrogate_text})

    async def broken_query(conn: AsyncConnection) -> Any:
        # A bug, not bad data: the statement itself (which holds the marker) is wrong.
        return await conn.execute(text(f"SELECT no_such_column AS {sql_marker}"))

    for work, code in (
        (cast_uuid, "invalid_data"),
        (nul, "invalid_data"),
        (surrogate, "invalid_data"),
        (broken_query, "internal_error"),
    ):
        with pytest.raises(HubJobsError) as caught:
            await hub.db(work)
        assert caught.value.code == code
        assert "SELECT" not in caught.value.message and "zqx" not in caught.value.message
    log = await asyncio.to_thread(_read, log_file)
    hostile.assert_absent(log, "the process log")
    assert "database refused a value" in log and "SQLSTATE 22P02" in log
    assert "database call failed" in log and "SQLSTATE 42703" in log


async def test_an_unexpected_api_failure_is_logged_without_its_message(
    settings: Settings, temporal: Client, engine: AsyncEngine, log_file: Path
) -> None:
    hostile = Hostile()
    secret = hostile.make("payload \u202e")
    app = create_app(settings, client=HubJobsClient(temporal, engine, settings))

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError(f"the payload was {secret}")

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://hubjobs"
    ) as http:
        answer = await http.get("/boom")
    assert answer.status_code == 500
    assert answer.json() == {
        "error": {
            "code": "internal_error",
            "message": "internal error; the detail is in the server log",
        }
    }
    log = await asyncio.to_thread(_read, log_file)
    hostile.assert_absent(log, "the process log")
    assert "API call failed: builtins.RuntimeError at" in log and "boom" in log


# --- workspace ids cannot be probed ----------------------------------------------------------


async def test_a_workspace_one_may_not_see_answers_as_one_that_does_not_exist(
    hub: HubJobsClient,
    settings: Settings,
    engine: AsyncEngine,
    temporal: Client,
    course: DemoCourse,
    tmp_path: Path,
) -> None:
    """An outsider (an administrator elsewhere), a disabled member and a stranger get
    the same answer for this workspace as for a workspace id that names nothing:
    same error type, code and message (client); same exit code and line (CLI); same
    status and body (API)."""
    async with engine.begin() as conn:
        elsewhere = await create_workspace(conn, "Elsewhere")
        outsider = await create_account(conn, elsewhere, name="Olga")
        disabled = await create_account(conn, course.workspace_id, enabled=False, name="Dora")
    missing = uuid.uuid4()
    job_id = uuid.uuid4()
    probes = [
        (course.workspace_id, outsider),
        (course.workspace_id, disabled),
        (course.workspace_id, uuid.uuid4()),
        (missing, outsider),
        (missing, course.actor_id),
    ]

    async def client_answers(workspace: uuid.UUID, actor: uuid.UUID) -> list[tuple[str, str, str]]:
        jobs = hub.scope(workspace, actor)
        answers = []
        for call in (
            lambda: jobs.list(),
            lambda: jobs.get(job_id),
            lambda: jobs.cancel(job_id),
            lambda: jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": "t"}),
            lambda: jobs.start("backup", {}),
            lambda: jobs.start("page_export", {}),
            lambda: jobs.items(job_id),
            lambda: jobs.retry(job_id),
            lambda: jobs.job_file(job_id, "pages-0001.ndjson"),
        ):
            with pytest.raises(HubJobsError) as caught:
                await call()
            answers.append((type(caught.value).__name__, caught.value.code, caught.value.message))
        return answers

    client = [await client_answers(ws, actor) for ws, actor in probes]
    assert all(answers == client[0] for answers in client), client
    assert client[0][0] == ("NotFound", "workspace_not_found", "the workspace does not exist")

    api_settings = settings.model_copy(update={"api_jwt_secret": SecretStr(SECRET)})
    app = create_app(api_settings, client=HubJobsClient(temporal, engine, api_settings))

    async def api_answers(workspace: uuid.UUID, actor: uuid.UUID) -> list[tuple[int, Any]]:
        auth = {"Authorization": f"Bearer {mint(actor, api_settings)}"}
        base = f"/workspaces/{workspace}/jobs"
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://hubjobs"
        ) as http:
            answers = []
            for method, url, body in (
                ("GET", base, None),
                ("GET", f"{base}/{job_id}", None),
                ("DELETE", f"{base}/{job_id}", None),
                (
                    "POST",
                    f"{base}/course_tagging",
                    {"root_page_id": str(course.root_page_id), "tag": "t"},
                ),
                ("POST", f"{base}/backup", {}),
                ("POST", f"{base}/page_export", {}),
                ("GET", f"{base}/{job_id}/items", None),
                ("POST", f"{base}/{job_id}/retry", None),
                ("GET", f"{base}/{job_id}/files/pages-0001.ndjson", None),
                ("GET", f"/workspaces/{workspace}/overview", None),
                ("GET", f"/workspaces/{workspace}/workers", None),
            ):
                answer = await http.request(method, url, json=body, headers=auth)
                answers.append((answer.status_code, answer.json()))
        return answers

    api = [await api_answers(ws, actor) for ws, actor in probes]
    assert all(answers == api[0] for answers in api), api
    assert api[0][0] == (
        404,
        {"error": {"code": "workspace_not_found", "message": "the workspace does not exist"}},
    )

    def cli(workspace: uuid.UUID, actor: uuid.UUID) -> tuple[int, str, str]:
        done = subprocess.run(
            [str(HUBJOBS), "list", "--workspace", str(workspace), "--actor", str(actor)],
            env=cli_env(settings, tmp_path, ["list"], {}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    answers = await asyncio.gather(
        asyncio.to_thread(cli, course.workspace_id, outsider),
        asyncio.to_thread(cli, missing, outsider),
    )
    assert (
        answers[0]
        == answers[1]
        == (
            1,
            "",
            "error: the workspace does not exist [workspace_not_found]\n",
        )
    )

    # A member who is not an administrator still learns that much, and only a member.
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    with pytest.raises(HubJobsError) as not_admin:
        await hub.scope(course.workspace_id, reader).start("backup", {})
    assert (not_admin.value.code, type(not_admin.value).__name__) == (
        "actor_not_administrator",
        "Forbidden",
    )
