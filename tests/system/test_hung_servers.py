"""Every call has a deadline (issue 19): a server that hangs (its processes SIGSTOPped:
they accept TCP connections in the kernel and answer nothing, which neither TCP
keepalives nor the server's own timeouts notice) is ``unavailable`` within seconds
through the HTTP API and the CLI, never a wait, and a start cut off by the hang leaves
nothing its caller does not know about. On a stack of the module's own (``hubjobs up``
in a fresh home), with the deadlines shortened by settings:

1. PostgreSQL (postmaster and backends) SIGSTOPped: the API's GET of a job, ``/health``
   and a POST answer 503 within 6 s; ``hubjobs health`` and ``hubjobs status`` exit 1
   within 8 s; once it runs again, the POST left no job.
2. Temporal SIGSTOPped: ``hubjobs tag-course`` exits 1 within 8 s and records nothing;
   the API (connected to Temporal before the hang) answers a POST 503 within 6 s, its
   job withdrawn (failed ``unavailable``: nothing runs it when Temporal is back); a
   POST with an idempotency key leaves its job queued, and the same key starts it
   once Temporal answers again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import pytest_asyncio
from pydantic import SecretStr

from hubjobs.devstack import embedded
from hubjobs.settings import Settings
from starter.api.tokens import mint
from starter.client import NOT_STARTED
from tests.support.helpers import until
from tests.support.processes import WorkerProcess, api_process
from tests.support.stacks import OwnStack, hubjobs, own_stack, server_pids

SECRET = "hung-servers-secret-" + "x" * 32
# The deadlines, shortened: a read 2 s, a lifecycle write 3 s, connecting to PostgreSQL
# 2 s, to Temporal 2 s, a Temporal call 2 s, a whole API request 5 s.
DEADLINES = {
    "HUBJOBS_DB_READ_TIMEOUT_SECONDS": "2",
    "HUBJOBS_DB_LIFECYCLE_TIMEOUT_SECONDS": "3",
    "HUBJOBS_DB_CONNECT_TIMEOUT_SECONDS": "2",
    "HUBJOBS_TEMPORAL_CONNECT_TIMEOUT_SECONDS": "2",
    "HUBJOBS_TEMPORAL_RPC_TIMEOUT_SECONDS": "2",
    "HUBJOBS_API_REQUEST_TIMEOUT_SECONDS": "5",
}
API_WITHIN = 6.0
CLI_WITHIN = 8.0
# How long the test gives a call that hangs (the old behaviour) before it calls it hung.
GIVE_UP = 30.0


@dataclass(frozen=True)
class Hung:
    stack: OwnStack
    env: dict[str, str]
    api: str
    workspace: str
    actor: str
    root_page: str
    headers: dict[str, str]
    logs: Path


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hung]:
    """The module's stack, the API serving it, and a demo course."""
    logs = tmp_path_factory.mktemp("hung")
    port = embedded.choose_port(0)
    extra = {
        **DEADLINES,
        "HUBJOBS_API_PORT": str(port),
        "HUBJOBS_API_JWT_SECRET": SECRET,
        "HUBJOBS_METRICS_PORT": "0",
        "HUBJOBS_MAINTENANCE": "false",
        "HUBJOBS_WORKER_VERSIONING": "false",
    }
    with own_stack(extra_env=extra) as stack:
        seeded = hubjobs(stack.env, "seed-demo", "--pages", "40", "--json")
        assert seeded.returncode == 0, seeded.stderr
        course = json.loads(seeded.stdout)
        token = mint(uuid.UUID(course["actor_id"]), Settings(api_jwt_secret=SecretStr(SECRET)))
        with api_process(stack.env, logs / "api.log"):
            yield Hung(
                stack,
                stack.env,
                f"http://127.0.0.1:{port}",
                course["workspace_id"],
                course["actor_id"],
                course["root_page_id"],
                {"Authorization": f"Bearer {token}"},
                logs,
            )


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@contextmanager
def stopped(pids: list[int]) -> Iterator[float]:
    """SIGSTOPs the processes (the first, the parent, first) for the block; SIGCONT
    whatever happens. Yields when they stopped (monotonic)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def postgres_processes(home: Path) -> list[int]:
    postmaster = server_pids(home)[0]
    return [postmaster, *children_of(postmaster)]


async def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = await call
    return result, time.monotonic() - started


def cli(hung: Hung, *args: str) -> Any:
    return asyncio.to_thread(hubjobs, hung.env, *args, timeout=GIVE_UP)


def scope(hung: Hung) -> list[str]:
    return ["--workspace", hung.workspace, "--actor", hung.actor]


@pytest_asyncio.fixture
async def api(hung: Hung) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=hung.api, headers=hung.headers, timeout=GIVE_UP) as c:
        yield c


async def jobs_of(api: httpx.AsyncClient, hung: Hung) -> list[dict[str, Any]]:
    answer = await api.get(f"/workspaces/{hung.workspace}/jobs", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["jobs"]  # a page: {jobs, next}
    return found


def no_open_transaction(database_url: str) -> bool:
    """No client of the server but this probe is inside a transaction."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        ).fetchone()
    return row is not None and row[0] == 0


def start_path(hung: Hung) -> str:
    return f"/workspaces/{hung.workspace}/jobs/course_tagging"


