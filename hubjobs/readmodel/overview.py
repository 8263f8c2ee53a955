"""A workspace's queue at a glance: per kind, its jobs waiting, running and stuck now,
those that ended in a window, and the throughput over that window in buckets. One
statement that checks membership and aggregates, as the other reads do: the unfinished
jobs off their rows, the ended ones off their minutes (hubjobs/job_rows/minutes.py)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from psycopg import AsyncConnection
from pydantic import BaseModel, Field

from hubjobs.readmodel.status import UNFINISHED_STATUSES, JobStatus, sql_list
from hubjobs.readmodel.views import Counters


class Window(StrEnum):
    """How far back the overview looks: the last hour in minutes, or the last day in
    quarters of an hour."""

    hour = "hour"
    day = "day"

    @property
    def step(self) -> timedelta:
        return timedelta(minutes=1) if self is Window.hour else timedelta(minutes=15)

    @property
    def buckets(self) -> int:
        return 60 if self is Window.hour else 96


class OldestQueued(BaseModel):
    job_id: uuid.UUID = Field(description="The job waiting longest")
    since: datetime = Field(description="When it was created (queued since then)")


class KindOverview(BaseModel):
    kind: str
    queued: int = Field(0, description="Queued now")
    running: int = Field(0, description="Running now")
    stuck: int = Field(
        0,
        description="Of those queued or running, the ones whose workflow tasks keep "
        "failing (not moving, whatever their status says)",
    )
    succeeded: int = Field(0, description="Succeeded within the window")
    failed: int = Field(0, description="Failed within the window")
    cancelled: int = Field(0, description="Cancelled within the window")
    oldest_queued: OldestQueued | None = Field(None, description="Its oldest queued job")


class ThroughputBucket(BaseModel):
    start: datetime = Field(description="The bucket's start; it lasts `bucket_seconds`")
    succeeded: int = Field(0, description="Jobs that succeeded in the bucket")
    failed: int = Field(0, description="Jobs that failed in the bucket")
    cancelled: int = Field(0, description="Jobs cancelled in the bucket")
    pages: Counters = Field(
        default_factory=Counters,
        description="The counters of the jobs that ended in the bucket, summed (`processed`: "
        "pages done)",
    )


class Overview(BaseModel):
    """What the console's overview draws: counts per kind, and a chart's series."""

    window: Window
    since: datetime = Field(description="The window's start: the first bucket's")
    until: datetime = Field(description="When the overview was read")
    bucket_seconds: int = Field(description="Each bucket's length")
    kinds: list[KindOverview] = Field(description="Per kind with jobs to show, by name")
    oldest_queued: OldestQueued | None = Field(description="The workspace's oldest queued job")
    buckets: list[ThroughputBucket] = Field(
        description="Every bucket of the window, oldest first (empty ones as zeros)"
    )


_EPOCH = "TIMESTAMPTZ 'epoch'"
# The workspace's jobs are read only when the actor's membership row is there: no member,
# no row, and none of the subqueries runs.
OVERVIEW = f"""
WITH member AS (
  SELECT m.role FROM workspace_memberships m
    JOIN user_accounts u ON u.id = m.user_id AND u.enabled
   WHERE m.workspace_id = %(workspace)s AND m.user_id = %(actor)s
), span AS (
  SELECT now() AS until,
         date_bin(%(step)s, now(), {_EPOCH}) - %(step)s * (%(buckets)s - 1) AS since
)
SELECT member.role, span.since, span.until,
  (SELECT coalesce(json_agg(n), '[]') FROM (
     SELECT kind,
            count(*) FILTER (WHERE status = {JobStatus.queued.sql}) AS queued,
            count(*) FILTER (WHERE status = {JobStatus.running.sql}) AS running,
            count(*) FILTER (WHERE stuck_since IS NOT NULL) AS stuck,
            min(created_at) FILTER (WHERE status = {JobStatus.queued.sql}) AS oldest_since,
            (array_agg(id ORDER BY created_at, id)
               FILTER (WHERE status = {JobStatus.queued.sql}))[1] AS oldest_id
       FROM jobs WHERE workspace_id = %(workspace)s AND status IN {sql_list(UNFINISHED_STATUSES)}
      GROUP BY kind) n),
  (SELECT coalesce(json_agg(f), '[]') FROM (
     SELECT kind, date_bin(%(step)s, minute, {_EPOCH}) AS start,
            coalesce(sum(jobs) FILTER (WHERE status = {JobStatus.succeeded.sql}), 0) AS succeeded,
            coalesce(sum(jobs) FILTER (WHERE status = {JobStatus.failed.sql}), 0) AS failed,
            coalesce(sum(jobs) FILTER (WHERE status = {JobStatus.cancelled.sql}), 0) AS cancelled,
            sum(pages_total) AS total, sum(pages_processed) AS processed,
            sum(pages_succeeded) AS items_succeeded, sum(pages_skipped) AS skipped,
            sum(pages_failed) AS items_failed
       FROM job_minutes WHERE workspace_id = %(workspace)s AND minute >= span.since
      GROUP BY 1, 2) f)
