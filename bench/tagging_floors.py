"""The tagging benchmark's SQL floors: the least SQL doing a tagging job's durable work,
written into an items table of a given design.

* the floor: into ``job_items`` itself, the product's table with its keys and indexes;
* the physical floor: into a bare table holding what the work needs (job, ordinal, page,
  whether it had the tag, the outcome) with its primary key only: no foreign key, no
  other index, no label;
* a floor variant (``floor:SPEC``): into a copy of the items table as migration 0002 made
  it (primary key, the (job, state, ordinal) index, the foreign key to jobs, the label
  written) changed by SPEC's ``+``-separated tokens: ``nostate`` (no state index),
  ``nofk``, ``nopk``, ``nolabel`` (the title not copied), ``ffNN`` (fillfactor NN),
  ``pending`` and ``failed`` (a partial (job, ordinal) index of the items in that
  state). What each piece of the design costs is a variant's rate against ``floor:``
  (no token: the design as it was) in the same rounds; migration 0010's design is
  ``floor:nostate+nofk+failed``.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from common import DemoCourse

TAG = "bench-tag"
# As the product does: snapshots this large refresh the items' statistics (in the timing).
ANALYZE_FROM = 10_000


@dataclass(frozen=True)
class ItemsTable:
    """Where a floor writes its items: the table, whether the snapshot copies each
    page's title (the label), and the statements creating it (none: it exists)."""

    name: str
    label: bool = True
    create: tuple[str, ...] = ()


PRODUCT = ItemsTable("job_items")
PHYSICAL = ItemsTable(
    "bench_items_physical",
    label=False,
    create=(
        "DROP TABLE IF EXISTS bench_items_physical",
        """
        CREATE TABLE bench_items_physical (
            job_id uuid NOT NULL, ordinal int NOT NULL, ref uuid,
            done_at_snapshot boolean NOT NULL DEFAULT false,
            state text NOT NULL DEFAULT 'pending', processed_at timestamptz,
            PRIMARY KEY (job_id, ordinal))
        """,
    ),
)
TOKENS = re.compile(r"nostate|nofk|nopk|nolabel|ff\d{2,3}|pending|failed")


def variant(spec: str) -> ItemsTable:
    """The items table of ``floor:SPEC`` (see the module's docstring)."""
    tokens = [t for t in spec.split("+") if t]
    if any(not TOKENS.fullmatch(t) for t in tokens):
        raise ValueError(f"floor variant {spec!r}: tokens are {TOKENS.pattern}")
    name = "bench_items_" + ("_".join(tokens) or "design")
    fill = next((int(t[2:]) for t in tokens if t.startswith("ff")), 100)
    create = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} (LIKE job_items INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
        f"WITH (fillfactor = {fill})",
    ]
    if "nopk" not in tokens:
        create.append(f"ALTER TABLE {name} ADD PRIMARY KEY (job_id, ordinal)")
    if "nostate" not in tokens:
        create.append(f"CREATE INDEX ON {name} (job_id, state, ordinal)")
    for state in ("pending", "failed"):
        if state in tokens:
            create.append(f"CREATE INDEX ON {name} (job_id, ordinal) WHERE state = '{state}'")
    if "nofk" not in tokens:
        create.append(
            f"ALTER TABLE {name} ADD FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE"
        )
    return ItemsTable(name, label="nolabel" not in tokens, create=tuple(create))


def items_table(contender: str) -> ItemsTable:
    """The items table a contender writes (the product's for hubjobs and the seed loop)."""
    if contender == "physical":
        return PHYSICAL
    if contender.startswith("floor:"):
        return variant(contender.removeprefix("floor:"))
    return PRODUCT


def create_tables(url: str, tables: list[ItemsTable]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            for sql in table.create:
                conn.execute(sql)


def analyze(url: str, table: ItemsTable) -> None:
    """Fresh statistics for the tables a contender reads: the course just seeded, the
    jobs and the actor's role, its items table."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ANALYZE pages, jobs, workspace_memberships, user_accounts, {table.name}")


def snapshot_sql(table: ItemsTable) -> tuple[str, ...]:
    """The snapshot as the product's first attempt takes it (hubjobs.kinds.course_tagging:
    the course walked by parent, one item per page in (depth, title, id) order, whether
    it had the tag under tag_key()), preceded by the job's row."""
    label = ("label, ", "c.title, ") if table.label else ("", "")
    return (
        # As the product's snapshot does: stale statistics right after a bulk import must
        # not turn the walk into a scan of pages per parent; the ordering sort in memory.
        "SELECT set_config('enable_seqscan', 'off', true), set_config('work_mem', '64MB', true)",
        """
        INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id,
                          correlation_id, payload)
        VALUES (%(job)s, 'floor-' || %(job)s, 'course_tagging', 'running', %(ws)s, %(actor)s,
                'bench', jsonb_build_object('root_page_id', %(root)s::text, 'tag', %(tag)s::text))
        """,
        f"""
        INSERT INTO {table.name} (job_id, ordinal, ref, {label[0]}done_at_snapshot)
        WITH RECURSIVE course AS (
            SELECT id, 0 AS depth, title, tags FROM pages WHERE id = %(root)s
            UNION ALL
            SELECT p.id, c.depth + 1, p.title, p.tags FROM pages p
              JOIN course c ON p.parent_id = c.id
             WHERE p.workspace_id IS NOT DISTINCT FROM %(ws)s::uuid AND NOT p.trashed
        )
        SELECT %(job)s, row_number() OVER (ORDER BY c.depth, c.title, c.id)::int, c.id,
               {label[1]}EXISTS (SELECT 1 FROM unnest(c.tags) t
                                  WHERE tag_key(t) = tag_key(%(tag)s))
          FROM course c
        """,
    )


