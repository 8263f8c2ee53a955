"""Creating and finishing a job's row.

Creating: validate its payload, let its kind check the start and snapshot its
items, and insert the read-model row, all in one transaction. The starter calls this
before starting the workflow, so a refused start leaves nothing behind and the row
exists from the moment a start returns; the workflow's first activity calls it again
for a job started straight through Temporal."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.domain.access import require_administrator
from hubjobs.errors import InvalidInput, describe_validation_errors
from hubjobs.kinds import REGISTRY, JobKind, NewJob
from hubjobs.readmodel import store as read_model
from hubjobs.readmodel.store import JobView
from hubjobs.temporal.messages import Counters, JobStatus


@dataclass(frozen=True)
class CreatedJob:
    job: JobView
    # False when the idempotency key (or the job id) named an existing job.
    created: bool


def validate_payload(kind: JobKind, payload: dict[str, Any]) -> Any:
    try:
        return kind.payload_model.model_validate(payload)
    except ValidationError as err:
        # From each error's place and message only: never the input, nor a key's raw name.
        problems = describe_validation_errors(err.errors(include_input=False))
        raise InvalidInput(
            f"invalid {kind.name} payload: {problems}", code="invalid_payload"
        ) from None


async def create_job(
    conn: AsyncConnection,
    kind: JobKind,
    *,
    job_id: uuid.UUID,
    workspace_id: uuid.UUID,
    actor_id: uuid.UUID,
    correlation_id: str,
    payload: dict[str, Any],
    idempotency_key: str | None = None,
) -> CreatedJob:
    """Run inside a transaction; raises a typed HubJobsError when the start is refused."""
    model = validate_payload(kind, payload)
    normalized = model.model_dump(mode="json")
    # Before the idempotency lookup: a start naming an existing job is still a start,
    # and must not hand that job to an actor who may not start jobs here.
    await require_administrator(conn, workspace_id, actor_id)
    if idempotency_key is not None:
        existing = await read_model.find_by_idempotency_key(
            conn, workspace_id, kind.name, idempotency_key
        )
        if existing is not None:
            return CreatedJob(existing, created=False)
    inserted = await read_model.insert_job(
        conn,
        job_id=job_id,
        kind=kind.name,
        workspace_id=workspace_id,
        actor_id=actor_id,
        correlation_id=correlation_id,
        idempotency_key=idempotency_key,
        payload=normalized,
    )
    if not inserted:
        # Lost a race on the idempotency key, or this id exists already.
        found = None
        if idempotency_key is not None:
            found = await read_model.find_by_idempotency_key(
                conn, workspace_id, kind.name, idempotency_key
            )
        found = found or await read_model.get_job(conn, job_id, workspace_id)
        if found is None:
            raise InvalidInput("the job id is taken", code="job_id_conflict")
        return CreatedJob(found, created=False)
    prepared = await kind.prepare(
        conn, NewJob(job_id, workspace_id, actor_id, correlation_id), model
    )
    await read_model.set_prepared(conn, job_id, total=prepared.total, summary=prepared.summary)
    job = await read_model.get_job(conn, job_id)
    assert job is not None
    return CreatedJob(job, created=True)


async def record_refused(
    conn: AsyncConnection,
    *,
    job_id: uuid.UUID,
    kind: str,
    workspace_id: uuid.UUID,
    actor_id: uuid.UUID,
    correlation_id: str,
    payload: dict[str, Any],
    code: str,
    message: str,
    retention: timedelta,
) -> None:
    """A job started straight through Temporal that its kind refuses still gets a row,
    failed, so that whoever started it can see why."""
    await read_model.insert_job(
        conn,
        job_id=job_id,
        kind=kind,
        workspace_id=workspace_id,
        actor_id=actor_id,
        correlation_id=correlation_id,
        idempotency_key=None,
        payload=payload,
    )
    await read_model.finish(
        conn, job_id, status="failed", retention=retention, error_code=code, error_message=message
    )


async def finish_job(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    status: JobStatus,
    default_retention: timedelta,
    error_code: str | None = None,
    error_message: str | None = None,
    output: dict[str, Any] | None = None,
) -> tuple[JobView | None, bool]:
    """Writes the final status of an unfinished job: counters recounted from its items
    (the truth), the result of a success built by its kind, ``expires_at`` from the
    kind's retention. A finished row is left as it is. Returns the row (None if there is
    no such job) and whether this call finished it."""
    job = await read_model.get_job(conn, job_id)
    if job is None:
        return None, False
    if job.is_final:
        return job, False
    kind = REGISTRY.get(job.kind)
    counters = await recount(conn, job_id) or job.counters
    result = None
    if status == "succeeded" and kind is not None:
        payload = kind.payload_model.model_validate(job.payload)
        result = kind.build_result(payload, counters, output)
    retention = (kind.retention if kind is not None else None) or default_retention
    final = await read_model.finish(
        conn,
        job_id,
        status=status,
        retention=retention,
        result=result,
        result_content_type=kind.result_content_type if kind and result is not None else None,
        error_code=error_code,
        error_message=error_message,
    )
    return final, True


async def recount(conn: AsyncConnection, job_id: uuid.UUID) -> Counters | None:
    """Sets the job's counters from its items' states; None for a kind without items."""
    row = (
        (
            await conn.execute(
                text(
                    """
                WITH counted AS (
                    SELECT count(*) AS total,
                           count(*) FILTER (WHERE state <> 'pending') AS processed,
                           count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
                           count(*) FILTER (WHERE state = 'skipped') AS skipped,
                           count(*) FILTER (WHERE state = 'failed') AS failed
                      FROM job_items WHERE job_id = :id
                )
                UPDATE jobs j SET total = c.total, processed = c.processed,
                       succeeded = c.succeeded, skipped = c.skipped, failed = c.failed
                  FROM counted c
                 WHERE j.id = :id AND c.total > 0 AND j.status IN ('queued', 'running')
             RETURNING c.total, c.processed, c.succeeded, c.skipped, c.failed
                """
                ),
                {"id": job_id},
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else Counters.model_validate(dict(row))
