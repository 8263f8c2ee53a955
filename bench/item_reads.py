"""Every read of a job's items, planned and timed (EXPLAIN ANALYZE) on jobs of 100,000 and
1,000,000 items, under each index design of ``job_items``: what each index serves and
what a read would cost without it.

Each size has two jobs among the others' items: a finished one (98 % of its items
succeeded, 1 % skipped, 1 % failed, scattered) and one half done (the first half
recorded, the rest pending). The reads are the product's own statements: a tagging
lane's batch (pending items in a range of ordinals), the unbounded pending read (a
small job's one batch, the sweep after lost commits), an export's first pending item,
a retry's failed items and its start's check, a page of the API's listing by each state,
the outcomes of a batch recorded, an export's detail lines and the retention's delete
(the writes rolled back). A design is the primary key plus: ``state`` (the (job, state,
ordinal) index, before migration 0010), nothing (``key``), or ``failed`` (a partial (job,
ordinal) index of the failed items, 0010's).

    .venv/bin/python bench/item_reads.py [--sizes 100000,1000000] [--designs state,key,failed]

Prints each design's indexes and their sizes, then, per read and size, each design's
median execution time of 3 and the scan of job_items it made (index, rows the filter
removed). Each design starts from a vacuumed table, as the first did.
"""

from __future__ import annotations

import argparse
import json
import statistics
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from common import Stack
from harness import say

from activities.course_tagging import READ_BATCH
from hubjobs.db.direct import Statement
from hubjobs.job_rows.store import DELETE_JOBS
from hubjobs.kinds.course_tagging import FAILED_SIZE
from hubjobs.readmodel.items import DETAIL_CHUNKS, FIRST_PENDING, LIST_ITEMS, RECORD_OUTCOMES

BATCH = 4_000
# The designs: the indexes of job_items beside its primary key.
DESIGNS: dict[str, tuple[str, ...]] = {
    "state": ("CREATE INDEX bench_ix_state ON job_items (job_id, state, ordinal)",),
    "key": (),
    "failed": (
        "CREATE INDEX bench_ix_failed ON job_items (job_id, ordinal) WHERE state = 'failed'",
    ),
}
FILL = """
INSERT INTO job_items (job_id, ordinal, ref, label, done_at_snapshot, state, processed_at)
SELECT %(job)s, n, gen_random_uuid(), 'Page ' || n, false,
       CASE WHEN %(half)s THEN (CASE WHEN n <= %(size)s / 2 THEN 'succeeded' ELSE 'pending' END)
            WHEN n %% 100 = 37 THEN 'failed' WHEN n %% 100 = 71 THEN 'skipped'
            ELSE 'succeeded' END,
       CASE WHEN %(half)s AND n > %(size)s / 2 THEN NULL ELSE now() END
  FROM generate_series(1, %(size)s) n
"""
JOB = """
INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, correlation_id,
                  payload, total)
VALUES (%(job)s, 'reads-' || %(job)s, 'course_tagging', 'running', gen_random_uuid(),
        gen_random_uuid(), 'bench', '{}', %(size)s)
"""


@dataclass(frozen=True)
class Read:
    name: str
    sql: str
    job: str  # "finished" or "half"
    params: dict[str, Any]
    write: bool = False


