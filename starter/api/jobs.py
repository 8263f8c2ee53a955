"""The jobs of a workspace: start one of a kind, read one (202 while it runs, its result
when done: FHIR bulk data's asynchronous pattern), list them, cancel, retry."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from hubjobs.domain.text import KEY_MAX_LENGTH, KEY_PATTERN, KIND_PATTERN, REASON_MAX_LENGTH
from hubjobs.errors import JobFailed
from hubjobs.kinds import REGISTRY
from hubjobs.readmodel.search import JobSort
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.schedules.definition import SCHEDULE_ID_MAX_LENGTH, SCHEDULE_ID_PATTERN
from starter.api.auth import Jobs
from starter.api.bodies import no_duplicate_keys
from starter.api.errors import ERRORS, KEY_REUSED, error
from starter.api.resources import (
    WORKSPACE_ROUTES,
    JobPage,
    JobRecord,
    JobResource,
    JobResourceFields,
    job_cursor,
    read_job_cursor,
    status_url,
)

RETRY_AFTER_SECONDS = 2
router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["jobs"])


CorrelationId = Annotated[
    str | None,
    Header(
        description="Carried into traces and logs: 1 to 128 characters of "
        "A-Z a-z 0-9 . _ ~ : / @ + = - (else 422 invalid_correlation_id)",
        min_length=1,
        max_length=KEY_MAX_LENGTH,
        pattern=KEY_PATTERN,
    ),
]


def accepted(job: JobView, headers: dict[str, str]) -> JSONResponse:
    """202 with the job, and ``headers``."""
    return JSONResponse(JobResource.of(job).model_dump(mode="json"), 202, headers)


@router.post(
    "/jobs/{kind}",
    status_code=202,
    response_model=JobResource,
    responses={**ERRORS, **KEY_REUSED},
    summary="Start a job of a kind (course_tagging, backup, …)",
    dependencies=[Depends(no_duplicate_keys)],
)
async def start_job(
    jobs: Jobs,
    kind: Annotated[str, Path(description="The job kind", max_length=64, pattern=KIND_PATTERN)],
    payload: Annotated[dict[str, Any], Body(description="The kind's payload")],
    idempotency_key: Annotated[
        str | None,
        Header(
            description="Same key and request (kind, payload, notify_url), same job; the "
            "same key with another request, 409 idempotency_key_reused. 1 to 128 "
            "characters of A-Z a-z 0-9 . _ ~ : / @ + = - (else 422 invalid_idempotency_key)",
            min_length=1,
            max_length=KEY_MAX_LENGTH,
            pattern=KEY_PATTERN,
        ),
    ] = None,
    x_correlation_id: CorrelationId = None,
    notify_url: Annotated[
        str | None,
        Query(
            description="An http(s) URL POSTed a signed completion webhook when the job is "
            "final (body, headers and verification: the 'From another service' guide). "
            "A host the deployment does not allow is 422 invalid_notify_url; without a "
            "signing secret configured, 422 webhooks_not_configured.",
            min_length=1,
            max_length=2000,
        ),
    ] = None,
) -> JSONResponse:
    job = await jobs.start(
        kind,
        payload,
        correlation_id=x_correlation_id,
        idempotency_key=idempotency_key,
        notify_url=notify_url,
    )
    return accepted(job, {"Content-Location": status_url(job)})


@router.get(
    "/jobs",
    response_model=JobPage,
    responses={**ERRORS},
    summary="The workspace's jobs, newest first (or as `sort` says), filtered, keyset-paged: "
    "pass `next` as `before` for the following page",
)
async def list_jobs(
    jobs: Jobs,
    status: Annotated[
        list[JobStatus] | None,
        Query(description="Only jobs in this status; repeated, in any of them"),
    ] = None,
    kind: Annotated[
        str | None,
        Query(
            description="Only jobs of this kind (422 unknown_kind for one not served)",
            max_length=64,
            pattern=KIND_PATTERN,
        ),
    ] = None,
    schedule_id: Annotated[
        str | None,
        Query(
            description="Only the runs of this schedule",
            max_length=SCHEDULE_ID_MAX_LENGTH,
            pattern=SCHEDULE_ID_PATTERN,
        ),
    ] = None,
    actor_id: Annotated[uuid.UUID | None, Query(description="Only jobs this user started")] = None,
    id_prefix: Annotated[
        str | None,
        Query(
            alias="id",
            description="A job id or its start: 1 to 32 hexadecimal digits, dashes allowed "
            "(422 invalid_job_id otherwise)",
        ),
    ] = None,
    since: Annotated[
        datetime | None,
        Query(description="Only jobs created at or after this time (ISO 8601; UTC without a zone)"),
    ] = None,
    until: Annotated[
        datetime | None,
        Query(description="Only jobs created before this time (ISO 8601; UTC without a zone)"),
    ] = None,
    field: Annotated[
        list[str] | None,
        Query(
            description="`payload.<field>=<value>` or `result.<field>=<value>`, repeatable: "
            "only jobs whose payload or result has that value (a list field: holds it). "
            "Needs `kind`; the kind's fields are in GET /kinds. 422 invalid_field_filter "
            "(malformed, or no kind), unknown_field, invalid_field_value (not its type)",
        ),
    ] = None,
    to_retry: Annotated[
        bool,
        Query(
            description="true: only finished jobs with failed items that no retry has "
            "taken yet (what POST …/jobs/retry with the same filter retries: count them "
            "first)"
        ),
    ] = False,
    sort: Annotated[
        JobSort,
        Query(
            description="created_desc (newest first), created_asc, or finished_desc / "
            "finished_asc (finished jobs only, by when they finished)"
        ),
    ] = JobSort.created_desc,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Annotated[
        str | None,
        Query(description="A previous page's `next`: the jobs after it", max_length=200),
    ] = None,
) -> JobPage:
    found = await jobs.list(
        status=status,
        kind=kind,
        schedule_id=schedule_id,
        actor_id=actor_id,
        id_prefix=id_prefix,
        since=since,
        until=until,
        fields=field or (),
        sort=sort,
        to_retry=to_retry,
        limit=limit,
        before=None if before is None else read_job_cursor(before),
    )
    return JobPage(
        jobs=[JobResource.of(job) for job in found],
        next=job_cursor(found[-1], sort) if len(found) == limit else None,
    )


@router.get(
    "/jobs/{job_id}",
    responses={
        200: {
            "description": "Finished: the job's result, in its content type",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        202: {
            "model": JobResource,
            "description": "Still running (see X-Progress)",
            "headers": {
                "X-Progress": {"schema": {"type": "string"}},
                "Retry-After": {"schema": {"type": "string"}},
            },
        },
        **ERRORS,
    },
    response_class=Response,
    summary="The job's status: 202 while it runs, its result when done",
)
async def job_status(request: Request, jobs: Jobs, job_id: uuid.UUID) -> Response:
    job = await jobs.get(job_id)
    if not job.is_final:
        progress = f"{job.processed}/{job.total}"
        if job.progress_message:
            progress += f" {job.progress_message}"
        return accepted(job, {"X-Progress": progress, "Retry-After": str(RETRY_AFTER_SECONDS)})
    if job.status == JobStatus.cancelled:
        return error(404, "job_cancelled", "the job was cancelled")
    if job.status == JobStatus.failed:
        return error(422, job.error_code or JobFailed.code, job.error_message or "the job failed")
    return Response(
        json.dumps(result_shown(request, job) or {}),
        status_code=200,
        media_type=job.result_content_type or "application/json",
    )


def result_shown(request: Request, job: JobView) -> dict[str, Any] | None:
    """The job's result as callers read it, as its kind shows it (an export's manifest
    with absolute URLs when the API knows its own, HUBJOBS_API_BASE_URL)."""
    kind = REGISTRY.find(job.kind)
    if kind is None:
        return job.result
    return kind.shown(job.result, request.app.state.settings.api_base_url)


@router.get(
    "/jobs/{job_id}/record",
    response_model=JobRecord,
    responses={**ERRORS},
    summary="The job's record at any status: what a 202 shows, and its result once it succeeded",
)
async def job_record(request: Request, jobs: Jobs, job_id: uuid.UUID) -> JobRecord:
    job = await jobs.get(job_id)
    record = JobRecord.model_validate(JobResource.of(job).model_dump())
    record.result = result_shown(request, job)
    record.source_job_id = job.source_job_id
    if job.is_final and job.has_failed_items:  # only such a job may have a retry
        retry = await jobs.retry_of(job_id)
        record.retried_by = None if retry is None else retry.id
    return record


@router.delete(
    "/jobs/{job_id}",
    status_code=202,
    response_model=JobResource,
    responses={**ERRORS},
    summary="Cancel the job (a no-op once it has finished: answered as the first was)",
)
async def cancel_job(
    jobs: Jobs,
    job_id: uuid.UUID,
    reason: Annotated[
        str | None,
        Query(
            description="Why, for the record: kept on the job (`cancel_reason`) when this "
            f"is its first cancellation; at most {REASON_MAX_LENGTH} characters."
        ),
    ] = None,
) -> JobResourceFields:
    """202 and the job, however often it is asked and whatever it is by then: a repeated
    or concurrent cancel answers as the first did (only a job the workspace does not
    have is 404)."""
    return JobResource.of(await jobs.cancel(job_id, reason=reason))


@router.post(
    "/jobs/{job_id}/retry",
    status_code=202,
    response_model=JobResource,
    responses={**ERRORS},
    summary="Run a finished job's failed items again, as a new job of its kind "
    "(the same one for every retry of the same job)",
)
async def retry_job(
    jobs: Jobs,
    job_id: uuid.UUID,
    x_correlation_id: CorrelationId = None,
) -> JSONResponse:
    job = await jobs.retry(job_id, correlation_id=x_correlation_id)
    return accepted(job, {"Content-Location": status_url(job)})
