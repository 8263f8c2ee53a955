"""The statements of ``jobs``: every write of a job's row, each guarded by its move.
Idempotent (an activity may run twice): a status only moves forward, and a finished row
is never changed again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.db import direct
from hubjobs.db.direct import Statement
from hubjobs.domain.access import ADMINISTRATOR
from hubjobs.job_rows import minutes, moves
from hubjobs.readmodel.changes import notify_column
from hubjobs.readmodel.reads import JOB_COLUMNS
from hubjobs.readmodel.status import (
    UNFINISHED_STATUSES,
    JobStatus,
    NotifyState,
    sql_list,
)
from hubjobs.readmodel.views import Counters, JobView, QueueState

UNFINISHED = sql_list(UNFINISHED_STATUSES)
# The queue state's ``failed``: the jobs that failed this recently.
FAILED_WINDOW = timedelta(hours=1)
# A retention batch's advisory lock: one sweep at a time, without locking each row.
RETENTION_LOCK = int.from_bytes(b"hjsweep1", "big")
# The class of the per-job snapshot locks (two int4 keys: apart from single-key ones).
SNAPSHOT_LOCK = int.from_bytes(b"snap", "big")
# In every write of a job's status, counters or message: streams hear of it at commit.
NOTIFY = notify_column("id")


SAME_WORKFLOW = "(CAST(:workflow_id AS text) IS NULL OR workflow_id = :workflow_id)"
# The actor of a row whose start named none that could be read (a refused direct start).
UNKNOWN_ACTOR = uuid.UUID(int=0)


def workflow_id_for(kind: str, job_id: uuid.UUID) -> str:
    """Meaningful in the Temporal UI: the kind, then the job."""
    return f"{kind}-{job_id}"


def _view(row: Any) -> JobView:
    return JobView.model_validate(dict(row._mapping))


def _job_or_none(row: dict[str, Any] | None) -> JobView | None:
    return None if row is None else JobView.model_validate(row)


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, default=str)


# --- creating -------------------------------------------------------------------------


INSERT_JOB = Statement.of(
    "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
    "correlation_id, idempotency_key, payload, source_job_id, schedule_id, summary, "
    "notify_url, notify_state) "
    "VALUES (:id, :workflow_id, :kind, :status, :workspace, :actor, :correlation, "
    ":key, CAST(:payload AS jsonb), :source, :schedule, :summary, "
    "CAST(:notify AS text), CASE WHEN CAST(:notify AS text) IS NULL THEN NULL "
    f"ELSE {NotifyState.pending.sql} END) "
    f"ON CONFLICT DO NOTHING RETURNING {JOB_COLUMNS}",
    prepared=True,
)


async def insert_job(
    conn: AsyncConnection,
    *,
    job_id: uuid.UUID,
    kind: str,
    workspace_id: uuid.UUID,
    actor_id: uuid.UUID,
    correlation_id: str,
    idempotency_key: str | None,
    payload: dict[str, Any],
    source_job_id: uuid.UUID | None = None,
    schedule_id: str | None = None,
    workflow_id: str | None = None,
    summary: str | None = None,
    notify_url: str | None = None,
) -> JobView | None:
    """A queued row, its items still to be taken; None when the idempotency key (or the
    id) names one already (a racing insert waits on the unique index). ``workflow_id``:
    a direct start's own (by default ``<kind>-<job id>``)."""
    row = await direct.first(
        conn,
        INSERT_JOB,
        {
            "id": job_id,
            "workflow_id": workflow_id or workflow_id_for(kind, job_id),
            "kind": kind,
            "status": JobStatus.queued.value,
            "workspace": workspace_id,
            "actor": actor_id,
            "correlation": correlation_id,
            "key": idempotency_key,
            "payload": _json(payload),
            "source": source_job_id,
            "schedule": schedule_id,
            "summary": summary,
            "notify": notify_url,
        },
    )
    return _job_or_none(row)


async def release_idempotency_key(conn: AsyncConnection, job_id: uuid.UUID) -> None:
    """The job no longer answers to its idempotency key."""
    await conn.execute(
        text("UPDATE jobs SET idempotency_key = NULL, updated_at = now() WHERE id = :id"),
        {"id": job_id},
    )