FROM member, span
"""


async def overview_as_member(
    conn: AsyncConnection[Any], workspace_id: uuid.UUID, actor_id: uuid.UUID, window: Window
) -> tuple[str | None, Overview | None]:
    """The actor's role (None: not an enabled member, or no such workspace) and the
    workspace's overview over ``window``."""
    cursor = await conn.execute(
        OVERVIEW,
        {
            "workspace": workspace_id,
            "actor": actor_id,
            "step": window.step,
            "buckets": window.buckets,
        },
    )
    row = await cursor.fetchone()
    if row is None:
        return None, None
    role, since, until, unfinished, ended = row
    return str(role), _overview(window, since, until, unfinished, ended)


# What an ended row of the statement holds, in the order the buckets sum them.
_JOBS = ("succeeded", "failed", "cancelled")
_PAGES = ("total", "processed", "items_succeeded", "skipped", "items_failed")


def _overview(
    window: Window,
    since: datetime,
    until: datetime,
    unfinished: list[dict[str, Any]],
    ended: list[dict[str, Any]],
) -> Overview:
    """The models from the statement's rows, summed as plain numbers first: a model per
    row and per addition cost more than the statement's own aggregation."""
    kinds: dict[str, dict[str, Any]] = {}

    def of(kind: str) -> dict[str, Any]:
        return kinds.setdefault(kind, {"kind": kind} | dict.fromkeys(_JOBS, 0))

    for row in unfinished:
        found = of(row["kind"])
        found.update(queued=row["queued"], running=row["running"], stuck=row["stuck"])
        if row["oldest_id"] is not None:
            found["oldest_queued"] = {"job_id": row["oldest_id"], "since": row["oldest_since"]}
    sums = [[0] * (len(_JOBS) + len(_PAGES)) for _ in range(window.buckets)]
    for row in ended:
        found = of(row["kind"])
        for name in _JOBS:
            found[name] += row[name]
        start = datetime.fromisoformat(row["start"])
        # A clock a little ahead of the database's puts an end past the last bucket.
        bucket = sums[min(int((start - since) / window.step), window.buckets - 1)]
        for n, name in enumerate(_JOBS + _PAGES):
            bucket[n] += row[name]
    views = [KindOverview.model_validate(kinds[name]) for name in sorted(kinds)]
    waiting = [k.oldest_queued for k in views if k.oldest_queued is not None]
    return Overview(
        window=window,
        since=since,
        until=until,
        bucket_seconds=int(window.step.total_seconds()),
        kinds=views,
        oldest_queued=min(waiting, key=lambda o: o.since, default=None),
        buckets=[_bucket(since + window.step * n, sums[n]) for n in range(window.buckets)],
    )


def _bucket(start: datetime, sums: list[int]) -> ThroughputBucket:
    jobs = dict(zip(_JOBS, sums, strict=False))
    total, processed, succeeded, skipped, failed = sums[len(_JOBS) :]
    pages = Counters(
        total=total, processed=processed, succeeded=succeeded, skipped=skipped, failed=failed
    )
    return ThroughputBucket(start=start, pages=pages, **jobs)
