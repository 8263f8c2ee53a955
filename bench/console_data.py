"""The console benchmarks' read model: 1,000,000 job rows in a realistic spread, made with
COPY once per stack and shared by bench_console (the API) and bench_console_paint (the
page in Chromium).

The rows (COPY, then VACUUM ANALYZE as autovacuum would): 5 workspaces of skewed size
(the largest holds 40 % of all jobs, the one measured), 3 kinds (75 % course tagging, 15 %
backups, 10 % exports), created over the last 24 hours, ended 5 s to 10 min after;
0.2 % queued, 0.5 % running (1 in 20 of the unfinished stuck), 4 % failed, 1.5 %
cancelled, the rest succeeded; each job 1 to 300 pages, 1 % of them failed. The ended
jobs' minutes (``job_minutes``, what the overview reads of them) counted from the rows.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from common import Hub, Stack
from harness import say

from hubjobs.db.direct import Statement
from hubjobs.job_rows import minutes

SHARES = (0.40, 0.25, 0.15, 0.12, 0.08)
KINDS = (("course_tagging", 0.75), ("backup", 0.15), ("course_export", 0.10))
COLUMNS = (
    "id, workflow_id, kind, status, workspace_id, actor_id, correlation_id, payload, total, "
    "processed, succeeded, skipped, failed, created_at, started_at, finished_at, expires_at, "
    "updated_at, stuck_since, stuck_reason"
)


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
        # Copied rows ended without the statement that counts an end: counted as a bulk
        # load is (the migration's backfill does the same).
        recount = Statement.of(minutes.RECOUNT).sql
        for workspace, _ in members():
            conn.execute(recount, {"workspace": workspace, "kept": minutes.KEPT})
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("VACUUM ANALYZE job_minutes")
        conn.execute("CHECKPOINT")


async def console_hub(stack: Stack, count: int) -> Hub:
    """The hub of ``count`` job rows, made once per stack (both console benchmarks read it)."""
    key = f"console_hub_{count}"
    if key not in stack.cache:
        hub = await stack.hub(f"console{count}", worker=False)
        say(f"copying {count:,} job rows")
        started = time.perf_counter()
        await asyncio.to_thread(build, hub.url, count)
        say(f"read model ready in {time.perf_counter() - started:.0f} s")
        stack.cache[key] = hub
    found: Hub = stack.cache[key]
    return found
