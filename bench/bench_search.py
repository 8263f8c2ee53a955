"""The job list's searches at scale: p50 and p95 of each filter and order the API's list
offers, on a jobs table of 1,000,000 rows, in the largest workspace (~10 % of the rows:
the longest index walks), each with its plan (EXPLAIN ANALYZE) in the JSON.

The rows (bulk-inserted with generate_series as bench_readmodel's, then VACUUM ANALYZE):
1,000 workspaces of skewed size, 90 % course tagging and 10 % backups, created over the
last 26 hours, the same statuses; each workspace has three members, its administrator
starting 80 % of its jobs, another 20 %, the third 0.05 %; a tagging job's tag is one
of 500, skewed (the commonest on ~4.5 % of jobs, the rarest on ~0.01 %), kept in its
result too when it succeeded.

The statements are captured from the product's own path (``WorkspaceJobs.list`` as the
API calls it), then replayed with psycopg, interleaved, prepared when the product lets
them be. Then what the search's indexes (migration 0014) cost the writes: jobs inserted
and finished, in bulk and one a commit, with the indexes, then without them, back to
back; ``--drop-index`` measures the searches without one.

    python bench/bench_search.py [--rows 1000000] [--runs 200] [--max-seconds 4]
                                 [--drop-index NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from bench_readmodel import actor_uuid, workspace_uuid
from common import Hub, Stack, Statement, capturing
from harness import Figure, Outcome, Target, percentile, say
from standalone import main_for

from hubjobs.readmodel.search import JobSort
from hubjobs.readmodel.status import JobStatus
from starter.client import WorkspaceJobs

NAME = "search"
TITLE = "Job list searches at 1,000,000 job rows"
WORKSPACES = 1000
TAGS = 500
TARGET_MS = 50.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000, help="job rows (default 1000000)")
    parser.add_argument("--runs", type=int, default=200, help="runs of each query (default 200)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=4.0,
        help="stop a query's runs after this long (at least 20 runs; default 4)",
    )
    parser.add_argument(
        "--drop-index",
        action="append",
        default=[],
        help="measure without this index (repeatable): what it saves",
    )


INSERT_JOBS = f"""
INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, correlation_id,
                  payload, summary, total, processed, succeeded, skipped, failed,
                  result, error_code, created_at, started_at, finished_at, expires_at,
                  updated_at)
SELECT id, kind || '-' || id, kind, status, {workspace_uuid("w")},
       CASE WHEN who < 0.2 THEN {actor_uuid(f"w + {WORKSPACES}")}
            WHEN who < 0.2005 THEN {actor_uuid(f"w + {2 * WORKSPACES}")}
            ELSE {actor_uuid("w")} END,
       md5(g::text),
       CASE WHEN kind = 'backup' THEN jsonb_build_object('scope', 'workspace')
            ELSE jsonb_build_object('root_page_id', gen_random_uuid(), 'tag', tag) END,
       'Tag course Onboarding, 120 pages', 120,
       CASE WHEN status IN ('queued') THEN 0 ELSE 120 END,
       CASE WHEN status = 'succeeded' THEN 118 ELSE 0 END, 2, 0,
       CASE WHEN status = 'succeeded' AND kind = 'course_tagging'
            THEN jsonb_build_object('tag', tag, 'total', 120, 'succeeded', 118) END,
       CASE WHEN status = 'failed' THEN 'processing_failed' END,
       created, created + interval '1 second',
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE finished END,
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE finished + interval '24 hours' END,
       CASE WHEN status IN ('queued', 'running') THEN created ELSE finished END
  FROM (
    SELECT g, gen_random_uuid() AS id,
           CASE WHEN random() < 0.9 THEN 'course_tagging' ELSE 'backup' END AS kind,
           CASE WHEN s < 0.001 THEN 'queued' WHEN s < 0.005 THEN 'running'
                WHEN s < 0.055 THEN 'failed' WHEN s < 0.075 THEN 'cancelled'
                ELSE 'succeeded' END AS status,
           'tag-' || floor({TAGS} * power(random(), 2))::int AS tag,
           random() AS who,
           w, created, created + random() * interval '10 minutes' AS finished
      FROM (SELECT g, random() AS s, floor({WORKSPACES} * power(random(), 3))::int AS w,
                   now() - random() * interval '26 hours' AS created
              FROM generate_series(%(first)s::int, %(last)s::int) g) r
  ) j
