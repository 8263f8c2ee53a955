"""The hub the campaign works on, and the hub's own writer.

Seeding: the plan's workspaces (each with an enabled administrator) and courses, one
page in fifty holding the 20 tags a page may hold (a tagging job skips it,
``tag_limit``), and a few attachments a workspace (backups carry files).

The writer edits pages as the hub's users do while jobs run, at the plan's times: a new
title, a page to the trash or out of it, each change a new version and a revision (its
own correlation id), with no ETag: it is the concurrent editor the jobs' ETag guard
meets. It never touches a course's root and never removes or adds a tag, so that every
tag on a page is the one job's that added it. It keeps going through outages (an edit
that finds no database is counted and skipped)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import text

from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import (
    create_account,
    create_attachment,
    create_course,
    create_workspace,
)
from tests.chaos.plan import Edit, Plan
from tests.chaos.stack import ChaosStack

HUB_EDITOR = uuid.UUID(int=0xC4A05)
WRITER_CORRELATION = "chaos-hub-writer"
# One page in this many holds the most tags a page may.
FULL_PAGE_EVERY = 50
MAX_TAGS = 20
# An edit more than this late (the database hung) is skipped, not sent.
EDIT_LATE_SECONDS = 10.0


@dataclass(frozen=True)
class Hub:
    workspaces: list[tuple[uuid.UUID, uuid.UUID]]  # (workspace, its administrator)
    courses: list[list[uuid.UUID]]  # each course's pages, the root first


async def seed_hub(chaos: ChaosStack, plan: Plan) -> Hub:
    rng = random.Random(f"{plan.seed}:hub")
    engine = async_engine(chaos.database_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            workspaces = []
            for number in range(len(plan.profile.courses)):
                workspace = await create_workspace(conn, f"Chaos workspace {number}")
                workspaces.append((workspace, await create_account(conn, workspace)))
            courses = []
            for course in plan.courses:
                workspace = workspaces[course.workspace][0]
                pages = await create_course(
                    conn, workspace, course.pages, title=f"Course {course.number}"
                )
                courses.append(pages)
                await _fill_tags(conn, pages[1::FULL_PAGE_EVERY])
            for number in range(len(workspaces)):
                first = next(
                    c
                    for c, spec in zip(courses, plan.courses, strict=True)
                    if spec.workspace == number
                )
                for index in range(plan.profile.attachments_per_workspace):
                    content = rng.randbytes(rng.randint(1, 64) << 10)
                    page = first[rng.randrange(len(first))]
                    await create_attachment(
                        conn, chaos.home / "attachments", page, f"file-{index}.bin", content
                    )
    finally:
        await engine.dispose()
    return Hub(workspaces, courses)


async def _fill_tags(conn: Any, pages: list[uuid.UUID]) -> None:
    """These pages get the most tags a page may hold, as a new version."""
    await conn.execute(
        text(
            """
            WITH changed AS (
                UPDATE pages SET tags = ARRAY(SELECT 'hub-' || n FROM generate_series(1, :n) n),
                       version = version + 1
                 WHERE id = ANY(:ids) RETURNING id, version, title, tags
            )
            INSERT INTO page_revisions (page_id, version, actor_id, change_summary, title, tags)
            SELECT id, version, :actor, 'Tags set', title, tags FROM changed
            """
        ),
        {"ids": pages, "n": MAX_TAGS, "actor": HUB_EDITOR},
    )


CHANGE = {
    "edit": "title = split_part(title, ' ~', 1) || ' ~' || %(n)s",
    "trash": "trashed = true",
    "restore": "trashed = false",
}
SUMMARY = {"edit": "Edited in the hub", "trash": "Moved to the trash", "restore": "Restored"}


def change_sql(action: str) -> str:
    return f"""
        WITH changed AS (
            UPDATE pages SET {CHANGE[action]}, version = version + 1, updated_at = now()
             WHERE id = %(id)s RETURNING id, version, title, tags
        )
        INSERT INTO page_revisions
               (page_id, version, actor_id, change_summary, correlation_id, title, tags)
        SELECT id, version, %(actor)s, %(summary)s, %(correlation)s, title, tags FROM changed
    """


class HubWriter:
    def __init__(self, chaos: ChaosStack, hub: Hub) -> None:
        self.chaos = chaos
        self.hub = hub
        self.counts: Counter[str] = Counter()
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def run(self, edits: list[Edit], t0: float) -> None:
        try:
            for number, edit in enumerate(edits):
                await asyncio.sleep(max(0.0, t0 + edit.at - time.monotonic()))
                if time.monotonic() - (t0 + edit.at) > EDIT_LATE_SECONDS:
                    self.counts["skipped (late)"] += 1
                    continue
                await self._apply(number, edit)
        finally:
            if self._conn is not None:
                await self._conn.close()

    async def _apply(self, number: int, edit: Edit) -> None:
        page = self.hub.courses[edit.course][edit.ordinal]
        params = {
            "id": page,
            "n": str(number),
            "actor": HUB_EDITOR,
            "summary": SUMMARY[edit.action],
            "correlation": WRITER_CORRELATION,
        }
        try:
            async with asyncio.timeout(10):
                if self._conn is None:
                    self._conn = await psycopg.AsyncConnection.connect(
                        self.chaos.database_url,
                        autocommit=True,
                        connect_timeout=3,
                        options="-c statement_timeout=5000 -c lock_timeout=3000",
                    )
                await self._conn.execute(change_sql(edit.action), params)
            self.counts[edit.action] += 1
        except (psycopg.Error, OSError, TimeoutError):
            self.counts["failed"] += 1
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await conn.close()
