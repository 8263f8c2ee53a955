"""The job table as the read model: every status move, counter and request of a job is
written here, so screens and services read one row instead of asking Temporal.

Writes are idempotent (an activity may run twice): status moves only go forward and a
finished row is never changed again.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.temporal.messages import Counters, JobStatus

JOB_COLUMNS = (
    "id, workflow_id, kind, status, workspace_id, actor_id, correlation_id, idempotency_key, "
    "payload, summary, total, processed, succeeded, skipped, failed, progress_message, result, "
    "result_content_type, error_code, error_message, cancel_requested_at, cancel_requested_by, "
    "created_at, started_at, finished_at, expires_at"
)


class JobView(BaseModel):
    """One job as callers see it (JSON keys snake_case)."""

    id: uuid.UUID
    workflow_id: str
    kind: str
    status: JobStatus
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    idempotency_key: str | None
    payload: dict[str, Any]
    summary: str | None
    total: int
    processed: int
    succeeded: int
    skipped: int
    failed: int
    progress_message: str | None
    result: dict[str, Any] | None
    result_content_type: str | None
    error_code: str | None
    error_message: str | None
    cancel_requested_at: datetime | None
    cancel_requested_by: uuid.UUID | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None

    @property
    def counters(self) -> Counters:
        return Counters(
            total=self.total,
            processed=self.processed,
            succeeded=self.succeeded,
            skipped=self.skipped,
            failed=self.failed,
        )

    @property
    def is_final(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled")


def workflow_id_for(kind: str, job_id: uuid.UUID) -> str:
    """Meaningful in the Temporal UI: the kind, then the job."""
    return f"{kind}-{job_id}"


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
    status: JobStatus = "queued",
) -> bool:
    """Inserts a queued row; False when the idempotency key (or the id) already names one.
    A concurrent insert with the same key waits on the unique index, then finds it."""
    row = (
        await conn.execute(
            text(
                "INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, "
                "correlation_id, idempotency_key, payload) VALUES (:id, :workflow_id, :kind, "
                ":status, :workspace, :actor, :correlation, :key, CAST(:payload AS jsonb)) "
                "ON CONFLICT DO NOTHING RETURNING id"
            ),
            {
                "id": job_id,
                "workflow_id": workflow_id_for(kind, job_id),
                "kind": kind,
                "status": status,
                "workspace": workspace_id,
                "actor": actor_id,
                "correlation": correlation_id,
                "key": idempotency_key,
                "payload": _json(payload),
            },
        )
    ).first()
    return row is not None


async def find_by_idempotency_key(
    conn: AsyncConnection, workspace_id: uuid.UUID, kind: str, key: str
) -> JobView | None:
    row = (
        (
            await conn.execute(
                text(
                    f"SELECT {JOB_COLUMNS} FROM jobs WHERE workspace_id = :workspace "
                    "AND kind = :kind AND idempotency_key = :key"
                ),
                {"workspace": workspace_id, "kind": kind, "key": key},
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else JobView.model_validate(dict(row))


async def set_prepared(
    conn: AsyncConnection, job_id: uuid.UUID, *, total: int, summary: str
) -> None:
    await conn.execute(
        text(
            "UPDATE jobs SET total = :total, summary = :summary, updated_at = now() WHERE id = :id"
        ),
        {"id": job_id, "total": total, "summary": summary},
    )


async def get_job(
    conn: AsyncConnection, job_id: uuid.UUID, workspace_id: uuid.UUID | None = None
) -> JobView | None:
    """The job; with ``workspace_id``, only if it belongs to that workspace."""
    row = (
        (
            await conn.execute(
                text(
                    f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id "
                    "AND (CAST(:workspace AS uuid) IS NULL OR workspace_id = :workspace)"
                ),
                {"id": job_id, "workspace": workspace_id},
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else JobView.model_validate(dict(row))


async def list_jobs(
    conn: AsyncConnection,
    workspace_id: uuid.UUID,
    *,
    status: JobStatus | None = None,
    kind: str | None = None,
    limit: int = 50,
) -> list[JobView]:
    rows = (
        await conn.execute(
            text(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE workspace_id = :workspace "
                "AND (CAST(:status AS text) IS NULL OR status = :status) "
                "AND (CAST(:kind AS text) IS NULL OR kind = :kind) "
                "ORDER BY created_at DESC, id LIMIT :limit"
            ),
            {"workspace": workspace_id, "status": status, "kind": kind, "limit": limit},
        )
    ).mappings()
    return [JobView.model_validate(dict(row)) for row in rows]


async def request_cancel(
    conn: AsyncConnection, job_id: uuid.UUID, actor_id: uuid.UUID | None
) -> None:
    """Records the first cancellation request of an unfinished job; later ones and
    requests on finished jobs change nothing."""
    await conn.execute(
        text(
            "UPDATE jobs SET cancel_requested_at = now(), cancel_requested_by = :actor, "
            "updated_at = now() WHERE id = :id AND cancel_requested_at IS NULL "
            "AND status IN ('queued', 'running')"
        ),
        {"id": job_id, "actor": actor_id},
    )


async def mark_running(
    conn: AsyncConnection, job_id: uuid.UUID, run_id: str | None
) -> JobView | None:
    await conn.execute(
        text(
            "UPDATE jobs SET status = 'running', started_at = COALESCE(started_at, now()), "
            "run_id = :run_id, updated_at = now() "
            "WHERE id = :id AND status IN ('queued', 'running')"
        ),
        {"id": job_id, "run_id": run_id},
    )
    return await get_job(conn, job_id)


async def add_progress(conn: AsyncConnection, job_id: uuid.UUID, delta: Counters) -> Counters:
    """Adds one batch's outcomes to the counters, in the batch's own transaction."""
    row = (
        (
            await conn.execute(
                text(
                    "UPDATE jobs SET processed = processed + :processed, "
                    "succeeded = succeeded + :succeeded, skipped = skipped + :skipped, "
                    "failed = failed + :failed, "
                    "updated_at = now() WHERE id = :id "
                    "RETURNING total, processed, succeeded, skipped, failed"
                ),
                {
                    "id": job_id,
                    "processed": delta.processed,
                    "succeeded": delta.succeeded,
                    "skipped": delta.skipped,
                    "failed": delta.failed,
                },
            )
        )
        .mappings()
        .one()
    )
    return Counters.model_validate(dict(row))


async def set_progress_message(conn: AsyncConnection, job_id: uuid.UUID, message: str) -> None:
    await conn.execute(
        text("UPDATE jobs SET progress_message = :message WHERE id = :id"),
        {"id": job_id, "message": message},
    )


async def finish(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    status: JobStatus,
    retention: timedelta,
    result: dict[str, Any] | None = None,
    result_content_type: str | None = None,
    error_code: str | None = None,
    error_message: str | None = None,
    progress_message: str | None = None,
) -> JobView | None:
    """Moves an unfinished job to its final status; a finished job stays as it was."""
    await conn.execute(
        text(
            "UPDATE jobs SET status = :status, result = CAST(:result AS jsonb), "
            "result_content_type = :content_type, error_code = :code, error_message = :message, "
            "progress_message = COALESCE(:progress, progress_message), "
            "cancel_requested_at = CASE WHEN :status = 'cancelled' "
            "THEN COALESCE(cancel_requested_at, now()) ELSE cancel_requested_at END, "
            "finished_at = now(), expires_at = now() + :retention, updated_at = now() "
            "WHERE id = :id AND status IN ('queued', 'running')"
        ),
        {
            "id": job_id,
            "status": status,
            "result": None if result is None else _json(result),
            "content_type": result_content_type,
            "code": error_code,
            "message": error_message,
            "progress": progress_message,
            "retention": retention,
        },
    )
    return await get_job(conn, job_id)


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, default=str)


class QueueState(BaseModel):
    queued: int
    running: int
    failed: int
    oldest_queued_age_seconds: float | None


async def queue_state(conn: AsyncConnection) -> QueueState:
    """Queue figures for the metrics, from one pass over ix_jobs_status_created."""
    row = (
        await conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE status = 'queued') AS queued, "
                "count(*) FILTER (WHERE status = 'running') AS running, "
                "count(*) FILTER (WHERE status = 'failed') AS failed, "
                "extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'queued')) "
                "AS oldest FROM jobs WHERE status IN ('queued', 'running', 'failed')"
            )
        )
    ).one()
    return QueueState(
        queued=row.queued,
        running=row.running,
        failed=row.failed,
        oldest_queued_age_seconds=None if row.oldest is None else float(row.oldest),
    )