"""


def build(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO workspaces (id, name) SELECT {workspace_uuid('w')}, 'Workspace ' || w "
            f"FROM generate_series(0, {WORKSPACES - 1}) w"
        )
        conn.execute(
            f"INSERT INTO user_accounts (id, email, display_name) SELECT {actor_uuid('a')}, "
            f"'user' || a || '@hub.example', 'User ' || a "
            f"FROM generate_series(0, {3 * WORKSPACES - 1}) a"
        )
        conn.execute(
            f"INSERT INTO workspace_memberships (workspace_id, user_id, role) SELECT "
            f"{workspace_uuid(f'a % {WORKSPACES}')}, {actor_uuid('a')}, "
            f"CASE WHEN a < {WORKSPACES} THEN 'administrator' ELSE 'editor' END "
            f"FROM generate_series(0, {3 * WORKSPACES - 1}) a"
        )
    step = 100_000
    chunks = [(first, min(first + step - 1, rows)) for first in range(1, rows + 1, step)]

    def insert(chunk: tuple[int, int]) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(INSERT_JOBS, {"first": chunk[0], "last": chunk[1]})

    with ThreadPoolExecutor(2) as pool:
        for done, _ in enumerate(pool.map(insert, chunks), 1):
            say(f"  jobs: {min(done * step, rows):,} / {rows:,}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("CHECKPOINT")


# Migration 0014's: what the writes pay for the searches.
SEARCH_INDEXES = (
    "ix_jobs_workspace_actor_created",
    "ix_jobs_workspace_finished",
    "ix_jobs_payload",
    "ix_jobs_result",
)
WRITE_ROWS = 100_000
# Jobs started, then finished, one a statement and a commit, as the product writes them.
ONE_BY_ONE = 2000
# A job's finishing write: its result, status and finish time (rewritten for a job the
# data made final already: the same index entries made).
FINISH = (
    "UPDATE jobs SET status = 'succeeded', finished_at = now(), updated_at = now(), "
    "result = jsonb_build_object('tag', payload->>'tag', 'total', 120, 'failed', 0) "
    "WHERE id = ANY(%(ids)s)"
)
INSERT_RETURNING = INSERT_JOBS + " RETURNING id"


@dataclass
class WriteCost:
    """Milliseconds a job: inserted and finished in bulk (one statement for all: the
    indexes' own cost shows), and one a commit (what a start and an ending pay)."""

    bulk_insert: float
    bulk_finish: float
    insert: float
    finish: float


def write_cost(url: str) -> WriteCost:
    with psycopg.connect(url, autocommit=True) as conn:

        def timed(sql: str, params: dict[str, Any]) -> tuple[float, list[Any]]:
            started = time.perf_counter()
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall() if cursor.description else []
            return (time.perf_counter() - started) * 1000, [row[0] for row in rows]

        spent, ids = timed(INSERT_RETURNING, {"first": 1, "last": WRITE_ROWS})
        bulk_insert = spent / WRITE_ROWS
        bulk_finish = timed(FINISH, {"ids": ids})[0] / WRITE_ROWS
        made = [timed(INSERT_RETURNING, {"first": n, "last": n}) for n in range(ONE_BY_ONE)]
        finished = [timed(FINISH, {"ids": job_ids}) for _, job_ids in made]
    return WriteCost(
        bulk_insert,
        bulk_finish,
        sum(ms for ms, _ in made) / ONE_BY_ONE,
        sum(ms for ms, _ in finished) / ONE_BY_ONE,
    )


@dataclass
class Largest:
    workspace: uuid.UUID
    admin: uuid.UUID
    member: uuid.UUID
    rare_member: uuid.UUID
    job: uuid.UUID
    rows: int


def largest(url: str) -> Largest:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"SELECT id FROM jobs WHERE workspace_id = {workspace_uuid('0')} LIMIT 1"
        ).fetchone()
        count = conn.execute(
            f"SELECT count(*) FROM jobs WHERE workspace_id = {workspace_uuid('0')}"
        ).fetchone()
        ids = conn.execute(
            f"SELECT {workspace_uuid('0')}, {actor_uuid('0')}, {actor_uuid(str(WORKSPACES))}, "
            f"{actor_uuid(str(2 * WORKSPACES))}"
        ).fetchone()
    assert row is not None and count is not None and ids is not None
    return Largest(ids[0], ids[1], ids[2], ids[3], row[0], int(count[0]))


