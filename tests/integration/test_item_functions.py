"""A job's items are read through the database's named functions (migration 0009), and
PostgreSQL inlines them: a tagging batch's read and a retry's failed items are planned
by an index of job_items (since 0010 the key's range, and the failed items' partial
index: test_item_plans.py), with no function scan left in the plan."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from activities.course_tagging import READ_BATCH
from hubjobs.db import direct
from hubjobs.db.direct import Statement
from hubjobs.kinds.course_tagging import FAILED_ITEMS
from tests.support.helpers import create_tagging_job
from tests.support.servers import seed


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


async def explain(
    engine: AsyncEngine, statement: str | Statement, params: dict[str, object]
) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        if isinstance(statement, Statement):  # already in psycopg's form
            explained = Statement(f"EXPLAIN (FORMAT JSON) {statement.sql}")
            (((document,),), _) = await direct.rows(conn, explained, params)
        else:
            found = await conn.execute(text(f"EXPLAIN (FORMAT JSON) {statement}"), params)
            document = found.scalar_one()
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    return plan_nodes(plan)


async def test_a_batch_read_and_a_retrys_items_are_planned_by_the_index(
    engine: AsyncEngine,
) -> None:
    course = await seed(engine, 50)
    job_id = await create_tagging_job(engine, course, "inlined")
    batch = await explain(
        engine,
        READ_BATCH,
        {
            "job": job_id,
            "after": 0,
            "upto": None,
            "limit": 10,
            "workspace": course.workspace_id,
            "tag": "inlined",
        },
    )
    failed = await explain(
        engine,
        FAILED_ITEMS,
        {"source": job_id, "workspace": course.workspace_id, "tag": "inlined"},
    )
    for nodes in (batch, failed):
        # (A tag check's unnest(tags) is a function scan of its own.)
        functions = {str(node.get("Function Name")) for node in nodes}
        assert not functions & {"job_pending_items", "job_failed_items"}, functions
        scans = [node for node in nodes if node.get("Relation Name") == "job_items"]
        # An index scan, or a bitmap heap scan fed by one.
        assert scans and all("Seq" not in str(node["Node Type"]) for node in scans), scans
