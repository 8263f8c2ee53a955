"""Creating a job: validate its payload, let its kind check the start and snapshot its
items, and insert the read-model row, all in one transaction. The starter calls this
before starting the workflow, so a refused start leaves nothing behind and the row
exists from the moment a start returns; the workflow's first activity calls it again
for a job started straight through Temporal."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs import read_model
from hubjobs.access import require_administrator
from hubjobs.errors import InvalidInput
from hubjobs.kinds import JobKind, NewJob
from hubjobs.read_model import JobView


@dataclass(frozen=True)
class CreatedJob:
    job: JobView
    # False when the idempotency key (or the job id) named an existing job.
    created: bool


def validate_payload(kind: JobKind, payload: dict[str, Any]) -> Any:
    try:
        return kind.payload_model.model_validate(payload)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in err.errors()
        )
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
