"""The read model at scale: p99 of every query the CLI, the API, the metrics and the
maintenance run today, on a jobs table of 1,000,000 rows (and their ~1,020,000 audit
events), each against a primary-key
probe run alongside (same connection, interleaved, fresh random keys each time).

The rows (bulk-inserted with generate_series, then VACUUM ANALYZE as autovacuum would):
1,000 workspaces of skewed size (the largest holds ~10 % of all jobs), 90 % course
tagging and 10 % backups, created over the last 26 hours; 0.1 % queued, 0.4 % running,
5 % failed, 2 % cancelled, the rest succeeded; finished rows expire 24 h after they
finished, so ~8 % are past their expiry (the retention backlog). Plus one job of
100,000 items (1 % failed, 5 % skipped), whose failed items are paged 100 at a time
by ordinal, from a random cursor.

The queries are captured from the product's own code paths (``WorkspaceJobs.get`` and
``.list`` as the CLI and API call them, the metrics' queue state, the retention
sweep's and the reconciler's selections, stopped before they change anything), then
replayed with psycopg with other keys: what the product sends, whatever it becomes.

    python bench/bench_readmodel.py [--rows 1000000] [--runs 500] [--max-seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from common import Hub, Stack, Statement, read_model_statements
from harness import Figure, Outcome, Target, percentile, ratio_of, say
from standalone import main_for

NAME = "readmodel"
TITLE = "Read model at 1,000,000 job rows"
WORKSPACES = 1000
ITEMS = 100_000
TARGET_MS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000, help="job rows (default 1000000)")
    parser.add_argument("--runs", type=int, default=500, help="runs of each query (default 500)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=4.0,
        help="stop a query's runs after this long (at least 100 runs; default 4)",
    )


def workspace_uuid(n: str) -> str:
    return f"('00000000-0000-4000-8000-' || lpad(to_hex({n}), 12, '0'))::uuid"


def actor_uuid(n: str) -> str:
    return f"('00000000-0000-4000-9000-' || lpad(to_hex({n}), 12, '0'))::uuid"


INSERT_JOBS = f"""
INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, correlation_id,
                  payload, summary, total, processed, succeeded, skipped, failed,
                  progress_message, result, error_code, error_message, created_at,
                  started_at, finished_at, expires_at, updated_at)
SELECT id, kind || '-' || id, kind, status, {workspace_uuid("w")}, {actor_uuid("w")},
       md5(g::text), jsonb_build_object('root_page_id', gen_random_uuid(), 'tag', 'exam-2026'),
       'Tag course Onboarding with exam-2026, 120 pages', 120,
       CASE WHEN status IN ('queued') THEN 0 ELSE 120 END,
       CASE WHEN status = 'succeeded' THEN 118 ELSE 0 END, 2, 0,
       '120 of 120 pages done', CASE WHEN status = 'succeeded'
       THEN jsonb_build_object('total', 120, 'succeeded', 118, 'skipped', 2) END,
       CASE WHEN status = 'failed' THEN 'processing_failed' END,
       CASE WHEN status = 'failed' THEN 'The job could not be completed.' END,
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
           w, created, created + random() * interval '10 minutes' AS finished
      FROM (SELECT g, random() AS s, floor({WORKSPACES} * power(random(), 3))::int AS w,
                   now() - random() * interval '26 hours' AS created
              FROM generate_series(%(first)s::int, %(last)s::int) g) r
  ) j
"""


# The audit trail of those jobs: each started by its workspace's administrator, each
# cancelled one cancelled alone, and again in bulk cancels of up to ~100 jobs a workspace
# (so a job's trail holds one to three events, a bulk one among them).
INSERT_AUDIT = """
INSERT INTO audit_events (at, workspace_id, actor_id, surface, action, reason, job_ids)
SELECT created_at, workspace_id, actor_id, 'api', 'start', NULL, ARRAY[id] FROM jobs
UNION ALL
SELECT finished_at, workspace_id, actor_id, 'cli', 'cancel', 'wrong tag', ARRAY[id]
  FROM jobs WHERE status = 'cancelled'
UNION ALL
SELECT max(finished_at), workspace_id, min(actor_id::text)::uuid, 'console', 'bulk_cancel',
       'all of them', array_agg(id)
  FROM jobs WHERE status = 'cancelled'
 GROUP BY workspace_id, abs(hashtext(id::text)) % 10
