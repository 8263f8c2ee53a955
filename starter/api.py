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

What the log gets: one access line a request with the route's template (never the
path as sent, its query or its headers), and for a failure its code, or the error's
type and frames (``describe_failure``): never a payload, a key or a message that could
quote one. A workspace the actor is not an enabled member of answers exactly as one
that does not exist (404 ``workspace_not_found``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hubjobs.domain.text import (
    KEY_MAX_LENGTH,
    KEY_PATTERN,
    KIND_PATTERN,
    invalid_correlation_id,
    invalid_idempotency_key,
)
from hubjobs.errors import (
    ConfigurationError,
    Forbidden,
    HubJobsError,
    InvalidInput,
    NotFound,
    Unavailable,
    describe_validation_errors,
)
from hubjobs.observability.logs import log_failure
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.auth import TokenVerifier, Unauthorized
from starter.client import HubJobsClient, WorkspaceJobs

log = logging.getLogger(__name__)
access_log = logging.getLogger("hubjobs.api.access")
RETRY_AFTER_SECONDS = 2
# The largest request body taken (a payload is a few hundred bytes).
MAX_BODY_BYTES = 1024 * 1024
INTERNAL_MESSAGE = "internal error; the detail is in the server log"


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
    403: {
        "model": ErrorBody,
        "description": "A member of the workspace who is not its administrator",
    },
    404: {
        "model": ErrorBody,
        "description": "No such workspace for the actor (also when not a member), "
        "or no such job in it (or cancelled)",
    },
    413: {"model": ErrorBody, "description": f"A body over {MAX_BODY_BYTES} bytes"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    500: {"model": ErrorBody, "description": "Internal error (the detail is in the log)"},
    503: {
        "model": ErrorBody,
        "description": "PostgreSQL, Temporal or the identity provider's keys unavailable",
    },
}

# Request fields whose refusal has a code of its own (the client's), not invalid_request.
FIELD_REFUSALS = {
    ("header", "idempotency-key"): invalid_idempotency_key,
    ("header", "x-correlation-id"): invalid_correlation_id,
}
FIELD_CODES = {("path", "kind"): ("unknown_kind", "unknown job kind")}


class RequestGuard:
    """The outermost layer of every request, below Starlette's own error middleware:

    - a body over ``MAX_BODY_BYTES`` is refused (413) before anything reads it;
    - an exception nothing else handled becomes 500 ``internal_error`` here, logged
      with ``describe_failure`` (type and frames, no message): it never goes further
      up, where the server would log it with its message;
    - one access line a request: method, the route's template, status, duration.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            replay = await self._read_body(scope, receive)
            if replay is None:
                too_large = error(413, "payload_too_large", "the request body is too large")
                await too_large(scope, receive, sending)
            else:
                await self.app(scope, replay, sending)
        except Exception as err:
            log_failure(log, "API call failed", err)
            if status == 0:
                await error(500, "internal_error", INTERNAL_MESSAGE)(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "(no route)"
            access_log.info(
                "%s %s %s %.1fms",
                scope.get("method", "-"),
                route,
                status,
                (time.monotonic() - started) * 1000,
            )

    @staticmethod
    async def _read_body(scope: Scope, receive: Receive) -> Receive | None:
        """The body read up front (at most ``MAX_BODY_BYTES``, else None), handed on."""
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > MAX_BODY_BYTES:
                        return None
                except ValueError:
                    pass
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return replay


async def jobs_for(
    request: Request,
    workspace_id: Annotated[uuid.UUID, Path(description="The workspace")],
    authorization: Annotated[str | None, Header(description="Bearer <JWT>")] = None,
) -> WorkspaceJobs:
    """The workspace's jobs as the token's actor sees them. A token checked against a
    configured key is checked here, on the loop (microseconds of CPU); one that may need
    an identity provider's keys fetched (JWKS) is checked in a thread, where the fetch
    may block."""
    hub: HubJobsClient = request.app.state.client
    verifier: TokenVerifier = request.app.state.verifier
    if verifier.key_set is None:
        actor = verifier.actor_of(authorization)
    else:
        actor = await run_in_threadpool(verifier.actor_of, authorization)
    return hub.scope(workspace_id, actor)


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
    app.state.verifier = TokenVerifier(settings)
    app.add_middleware(RequestGuard)
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
        errors = list(exc.errors())
        for e in errors:
            loc = tuple(e.get("loc", ()))
            if loc in FIELD_REFUSALS:
                refusal = FIELD_REFUSALS[loc]()
                return error(422, refusal.code, refusal.message)
            if loc in FIELD_CODES:
                return error(422, *FIELD_CODES[loc])
        # From each error's place and message only, never the input (describe_…).
        where = describe_validation_errors(errors, default_loc="request")
        return error(422, "invalid_request", f"invalid request: {where}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}
        return error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        # Only what RequestGuard itself did not catch; it catches the rest.
        log_failure(log, "API call failed", exc)
        return error(500, "internal_error", INTERNAL_MESSAGE)

    @app.post(
        "/workspaces/{workspace_id}/jobs/{kind}",
        status_code=202,
        response_model=JobResource,
        responses={**ERRORS},
        summary="Start a job of a kind (course_tagging, backup, …)",
    )
    async def start_job(
        jobs: Jobs,
        kind: Annotated[str, Path(description="The job kind", max_length=64, pattern=KIND_PATTERN)],
        payload: Annotated[dict[str, Any], Body(description="The kind's payload")],
        idempotency_key: Annotated[
            str | None,
            Header(
                description="Same key, same job: 1 to 128 characters of "
                "A-Z a-z 0-9 . _ ~ : / @ + = - (else 422 invalid_idempotency_key)",
                min_length=1,
                max_length=KEY_MAX_LENGTH,
                pattern=KEY_PATTERN,
            ),
        ] = None,
        x_correlation_id: Annotated[
            str | None,
            Header(
                description="Carried into traces and logs: 1 to 128 characters of "
                "A-Z a-z 0-9 . _ ~ : / @ + = - (else 422 invalid_correlation_id)",
                min_length=1,
                max_length=KEY_MAX_LENGTH,
                pattern=KEY_PATTERN,
            ),
        ] = None,
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
    from sqlalchemy import text

    database = temporal = "ok"
    try:
        async with hub.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as err:
        log.warning("health: database unreachable: %s", type(err).__name__)
        database = "unavailable"
    try:
        client = await hub.temporal_client()
        await client.service_client.check_health()
    except Exception as err:
        log.warning("health: Temporal unreachable: %s", type(err).__name__)
        temporal = "unavailable"
    return Health(
        status="ok" if database == temporal == "ok" else "unavailable",
        database=database,
        temporal=temporal,
    )