def reads(size: int) -> list[Read]:
    half = size // 2
    ordinals = list(range(half + 1, half + BATCH + 1))
    listing = {"after": 0, "limit": 100}
    return [
        Read(
            "lane's batch (pending, range)",
            READ_BATCH.sql,
            "half",
            {"after": half, "upto": half + BATCH, "limit": BATCH, "workspace": None, "tag": "t"},
        ),
        Read(
            "pending, no upper bound (from 0)",
            READ_BATCH.sql,
            "half",
            {"after": 0, "upto": None, "limit": BATCH, "workspace": None, "tag": "t"},
        ),
        Read(
            "export: first pending, from 0", Statement.of(FIRST_PENDING).sql, "half", {"after": 0}
        ),
        Read(
            "export: first pending, after the last file",
            Statement.of(FIRST_PENDING).sql,
            "half",
            {"after": half - 1_000},
        ),
        Read(
            "retry: failed items",
            "SELECT count(*) FROM job_failed_items(%(job)s)",
            "finished",
            {},
        ),
        Read(
            "retry's start: a failed page left",
            FAILED_SIZE.sql.replace("%(source)s", "%(job)s"),
            "finished",
            {"workspace": None, "tag": "t", "bound": 1},
        ),
        *(
            Read(
                f"listing, state {state}",
                Statement.of(LIST_ITEMS).sql,
                "finished",
                {**listing, "state": state},
            )
            for state in (None, "failed", "skipped", "succeeded")
        ),
        Read(
            "listing, pending",
            Statement.of(LIST_ITEMS).sql,
            "half",
            {**listing, "state": "pending"},
        ),
        Read(
            "a batch's outcomes recorded",
            RECORD_OUTCOMES.sql,
            "half",
            {
                "ordinals": ordinals,
                "states": ["succeeded"] * BATCH,
                "codes": [None] * BATCH,
                "messages": [None] * BATCH,
                "low": ordinals[0],
                "high": ordinals[-1],
                "clear": False,
            },
            write=True,
        ),
        Read(
            "export: a file's detail lines",
            Statement.of(DETAIL_CHUNKS).sql,
            "finished",
            {"low": half, "high": half + 10_000, "chunk": 262_144},
        ),
        Read(
            "retention: a job and its items deleted",
            Statement.of(DELETE_JOBS).sql,
            "finished",
            {},
            write=True,
        ),
    ]


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def scans(plan: dict[str, Any]) -> str:
    """The scans of job_items in a plan: their kind, index and rows filtered out."""
    found = []
    for node in nodes(plan):
        if node.get("Relation Name") == "job_items":
            kind = str(node["Node Type"]).replace(" Scan", "")
            # A bitmap heap scan's index is its child's.
            index = node.get("Index Name") or " ".join(
                str(child.get("Index Name", "")) for child in node.get("Plans", [])
            )
            removed = int(node.get("Rows Removed by Filter", 0) or 0)
            found.append(f"{kind} {index}".strip() + (f", {removed:,} filtered" if removed else ""))
    return "; ".join(found) or "-"


def explain(conn: psycopg.Connection[Any], read: Read, job: uuid.UUID) -> tuple[float, str]:
    times, shape = [], ""
    for _ in range(3):
        with conn.transaction(force_rollback=read.write):
            cur = conn.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {read.sql}",
                {**read.params, "job": job, "ids": [job]},
            )
            document = cur.fetchone()
            assert document is not None
            found = document[0] if not isinstance(document[0], str) else json.loads(document[0])
            times.append(float(found[0]["Execution Time"]))
            shape = scans(found[0]["Plan"])
    return statistics.median(times), shape


def index_sizes(conn: psycopg.Connection[Any]) -> str:
    """Each index of job_items and its size (MB), the items of every job filled."""
    rows = conn.execute(
        "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) / 2.0 ^ 20 "
        "FROM pg_index WHERE indrelid = 'job_items'::regclass ORDER BY 1"
    ).fetchall()
    return ", ".join(f"{name} {mb:.0f} MB" for name, mb in rows)


def fill(conn: psycopg.Connection[Any], sizes: list[int]) -> dict[tuple[int, str], uuid.UUID]:
    jobs: dict[tuple[int, str], uuid.UUID] = {}
    for size in sizes:
        for kind in ("finished", "half"):
            job = uuid.uuid4()
            say(f"{size:,} items, {kind}")
            params = {"job": job, "size": size, "half": kind == "half"}
            with conn.transaction():
                conn.execute(JOB, params)
                conn.execute(FILL, params)
            jobs[size, kind] = job
    conn.execute("VACUUM ANALYZE job_items")
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--designs", default=",".join(DESIGNS))
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    designs = args.designs.split(",")
    with Stack() as stack:
        url = stack.database("item_reads")
        with psycopg.connect(url, autocommit=True) as conn:
            # The table bare but for its primary key: each design adds its own indexes.
            for index in ("ix_job_items_job_state_ordinal", "ix_job_items_failed"):
                conn.execute(f"DROP INDEX IF EXISTS {index}")
            jobs = fill(conn, sizes)
            results: dict[tuple[str, int], dict[str, tuple[float, str]]] = {}
            sizes_mb: dict[str, str] = {}
            for design in designs:
                for sql in DESIGNS[design]:
                    conn.execute(sql)
                # The writes rolled back under the design before left every row they
                # touched not all-visible: index-only scans would go to the heap again.
                conn.execute("VACUUM ANALYZE job_items")
                sizes_mb[design] = index_sizes(conn)
                for size in sizes:
                    for read in reads(size):
                        found = explain(conn, read, jobs[size, read.job])
                        results.setdefault((read.name, size), {})[design] = found
                for sql in DESIGNS[design]:
                    conn.execute("DROP INDEX " + sql.split()[2])
    for design, sized in sizes_mb.items():
        print(f"{design:>7}: indexes {sized}")
    for (name, size), by_design in results.items():
        print(f"{name}, {size:,} items")
        for design, (ms, shape) in by_design.items():
            print(f"    {design:>7}: {ms:9.2f} ms  {shape}")


if __name__ == "__main__":
    main()