def writes_sql(table: ItemsTable) -> tuple[str, ...]:
    """In one transaction: the tag added to every page with its version bump, one
    revision per changed page, every item's outcome, the job's row."""
    return (
        f"""
        UPDATE pages p SET tags = array_append(p.tags, %(tag)s), version = p.version + 1,
               updated_at = now()
          FROM {table.name} i
         WHERE i.job_id = %(job)s AND i.ref = p.id AND NOT i.done_at_snapshot
        """,
        f"""
        INSERT INTO page_revisions
               (page_id, version, actor_id, change_summary, correlation_id, title, tags)
        SELECT p.id, p.version, %(actor)s, %(summary)s, 'bench', p.title, p.tags
          FROM {table.name} i JOIN pages p ON p.id = i.ref
         WHERE i.job_id = %(job)s AND NOT i.done_at_snapshot
        """,
        f"""
        UPDATE {table.name}
           SET state = CASE WHEN done_at_snapshot THEN 'skipped' ELSE 'succeeded' END,
               processed_at = now()
         WHERE job_id = %(job)s
        """,
        """
        UPDATE jobs SET status = 'succeeded', processed = total, succeeded = total,
               finished_at = now(), updated_at = now()
         WHERE id = %(job)s
        """,
    )


def backend_cpu(pid: int) -> float:
    """CPU seconds (user and system) of a PostgreSQL backend so far: what a floor's
    statements cost the server, far steadier than their wall time on a shared machine."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_wal(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """The WAL bytes and full-page images this connection's backend has written so far
    (PostgreSQL 18's own statistics of a backend: autovacuum's and checkpoints' are not
    in it). Its statistics are flushed first, outside any transaction."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT wal_bytes, wal_fpi FROM pg_stat_get_backend_wal(pg_backend_pid())"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def floor_once(
    url: str, course: DemoCourse, pages: int, table: ItemsTable
) -> tuple[float, dict[str, float]]:
    """A floor's seconds, from its snapshot's first statement to its last commit; where
    they went (``snapshot``, ``writes``, and each statement on the items), the CPU
    seconds its backend spent and the WAL it wrote."""
    params = {
        "tag": TAG,
        "job": uuid.uuid4(),
        "actor": course.actor_id,
        "ws": course.workspace_id,
        "root": course.root_page_id,
        "summary": f"Course tag {TAG} added",
    }
    spent: dict[str, float] = {}

    def timed(name: str, sql: str) -> int:
        mark, used = time.perf_counter(), backend_cpu(conn.info.backend_pid)
        count = conn.execute(sql, params).rowcount
        spent[name] = time.perf_counter() - mark
        spent[name + CPU_OF] = backend_cpu(conn.info.backend_pid) - used
        return count

    with psycopg.connect(url, autocommit=True) as conn:
        wal, fpi = backend_wal(conn)
        cpu = backend_cpu(conn.info.backend_pid)
        started = time.perf_counter()
        with conn.transaction():
            planner, job, items = snapshot_sql(table)
            conn.execute(planner)
            conn.execute(job, params)
            snapped = timed(ITEMS_INSERT, items)
        if pages >= ANALYZE_FROM:
            conn.execute(f"ANALYZE {table.name}")
        snapshot = time.perf_counter() - started
        with conn.transaction():
            tagged, revised, recorded, finished = writes_sql(table)
            counts = [timed(PAGES_UPDATE, tagged), timed(REVISIONS, revised)]
            counts += [timed(ITEMS_UPDATE, recorded), conn.execute(finished, params).rowcount]
        seconds = time.perf_counter() - started
        cpu = backend_cpu(conn.info.backend_pid) - cpu
        wal_after, fpi_after = backend_wal(conn)
    if snapped != pages or counts[:3] != [pages, pages, pages]:
        raise RuntimeError(f"{table.name}: wrote {snapped} and {counts}, not {pages} of each")
    return seconds, {
        "snapshot": snapshot,
        "writes": seconds - snapshot,
        **spent,
        CPU: cpu,
        WAL: (wal_after - wal) / 2**20,
        FPI: fpi_after - fpi,
    }


# The keys of a floor's figures beside its phases (seconds): the statements on the items
# and the pages, the backend's CPU seconds, its WAL in MB and full-page images.
ITEMS_INSERT, PAGES_UPDATE, REVISIONS, ITEMS_UPDATE = (
    "items insert",
    "pages update",
    "revisions",
    "items update",
)
CPU, WAL, FPI = "backend CPU s", "WAL MB", "full-page images"
CPU_OF = " CPU"  # a statement's key and this: the backend's CPU seconds in it
