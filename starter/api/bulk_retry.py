"""Retry the failed items of many of a workspace's jobs at once: those named, or every
finished job with failed items no retry has taken yet among those the list's filters
match (the page's "Retry failed"). Authorised once; each job then retried as its own
POST …/retry would be; one audit event; the answer says, job by job, what became of it."""

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
from starter.api.resources import WORKSPACE_ROUTES, JobResource
from starter.client import MAX_BULK_CANCEL, RetryOutcome

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["jobs"], responses=ERRORS)


class BulkRetry(BaseModel):
    """Exactly one of ``ids`` and ``filter``."""

    model_config = ConfigDict(extra="forbid")

    ids: list[uuid.UUID] | None = Field(
        default=None, max_length=MAX_BULK_CANCEL, description="The jobs to retry"
    )
    filter: JobFilter | None = Field(
        default=None,
        description="Or every finished job with failed items no retry has taken yet among "
        "those the list's filters match (GET …/jobs?to_retry=true counts them), newest "
        f"first, {MAX_BULK_CANCEL} at most (`more` says whether others remain)",
    )
    reason: str | None = Field(
        default=None,
        description=f"Why, for the audit trail: at most {REASON_MAX_LENGTH} characters",
    )


class RetryResult(BaseModel):
    id: uuid.UUID = Field(description="The job named (or found)")
    retry: JobResource | None = Field(
        description="Its retry, as POST …/{id}/retry answers: a new job, or the one an "
        "earlier retry started (`created` false); null with `error`"
    )
    created: bool = Field(description="This call started the retry")
    error: ErrorDetail | None = Field(
        description="What POST …/{id}/retry would have met: `job_not_found`, "
        "`job_not_finished`, `not_retryable`, `nothing_to_retry`, `unavailable`, …"
    )


class BulkRetryAnswer(BaseModel):
    results: list[RetryResult]
    more: bool = Field(description="A filter matched more than were retried: ask again")


def result_of(outcome: RetryOutcome) -> RetryResult:
    error = outcome.error
    return RetryResult(
        id=outcome.job_id,
        retry=None if outcome.retry is None else JobResource.of(outcome.retry),
        created=outcome.created,
        error=None
        if error is None
        else ErrorDetail(code=error.code, message=error.message, job_id=error.job_id),
    )


@router.post(
    "/jobs/retry",
    status_code=202,
    response_model=BulkRetryAnswer,
    summary="Retry the failed items of many jobs: those named, or every one a filter "
    "matches that has failed items not yet retried",
    dependencies=[Depends(no_duplicate_keys)],
)
async def retry_jobs(jobs: Jobs, request: Annotated[BulkRetry, Body()]) -> BulkRetryAnswer:
    """202 and each job's outcome, in the order named (newest first for a filter), each
    as a retry of it answers; a job the workspace does not have is that result's
    `job_not_found`, not the call's. A member who may not retry (a reader) is refused
    as a single retry is: 403 actor_not_administrator."""
    if (request.ids is None) == (request.filter is None):
        raise InvalidInput("name either ids or a filter", code="invalid_request")
    if request.filter is not None:
        found, more = await jobs.retry_matching(reason=request.reason, **request.filter.filters())
        return BulkRetryAnswer(results=[result_of(o) for o in found], more=more)
    outcomes = await jobs.retry_many(request.ids or [], reason=request.reason)
    return BulkRetryAnswer(results=[result_of(o) for o in outcomes], more=False)
