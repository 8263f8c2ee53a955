"""The overview's ended counts and non-empty buckets as a count over the jobs table would
give them (what the overview read before it read ``job_minutes``), and the same read
off an overview's answer, to compare the two."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg

from hubjobs.readmodel.overview import Overview, overview_as_member

# A workspace's ended jobs in a window, counted and summed per kind and bucket.
ENDED_JOBS = """
SELECT kind, date_bin(%(step)s, finished_at, TIMESTAMPTZ 'epoch') AS start,
       count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'cancelled'),
       sum(total), sum(processed), sum(succeeded), sum(skipped), sum(failed)
  FROM jobs WHERE workspace_id = %(workspace)s AND finished_at IS NOT NULL
   AND status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= %(since)s
 GROUP BY 1, 2
"""
JOBS = ("succeeded", "failed", "cancelled")
PAGES = ("total", "processed", "succeeded", "skipped", "failed")

# {kind: (succeeded, failed, cancelled)}, {bucket start: (those three, then the pages)}
Ended = tuple[dict[str, tuple[int, ...]], dict[datetime, tuple[int, ...]]]


def ended_of(found: Overview) -> Ended:
    """What an overview says of ended jobs: per kind, and its non-empty buckets."""
    kinds = {
        k.kind: tuple(getattr(k, n) for n in JOBS)
        for k in found.kinds
        if any(getattr(k, n) for n in JOBS)
    }
    buckets = {
        b.start: tuple(getattr(b, n) for n in JOBS) + tuple(getattr(b.pages, n) for n in PAGES)
        for b in found.buckets
        if any(getattr(b, n) for n in JOBS)
    }
    return kinds, buckets


def ended_in_jobs(url: str, workspace: uuid.UUID, found: Overview) -> Ended:
    """The same, counted over the jobs table for ``found``'s window (its ``since``)."""
    step = timedelta(seconds=found.bucket_seconds)
    params = {"workspace": workspace, "step": step, "since": found.since}
    with psycopg.connect(url) as conn:
        rows = conn.execute(ENDED_JOBS, params).fetchall()
    kinds: dict[str, list[int]] = {}
    buckets: dict[datetime, list[int]] = {}
    last = found.since + step * (len(found.buckets) - 1)
    for kind, start, *sums in rows:
        counted = kinds.setdefault(kind, [0, 0, 0])
        for n in range(len(JOBS)):
            counted[n] += sums[n]
        # As the overview does: an end past the last bucket (a clock ahead) goes in it.
        bucket = buckets.setdefault(min(start, last), [0] * len(sums))
        for n, value in enumerate(sums):
            bucket[n] += int(value)
    return (
        {k: tuple(v) for k, v in kinds.items()},
        {s: tuple(v) for s, v in buckets.items()},
    )


async def read_overview(url: str, workspace: uuid.UUID, actor: uuid.UUID, window: Any) -> Overview:
    """The workspace's overview as its member reads it, on a connection of its own."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        role, found = await overview_as_member(conn, workspace, actor, window)
    assert role is not None and found is not None, "the actor is a member"
    return found
