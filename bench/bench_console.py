"""The console's API at scale: p50 and p95 of ``GET …/overview`` (hour and day) and of
``GET …/jobs`` (the first page, and failed jobs only) through the API app in process
(httpx, ASGI: the routes, the token, the client's read pool, JSON), on a jobs table of
1,000,000 rows, against ``GET …/jobs/{id}`` of one job through the same app.

The rows (COPY, then VACUUM ANALYZE as autovacuum would): 5 workspaces of skewed size
(the largest holds 40 % of all jobs, the one measured), 3 kinds (75 % course tagging, 15 %
backups, 10 % exports), created over the last 24 hours, ended 5 s to 10 min after;
0.2 % queued, 0.5 % running (1 in 20 of the unfinished stuck), 4 % failed, 1.5 %
cancelled, the rest succeeded; each job 1 to 300 pages, 1 % of them failed.

    python bench/bench_console.py [--rows 1000000] [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from common import Stack
from harness import Figure, Outcome, Target, percentile, ratio_of, say
from pydantic import SecretStr
from standalone import main_for

from hubjobs.settings import Settings
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient

NAME = "console"
TITLE = "Console API at 1,000,000 job rows"
TARGET_MS = 50.0
SHARES = (0.40, 0.25, 0.15, 0.12, 0.08)
KINDS = (("course_tagging", 0.75), ("backup", 0.15), ("course_export", 0.10))
SECRET = "bench-console-secret-" + "x" * 32
COLUMNS = (
    "id, workflow_id, kind, status, workspace_id, actor_id, correlation_id, payload, total, "
    "processed, succeeded, skipped, failed, created_at, started_at, finished_at, expires_at, "
    "updated_at, stuck_since, stuck_reason"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000, help="job rows (default 1000000)")
    parser.add_argument("--runs", type=int, default=300, help="calls of each (default 300)")


def members() -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(workspace, its administrator), fixed ids, largest workspace first."""
    return [
        (uuid.UUID(int=0xC0501E000000 + n), uuid.UUID(int=0xAD0000000000 + n))
        for n in range(len(SHARES))
    ]