# With the snapshot lock, for its transaction: stale statistics after a bulk import made
# the planner scan ``pages`` once per parent, and the sort must stay in memory.
SNAPSHOT_PLANNER = "set_config('enable_seqscan', 'off', true), set_config('work_mem', '64MB', true)"


LOCK_SNAPSHOT = Statement.of(
    f"SELECT pg_advisory_xact_lock(:class, hashtext(CAST(:id AS text))), {SNAPSHOT_PLANNER}",
    prepared=True,
)


async def lock_snapshot(conn: AsyncConnection, job_id: uuid.UUID) -> None:
    """The job's snapshot lock, held to the end of the transaction; not the row's, so a
    cancel does not wait for a long snapshot. Read the row in a later statement: a
    statement's view is fixed before it waits for the lock."""
    await direct.run(conn, LOCK_SNAPSHOT, {"class": SNAPSHOT_LOCK, "id": job_id})


SNAPSHOT_DUE = Statement.of(
    f"SELECT snapshot_at IS NULL AS due FROM jobs WHERE id = :id AND {moves.SNAPSHOT.guard}",
    prepared=True,
)


async def snapshot_due(conn: AsyncConnection, job_id: uuid.UUID) -> bool:
    """Whether the unfinished job's items are still to be taken, under the lock."""
    _, due = await direct.each(conn, _locked(job_id, SNAPSHOT_DUE, {"id": job_id}))
    return bool(due and due[0][0])


def _locked(
    job_id: uuid.UUID, statement: Statement, params: dict[str, Any]
) -> list[tuple[Statement, dict[str, Any]]]:
    """The snapshot lock, then ``statement``, in one round trip."""
    return [(LOCK_SNAPSHOT, {"class": SNAPSHOT_LOCK, "id": job_id}), (statement, params)]


SET_SNAPSHOT = Statement.of(
    "UPDATE jobs SET total = :total, summary = :summary, snapshot_at = now(), "
    f"updated_at = now() WHERE id = :id AND snapshot_at IS NULL RETURNING {NOTIFY}",
    prepared=True,
)


async def set_snapshot(
    conn: AsyncConnection, job_id: uuid.UUID, *, total: int, summary: str
) -> None:
    """Records that the job's items were taken (``total`` of them), now."""
    await direct.run(conn, SET_SNAPSHOT, {"id": job_id, "total": total, "summary": summary})


# --- reading --------------------------------------------------------------------------


GET_JOB = Statement.of(
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id "
    "AND (CAST(:workspace AS uuid) IS NULL OR workspace_id = :workspace)",
    prepared=True,
)


async def get_job(
    conn: AsyncConnection, job_id: uuid.UUID, workspace_id: uuid.UUID | None = None
) -> JobView | None:
    """The job; with ``workspace_id``, only if it belongs to that workspace."""
    return _job_or_none(
        await direct.first(conn, GET_JOB, {"id": job_id, "workspace": workspace_id})
    )


# What an attempt checks of its job before each unit of work, by key.
JOB_GATE = Statement.of(
    f"""
    SELECT j.status = {JobStatus.running.sql} AS running,
           j.cancel_requested_at IS NOT NULL AS cancel_requested,
           EXISTS (SELECT 1 FROM workspace_memberships m
                     JOIN user_accounts u ON u.id = m.user_id
                    WHERE m.workspace_id = j.workspace_id AND m.user_id = j.actor_id
                      AND u.enabled AND m.role = '{ADMINISTRATOR}') AS actor_ok
      FROM jobs j
     WHERE j.id = :job
    """,
    prepared=True,
)


@dataclass(frozen=True)
class Gate:
    running: bool
    cancel_requested: bool
    actor_ok: bool


async def gate(conn: AsyncConnection, job_id: uuid.UUID) -> Gate | None:
    """The job as its running attempt sees it before a unit of work; None: no such job."""
    row = await direct.first(conn, JOB_GATE, {"job": job_id})
    return None if row is None else Gate(**row)


BY_IDEMPOTENCY_KEY = Statement.of(
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE workspace_id = :workspace AND idempotency_key = :key",
    prepared=True,
)


async def find_by_idempotency_key(
    conn: AsyncConnection, workspace_id: uuid.UUID, key: str
) -> JobView | None:
    """The job the key names in the workspace, whatever its kind."""
    params = {"workspace": workspace_id, "key": key}
    return _job_or_none(await direct.first(conn, BY_IDEMPOTENCY_KEY, params))