async def test_postgres_hung_is_unavailable_within_seconds(
    hung: Hung, api: httpx.AsyncClient
) -> None:
    started = await api.post(start_path(hung), json={"root_page_id": hung.root_page, "tag": "x"})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    before = len(await jobs_of(api, hung))
    with stopped(postgres_processes(hung.stack.home)):
        get, get_took = await timed(api.get(f"/workspaces/{hung.workspace}/jobs/{job_id}"))
        health, health_took = await timed(api.get("/health"))
        post, post_took = await timed(
            api.post(start_path(hung), json={"root_page_id": hung.root_page, "tag": "hung"})
        )
        cli_health, cli_health_took = await timed(cli(hung, "health", "--json"))
        cli_status, cli_status_took = await timed(cli(hung, "status", job_id, *scope(hung)))
    print(
        f"\nPostgreSQL SIGSTOPped: GET {get.status_code} in {get_took:.2f} s, /health "
        f"{health.status_code} in {health_took:.2f} s, POST {post.status_code} in "
        f"{post_took:.2f} s; `hubjobs health` exit {cli_health.returncode} in "
        f"{cli_health_took:.2f} s, `hubjobs status` exit {cli_status.returncode} in "
        f"{cli_status_took:.2f} s"
    )
    for answer, took in ((get, get_took), (health, health_took), (post, post_took)):
        assert answer.status_code == 503, answer.text
        assert took < API_WITHIN, took
    assert health.json()["database"] == "unavailable" and health.json()["temporal"] == "ok"
    assert get.json()["error"]["code"] == post.json()["error"]["code"] == "unavailable"
    assert cli_health.returncode == 1 and cli_health_took < CLI_WITHIN, cli_health.stderr
    assert json.loads(cli_health.stdout)["database"] == "unavailable"
    assert cli_status.returncode == 1 and cli_status_took < CLI_WITHIN, cli_status.stderr
    assert "[unavailable]" in cli_status.stderr and "Traceback" not in cli_status.stderr
    # Running again: answers at once, and the POST cut off by the hang left no job (its
    # transaction never committed), once the server has read what it was sent: the
    # backends the hang caught mid-transaction have ended them (their clients gone).
    await until(
        "the transactions the hang cut off to end",
        lambda: asyncio.to_thread(no_open_transaction, hung.stack.database_url),
        timeout=30,
    )
    assert (await api.get("/health")).status_code == 200
    assert len(await jobs_of(api, hung)) == before


async def test_temporal_hung_during_a_start_leaves_nothing_unknown(
    hung: Hung, api: httpx.AsyncClient
) -> None:
    temporal = server_pids(hung.stack.home)[1]
    before = {job["id"] for job in await jobs_of(api, hung)}
    body = {"root_page_id": hung.root_page, "tag": "hung-temporal"}
    keyed = {"Idempotency-Key": f"hung-{uuid.uuid4().hex[:8]}"}
    with stopped([temporal]):
        tagged, tag_took = await timed(
            cli(hung, "tag-course", *scope(hung), "--root-page", hung.root_page, "--tag", "t")
        )
        post, post_took = await timed(api.post(start_path(hung), json=body))
        keyed_post, keyed_took = await timed(api.post(start_path(hung), json=body, headers=keyed))
    print(
        f"\nTemporal SIGSTOPped: `hubjobs tag-course` exit {tagged.returncode} in "
        f"{tag_took:.2f} s; the API's POST {post.status_code} in {post_took:.2f} s, "
        f"with a key {keyed_post.status_code} in {keyed_took:.2f} s"
    )
    assert tagged.returncode == 1 and tag_took < CLI_WITHIN, tagged.stderr
    assert "[unavailable]" in tagged.stderr and "Traceback" not in tagged.stderr
    for answer, took in ((post, post_took), (keyed_post, keyed_took)):
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "unavailable"
        assert took < API_WITHIN, took

    # What the hang left: the CLI's start (a call of the stack's API) and the API's
    # unkeyed start a withdrawn job each; the keyed one a queued job for its key.
    left = [job for job in await jobs_of(api, hung) if job["id"] not in before]
    by_status = {job["status"]: job for job in left}
    assert len(left) == 3 and set(by_status) == {"failed", "queued"}, left
    assert [job["status"] for job in left].count("failed") == 2, left
    withdrawn, waiting = by_status["failed"], by_status["queued"]
    assert (withdrawn["error_code"], withdrawn["error_message"]) == ("unavailable", NOT_STARTED)

    # Temporal runs again, and a worker with it: the same key starts the queued job,
    # which succeeds; the withdrawn one never runs.
    env = hung.env | {"HUBJOBS_TAGGING_BATCH_SIZE": "10"}
    worker = WorkerProcess("worker", env, hung.logs)
    try:
        again = await api.post(start_path(hung), json=body, headers=keyed)
        assert again.status_code == 202, again.text
        assert again.json()["id"] == waiting["id"]
        deadline = time.monotonic() + 60
        while (
            await api.get(f"/workspaces/{hung.workspace}/jobs/{waiting['id']}")
        ).status_code != 200:
            assert time.monotonic() < deadline, worker.tail()
            await asyncio.sleep(0.2)
        after = {job["id"]: job for job in await jobs_of(api, hung)}
        assert after[withdrawn["id"]]["status"] == "failed"
        assert after[withdrawn["id"]]["started_at"] is None, "the withdrawn job ran"
    finally:
        worker.kill()
