"""The kind-aware steps around the store: admitting a start (a few statements by key, in
the caller's transaction, before its workflow starts, so a refused start leaves
nothing), snapshotting by the first attempt (so a start never waits for a big course),
and finishing with the kind's result and retention.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.domain.access import require_administrator, require_hub_operator
from hubjobs.errors import HubJobsError, IdempotencyKeyReused, InvalidInput
from hubjobs.job_rows import store
from hubjobs.job_rows.store import Ending, Finished
from hubjobs.kinds import REGISTRY, JobKind, NewJob, Prepared
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView


@dataclass(frozen=True)
class CreatedJob:
    job: JobView
    # False when the idempotency key (or the job id) named an existing job.
    created: bool


@dataclass(frozen=True)
class JobRow:
    """What a start says of the job it asks for, whoever starts it."""

    job_id: uuid.UUID
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    payload: dict[str, Any]
    idempotency_key: str | None = None
    source_job_id: uuid.UUID | None = None
    schedule_id: str | None = None
    workflow_id: str | None = None
    # Checked by the caller, outside the transaction: the check resolves its host.
    notify_url: str | None = None


async def admit(
    conn: AsyncConnection, row: JobRow, *, operators: Collection[uuid.UUID] = ()
) -> CreatedJob:
    """The one way a job's row comes to be: created when the start passes its checks,
    else its HubJobsError raised."""
    return await _create(conn, row, operators)


async def admit_unwatched(
    conn: AsyncConnection, row: JobRow, *, operators: Collection[uuid.UUID], kept_for: timedelta
) -> CreatedJob:
    """``admit`` for a start no caller waits on (a firing, a start straight through
    Temporal): refused, it still gets a failed row kept ``kept_for``, then raises."""
    try:
        async with conn.begin_nested():
            return await _create(conn, row, operators)
    except HubJobsError as refusal:
        await keep_refused(conn, row, refusal, kept_for)
        raise


async def keep_refused(
    conn: AsyncConnection, row: JobRow, refusal: HubJobsError, kept_for: timedelta
) -> None:
    """The failed row of a start refused before it could be admitted; an id that names
    a row already changes nothing."""
    # No key (no later start may find it), no source, no webhook (nothing delivers it).
    bare = replace(row, idempotency_key=None, source_job_id=None, notify_url=None)
    if await _insert(conn, bare, row.payload) is None:
        return
    ending = Ending(JobStatus.failed, error_code=refusal.code, error_message=refusal.message)
    await store.finish(conn, row.job_id, ending, retention=kept_for)


async def release_empty_retry(conn: AsyncConnection, row: JobRow) -> None:
    """Before a retry's ``admit``: a finished earlier retry under the key that took no
    item gives the key up, so this start makes a new job over the pages back since."""
    if row.idempotency_key is None or row.source_job_id is None:
        return
    earlier = await store.find_by_idempotency_key(conn, row.workspace_id, row.idempotency_key)
    if (
        earlier is not None
        and earlier.is_final
        and earlier.snapshot_at is not None
        and earlier.total == 0
    ):
        await store.release_idempotency_key(conn, earlier.id)


async def _create(
    conn: AsyncConnection, row: JobRow, operators: Collection[uuid.UUID]
) -> CreatedJob:
    kind = REGISTRY.get(row.kind)
    model = kind.validate(row.payload)
    # Before the idempotency lookup: a start naming an existing job is still a start,
    # and must not hand that job to an actor who may not start jobs here.
    await require_administrator(conn, row.workspace_id, row.actor_id)
    if kind.hub_wide is not None and kind.hub_wide(model):
        require_hub_operator(operators, row.actor_id)
    if row.idempotency_key is not None:
        existing = await store.find_by_idempotency_key(conn, row.workspace_id, row.idempotency_key)
        if existing is not None:
            return CreatedJob(_named_by_key(existing, row, kind, model), created=False)
    new_job = NewJob(
        row.job_id, row.workspace_id, row.actor_id, row.correlation_id, row.source_job_id
    )
    summary = kind.title if kind.check is None else await kind.check(conn, new_job, model)
    inserted = await _insert(conn, row, model.model_dump(mode="json"), summary)
    if inserted is None:
        # Lost a race on the idempotency key, or this id exists already.
        if row.idempotency_key is not None:
            found = await store.find_by_idempotency_key(conn, row.workspace_id, row.idempotency_key)
            if found is not None:
                return CreatedJob(_named_by_key(found, row, kind, model), created=False)
        found = await store.get_job(conn, row.job_id, row.workspace_id)
        if found is None or (row.workflow_id is not None and found.workflow_id != row.workflow_id):
            raise InvalidInput("the job id is taken", code="job_id_conflict")
        return CreatedJob(found, created=False)
    return CreatedJob(inserted, created=True)


def _named_by_key(existing: JobView, row: JobRow, kind: JobKind[Any], model: BaseModel) -> JobView:
    """The job the key names, when the start is the same request (kind, validated
    payload, notify_url); else ``IdempotencyKeyReused``. A direct start never answers
    with another's job."""
    if existing.id == row.job_id:
        return existing
    if row.workflow_id is not None or not _same_request(existing, row, kind, model):
        raise IdempotencyKeyReused(existing.id)
    return existing


