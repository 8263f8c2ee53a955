"""Every read of a job's items is an index scan of one job's range (migration 0010): by the
primary key (job, ordinal), bounded by the ordinals the read asks for, or, for failed
items, by the partial ix_job_items_failed; never a scan of the table. Planned on fresh
statistics of a table where the job is one of several (bench/item_reads.py times the
same reads on jobs of 100,000 and 1,000,000 items)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from activities.course_tagging import READ_BATCH
from hubjobs.db import direct
from hubjobs.db.direct import Statement
from hubjobs.job_rows.store import DELETE_JOBS
from hubjobs.kinds.course_tagging import FAILED_ITEMS, FAILED_SIZE
from hubjobs.readmodel.items import DETAIL_CHUNKS, FIRST_PENDING, LIST_ITEMS, RECORD_OUTCOMES

SIZE = 10_000  # a job's items; ten other jobs as large share the table
KEY, FAILED = "pk_job_items", "ix_job_items_failed"
# A finished job (1 % failed, 1 % skipped) or one half done (the rest pending).
ITEMS = """
INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, correlation_id,
                  payload, total)
VALUES (:job, 'plans-' || :job, 'course_tagging', 'running', gen_random_uuid(),
        gen_random_uuid(), 'plans', '{}', :size);
INSERT INTO job_items (job_id, ordinal, ref, label, state, processed_at)
SELECT :job, n, gen_random_uuid(), 'Page ' || n,
       CASE WHEN :half THEN (CASE WHEN n <= :size / 2 THEN 'succeeded' ELSE 'pending' END)
            WHEN n % 100 = 37 THEN 'failed' WHEN n % 100 = 71 THEN 'skipped'
            ELSE 'succeeded' END, now()
  FROM generate_series(1, :size) n
"""


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Each scan of job_items in the plan: the index it went by, and its condition (a
    bitmap heap scan's are its bitmap index scan's). A sequential scan has none."""
    found = []
    for node in nodes(plan):
        if node.get("Relation Name") != "job_items" or node["Node Type"] == "ModifyTable":
            continue
        by = node
        if node["Node Type"] == "Bitmap Heap Scan":
            (by,) = [c for c in node["Plans"] if c["Node Type"] == "Bitmap Index Scan"]
        found.append((str(by.get("Index Name", "-")), str(by.get("Index Cond", ""))))
    return found


async def plan_of(engine: AsyncEngine, sql: str, params: dict[str, Any]) -> dict[str, Any]:
    async with engine.connect() as conn:
        explained = Statement(f"EXPLAIN (FORMAT JSON) {sql}")
        ((document,),), _ = await direct.rows(conn, explained, params)
        await conn.rollback()
    return dict((json.loads(document) if isinstance(document, str) else document)[0]["Plan"])


@pytest.fixture
async def jobs(engine: AsyncEngine) -> dict[str, uuid.UUID]:
    """A finished job and a half-done one among ten others, on fresh statistics."""
    made: dict[str, uuid.UUID] = {}
    async with engine.connect() as conn:
        for name in ["finished", "half", *(f"other {n}" for n in range(10))]:
            made[name] = uuid.uuid4()
            params = {"job": made[name], "size": SIZE, "half": name == "half"}
            for sql in ITEMS.split(";"):
                await direct.run(conn, Statement.of(sql), params)
        await conn.commit()
        await direct.run(conn, Statement("ANALYZE job_items"), {})
        await conn.commit()
    return made


def _read_batch(after: int, upto: int | None) -> dict[str, Any]:
    return {"after": after, "upto": upto, "limit": 4_000, "workspace": None, "tag": "t"}


HALF = SIZE // 2
OUTCOMES = {
    "ordinals": list(range(HALF + 1, HALF + 51)),
    "states": ["succeeded"] * 50,
    "codes": [None] * 50,
    "messages": [None] * 50,
    "low": HALF + 1,
    "high": HALF + 50,
    "clear": False,
}
# (what reads, its statement, the job, its parameters, the index, what bounds the range)
READS: list[tuple[str, str, str, dict[str, Any], str, str]] = [
    ("a lane's batch", READ_BATCH.sql, "half", _read_batch(HALF, HALF + 4_000), KEY, "<="),
    ("the sweep's batch", READ_BATCH.sql, "half", _read_batch(0, None), KEY, ">"),
    (
        "a retry's failed items",
        Statement.of(FAILED_ITEMS).sql.replace("%(source)s", "%(job)s"),
        "finished",
        {"workspace": None, "tag": "t"},
        FAILED,
        "",
    ),
    (
        "a retry's start",
        FAILED_SIZE.sql.replace("%(source)s", "%(job)s"),
        "finished",
        {"workspace": None, "tag": "t", "bound": 1},
        FAILED,
        "",
    ),
    *(
        (
            f"a listing of {state or 'all'} items",
            Statement.of(LIST_ITEMS).sql,
            "finished",
            {"after": 100, "limit": 100, "state": state},
            FAILED if state == "failed" else KEY,
            "" if state == "failed" else ">",
        )
        for state in (None, "failed", "skipped", "succeeded", "pending")
    ),
    ("an export's next file", Statement.of(FIRST_PENDING).sql, "half", {"after": 1_000}, KEY, ">"),
    (
        "an export's file",
        Statement.of(DETAIL_CHUNKS).sql,
        "finished",
        {"low": 1, "high": 1_000, "chunk": 65_536},
        KEY,
        "<=",
    ),
    ("a batch's outcomes", RECORD_OUTCOMES.sql, "half", OUTCOMES, KEY, ""),
    ("the retention's delete", Statement.of(DELETE_JOBS).sql, "finished", {}, KEY, ""),
]


async def test_every_read_of_a_jobs_items_is_an_index_scan_of_its_range(
    engine: AsyncEngine, jobs: dict[str, uuid.UUID]
) -> None:
    wrong = []
    for read, sql, job, params, index, bound in READS:
        job_id = jobs[job]
        found = scans(await plan_of(engine, sql, {**params, "job": job_id, "ids": [job_id]}))
        if not found:
            wrong.append(f"{read}: no scan of job_items")
        for name, condition in found:
            if name != index or "job_id = " not in condition:
                wrong.append(f"{read}: by {name}, not {index} ({condition})")
            elif bound and f"ordinal {bound}" not in condition:
                wrong.append(f"{read}: not bounded by ordinal {bound} ({condition})")
    assert not wrong, "\n".join(wrong)


async def test_a_batch_reads_generic_plan_is_bounded_by_its_range_too(
    engine: AsyncEngine, jobs: dict[str, uuid.UUID]
) -> None:
    """READ_BATCH is prepared: after a few runs PostgreSQL may run its generic plan,
    made without the values. It goes by the key's range, bounded by ``upto`` even when
    that is NULL (the function's coalesce)."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    generic = re.sub(r"%\((\w+)\)s", numbered, READ_BATCH.sql)
    async with engine.connect() as conn:
        explained = Statement(f"EXPLAIN (GENERIC_PLAN, FORMAT JSON) {generic}")
        ((document,),), _ = await direct.rows(conn, explained, {})
        await conn.rollback()
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    ((index, condition),) = scans(plan)
    assert index == KEY, condition
    assert "job_id = " in condition and "ordinal <= COALESCE(" in condition, condition