Search = Callable[[WorkspaceJobs, Largest], Awaitable[Any]]


def searches(now: datetime) -> dict[str, Search]:
    """Each filter and order the list offers, as the API calls the client."""
    return {
        "newest first (no filter)": lambda j, w: j.list(),
        "oldest first": lambda j, w: j.list(sort=JobSort.created_asc),
        "finished, newest first": lambda j, w: j.list(sort=JobSort.finished_desc),
        "status failed or cancelled": lambda j, w: j.list(
            status=[JobStatus.failed, JobStatus.cancelled]
        ),
        "status running": lambda j, w: j.list(status=JobStatus.running),
        "actor (20 % of jobs)": lambda j, w: j.list(actor_id=w.member),
        "actor (0.05 % of jobs)": lambda j, w: j.list(actor_id=w.rare_member),
        "status queued or running (0.5 %)": lambda j, w: j.list(
            status=[JobStatus.queued, JobStatus.running]
        ),
        "id prefix (4 hex digits)": lambda j, w: j.list(id_prefix=w.job.hex[:4]),
        "whole id": lambda j, w: j.list(id_prefix=str(w.job)),
        "one hour, oldest first": lambda j, w: j.list(
            since=now - timedelta(hours=3), until=now - timedelta(hours=2), sort=JobSort.created_asc
        ),
        "payload.tag common (~4.5 %)": lambda j, w: j.list(
            kind="course_tagging", fields=["payload.tag=tag-0"]
        ),
        "payload.tag rare (~0.01 %)": lambda j, w: j.list(
            kind="course_tagging", fields=[f"payload.tag=tag-{TAGS - 1}"]
        ),
        "result.tag rare, failed or succeeded": lambda j, w: j.list(
            kind="course_tagging",
            status=[JobStatus.failed, JobStatus.succeeded],
            fields=[f"result.tag=tag-{TAGS - 1}"],
        ),
        "oldest first, page after the middle": lambda j, w: j.list(
            sort=JobSort.created_asc, before=(now - timedelta(hours=13), uuid.UUID(int=0))
        ),
    }