# --- the queue and its unfinished jobs ------------------------------------------------


async def queue_state(conn: AsyncConnection) -> QueueState:
    """Queue figures for the metrics; failures only within ``FAILED_WINDOW`` (all of them
    would cost a pass over every failed row; hubjobs_jobs_finished counts them)."""
    row = (
        await conn.execute(
            text(
                f"SELECT (SELECT count(*) FROM jobs WHERE status = {JobStatus.queued.sql}) "
                f"AS queued, (SELECT count(*) FROM jobs WHERE status = {JobStatus.running.sql}) "
                f"AS running, (SELECT count(*) FROM jobs WHERE status = {JobStatus.failed.sql} "
                "AND finished_at > now() - CAST(:window AS interval)) AS failed, "
                "(SELECT extract(epoch FROM now() - min(created_at)) FROM jobs "
                f"WHERE status = {JobStatus.queued.sql}) AS oldest, "
                "(SELECT count(*) FROM jobs WHERE stuck_since IS NOT NULL) AS stuck"
            ),
            {"window": FAILED_WINDOW},
        )
    ).one()
    return QueueState(
        queued=row.queued,
        running=row.running,
        failed=row.failed,
        oldest_queued_age_seconds=None if row.oldest is None else float(row.oldest),
        stuck=row.stuck,
    )


@dataclass(frozen=True)
class UnfinishedJob:
    """What the reconciler asks Temporal about (the whole row only for the few it changes)."""

    id: uuid.UUID
    workflow_id: str
    status: JobStatus
    updated_at: datetime
    # Flagged stuck already (its workflow tasks kept failing when last looked at).
    stuck: bool = False


async def unfinished_jobs(
    conn: AsyncConnection,
    *,
    older_than: timedelta,
    limit: int,
    after: UnfinishedJob | None = None,
) -> list[UnfinishedJob]:
    """Unfinished rows older than ``older_than``, least recently touched first, a page of
    ``limit`` after ``after``."""
    page = (
        ""
        if after is None
        else "AND updated_at >= :after_updated AND (updated_at, id) > (:after_updated, :after_id) "
    )
    rows = await conn.execute(
        text(
            "SELECT id, workflow_id, status, updated_at, stuck_since IS NOT NULL AS stuck "
            f"FROM jobs WHERE status IN {UNFINISHED} "
            f"AND created_at < now() - CAST(:age AS interval) {page}"
            "ORDER BY updated_at, id LIMIT :limit"
        ),
        {
            "age": older_than,
            "limit": limit,
            "after_updated": None if after is None else after.updated_at,
            "after_id": None if after is None else after.id,
        },
    )
    return [
        UnfinishedJob(row.id, row.workflow_id, JobStatus(row.status), row.updated_at, row.stuck)
        for row in rows
    ]


@dataclass(frozen=True)
class SettledJob:
    """A job whose run should have closed by now: final, or asked to stop, for longer
    than the reconciler's grace (``settled_among``)."""

    id: uuid.UUID
    status: JobStatus


async def settled_among(
    conn: AsyncConnection, job_ids: Sequence[uuid.UUID], *, older_than: timedelta
) -> list[SettledJob]:
    """Of ``job_ids`` (open runs), those final or asked to stop for over ``older_than``."""
    rows = await conn.execute(
        text(
            "SELECT id, status FROM jobs WHERE id = ANY(:ids) "
            "AND COALESCE(finished_at, cancel_requested_at) < now() - CAST(:age AS interval)"
        ),
        {"ids": list(job_ids), "age": older_than},
    )
    return [SettledJob(row.id, JobStatus(row.status)) for row in rows]


# --- running ----------------------------------------------------------------------------


MARK_STUCK = text(
    "UPDATE jobs SET stuck_since = now(), stuck_reason = :reason "
    f"WHERE id = :id AND stuck_since IS NULL AND {moves.MARK_STUCK.guard} RETURNING id"
)


async def mark_stuck(conn: AsyncConnection, job_id: uuid.UUID, reason: str) -> bool:
    """Flags the job stuck (once); True when this call did. ``updated_at`` stays, so the
    reconciler's least-recently-touched selection keeps looking at it."""
    row = (await conn.execute(MARK_STUCK, {"id": job_id, "reason": reason})).first()
    return row is not None


