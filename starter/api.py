"""The HTTP API for services in other languages: the asynchronous request pattern of
FHIR bulk data over the starter client.

    POST   /workspaces/{ws}/jobs/{kind}   202 Accepted, Content-Location: the status URL
    GET    /workspaces/{ws}/jobs/{id}     202 + X-Progress + Retry-After while it runs,
                                          200 + the result (its own content type) when done,
                                          422 + {"error": {code, message}} when it failed,
                                          404 once it is cancelled or gone
    DELETE /workspaces/{ws}/jobs/{id}     202: cancellation signalled (a no-op once finished)
    GET    /workspaces/{ws}/jobs          the workspace's jobs, newest first
    GET    /health                        database and Temporal reachability

Every call but /health carries ``Authorization: Bearer <JWT naming the actor>`` and is
scoped to the workspace in its path. Errors are ``{"error": {"code", "message"}}``
with a stable code; details go to the log. The OpenAPI document is the contract.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException

from hubjobs.errors import (
    ConfigurationError,
    Forbidden,
    HubJobsError,
    InvalidInput,
    NotFound,
    Unavailable,
)
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.auth import Unauthorized, actor_of
from starter.client import HubJobsClient, WorkspaceJobs

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 2


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class JobResource(BaseModel):
    id: uuid.UUID
    kind: str
    status: JobStatus
    workspace_id: uuid.UUID
    summary: str | None
    total: int
    processed: int
    succeeded: int
    skipped: int
    failed: int
    progress_message: str | None
    error_code: str | None
    error_message: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    status_url: str

    @classmethod
    def of(cls, job: JobView) -> JobResource:
        data = job.model_dump(mode="json")
        return cls.model_validate(
            {**{k: data[k] for k in cls.model_fields if k in data}, "status_url": status_url(job)}
        )


class Health(BaseModel):
    status: str
    database: str
    temporal: str


def status_url(job: JobView) -> str:
    return f"/workspaces/{job.workspace_id}/jobs/{job.id}"


def error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


STATUS_OF: list[tuple[type[HubJobsError], int]] = [
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (InvalidInput, 422),
    (Unavailable, 503),
    (ConfigurationError, 503),
]

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Unreadable request (a body that is not JSON)"},
    401: {"model": ErrorBody, "description": "Missing or invalid bearer token"},
    403: {"model": ErrorBody, "description": "The actor may not do this in the workspace"},
    404: {"model": ErrorBody, "description": "No such job in the workspace (or cancelled)"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    503: {"model": ErrorBody, "description": "PostgreSQL or Temporal unavailable"},
}


def jobs_for(
    request: Request,
    workspace_id: Annotated[uuid.UUID, Path(description="The workspace")],
    authorization: Annotated[str | None, Header(description="Bearer <JWT>")] = None,
) -> WorkspaceJobs:
    """The workspace's jobs as the token's actor sees them."""
    hub: HubJobsClient = request.app.state.client
    return hub.scope(workspace_id, actor_of(authorization, request.app.state.settings))


Jobs = Annotated[WorkspaceJobs, Depends(jobs_for)]


def create_app(settings: Settings | None = None, client: HubJobsClient | None = None) -> FastAPI:
    """The app; with ``client`` it uses that one, otherwise it connects at start-up."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if client is not None:
            app.state.client = client
            yield
            return
        app.state.client = await HubJobsClient.connect(settings)
        try:
            yield
        finally:
            await app.state.client.close()

    app = FastAPI(
        title="hubjobs",
        version="1",
        summary="Durable background jobs for the knowledge hub (FHIR bulk-data style).",
        lifespan=lifespan,
    )
    app.state.settings = settings
    if client is not None:
        app.state.client = client

    @app.exception_handler(HubJobsError)
    async def hubjobs_error(_: Request, exc: HubJobsError) -> JSONResponse:
        status = next((s for t, s in STATUS_OF if isinstance(exc, t)), 500)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status >= 500:
            log.warning("API call failed: %s (%s)", exc.code, exc.message)
        return error(status, exc.code, exc.message, headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
            for e in exc.errors()
        )
        return error(422, "invalid_request", f"invalid request: {where}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}
        return error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("API call failed")
        return error(500, "internal_error", "internal error; the detail is in the server log")

    @app.post(
        "/workspaces/{workspace_id}/jobs/{kind}",
        status_code=202,
        response_model=JobResource,
        responses={**ERRORS},
        summary="Start a job of a kind (course_tagging, backup, …)",
    )
    async def start_job(
        jobs: Jobs,
        kind: Annotated[str, Path(description="The job kind", max_length=64)],
        payload: Annotated[dict[str, Any], Body(description="The kind's payload")],
        idempotency_key: Annotated[
            str | None, Header(description="Same key, same job", max_length=200)
        ] = None,
        x_correlation_id: Annotated[str | None, Header(max_length=200)] = None,
    ) -> JSONResponse:
        job = await jobs.start(
            kind, payload, correlation_id=x_correlation_id, idempotency_key=idempotency_key
        )
        return JSONResponse(
            JobResource.of(job).model_dump(mode="json"),
            status_code=202,
            headers={"Content-Location": status_url(job)},
        )

    @app.get(
        "/workspaces/{workspace_id}/jobs",
        response_model=list[JobResource],
        responses={**ERRORS},
        summary="The workspace's jobs, newest first",
    )
    async def list_jobs(
        jobs: Jobs,
        status: Annotated[JobStatus | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    ) -> list[JobResource]:
        return [JobResource.of(job) for job in await jobs.list(status=status, limit=limit)]

    @app.get(
        "/workspaces/{workspace_id}/jobs/{job_id}",
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
    async def job_status(jobs: Jobs, job_id: uuid.UUID) -> Response:
        job = await jobs.get(job_id)
        if not job.is_final:
            progress = f"{job.processed}/{job.total}"
            if job.progress_message:
                progress += f" {job.progress_message}"
            return JSONResponse(
                JobResource.of(job).model_dump(mode="json"),
                status_code=202,
                headers={"X-Progress": progress, "Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        if job.status == JobStatus.cancelled:
            return error(404, "job_cancelled", "the job was cancelled")
        if job.status == JobStatus.failed:
            return error(422, job.error_code or "job_failed", job.error_message or "the job failed")
        return Response(
            json.dumps(job.result or {}),
            status_code=200,
            media_type=job.result_content_type or "application/json",
        )

    @app.delete(
        "/workspaces/{workspace_id}/jobs/{job_id}",
        status_code=202,
        response_model=JobResource,
        responses={**ERRORS},
        summary="Cancel the job (a no-op once it has finished)",
    )
    async def cancel_job(jobs: Jobs, job_id: uuid.UUID) -> JobResource:
        job = await jobs.get(job_id)
        if job.status == JobStatus.cancelled:
            raise NotFound("the job was cancelled", code="job_cancelled")
        return JobResource.of(await jobs.cancel(job_id))

    @app.get(
        "/health",
        response_model=Health,
        responses={503: {"model": Health, "description": "A dependency does not answer"}},
        summary="Database and Temporal reachability",
    )
    async def health(request: Request) -> JSONResponse:
        hub: HubJobsClient = request.app.state.client
        report = await check_health(hub)
        ok = report.database == "ok" and report.temporal == "ok"
        return JSONResponse(report.model_dump(), status_code=200 if ok else 503)

    return app


async def check_health(hub: HubJobsClient) -> Health:
    database = temporal = "ok"
    try:
        async with hub.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as err:
        log.warning("health: database unreachable: %s", type(err).__name__)
        database = "unavailable"
    try:
        await hub.temporal.service_client.check_health()
    except Exception as err:
        log.warning("health: Temporal unreachable: %s", type(err).__name__)
        temporal = "unavailable"
    return Health(
        status="ok" if database == temporal == "ok" else "unavailable",
        database=database,
        temporal=temporal,
    )