def rows(count: int, seed: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    spaces = members()
    kinds = [k for k, _ in KINDS]
    weights = [w for _, w in KINDS]
    for _ in range(count):
        workspace, actor = rng.choices(spaces, SHARES)[0]
        kind = rng.choices(kinds, weights)[0]
        s = rng.random()
        status = (
            "queued"
            if s < 0.002
            else "running"
            if s < 0.007
            else "failed"
            if s < 0.047
            else "cancelled"
            if s < 0.062
            else "succeeded"
        )
        created = now - timedelta(seconds=rng.uniform(0, 86_400))
        unfinished = status in ("queued", "running")
        finished = None if unfinished else created + timedelta(seconds=rng.uniform(5, 600))
        total = rng.randint(1, 300)
        failed = total // 100
        processed = 0 if status == "queued" else total
        stuck = unfinished and rng.random() < 0.05
        job_id = uuid.uuid4()
        yield (
            job_id,
            f"{kind}-{job_id}",
            kind,
            status,
            workspace,
            actor,
            "bench",
            '{"tag": "exam-2026"}',
            total,
            processed,
            processed - failed if processed else 0,
            0,
            failed if processed else 0,
            created,
            None if status == "queued" else created + timedelta(seconds=1),
            finished,
            None if finished is None else finished + timedelta(hours=24),
            finished or created,
            created if stuck else None,
            "WorkflowTaskFailed" if stuck else None,
        )


def build(url: str, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for n, (workspace, actor) in enumerate(members()):
            conn.execute(
                "INSERT INTO workspaces (id, name) VALUES (%s, %s)", (workspace, f"Space {n}")
            )
            conn.execute(
                "INSERT INTO user_accounts (id, email, display_name) VALUES (%s, %s, %s)",
                (actor, f"admin{n}@hub.example", f"Admin {n}"),
            )
            conn.execute(
                "INSERT INTO workspace_memberships (workspace_id, user_id, role) "
                "VALUES (%s, %s, 'administrator')",
                (workspace, actor),
            )
    now = datetime.now(UTC)
    step = 100_000
    chunks = [(first, min(step, count - first)) for first in range(0, count, step)]

    def copy(chunk: tuple[int, int]) -> None:
        with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cursor:
            with cursor.copy(f"COPY jobs ({COLUMNS}) FROM STDIN") as copying:
                for row in rows(chunk[1], chunk[0], now):
                    copying.write_row(row)

    # Two sessions, one a core: the rows are made in Python, the indexes kept by the server.
    with ThreadPoolExecutor(2) as pool:
        for done, _ in enumerate(pool.map(copy, chunks), 1):
            say(f"  jobs: {min(done * step, count):,} / {count:,}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("CHECKPOINT")


async def timed(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    answer = await client.get(url, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status_code != 200:
        raise RuntimeError(f"{url}: {answer.status_code} {answer.text[:200]}")
    return elapsed


async def measure(settings: Settings, runs: int) -> dict[str, list[float]]:
    """Milliseconds of each call, interleaved run by run, the largest workspace's."""
    workspace, actor = members()[0]
    hub = HubJobsClient(settings=settings)
    app = create_app(settings, client=hub)
    headers = {"Authorization": f"Bearer {mint(actor, settings)}"}
    base = f"/workspaces/{workspace}"
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://hubjobs"
        ) as client:
            # Succeeded: a job running answers 202, a failed one its error.
            listed = await client.get(
                f"{base}/jobs", params={"limit": 200, "status": "succeeded"}, headers=headers
            )
            ids = [job["id"] for job in listed.json()["jobs"]]
            calls = {
                "overview (hour)": f"{base}/overview",
                "overview (day)": f"{base}/overview?window=day",
                "jobs list": f"{base}/jobs",
                "jobs list (failed)": f"{base}/jobs?status=failed",
                # A bulk retry's count, asked first: the page reads up to 1,000 rows.
                "retry count": f"{base}/jobs?to_retry=true&limit=1000",
            }
            for url in calls.values():  # warm: the pool's connections, the plans
                for _ in range(5):
                    await timed(client, url, headers)
            ms: dict[str, list[float]] = {label: [] for label in [*calls, "one job"]}
            for n in range(runs):
                for label, url in calls.items():
                    ms[label].append(await timed(client, url, headers))
                ms["one job"].append(
                    await timed(client, f"{base}/jobs/{ids[n % len(ids)]}", headers)
                )
    finally:
        await hub.close()
    return ms


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub(f"console{args.rows}", worker=False)
    say(f"copying {args.rows:,} job rows")
    started = time.perf_counter()
    await asyncio.to_thread(build, hub.url, args.rows)
    say(f"read model ready in {time.perf_counter() - started:.0f} s")
    settings = hub.settings_object().model_copy(update={"api_jwt_secret": SecretStr(SECRET)})
    ms = await measure(settings, args.runs)
    baseline = percentile(ms.pop("one job"), 95)
    figures = [
        Figure(
            NAME,
            f"p95 {label}",
            "ms",
            percentile(values, 95),
            baseline,
            "GET one job, p95",
            ratio_of(percentile(values, 95), baseline),
            Target("<=", TARGET_MS, on="value", unit="ms"),
        )
        for label, values in ms.items()
    ]
    with psycopg.connect(hub.url) as conn:
        largest = conn.execute(
            "SELECT count(*) FROM jobs WHERE workspace_id = %s", (members()[0][0],)
        ).fetchone()
    series = {
        "rows": args.rows,
        "p50_ms": {label: percentile(values, 50) for label, values in ms.items()},
        "p95_ms": {label: percentile(values, 95) for label, values in ms.items()},
        "one_job_p95_ms": baseline,
    }
    notes = [
        f"console: {args.rows:,} job rows, {largest[0] if largest else 0:,} in the workspace "
        f"measured; {args.runs} calls each, p50 "
        + ", ".join(f"{label} {percentile(values, 50):.1f} ms" for label, values in ms.items())
    ]
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
