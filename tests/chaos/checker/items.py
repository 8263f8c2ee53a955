"""Invariants 1 and 2: each page's effect once, and counters that equal their items.

1. A tagging job's succeeded item: its page holds the job's tag exactly once, with
   exactly one revision carrying the job's correlation id (none only when another
   writer's revision brought the tag first: "already there, not at the snapshot"); an
   item not succeeded has no revision of the job; no page outside the job's items has
   one. A succeeded export's files hold each of its items' pages on exactly one line;
   a cancelled or failed export leaves no file.
2. A job with items (tagging, export): total, processed, succeeded, skipped and failed
   equal its items' counts; any job: processed within total; a job that succeeded has
   no item pending."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg

from tests.chaos.checker.facts import Facts
from tests.chaos.checker.verdict import Verdict, verdict

ITEM_KINDS = ("course_tagging", "page_export")

# Per tagging job: its succeeded items whose page does not hold the tag exactly once.
TAG_NOT_ONCE = """
SELECT i.job_id, i.ref, p.id IS NULL AS gone,
       (SELECT count(*) FROM unnest(p.tags) AS t(tag)
         WHERE lower(t.tag) = lower(j.payload->>'tag')) AS copies
  FROM jobs j JOIN job_items i ON i.job_id = j.id
  LEFT JOIN pages p ON p.id = i.ref
 WHERE j.kind = 'course_tagging' AND i.state = 'succeeded'
   AND (p.id IS NULL OR (SELECT count(*) FROM unnest(p.tags) AS t(tag)
                         WHERE lower(t.tag) = lower(j.payload->>'tag')) <> 1)
"""
# Per tagging job and page: the revisions carrying the job's correlation id, against
# the page's item in the job (NULL: not one of its items).
JOB_REVISIONS = """
WITH revs AS (
    SELECT j.id AS job_id, r.page_id, count(*) AS revisions
      FROM jobs j JOIN page_revisions r ON r.correlation_id = j.correlation_id
     WHERE j.kind = 'course_tagging'
     GROUP BY j.id, r.page_id
)
SELECT revs.job_id, revs.page_id, revs.revisions, i.state
  FROM revs LEFT JOIN job_items i ON i.job_id = revs.job_id AND i.ref = revs.page_id
 WHERE i.state IS DISTINCT FROM 'succeeded' OR revs.revisions <> 1
"""
# Succeeded items without any revision of their job: fine only when the first revision
# that carried the tag is another writer's.
SUCCEEDED_WITHOUT_REVISION = """
SELECT i.job_id, i.ref,
       (SELECT r.correlation_id FROM page_revisions r
         WHERE r.page_id = i.ref
           AND EXISTS (SELECT 1 FROM unnest(r.tags) AS t(tag)
                        WHERE lower(t.tag) = lower(j.payload->>'tag'))
         ORDER BY r.version LIMIT 1) AS first_with_tag
  FROM jobs j JOIN job_items i ON i.job_id = j.id
 WHERE j.kind = 'course_tagging' AND i.state = 'succeeded'
   AND NOT EXISTS (SELECT 1 FROM page_revisions r
                    WHERE r.page_id = i.ref AND r.correlation_id = j.correlation_id)
"""
TAGGING_ITEMS = """
SELECT count(*) FROM jobs j JOIN job_items i ON i.job_id = j.id
 WHERE j.kind = 'course_tagging'
"""


async def each_effect_once(conn: psycopg.AsyncConnection[Any], facts: Facts) -> Verdict:
    result = verdict(1)
    async with conn.cursor() as cur:
        await cur.execute(TAGGING_ITEMS)
        row = await cur.fetchone()
        result.checked = int(row[0]) if row else 0
        await cur.execute(TAG_NOT_ONCE)
        for job_id, page_id, gone, copies in await cur.fetchall():
            state = "is gone" if gone else f"holds the tag {copies} times"
            result.violated(str(job_id), f"page {page_id}: item succeeded but the page {state}")
        await cur.execute(JOB_REVISIONS)
        for job_id, page_id, revisions, state in await cur.fetchall():
            where = f"its item {state}" if state else "not one of its items"
            result.violated(
                str(job_id), f"page {page_id}: {revisions} revisions of the job ({where})"
            )
        await cur.execute(SUCCEEDED_WITHOUT_REVISION)
        others = 0
        for job_id, page_id, first in await cur.fetchall():
            job = facts.jobs.get(str(job_id))
            if first is None or (job is not None and first == job.correlation_id):
                result.violated(
                    str(job_id), f"page {page_id}: item succeeded, no revision brought the tag"
                )
            else:
                others += 1
        result.notes["succeeded_by_another_writer"] = others
    exports_checked = _exports(facts, result)
    result.checked += exports_checked
    result.notes["export_items_checked"] = exports_checked
    return result


def _exports(facts: Facts, result: Verdict) -> int:
    """Each succeeded export's lines against its items' pages (read from the files the
    export wrote under the stack's ``exports/<job id>/``)."""
    checked = 0
    for job in facts.jobs.values():
        if job.kind != "page_export" or not job.final:
            continue
        folder = facts.home / "exports" / job.id
        files = sorted(folder.glob("*.ndjson")) if folder.is_dir() else []
        if job.status != "succeeded":
            if files:
                result.violated(job.id, f"export {job.status} left {len(files)} files behind")
            continue
        lines: Counter[str] = Counter()
        unreadable = 0
        for path in files:
            for line in path.read_bytes().splitlines():
                try:
                    lines[str(json.loads(line)["id"])] += 1
                except (ValueError, KeyError, TypeError):
                    unreadable += 1
        if unreadable:
            result.violated(job.id, f"export: {unreadable} lines that are no page")
        wanted = facts.items.get(job.id)
        total = wanted.items if wanted else 0
        checked += total
        twice = sum(1 for n in lines.values() if n > 1)
        if twice or sum(lines.values()) != total:
            result.violated(
                job.id,
                f"export: {sum(lines.values())} lines for {total} items, {twice} pages twice",
            )
    return checked


async def counters_equal_items(facts: Facts) -> Verdict:
    result = verdict(2)
    for job in facts.jobs.values():
        result.checked += 1
        counts = facts.items.get(job.id)
        if job.processed > job.total or min(job.processed, job.total) < 0:
            result.violated(job.id, f"processed {job.processed} of a total of {job.total}")
        if job.kind in ITEM_KINDS:
            _against_items(result, job.id, job.row, counts)
        if job.status == "succeeded" and counts is not None and counts.pending:
            result.violated(job.id, f"succeeded with {counts.pending} items pending")
    return result


def _against_items(result: Verdict, job_id: str, row: dict[str, Any], counts: Any) -> None:
    items = {
        "total": counts.items if counts else 0,
        "processed": counts.processed if counts else 0,
        "succeeded": counts.succeeded if counts else 0,
        "skipped": counts.skipped if counts else 0,
        "failed": counts.failed if counts else 0,
    }
    off = [
        f"{name} {row[name]} (items say {value})"
        for name, value in items.items()
        if row[name] != value
    ]
    if off:
        result.violated(job_id, "counters off: " + ", ".join(off))