async def clear_stuck(conn: AsyncConnection, job_id: uuid.UUID) -> bool:
    """The job's workflow tasks run again: no longer stuck. True when it was."""
    row = (
        await conn.execute(
            text(
                "UPDATE jobs SET stuck_since = NULL, stuck_reason = NULL "
                "WHERE id = :id AND stuck_since IS NOT NULL RETURNING id"
            ),
            {"id": job_id},
        )
    ).first()
    return row is not None


# The first cancel request of each unfinished job among ``ids``: who asked and why.
REQUEST_CANCELS = text(
    "UPDATE jobs SET cancel_requested_at = now(), cancel_requested_by = :actor, "
    "cancel_reason = :reason, updated_at = now() WHERE id = ANY(:ids) "
    "AND (CAST(:workspace AS uuid) IS NULL OR workspace_id = :workspace) "
    f"AND cancel_requested_at IS NULL AND {moves.REQUEST_CANCEL.guard} RETURNING {NOTIFY}"
)


async def request_cancel(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    reason: str | None = None,
) -> None:
    """The first cancel request of an unfinished job; later ones change nothing."""
    await conn.execute(
        REQUEST_CANCELS, {"ids": [job_id], "workspace": None, "actor": actor_id, "reason": reason}
    )


async def request_cancels(
    conn: AsyncConnection,
    workspace_id: uuid.UUID,
    job_ids: Sequence[uuid.UUID],
    actor_id: uuid.UUID,
    reason: str | None = None,
) -> list[JobView]:
    """``request_cancel`` for the workspace's jobs among ``job_ids``; returns them as
    they were before."""
    if not job_ids:
        return []
    params = {"ids": list(job_ids), "workspace": workspace_id}
    rows = await conn.execute(
        text(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY(:ids) AND workspace_id = :workspace"),
        params,
    )
    found = [_view(row) for row in rows]
    await conn.execute(REQUEST_CANCELS, {**params, "actor": actor_id, "reason": reason})
    return found


# What an attempt's opening sets: running, the run, the attempts only ever growing.
OPENING = (
    f"status = {JobStatus.running.sql}, started_at = COALESCE(started_at, now()), "
    "run_id = :run_id, attempts = GREATEST(attempts, :attempts), "
    "attempts_failed = GREATEST(attempts_failed, :failed)"
)


OPEN_JOB = Statement.of(
    f"""
    WITH opened AS (
        UPDATE jobs SET {OPENING}, updated_at = now()
         WHERE id = :id AND {moves.OPEN.guard} AND {SAME_WORKFLOW}
     RETURNING {JOB_COLUMNS}, {NOTIFY}
    )
    SELECT {JOB_COLUMNS} FROM opened
    UNION ALL
    SELECT {JOB_COLUMNS} FROM jobs
     WHERE id = :id AND {SAME_WORKFLOW} AND NOT EXISTS (SELECT 1 FROM opened)
    """,
    prepared=True,
)


async def open_job(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    run_id: str | None,
    attempts: int,
    attempts_failed: int,
    workflow_id: str | None = None,
) -> JobView | None:
    """Running for one attempt, returned (a finished one as it is). With ``workflow_id``,
    only that workflow's row: a direct start naming another job's id gets nothing."""
    params = {
        "id": job_id,
        "run_id": run_id,
        "attempts": attempts,
        "failed": attempts_failed,
        "workflow_id": workflow_id,
    }
    return _job_or_none(await direct.first(conn, OPEN_JOB, params))


async def follow_run(
    conn: AsyncConnection, job_id: uuid.UUID, *, run_id: str, workflow_id: str | None
) -> None:
    """A finished row follows its run (one made by ``temporal workflow reset``)."""
    await conn.execute(
        text(
            "UPDATE jobs SET run_id = :run_id "
            f"WHERE id = :id AND {SAME_WORKFLOW} AND run_id IS DISTINCT FROM :run_id"
        ),
        {"id": job_id, "run_id": run_id, "workflow_id": workflow_id},
    )


async def set_progress(
    conn: AsyncConnection, job_id: uuid.UUID, counters: Counters, message: str
) -> bool:
    """Progress of a kind that counts steps, not items; returns whether a cancel is asked."""
    requested = (
        await conn.execute(
            text(
                "UPDATE jobs SET total = :total, processed = :processed, "
                "succeeded = :succeeded, skipped = :skipped, failed = :failed, "
                "progress_message = :message, updated_at = now() WHERE id = :id "
                f"RETURNING cancel_requested_at IS NOT NULL, {NOTIFY}"
            ),
            {"id": job_id, "message": message, **counters.model_dump()},
        )
    ).scalar_one_or_none()
    return bool(requested)


# --- finishing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """How a job ends, as its final write records it."""

    status: JobStatus
    counters: Counters | None = None
    output: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    attempts: int = 0
    attempts_failed: int = 0


@dataclass(frozen=True)
class Finished:
    job: JobView
    # False when the row was final already (another writer finished it first).
    changed: bool


FINISH = Statement.of(
    f"""
    WITH finished AS (
        UPDATE jobs SET status = :status, result = CAST(:result AS jsonb),
               result_content_type = :content_type, error_code = :code,
               error_message = :message,
               cancel_requested_at = CASE WHEN :status = {JobStatus.cancelled.sql}
                   THEN COALESCE(cancel_requested_at, now())
                   ELSE cancel_requested_at END,
               finished_at = now(), expires_at = now() + :retention,
               attempts = GREATEST(attempts, :attempts),
               attempts_failed = GREATEST(attempts_failed, :failed),
               stuck_since = NULL, stuck_reason = NULL, updated_at = now()
         WHERE id = :id AND {moves.FINISH.guard}
     RETURNING {JOB_COLUMNS}, {NOTIFY}
    ), counted AS ({minutes.counting("finished")})
    SELECT {JOB_COLUMNS}, true AS changed FROM finished
    UNION ALL
    SELECT {JOB_COLUMNS}, false FROM jobs
     WHERE id = :id AND NOT EXISTS (SELECT 1 FROM finished)
    """
)


async def finish(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    ending: Ending,
    *,
    retention: timedelta,
    result: dict[str, Any] | None = None,
    result_content_type: str | None = None,
) -> Finished | None:
    """An unfinished job to its final status; None when there is no such job."""
    if ending.status not in moves.FINISH.targets:
        raise ValueError(f"a job does not finish {ending.status}")
    row = await direct.first(
        conn,
        FINISH,
        {
            "id": job_id,
            "status": ending.status.value,
            "result": None if result is None else _json(result),
            "content_type": result_content_type,
            "code": ending.error_code,
            "message": ending.error_message,
            "retention": retention,
            "attempts": ending.attempts,
            "failed": ending.attempts_failed,
        },
    )
    if row is None:
        return None
    changed = bool(row.pop("changed"))
    return Finished(JobView.model_validate(row), changed)


# --- completion webhooks ----------------------------------------------------------------

# A withdrawn job's webhook, as ``notify_last_error`` says it (our code and message).
NOT_STARTED_NOTIFY = "not_started: the job was not started, so no completion is sent"


async def record_notify(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    state: NotifyState,
    attempt: int,
    error: str | None = None,
) -> bool:
    """A try of the job's completion webhook; a delivery recorded final stays so. False
    when the row is gone or final already."""
    result = await conn.execute(
        text(
            "UPDATE jobs SET notify_state = CAST(:state AS text), "
            "notify_attempts = GREATEST(notify_attempts, :attempt), "
            "notify_last_error = COALESCE(CAST(:error AS text), notify_last_error), "
            "notified_at = CASE WHEN CAST(:state AS text) = "
            f"{NotifyState.delivered.sql} THEN now() ELSE notified_at END, updated_at = now() "
            f"WHERE id = :id AND notify_state = {NotifyState.pending.sql} RETURNING {NOTIFY}"
        ),
        {"id": job_id, "state": state, "attempt": attempt, "error": error},
    )
    return result.first() is not None


_PENDING = f"notify_state = {NotifyState.pending.sql}"
WITHDRAW = text(
    f"WITH withdrawn AS (UPDATE jobs SET status = {JobStatus.failed.sql}, error_code = :code, "
    "error_message = :message, finished_at = now(), expires_at = now() + :retention, "
    f"notify_last_error = CASE WHEN {_PENDING} THEN :notify_error "
    "ELSE notify_last_error END, "
    f"notify_state = CASE WHEN {_PENDING} THEN {NotifyState.failed.sql} "
    "ELSE notify_state END, "
    f"updated_at = now() WHERE id = :id AND {moves.WITHDRAW.guard} "
    f"RETURNING {minutes.READS}, {NOTIFY}), "
    f"counted AS ({minutes.counting('withdrawn')}) "
    "SELECT 1 FROM withdrawn"
)


async def withdraw(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    code: str,
    message: str,
    retention: timedelta,
) -> bool:
    """A start Temporal did not take, failed while still queued, so a late workflow finds
    it final; its webhook, owed to no one, is recorded failed. False when no longer
    queued: its workflow did start."""
    result = await conn.execute(
        WITHDRAW,
        {
            "id": job_id,
            "code": code,
            "message": message,
            "retention": retention,
            "notify_error": NOT_STARTED_NOTIFY,
        },
    )
    return result.first() is not None


# --- retention --------------------------------------------------------------------------


async def claim_retention(conn: AsyncConnection) -> bool:
    """Whether this transaction may sweep (no other batch holds the lock)."""
    claimed = await conn.execute(
        text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": RETENTION_LOCK}
    )
    return bool(claimed.scalar_one())


@dataclass(frozen=True)
class ExpiredJob:
    id: uuid.UUID
    kind: str


async def expired_jobs(
    conn: AsyncConnection, cutoff: datetime, limit: int, *, deliveries_since: datetime
) -> list[ExpiredJob]:
    """Up to ``limit`` jobs expired at ``cutoff``, first expired first; one whose webhook
    may still be trying (finished after ``deliveries_since``) stays, so its receiver can
    still look it up."""
    rows = await conn.execute(
        text(
            "SELECT id, kind FROM jobs WHERE expires_at <= :cutoff "
            f"AND (notify_state IS DISTINCT FROM {NotifyState.pending.sql} "
            "OR finished_at <= :deliveries_since) "
            "ORDER BY expires_at LIMIT :limit"
        ),
        {"cutoff": cutoff, "limit": limit, "deliveries_since": deliveries_since},
    )
    return [ExpiredJob(row.id, row.kind) for row in rows]


async def get_jobs(conn: AsyncConnection, job_ids: Sequence[uuid.UUID]) -> list[JobView]:
    """The jobs of ``job_ids`` that exist, in no particular order."""
    if not job_ids:
        return []
    rows = await conn.execute(
        text(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY(:ids)"), {"ids": list(job_ids)}
    )
    return [_view(row) for row in rows]


# A schedule's successful runs but the newest ``:keep``, expired now.
EXPIRE_OLDER_RUNS = text(
    f"""
    UPDATE jobs SET expires_at = now(), updated_at = now()
     WHERE schedule_id = :schedule AND {moves.EXPIRE_OLDER_RUNS.guard}
       AND (expires_at IS NULL OR expires_at > now())
       AND finished_at IS NOT NULL
       AND id NOT IN (SELECT id FROM jobs
                       WHERE schedule_id = :schedule AND {moves.EXPIRE_OLDER_RUNS.guard}
                       ORDER BY finished_at DESC, id DESC LIMIT :keep)
    """
)


async def expire_older_runs(conn: AsyncConnection, schedule_id: str, keep: int) -> int:
    """A schedule's successful runs but the newest ``keep`` expire now, for the sweep;
    returns how many moved (a second call moves none)."""
    expired = await conn.execute(EXPIRE_OLDER_RUNS, {"schedule": schedule_id, "keep": keep})
    return int(expired.rowcount or 0)


# A job's items go with it, in the same statement: no foreign key does it for them.
DELETE_JOBS = """
WITH items AS (DELETE FROM job_items WHERE job_id = ANY(CAST(:ids AS uuid[])))
DELETE FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))
"""


async def delete_jobs(conn: AsyncConnection, job_ids: Sequence[uuid.UUID]) -> None:
    """Removes jobs and their items."""
    if not job_ids:
        return
    await conn.execute(text(DELETE_JOBS), {"ids": list(job_ids)})


async def postpone_expiry(
    conn: AsyncConnection, job_ids: Sequence[uuid.UUID], until: datetime
) -> None:
    if not job_ids:
        return
    await conn.execute(
        text("UPDATE jobs SET expires_at = :until WHERE id = ANY(:ids)"),
        {"ids": list(job_ids), "until": until},
    )