@contextmanager
def preparing() -> Iterator[list[bool]]:
    """Whether each statement sent straight on psycopg may be prepared."""
    prepare: list[bool] = []
    inner = psycopg.AsyncConnection.execute

    async def spy(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        prepare.append(kwargs.get("prepare") is not False)
        return await inner(self, query, params, **kwargs)

    psycopg.AsyncConnection.execute = spy  # type: ignore[method-assign]
    try:
        yield prepare
    finally:
        psycopg.AsyncConnection.execute = inner  # type: ignore[method-assign]


async def captured(hub: Hub, ws: Largest, now: datetime) -> list[tuple[Statement, bool]]:
    """Each search's statement, and whether the product lets it be prepared."""
    found: list[tuple[Statement, bool]] = []
    async with hub.client() as client:
        jobs = client.scope(ws.workspace, ws.admin)
        await jobs.list(limit=1)  # the pool connects outside the capture
        for label, search in searches(now).items():
            with capturing(client.engine) as seen, preparing() as prepare:
                await search(jobs, ws)
            (sql, params), *_ = [s for s in seen if "FROM jobs" in s[0]]
            found.append((Statement(label, sql, params), prepare[-1]))
    return found


def measure(
    url: str, statements: list[tuple[Statement, bool]], runs: int, max_seconds: float
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Milliseconds of each statement, interleaved run by run, prepared (after psycopg's
    five runs) when the product lets it be; and each one's plan."""
    ms: dict[str, list[float]] = {s.label: [] for s, _ in statements}
    spent = dict.fromkeys(ms, 0.0)
    plans: dict[str, str] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for statement, _ in statements:
            rows = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, statement.params
            ).fetchall()
            plans[statement.label] = "\n".join(str(r[0]) for r in rows)
        for n in range(runs):
            for statement, prepare in statements:
                if n >= 20 and spent[statement.label] > max_seconds:
                    continue
                started = time.perf_counter()
                conn.execute(
                    statement.sql, statement.params, binary=True, prepare=None if prepare else False
                ).fetchall()
                seconds = time.perf_counter() - started
                ms[statement.label].append(seconds * 1000)
                spent[statement.label] += seconds
    return ms, plans


_SCANS = re.compile(
    r"(Seq Scan on jobs|(?:Parallel )?(?:Bitmap Index|Index(?: Only)?) Scan(?: Backward)?"
    r" (?:using|on) (?!pk_workspace|pk_user|ix_workspace_memberships)\w+)"
)


def access(plan: str) -> str:
    """The ways the plan reads jobs: its scans of the table and of the table's indexes."""
    return ", ".join(dict.fromkeys(m.group(1) for m in _SCANS.finditer(plan))) or "?"


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub(f"search{args.rows}", worker=False)
    say(f"bulk-inserting {args.rows:,} job rows")
    started = time.perf_counter()
    await asyncio.to_thread(build, hub.url, args.rows)
    say(f"read model ready in {time.perf_counter() - started:.0f} s")
    ws = largest(hub.url)
    now = datetime.now(UTC)
    statements = await captured(hub, ws, now)
    if args.drop_index:
        with psycopg.connect(hub.url, autocommit=True) as conn:
            for index in args.drop_index:
                conn.execute(f'DROP INDEX "{index}"')
    ms, plans = await asyncio.to_thread(measure, hub.url, statements, args.runs, args.max_seconds)
    # The writes with the search's indexes, then without them, back to back.
    cost = await asyncio.to_thread(write_cost, hub.url)
    with psycopg.connect(hub.url, autocommit=True) as conn:
        for index in SEARCH_INDEXES:
            conn.execute(f'DROP INDEX IF EXISTS "{index}"')
    bare = await asyncio.to_thread(write_cost, hub.url)
    figures = [
        Figure(
            NAME,
            f"p95 {s.label}",
            "ms",
            percentile(ms[s.label], 95),
            None,
            "",
            None,
            Target("<=", TARGET_MS, on="value", unit="ms"),
        )
        for s, _ in statements
    ]
    without = "without the search's indexes"
    figures += [
        Figure(NAME, f"{what} ({how})", "ms", ms_a_job, ms_bare, without, ms_a_job / ms_bare, None)
        for what, how, ms_a_job, ms_bare in [
            (
                "insert a job",
                f"{WRITE_ROWS:,} in one statement",
                cost.bulk_insert,
                bare.bulk_insert,
            ),
            (
                "finish a job",
                f"{WRITE_ROWS:,} in one statement",
                cost.bulk_finish,
                bare.bulk_finish,
            ),
            ("insert a job", f"{ONE_BY_ONE:,}, a commit each", cost.insert, bare.insert),
            ("finish a job", f"{ONE_BY_ONE:,}, a commit each", cost.finish, bare.finish),
        ]
    ]
    series = {
        "rows": args.rows,
        "workspace_rows": ws.rows,
        "dropped": args.drop_index,
        "p50_ms": {s.label: percentile(ms[s.label], 50) for s, _ in statements},
        "p95_ms": {s.label: percentile(ms[s.label], 95) for s, _ in statements},
        "runs": {s.label: len(ms[s.label]) for s, _ in statements},
        "plans": plans,
        "sql": {s.label: " ".join(s.sql.split()) for s, _ in statements},
    }
    for label, plan in plans.items():
        say(f"--- {label}\n{plan}")
    notes = [
        f"search: {args.rows:,} job rows, {ws.rows:,} in the workspace searched"
        + (f"; without {', '.join(args.drop_index)}" if args.drop_index else ""),
        "| search | p50 | p95 | how jobs is read (EXPLAIN ANALYZE) |",
        "| --- | --- | --- | --- |",
        *(
            f"| {s.label} | {percentile(ms[s.label], 50):.2f} ms | "
            f"{percentile(ms[s.label], 95):.2f} ms | {access(plans[s.label])} |"
            for s, _ in statements
        ),
    ]
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
