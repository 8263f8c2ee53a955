"""Cancel many of a workspace's jobs at once: those named, or every unfinished one the
list's filters match (the operator page's "cancel selected" and "cancel all
matching"). Authorised once, recorded in one transaction, each job then signalled as
a DELETE signals it; the answer says, job by job, what became of it."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from hubjobs.domain.text import REASON_MAX_LENGTH
from hubjobs.errors import InvalidInput
from starter.api.auth import Jobs
from starter.api.bodies import no_duplicate_keys
from starter.api.errors import ERRORS, ErrorDetail
from starter.api.job_filter import JobFilter
from starter.api.resources import WORKSPACE_ROUTES, JobResource, JobResourceFields
from starter.client import MAX_BULK_CANCEL, CancelOutcome

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["jobs"], responses=ERRORS)


class BulkCancel(BaseModel):
    """Exactly one of ``ids`` and ``filter``."""

    model_config = ConfigDict(extra="forbid")

    ids: list[uuid.UUID] | None = Field(
        default=None, max_length=MAX_BULK_CANCEL, description="The jobs to cancel"
    )
    filter: JobFilter | None = Field(
        default=None,
        description="Or every unfinished job the list's filters match (as GET …/jobs "
        f"reads them), newest first, {MAX_BULK_CANCEL} at most (`more` says whether "
        "others remain)",
    )
    reason: str | None = Field(
        default=None,
        description=f"Why, for the record (as DELETE's): at most {REASON_MAX_LENGTH} characters",
    )


class CancelResult(BaseModel):
    id: uuid.UUID
    job: JobResource | None = Field(
        description="The job as it is after (as DELETE answers), or null with `error`"
    )
    error: ErrorDetail | None = Field(
        description="What a DELETE of this job would have met (`job_not_found`, `unavailable`)"
    )


class BulkCancelAnswer(BaseModel):
    results: list[CancelResult]
    more: bool = Field(description="A filter matched more than were cancelled: ask again")


def result_of(outcome: CancelOutcome) -> CancelResult:
    job: JobResourceFields | None = None if outcome.job is None else JobResource.of(outcome.job)
    error = outcome.error
    return CancelResult(
        id=outcome.job_id,
        job=job,
        error=None
        if error is None
        else ErrorDetail(code=error.code, message=error.message, job_id=error.job_id),
    )


@router.post(
    "/jobs/cancel",
    status_code=202,
    response_model=BulkCancelAnswer,
    summary="Cancel many jobs: those named, or every unfinished one a filter matches",
    dependencies=[Depends(no_duplicate_keys)],
)
async def cancel_jobs(jobs: Jobs, request: Annotated[BulkCancel, Body()]) -> BulkCancelAnswer:
    """202 and each job's outcome, in the order named (newest first for a filter): each
    as a DELETE of it answers, a job already finished included; a job the workspace
    does not have is that result's `job_not_found`, not the call's."""
    if (request.ids is None) == (request.filter is None):
        raise InvalidInput("name either ids or a filter", code="invalid_request")
    if request.filter is not None:
        found, more = await jobs.cancel_matching(reason=request.reason, **request.filter.filters())
        return BulkCancelAnswer(results=[result_of(o) for o in found], more=more)
    outcomes = await jobs.cancel_many(request.ids or [], reason=request.reason)
    return BulkCancelAnswer(results=[result_of(o) for o in outcomes], more=False)