def _same_request(existing: JobView, row: JobRow, kind: JobKind[Any], model: BaseModel) -> bool:
    if existing.kind != kind.name or existing.notify_url != row.notify_url:
        return False
    try:
        # Both through today's model: a field added since, defaulted, is on both sides.
        earlier: BaseModel = kind.validate(existing.payload)
    except HubJobsError:
        return False
    return earlier.model_dump(mode="json") == model.model_dump(mode="json")


async def take_snapshot(conn: AsyncConnection, job: JobView) -> bool:
    """Takes the job's items unless taken, in the caller's transaction; the kind may
    refuse (HubJobsError). Returns whether it took them."""
    if not await store.snapshot_due(conn, job.id):
        return False
    prepared = await insert_snapshot(conn, job)
    await store.set_snapshot(conn, job.id, total=prepared.total, summary=prepared.summary)
    return True


async def insert_snapshot(conn: AsyncConnection, job: JobView) -> Prepared:
    """The kind's snapshot, under the caller's lock; ``snapshot_at`` is the caller's."""
    kind = REGISTRY.get(job.kind)
    new_job = NewJob(job.id, job.workspace_id, job.actor_id, job.correlation_id, job.source_job_id)
    return await kind.prepare(conn, new_job, kind.validate(job.payload))


async def _insert(
    conn: AsyncConnection, row: JobRow, payload: dict[str, Any], summary: str | None = None
) -> JobView | None:
    return await store.insert_job(
        conn,
        job_id=row.job_id,
        kind=row.kind,
        workspace_id=row.workspace_id,
        actor_id=row.actor_id,
        correlation_id=row.correlation_id,
        idempotency_key=row.idempotency_key,
        payload=payload,
        source_job_id=row.source_job_id,
        schedule_id=row.schedule_id,
        workflow_id=row.workflow_id,
        summary=summary,
        notify_url=row.notify_url,
    )


async def finish_job(
    conn: AsyncConnection, job: JobView, ending: Ending, *, default_retention: timedelta
) -> Finished | None:
    """The final status; a success gets its kind's result from the exact counters."""
    kind = REGISTRY.find(job.kind)
    result = None
    if ending.status == JobStatus.succeeded and kind is not None:
        counters = ending.counters or job.counters
        result = kind.result_of(kind.validate(job.payload), counters, ending.output)
    retention = (kind.retention if kind is not None else None) or default_retention
    return await store.finish(
        conn,
        job.id,
        ending,
        retention=retention,
        result=result,
        result_content_type=kind.result_content_type if kind and result is not None else None,
    )
