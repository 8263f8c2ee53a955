"""A workspace's audit trail: every operator action (start, cancel, retry, bulk cancel,
schedule changes, restore), newest first; a job's trail is the same list filtered by
its id. Every member may read it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from hubjobs.readmodel.audit import AuditEventView
from hubjobs.readmodel.status import AuditAction
from starter.api.auth import Jobs
from starter.api.errors import ERRORS
from starter.api.resources import WORKSPACE_ROUTES, keyset_cursor, read_keyset_cursor

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["audit"], responses=ERRORS)


class AuditPage(BaseModel):
    """A page of a workspace's operator actions, newest first; ``next`` (None on the
    last page) is the ``before`` of the page that follows."""

    events: list[AuditEventView]
    next: str | None = Field(description="Pass as `before` for the following page")


def audit_cursor(event: AuditEventView) -> str:
    return keyset_cursor(event.at, event.id)


def event_number(text: str) -> int:
    number = int(text)
    if not 0 < number < 2**63:  # an event's id is a bigint
        raise ValueError("not an event's id")
    return number


def read_audit_cursor(cursor: str) -> tuple[datetime, int]:
    return read_keyset_cursor(cursor, event_number)


@router.get(
    "/audit",
    response_model=AuditPage,
    summary="The workspace's operator actions, newest first, keyset-paged: pass `next` "
    "as `before` for the following page",
)
async def list_audit(
    jobs: Jobs,
    job_id: Annotated[
        uuid.UUID | None,
        Query(description="Only the actions that touched this job (its trail, bulk ones too)"),
    ] = None,
    action: Annotated[AuditAction | None, Query(description="Only this action")] = None,
    actor_id: Annotated[uuid.UUID | None, Query(description="Only this actor's actions")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Annotated[
        str | None,
        Query(description="A previous page's `next`: the events after it", max_length=200),
    ] = None,
) -> AuditPage:
    found = await jobs.audit(
        job_id=job_id,
        action=action,
        actor_id=actor_id,
        limit=limit,
        before=None if before is None else read_audit_cursor(before),
    )
    return AuditPage(events=found, next=audit_cursor(found[-1]) if len(found) == limit else None)