"""


@dataclass
class JobsTable:
    hub: Hub
    rows: int
    items_job: uuid.UUID
    sample: list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]]  # (job, workspace, actor)


def build(url: str, rows: int) -> uuid.UUID:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO workspaces (id, name) SELECT {workspace_uuid('w')}, 'Workspace ' || w "
            f"FROM generate_series(0, {WORKSPACES - 1}) w"
        )
        conn.execute(
            f"INSERT INTO user_accounts (id, email, display_name) SELECT {actor_uuid('w')}, "
            f"'admin' || w || '@hub.example', 'Admin ' || w "
            f"FROM generate_series(0, {WORKSPACES - 1}) w"
        )
        conn.execute(
            f"INSERT INTO workspace_memberships (workspace_id, user_id, role) SELECT "
            f"{workspace_uuid('w')}, {actor_uuid('w')}, 'administrator' "
            f"FROM generate_series(0, {WORKSPACES - 1}) w"
        )

    # Two sessions, one a core: the inserts are index-bound.
    step = 100_000
    chunks = [(first, min(first + step - 1, rows)) for first in range(1, rows + 1, step)]

    def insert(chunk: tuple[int, int]) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(INSERT_JOBS, {"first": chunk[0], "last": chunk[1]})

    with ThreadPoolExecutor(2) as pool:
        for done, _ in enumerate(pool.map(insert, chunks), 1):
            say(f"  jobs: {min(done * step, rows):,} / {rows:,}")
    items_job = uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
            f"correlation_id, payload, total, processed, created_at, finished_at, expires_at) "
            f"VALUES (%(id)s, 'course_tagging-' || %(id)s, 'course_tagging', 'succeeded', "
            f"{workspace_uuid('1')}, {actor_uuid('1')}, 'bench', '{{}}', {ITEMS}, {ITEMS}, "
            f"now(), now(), now() + interval '24 hours')",
            {"id": items_job},
        )
        conn.execute(
            "INSERT INTO job_items (job_id, ordinal, ref, done_at_snapshot, state, error_code, "
            "processed_at) SELECT %(id)s, g, gen_random_uuid(), g %% 20 = 0, "
            "CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 20 = 0 THEN 'skipped' "
            "ELSE 'succeeded' END, CASE WHEN g %% 100 = 0 THEN 'page_unavailable' END, now() "
            f"FROM generate_series(1, {ITEMS}) g",
            {"id": items_job},
        )
        say("  audit events: a start per job, a cancel per cancelled one, bulk cancels")
        conn.execute(INSERT_AUDIT)
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("VACUUM ANALYZE job_items")
        conn.execute("VACUUM ANALYZE audit_events")
        conn.execute("CHECKPOINT")
    return items_job


async def jobs_table(stack: Stack, rows: int) -> JobsTable:
    """The 1,000,000-row read model, made once per stack (bench_retention sweeps it)."""
    key = f"jobs_table_{rows}"
    if key not in stack.cache:
        hub = await stack.hub(f"readmodel{rows}", worker=False)
        say(f"bulk-inserting {rows:,} job rows")
        started = time.perf_counter()
        items_job = await asyncio.to_thread(build, hub.url, rows)
        say(f"read model ready in {time.perf_counter() - started:.0f} s")
        with psycopg.connect(hub.url) as conn:
            sample = [
                (r[0], r[1], r[2])
                for r in conn.execute(
                    "SELECT id, workspace_id, actor_id FROM jobs TABLESAMPLE SYSTEM (1) LIMIT 5000"
                )
            ]
        stack.cache[key] = JobsTable(hub, rows, items_job, sample)
    found: JobsTable = stack.cache[key]
    return found


ITEMS_PAGE = (
    "SELECT ordinal, ref, state, error_code, error_message, processed_at FROM job_items "
    "WHERE job_id = %(job)s AND state = %(state)s AND ordinal > %(after)s "
    "ORDER BY ordinal LIMIT 100"
)
PROBE = "SELECT * FROM jobs WHERE id = %(id)s"


def measure(
    url: str,
    statements: list[Statement],
    table: JobsTable,
    sentinel: tuple[uuid.UUID, uuid.UUID, uuid.UUID],
    runs: int,
    max_seconds: float,
) -> tuple[dict[str, list[float]], list[float]]:
    """Milliseconds of each statement and of the probe, interleaved run by run."""
    rng = random.Random(11)
    ms: dict[str, list[float]] = {s.label: [] for s in statements}
    spent: dict[str, float] = {s.label: 0.0 for s in statements}
    probe: list[float] = []

    def keyed(params: dict[str, Any], row: tuple[uuid.UUID, uuid.UUID, uuid.UUID]) -> Any:
        swap = dict(zip(sentinel, row, strict=True))
        return {k: swap.get(v, v) if isinstance(v, uuid.UUID) else v for k, v in params.items()}

    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(runs):
            for statement in statements:
                if n >= 100 and spent[statement.label] > max_seconds:
                    continue
                row = rng.choice(table.sample)
                params = keyed(statement.params, row)
                if statement.sql is ITEMS_PAGE:
                    params["after"] = rng.randrange(ITEMS)
                started = time.perf_counter()
                conn.execute(PROBE, {"id": rng.choice(table.sample)[0]}).fetchall()
                probe.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                conn.execute(statement.sql, params).fetchall()
                seconds = time.perf_counter() - started
                ms[statement.label].append(seconds * 1000)
                spent[statement.label] += seconds
    return ms, probe


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    table = await jobs_table(stack, args.rows)
    sentinel = table.sample[0]
    statements = await read_model_statements(table.hub, sentinel[1], sentinel[2], sentinel[0])
    statements.append(
        Statement(
            "job_items page (state filter, 1 % match)",
            ITEMS_PAGE,
            {"job": table.items_job, "state": "failed", "after": 0},
        )
    )
    say(f"read model: {len(statements)} statements, up to {args.runs} runs each")
    ms, probe = await asyncio.to_thread(
        measure, table.hub.url, statements, table, sentinel, args.runs, args.max_seconds
    )
    probe_p99 = percentile(probe, 99)
    figures = []
    for statement in statements:
        values = ms[statement.label]
        p99 = percentile(values, 99)
        figures.append(
            Figure(
                NAME,
                f"p99 {statement.label}",
                "ms",
                p99,
                probe_p99,
                "PK probe",
                ratio_of(p99, probe_p99),
                Target("<=", TARGET_MS, on="value", unit="ms"),
            )
        )
    series = {
        "rows": args.rows,
        "p50_ms": {s.label: percentile(ms[s.label], 50) for s in statements},
        "p99_ms": {s.label: percentile(ms[s.label], 99) for s in statements},
        "runs": {s.label: len(ms[s.label]) for s in statements},
        "probe_p99_ms": probe_p99,
        "sql": {s.label: " ".join(s.sql.split()) for s in statements},
    }
    notes = [
        f"readmodel: {args.rows:,} job rows; runs per query: "
        + ", ".join(f"{len(v)}" for v in ms.values())
        + f"; PK probe p50 {percentile(probe, 50):.2f} ms"
    ]
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
