"""The HTTP API on the real servers: every status code of the asynchronous request
pattern, authentication, isolation across workspaces, schemathesis against the
OpenAPI document of a real `hubjobs api` process, and that process's port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import jwt
import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.devstack.embedded import choose_port, wait_for_port
from hubjobs.schedules.definition import workspace_query
from hubjobs.settings import Settings
from hubjobs.temporal.contract import FOLDER
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient
from tests.support.codec_keys import codec_env
from tests.support.helpers import with_kind
from tests.support.processes import hubjobs_env
from tests.support.servers import API_SECRET, bearer, running_worker, seed
from tests.support.stacks import HUBJOBS, ForeignListener, hubjobs


@pytest.fixture
def api_settings(settings: Settings) -> Settings:
    return with_kind(
        settings.model_copy(update={"api_jwt_secret": SecretStr(API_SECRET)}),
        "course_tagging",
        tagging_batch_size=10,
        tagging_batch_pause_seconds=0.05,
    )


async def test_the_asynchronous_request_pattern_end_to_end(
    http: httpx.AsyncClient, api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> None:
    course = await seed(engine, 300)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    async with running_worker(temporal, api_settings):
        started = await http.post(
            f"{base}/course_tagging",
            json={"root_page_id": str(course.root_page_id), "tag": "api"},
            headers={**auth, "Idempotency-Key": "k-1", "X-Correlation-Id": "corr-1"},
        )
        assert started.status_code == 202
        location = started.headers["Content-Location"]
        job = started.json()
        assert location == f"{base}/{job['id']}" == job["status_url"]
        again = await http.post(
            f"{base}/course_tagging",
            json={"root_page_id": str(course.root_page_id), "tag": "api"},
            headers={**auth, "Idempotency-Key": "k-1"},
        )
        assert again.status_code == 202 and again.json()["id"] == job["id"]

        running = await http.get(location, headers=auth)
        assert running.status_code == 202
        assert running.headers["Retry-After"] == "2"
        # "0/0" until the first attempt has taken the course's snapshot, then of 300.
        progress = {running.headers["X-Progress"].split(" ")[0].split("/")[1]}
        deadline = time.monotonic() + 60
        while running.status_code == 202 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            running = await http.get(location, headers=auth)
            if running.status_code == 202:
                progress.add(running.headers["X-Progress"].split(" ")[0].split("/")[1])
        assert progress <= {"0", "300"}, progress
    assert running.status_code == 200
    assert running.headers["content-type"].startswith("application/json")
    assert running.json() == {
        "rootPageId": str(course.root_page_id),
        "tag": "api",
        "total": 300,
        "processed": 300,
        "succeeded": 300,
        "skipped": 0,
        "failed": 0,
    }
    listed = await http.get(base, headers=auth)
    assert listed.status_code == 200 and [j["id"] for j in listed.json()["jobs"]] == [job["id"]]
    assert listed.json()["next"] is None


async def test_a_reused_idempotency_key_is_409_naming_the_first_job(
    http: httpx.AsyncClient, api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> None:
    """The same key with another payload or kind: 409 ``idempotency_key_reused`` with
    the first job's id, nothing started; the same payload (keys in another order, the
    tag's spaces): 202 and the same job; two different requests at once: one 202, one
    409 naming it."""
    course = await seed(engine, 3)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    root = str(course.root_page_id)

    async def post(kind: str, payload: dict[str, str], key: str) -> httpx.Response:
        return await http.post(
            f"{base}/{kind}", json=payload, headers={**auth, "Idempotency-Key": key}
        )

    first = await post("course_tagging", {"root_page_id": root, "tag": "svc-1"}, "K")
    assert first.status_code == 202
    job_id = first.json()["id"]
    for kind, payload in (
        ("course_tagging", {"root_page_id": root, "tag": "svc-2"}),
        ("page_export", {"root_page_id": root}),
    ):
        refused = await post(kind, payload, "K")
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["job_id"]) == ("idempotency_key_reused", job_id)
        assert job_id in error["message"]
    same = await post("course_tagging", {"tag": " svc-1 ", "root_page_id": root}, "K")
    assert same.status_code == 202 and same.json()["id"] == job_id
    # Every other error has no job_id at all.
    other = await post("course_tagging", {"root_page_id": root, "tag": ""}, "K2")
    assert other.status_code == 422 and set(other.json()["error"]) == {"code", "message"}

    raced = await asyncio.gather(
        *(post("course_tagging", {"root_page_id": root, "tag": t}, "R") for t in ("a", "b"))
    )
    assert sorted(r.status_code for r in raced) == [202, 409]
    won = next(r for r in raced if r.status_code == 202).json()["id"]
    assert next(r for r in raced if r.status_code == 409).json()["error"]["job_id"] == won
    listed = (await http.get(base, headers=auth)).json()["jobs"]
    assert sorted(j["id"] for j in listed) == sorted([job_id, won])
    for job in listed:
        await temporal.get_workflow_handle(job["workflow_id"]).terminate("test over")


async def test_the_job_list_is_keyset_paged_newest_first(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine
) -> None:
    """Five jobs (no worker: they stay queued), two a page: the pages follow each other
    by `next` without a gap or a repeat, newest first; a cursor not given is refused."""
    course = await seed(engine, 3)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    started = []
    for n in range(5):
        answer = await http.post(
            f"{base}/course_tagging",
            json={"root_page_id": str(course.root_page_id), "tag": f"page-{n}"},
            headers=auth,
        )
        assert answer.status_code == 202
        started.append(answer.json()["id"])
    pages: list[list[str]] = []
    query: dict[str, str | int] = {"limit": 2}
    while True:
        page = (await http.get(base, params=query, headers=auth)).json()
        pages.append([job["id"] for job in page["jobs"]])
        if page["next"] is None:
            break
        query = {"limit": 2, "before": page["next"]}
    # The last full page may be followed by an empty one: its `next` cannot know.
    assert [len(p) for p in pages][:3] == [2, 2, 1]
    assert [job for p in pages for job in p] == started[::-1]
    refused = await http.get(base, params={"before": "not-a-cursor"}, headers=auth)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_cursor"


async def test_delete_cancels_then_the_job_is_gone(
    http: httpx.AsyncClient, api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> None:
    course = await seed(engine, 1000)
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    async with running_worker(temporal, api_settings):
        started = await http.post(
            f"{base}/course_tagging",
            json={"root_page_id": str(course.root_page_id), "tag": "x"},
            headers=auth,
        )
        location = started.headers["Content-Location"]
        cancelled = await http.delete(
            location, params={"reason": "started by mistake"}, headers=auth
        )
        assert cancelled.status_code == 202
        assert cancelled.json()["status"] in ("queued", "running", "cancelled")
        assert cancelled.json()["cancel_reason"] == "started by mistake"
        deadline = time.monotonic() + 30
        gone = await http.get(location, headers=auth)
        while gone.status_code == 202 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            gone = await http.get(location, headers=auth)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "job_cancelled"
    # Cancelled already: asked again, answered as the first time, with the job as it is.
    again = await http.delete(location, params={"reason": "again"}, headers=auth)
    assert again.status_code == 202 and again.json()["status"] == "cancelled"
    assert again.json()["cancel_reason"] == "started by mistake"  # the first request's


async def test_a_failed_job_answers_422_with_its_stable_code(
    http: httpx.AsyncClient, api_settings: Settings, temporal: Client, engine: AsyncEngine
) -> None:
    course = await seed(engine, 1000)
    auth = bearer(course.actor_id, api_settings)
    async with running_worker(temporal, api_settings):
        started = await http.post(
            f"/workspaces/{course.workspace_id}/jobs/course_tagging",
            json={"root_page_id": str(course.root_page_id), "tag": "x"},
            headers=auth,
        )
        location = started.headers["Content-Location"]
        async with engine.begin() as conn:  # demoted mid-course: still a member, not admin
            await conn.execute(
                text("UPDATE workspace_memberships SET role = 'editor' WHERE user_id = :id"),
                {"id": course.actor_id},
            )
        deadline = time.monotonic() + 30
        answer = await http.get(location, headers=auth)
        while answer.status_code == 202 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            answer = await http.get(location, headers=auth)
    assert answer.status_code == 422
    assert answer.json() == {
        "error": {
            "code": "actor_unavailable",
            "message": "The actor is no longer an enabled administrator of the workspace.",
        }
    }


async def test_authentication_and_workspace_isolation(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    base = f"/workspaces/{course.workspace_id}/jobs"
    assert (await http.get(base)).status_code == 401
    missing = await http.get(base, headers={"Authorization": "Bearer nonsense"})
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthorized"
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    scope = {"aud": "hubjobs", "iss": "hubjobs"}
    forged = jwt.encode(
        {"sub": str(course.actor_id), "exp": int(time.time()) + 60, **scope},
        "a-different-secret-of-enough-length-0123456789",
    )
    assert (await http.get(base, headers={"Authorization": f"Bearer {forged}"})).status_code == 401
    # Expired 5 s past the leeway for clocks (a token 5 s expired is still taken).
    past = int(time.time()) - 5 - int(api_settings.api_jwt_leeway_seconds)
    expired = jwt.encode({"sub": str(course.actor_id), "exp": past, **scope}, API_SECRET)
    assert (await http.get(base, headers={"Authorization": f"Bearer {expired}"})).status_code == 401

    other = await seed(engine, 3)
    own_job = await http.post(
        f"{base}/backup", json={}, headers=bearer(course.actor_id, api_settings)
    )
    assert own_job.status_code == 202
    location = own_job.headers["Content-Location"]
    outsider = bearer(other.actor_id, api_settings)
    # Another workspace's administrator: not a member here, so to it this workspace does
    # not exist (as any workspace it may not see), and it finds nothing from there.
    for url in (base, location):
        probe = await http.get(url, headers=outsider)
        assert probe.status_code == 404
        assert probe.json()["error"]["code"] == "workspace_not_found"
    foreign = location.replace(str(course.workspace_id), str(other.workspace_id))
    hidden = await http.get(foreign, headers=outsider)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "job_not_found"
    assert (await http.delete(foreign, headers=outsider)).status_code == 404
    listed = await http.get(f"/workspaces/{other.workspace_id}/jobs", headers=outsider)
    assert listed.status_code == 200 and listed.json() == {"jobs": [], "next": None}

    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    as_reader = bearer(reader, api_settings)
    assert (await http.get(location, headers=as_reader)).status_code == 202
    refused = await http.delete(location, headers=as_reader)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "actor_not_administrator"


async def test_bad_requests_get_a_stable_code_and_no_internals(
    http: httpx.AsyncClient, api_settings: Settings, course: DemoCourse
) -> None:
    auth = bearer(course.actor_id, api_settings)
    base = f"/workspaces/{course.workspace_id}/jobs"
    unknown = await http.post(f"{base}/no_such_kind", json={}, headers=auth)
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_kind"
    bad_tag = await http.post(
        f"{base}/course_tagging",
        json={"root_page_id": str(course.root_page_id), "tag": "  "},
        headers=auth,
    )
    assert bad_tag.status_code == 422 and bad_tag.json()["error"]["code"] == "invalid_payload"
    not_uuid = await http.get(f"{base}/not-a-uuid", headers=auth)
    assert not_uuid.status_code == 422 and not_uuid.json()["error"]["code"] == "invalid_request"
    no_job = await http.get(f"{base}/{uuid.uuid4()}", headers=auth)
    assert no_job.status_code == 404 and no_job.json()["error"]["code"] == "job_not_found"
    for answer in (unknown, bad_tag, not_uuid, no_job):
        assert "Traceback" not in answer.text and "SELECT" not in answer.text


async def test_a_payload_is_taken_as_sent_or_refused(
    http: httpx.AsyncClient, api_settings: Settings, course: DemoCourse
) -> None:
    """A key twice in one object is refused (JSON leaves it undefined; Python's parser
    kept the last), and so is a value of the wrong JSON type: ``true`` or ``1e3`` for a
    number of pages, a string for a number. Each is 422 ``invalid_payload``, and no job
    is left behind."""
    auth = bearer(course.actor_id, api_settings) | {"Content-Type": "application/json"}
    base = f"/workspaces/{course.workspace_id}/jobs"
    root = str(course.root_page_id)
    bodies = [
        f'{{"root_page_id": "{root}", "tag": "a", "tag": "b"}}',
        f'{{"root_page_id": "{root}", "pages_per_file": 10, "pages_per_file": 20}}',
        f'{{"root_page_id": "{root}", "pages_per_file": true}}',
        f'{{"root_page_id": "{root}", "pages_per_file": 1e3}}',
        f'{{"root_page_id": "{root}", "pages_per_file": "1000"}}',
    ]
    kinds = ["course_tagging", "page_export", "page_export", "page_export", "page_export"]
    for kind, body in zip(kinds, bodies, strict=True):
        answer = await http.post(f"{base}/{kind}", content=body, headers=auth)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"]["code"] == "invalid_payload", (body, answer.text)
    nested = '{"kind": "backup", "every": "1h", "payload": {"a": 1, "a": 2}}'
    schedule = await http.post(
        f"/workspaces/{course.workspace_id}/schedules", content=nested, headers=auth
    )
    assert schedule.status_code == 422, schedule.text
    assert schedule.json()["error"]["code"] == "invalid_payload"
    listed = await http.get(base, headers=auth)
    assert listed.status_code == 200 and listed.json() == {"jobs": [], "next": None}
    # The same payloads, each key once and of its type, are taken.
    fine = await http.post(
        f"{base}/page_export", json={"root_page_id": root, "pages_per_file": 10}, headers=auth
    )
    assert fine.status_code == 202, fine.text


async def test_health_and_openapi(
    http: httpx.AsyncClient, api_settings: Settings, temporal: Client
) -> None:
    healthy = await http.get("/health")
    assert healthy.status_code == 200
    assert healthy.json() == {"status": "ok", "database": "ok", "temporal": "ok"}
    spec = (await http.get("/openapi.json")).json()
    assert {
        "/workspaces/{workspace_id}/jobs/{kind}",
        "/workspaces/{workspace_id}/jobs/{job_id}",
        "/workspaces/{workspace_id}/jobs/{job_id}/items",
        "/workspaces/{workspace_id}/jobs/{job_id}/retry",
        "/workspaces/{workspace_id}/jobs/{job_id}/files/{name}",
        "/health",
    } <= set(spec["paths"])
    items = spec["paths"]["/workspaces/{workspace_id}/jobs/{job_id}/items"]["get"]
    assert {p["name"] for p in items["parameters"] if p["in"] == "query"} == {
        "state",
        "after",
        "limit",
    }
    files = spec["paths"]["/workspaces/{workspace_id}/jobs/{job_id}/files/{name}"]["get"]
    assert set(files["responses"]["200"]["content"]) == {"application/x-ndjson"}
    assert (
        "202"
        in spec["paths"]["/workspaces/{workspace_id}/jobs/{job_id}/retry"]["post"]["responses"]
    )

    dead = async_engine(f"postgresql://postgres@127.0.0.1:{choose_port(0)}/nothing")
    app = create_app(api_settings, client=HubJobsClient(temporal, dead, api_settings))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://hubjobs"
    ) as client:
        sick = await client.get("/health")
    await dead.dispose()
    assert sick.status_code == 503
    assert sick.json() == {"status": "unavailable", "database": "unavailable", "temporal": "ok"}


def test_schemathesis_finds_nothing_wrong_with_the_api(
    api_settings: Settings, engine: AsyncEngine, course: DemoCourse, tmp_path: Path
) -> None:
    """A real `hubjobs api` process (the payload codec on), tested against its own
    OpenAPI document."""
    port = choose_port(0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env.update(
        HUBJOBS_DATABASE_URL=api_settings.resolved_database_url(),
        HUBJOBS_TEMPORAL_ADDRESS=api_settings.resolved_temporal_address(),
        HUBJOBS_TASK_QUEUE=api_settings.task_queue,
        HUBJOBS_API_JWT_SECRET=API_SECRET,
        HUBJOBS_API_PORT=str(port),
        HUBJOBS_HOME=str(tmp_path),
        # The payload codec on, so that its endpoint (/codec/encode, /codec/decode) is in
        # the OpenAPI document and fuzzed with the rest.
        **codec_env(),
    )
    binary = Path(sys.executable).parent
    server = subprocess.Popen(
        [str(binary / "hubjobs"), "api"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "api.log", "w"),
    )
    try:
        wait_for_port(port, 30, "the API")
        token = mint(course.actor_id, api_settings)
        result = subprocess.run(
            [
                str(binary / "st"),
                "run",
                f"http://127.0.0.1:{port}/openapi.json",
                "--header",
                f"Authorization: Bearer {token}",
                "--max-examples",
                "15",
                "--checks",
                "not_a_server_error,status_code_conformance,"
                "content_type_conformance,response_schema_conformance,"
                "response_headers_conformance",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env={**env, "SCHEMATHESIS_HOOKS": ""},
        )
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    finally:
        server.terminate()
        server.wait(timeout=20)
        # Any schedule it managed to create would fire for the rest of the session.
        asyncio.run(delete_schedules(api_settings, course.workspace_id))


async def delete_schedules(settings: Settings, workspace_id: uuid.UUID) -> None:
    client = await Client.connect(settings.resolved_temporal_address())
    async for entry in await client.list_schedules(workspace_query(workspace_id)):
        await client.get_schedule_handle(entry.id).delete()


async def test_the_temporal_contract_is_served_as_checked_in(http: httpx.AsyncClient) -> None:
    """``GET /contract`` and its files: the bytes of docs/contract/, no token needed (it
    says how to call, nothing about any job); an unknown file is a stable 404."""

    index = await http.get("/contract")
    assert index.status_code == 200 and index.headers["content-type"] == "application/json"
    assert index.text == (FOLDER / "index.json").read_text()
    for name in index.json()["kinds"]["course_tagging"].values():
        if str(name).endswith(".json"):
            served = await http.get(f"/contract/{name}")
            assert served.status_code == 200
            assert served.text == (FOLDER / str(name)).read_text()
    missing = await http.get("/contract/nothing.schema.json")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "contract_file_not_found"
    climbing = await http.get("/contract/..%2F..%2Fhubjobs%2Fsettings.py")
    assert climbing.status_code == 404 and "pydantic" not in climbing.text


def test_hubjobs_api_takes_its_port_and_refuses_a_taken_one_as_the_cli_does(
    api_settings: Settings, tmp_path: Path
) -> None:
    """`hubjobs api` on a port another program holds, by `--port` or HUBJOBS_API_PORT:
    one line, `port_taken` naming the holder, exit 1; `--port` on a free one serves
    there. Before: no `--port`, and a taken port ended in uvicorn's text and exit 3."""
    env = hubjobs_env(api_settings, tmp_path, api_jwt_secret=API_SECRET)
    foreign = ForeignListener(choose_port(0))
    held = {"HUBJOBS_API_PORT": str(foreign.port)}
    try:
        for args, with_env in (
            (["api", "--port", str(foreign.port)], env),
            (["api"], env | held),
        ):
            refused = hubjobs(with_env, *args, timeout=60)
            assert (refused.returncode, refused.stdout) == (1, ""), refused
            [line] = refused.stderr.strip().splitlines()
            assert line.startswith(
                f"error: the API's port {foreign.port} is held by pid {foreign.pid} ("
            ), line
            assert line.endswith("[port_taken]"), line

        free = choose_port(0)
        api = subprocess.Popen(
            [HUBJOBS, "api", "--port", str(free)],
            env=env | held,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(free, 60, "the API")
            assert httpx.get(f"http://127.0.0.1:{free}/health", timeout=10).status_code == 200
        finally:
            api.terminate()
            api.wait(timeout=30)
    finally:
        foreign.stop()
