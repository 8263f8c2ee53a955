"""The HTTP API for services in other languages: the asynchronous request pattern of
FHIR bulk data over the starter client.

    POST   /workspaces/{ws}/jobs/{kind}   202 Accepted, Content-Location: the status URL
    GET    /workspaces/{ws}/jobs/{id}     202 + X-Progress + Retry-After while it runs,
                                          200 + the result (its own content type) when done,
                                          422 + {"error": {code, message}} when it failed,
                                          404 once it is cancelled or gone
    DELETE /workspaces/{ws}/jobs/{id}     202: cancellation signalled (a no-op once finished)
    GET    /workspaces/{ws}/jobs          the workspace's jobs, newest first
    GET    /workspaces/{ws}/jobs/{id}/items        the job's items, keyset-paged (``next``)
    POST   /workspaces/{ws}/jobs/{id}/retry        202: a new job over its failed items
    GET    /workspaces/{ws}/jobs/{id}/files/{name} a finished export's file, streamed NDJSON
    GET    /health                        database and Temporal reachability
    POST   /codec/encode, /codec/decode   Temporal's codec endpoint (with the codec on)

Recurring jobs (each a Temporal Schedule whose every firing is a job):

    POST   /workspaces/{ws}/schedules                   201 + Location: create one
    GET    /workspaces/{ws}/schedules                   the workspace's schedules
    GET    /workspaces/{ws}/schedules/{id}              one, with its next and recent runs
    POST   /workspaces/{ws}/schedules/{id}/pause        200 (and /unpause)
    POST   /workspaces/{ws}/schedules/{id}/trigger      202: fires now (422 during a run)
    DELETE /workspaces/{ws}/schedules/{id}              204: gone from Temporal; jobs stay

Every call but /health carries ``Authorization: Bearer <JWT naming the actor>`` and is
scoped to the workspace in its path. Errors are ``{"error": {"code", "message"}}``
with a stable code; details go to the log. The OpenAPI document is the contract.

What the log gets: one access line a request with the route's template (never the
path as sent, its query or its headers), and for a failure its code, or the error's
type and frames (``describe_failure``): never a payload, a key or a message that could
quote one. A workspace the actor is not an enabled member of answers exactly as one
that does not exist (404 ``workspace_not_found``).

Every request has a budget (HUBJOBS_API_REQUEST_TIMEOUT_SECONDS) to the start of its
answer: past it, 503 ``unavailable`` at once, whatever it waits on. Each call inside has
a shorter deadline of its own (the database's by purpose, Temporal's), which normally
answers first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hubjobs.db.deadline import deadline
from hubjobs.domain.text import (
    KEY_MAX_LENGTH,
    KEY_PATTERN,
    KIND_PATTERN,
    invalid_correlation_id,
    invalid_idempotency_key,
)
from hubjobs.errors import (
    INTERNAL_ERROR,
    ConfigurationError,
    Forbidden,
    HubJobsError,
    InvalidInput,
    InvalidPayload,
    JobFailed,
    JobNotFound,
    NotFound,
    Unavailable,
    UnknownKind,
    describe_validation_errors,
)
from hubjobs.kinds.page_export import CONTENT_TYPE as EXPORT_CONTENT_TYPE
from hubjobs.observability.logs import log_failure
from hubjobs.readmodel.status import ItemState, JobStatus
from hubjobs.readmodel.views import ItemPage, JobView
from hubjobs.settings import Settings
from hubjobs.temporal.job_schedules import (
    SCHEDULE_ID_MAX_LENGTH,
    SCHEDULE_ID_PATTERN,
    ScheduleView,
)
from starter.auth import TokenVerifier, Unauthorized
from starter.client import MAX_ITEMS_PAGE, MAX_ORDINAL, HubJobsClient, WorkspaceJobs
from starter.codec_endpoint import CodecCors, codec_router
from starter.contract_endpoint import router as contract_router
from starter.schedules import WorkspaceSchedules, invalid_schedule_id

log = logging.getLogger(__name__)
access_log = logging.getLogger("hubjobs.api.access")
RETRY_AFTER_SECONDS = 2
# The largest request body taken (a payload is a few hundred bytes).
MAX_BODY_BYTES = 1024 * 1024
INTERNAL_MESSAGE = "internal error; the detail is in the server log"
# Export files are streamed in pieces this large.
FILE_CHUNK_BYTES = 256 * 1024


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
    # The schedule whose firing started the job (null for a job started by hand).
    schedule_id: str | None
    # Set while the job's workflow tasks keep failing (null otherwise): not moving.
    stuck_since: str | None = None
    stuck_reason: str | None = None
    status_url: str

    @classmethod
    def of(cls, job: JobView) -> JobResource:
        data = job.model_dump(mode="json")
        return cls.model_validate(
            {**{k: data[k] for k in cls.model_fields if k in data}, "status_url": status_url(job)}
        )


class ScheduleRequest(BaseModel):
    """A schedule to create: exactly one of ``cron`` and ``every`` (else 422
    ``invalid_schedule``)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="The job kind (422 unknown_kind otherwise)")
    cron: str | None = Field(
        default=None,
        description='A cron expression, five fields: "0 3 * * *" is 03:00 every day '
        "(422 invalid_cron otherwise)",
    )
    every: str | None = Field(
        default=None,
        description="An interval instead: 30s, 15m, 1h30m, 7d (422 invalid_interval otherwise)",
    )
    time_zone: str | None = Field(
        default=None,
        description="The cron expression's IANA time zone, UTC by default "
        "(422 invalid_time_zone otherwise)",
    )
    payload: dict[str, Any] = Field(
        default_factory=dict, description="The kind's payload, checked now and at every firing"
    )
    keep: int | None = Field(
        default=None,
        description="Keep the newest N (1 to 1000) successful runs; older ones expire "
        "(422 invalid_keep otherwise)",
    )


class ScheduleRunResource(BaseModel):
    scheduled_at: datetime
    started_at: datetime
    job_id: uuid.UUID
    job_url: str


class ScheduleResource(BaseModel):
    id: str
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    payload: dict[str, Any]
    cron: str | None
    every_seconds: int | None
    time_zone: str | None
    timing: str
    keep: int | None
    paused: bool
    note: str | None
    next_runs: list[datetime]
    recent_runs: list[ScheduleRunResource]
    created_at: datetime
    url: str
    jobs_url: str

    @classmethod
    def of(cls, view: ScheduleView) -> ScheduleResource:
        base = f"/workspaces/{view.workspace_id}"
        return cls(
            **view.model_dump(exclude={"recent_runs"}),
            timing=view.timing.describe(),
            recent_runs=[
                ScheduleRunResource(
                    scheduled_at=run.scheduled_at,
                    started_at=run.started_at,
                    job_id=run.job_id,
                    job_url=f"{base}/jobs/{run.job_id}",
                )
                for run in view.recent_runs
            ],
            url=schedule_url(view),
            jobs_url=f"{base}/jobs?schedule_id={view.id}",
        )


class Health(BaseModel):
    status: str
    database: str
    temporal: str


def status_url(job: JobView) -> str:
    return f"/workspaces/{job.workspace_id}/jobs/{job.id}"


def schedule_url(view: ScheduleView) -> str:
    return f"/workspaces/{view.workspace_id}/schedules/{view.id}"


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
        "or no such job (or cancelled) or schedule in it",
    },
    413: {"model": ErrorBody, "description": f"A body over {MAX_BODY_BYTES} bytes"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    500: {"model": ErrorBody, "description": "Internal error (the detail is in the log)"},
    503: {
        "model": ErrorBody,
        "description": "PostgreSQL, Temporal or the identity provider's keys unavailable",
    },
}

CODEC_ERRORS: dict[int | str, dict[str, Any]] = {
    **{status: ERRORS[status] for status in (400, 401, 413, 500, 503)},
    403: {"model": ErrorBody, "description": "An actor HUBJOBS_CODEC_ACTORS does not list"},
    422: {
        "model": ErrorBody,
        "description": "Not base64, or a payload that does not decrypt (undecodable_payload)",
    },
}

# Request fields whose refusal has a code of its own (the client's), not invalid_request.
FIELD_REFUSALS = {
    ("header", "idempotency-key"): invalid_idempotency_key,
    ("header", "x-correlation-id"): invalid_correlation_id,
}
FIELD_CODES = {
    ("path", "kind"): (UnknownKind.code, UnknownKind().message),
    ("path", "schedule_id"): (invalid_schedule_id().code, invalid_schedule_id().message),
    ("query", "schedule_id"): (invalid_schedule_id().code, invalid_schedule_id().message),
}


class RequestGuard:
    """The outermost layer of every request, below Starlette's own error middleware:

    - a body over ``MAX_BODY_BYTES`` is refused (413) before anything reads it;
    - a request that has not started its answer within ``budget`` seconds is answered
      503 ``unavailable`` at once, and what it waited on is cancelled (0: no budget);
    - an exception nothing else handled becomes 500 ``internal_error`` here, logged
      with ``describe_failure`` (type and frames, no message): it never goes further
      up, where the server would log it with its message;
    - one access line a request: method, the route's template, status, duration.
    """

    def __init__(self, app: ASGIApp, budget: float = 0.0) -> None:
        self.app = app
        self.budget = budget

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
                await self._within_budget(scope, replay, sending)
        except Exception as err:
            log_failure(log, "API call failed", err)
            if status == 0:
                await error(500, INTERNAL_ERROR, INTERNAL_MESSAGE)(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "(no route)"
            access_log.info(
                "%s %s %s %.1fms",
                scope.get("method", "-"),
                route,
                status,
                (time.monotonic() - started) * 1000,
            )

    async def _within_budget(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Runs the request; past the budget with no answer started, answers 503 and
        leaves the request to its cancellation (what it sends then goes nowhere). Once
        the answer has started (a file streaming) the budget is over."""
        if self.budget <= 0:
            await self.app(scope, receive, send)
            return
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        cut = False

        async def sending(message: Message) -> None:
            if cut:
                return
            if message["type"] == "http.response.start" and not started.done():
                started.set_result(None)
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, sending))
        try:
            await asyncio.wait({task, started}, timeout=self.budget, return_when=FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server is going away: so is the request
            task.cancel()
            raise
        if task.done() or started.done():
            await task
            return
        cut = True
        task.cancel()
        task.add_done_callback(_consume_outcome)
        log.warning("API call past its budget of %.1f s: answered 503", self.budget)
        unavailable = error(503, Unavailable.code, "the service did not answer in time; try again")
        await unavailable(scope, receive, send)

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


def _consume_outcome(task: asyncio.Future[None]) -> None:
    """A request cut at its budget ends in the background: its outcome is not news."""
    if not task.cancelled() and task.exception() is not None:
        log.info("API call ended after its budget: %s", type(task.exception()).__name__)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a key twice in one object is refused (JSON leaves it
    undefined; Python would silently keep the last)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise InvalidPayload("the payload holds a key twice in one object")
        found[key] = value
    return found


async def no_duplicate_keys(request: Request) -> None:
    """The body's JSON objects name each key once (else 422 ``invalid_payload``)."""
    body = await request.body()
    if not body:
        return
    try:
        json.loads(body, object_pairs_hook=_refuse_duplicates)
    except ValueError:
        return  # not JSON: FastAPI's own parsing refuses it


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


def schedules_for(jobs: Jobs) -> WorkspaceSchedules:
    """The workspace's schedules, for the same actor, authorised like its jobs."""
    return jobs.schedules


Schedules = Annotated[WorkspaceSchedules, Depends(schedules_for)]
ScheduleId = Annotated[
    str,
    Path(
        description="The schedule's id, <kind>-schedule-<uuid>",
        max_length=SCHEDULE_ID_MAX_LENGTH,
        pattern=SCHEDULE_ID_PATTERN,
    ),
]


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
    if settings.payload_codec:
        # Temporal's codec endpoint, for the UI and the CLI (see starter/codec_endpoint.py).
        router, origins = codec_router(settings, app.state.verifier, CODEC_ERRORS)
        app.include_router(router)
        app.add_middleware(CodecCors, origins=origins)
    app.include_router(contract_router)
    app.add_middleware(RequestGuard, budget=settings.api_request_timeout_seconds)
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
        codes = {400: "invalid_request", 404: NotFound.code, 405: "method_not_allowed"}
        return error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        # Only what RequestGuard itself did not catch; it catches the rest.
        log_failure(log, "API call failed", exc)
        return error(500, INTERNAL_ERROR, INTERNAL_MESSAGE)

    @app.post(
        "/workspaces/{workspace_id}/jobs/{kind}",
        status_code=202,
        response_model=JobResource,
        responses={**ERRORS},
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
        schedule_id: Annotated[
            str | None,
            Query(
                description="Only the runs of this schedule",
                max_length=SCHEDULE_ID_MAX_LENGTH,
                pattern=SCHEDULE_ID_PATTERN,
            ),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    ) -> list[JobResource]:
        found = await jobs.list(status=status, schedule_id=schedule_id, limit=limit)
        return [JobResource.of(job) for job in found]

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
            return error(
                422, job.error_code or JobFailed.code, job.error_message or "the job failed"
            )
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

    # --- schedules ---------------------------------------------------------------------

    @app.post(
        "/workspaces/{workspace_id}/schedules",
        status_code=201,
        response_model=ScheduleResource,
        responses={**ERRORS},
        summary="Create a schedule of jobs of a kind (cron or interval)",
        dependencies=[Depends(no_duplicate_keys)],
    )
    async def create_schedule(schedules: Schedules, body: ScheduleRequest) -> JSONResponse:
        view = await schedules.create(
            body.kind,
            cron=body.cron,
            every=body.every,
            time_zone=body.time_zone,
            payload=body.payload,
            keep=body.keep,
        )
        return JSONResponse(
            ScheduleResource.of(view).model_dump(mode="json"),
            status_code=201,
            headers={"Location": schedule_url(view)},
        )

    @app.get(
        "/workspaces/{workspace_id}/schedules",
        response_model=list[ScheduleResource],
        responses={**ERRORS},
        summary="The workspace's schedules, newest first",
    )
    async def list_schedules(schedules: Schedules) -> list[ScheduleResource]:
        return [ScheduleResource.of(view) for view in await schedules.list()]

    @app.get(
        "/workspaces/{workspace_id}/schedules/{schedule_id}",
        response_model=ScheduleResource,
        responses={**ERRORS},
        summary="One schedule: its definition, next firings and recent runs",
    )
    async def get_schedule(schedules: Schedules, schedule_id: ScheduleId) -> ScheduleResource:
        return ScheduleResource.of(await schedules.get(schedule_id))

    @app.post(
        "/workspaces/{workspace_id}/schedules/{schedule_id}/pause",
        response_model=ScheduleResource,
        responses={**ERRORS},
        summary="Pause the schedule (a run under way goes on)",
    )
    async def pause_schedule(schedules: Schedules, schedule_id: ScheduleId) -> ScheduleResource:
        return ScheduleResource.of(await schedules.pause(schedule_id))

    @app.post(
        "/workspaces/{workspace_id}/schedules/{schedule_id}/unpause",
        response_model=ScheduleResource,
        responses={**ERRORS},
        summary="Let a paused schedule fire again",
    )
    async def unpause_schedule(schedules: Schedules, schedule_id: ScheduleId) -> ScheduleResource:
        return ScheduleResource.of(await schedules.unpause(schedule_id))

    @app.post(
        "/workspaces/{workspace_id}/schedules/{schedule_id}/trigger",
        status_code=202,
        response_model=ScheduleResource,
        responses={**ERRORS},
        summary="Fire now (422 schedule_running while a run of the schedule is still going)",
    )
    async def trigger_schedule(schedules: Schedules, schedule_id: ScheduleId) -> ScheduleResource:
        return ScheduleResource.of(await schedules.trigger(schedule_id))

    @app.delete(
        "/workspaces/{workspace_id}/schedules/{schedule_id}",
        status_code=204,
        response_class=Response,
        responses={**ERRORS},
        summary="Delete the schedule from Temporal (its jobs stay)",
    )
    async def delete_schedule(schedules: Schedules, schedule_id: ScheduleId) -> Response:
        await schedules.delete(schedule_id)
        return Response(status_code=204)

    @app.post(
        "/workspaces/{workspace_id}/jobs/{job_id}/retry",
        status_code=202,
        response_model=JobResource,
        responses={**ERRORS},
        summary="Run a finished job's failed items again, as a new job of its kind "
        "(the same one for every retry of the same job)",
    )
    async def retry_job(
        jobs: Jobs,
        job_id: uuid.UUID,
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
        job = await jobs.retry(job_id, correlation_id=x_correlation_id)
        return JSONResponse(
            JobResource.of(job).model_dump(mode="json"),
            status_code=202,
            headers={"Content-Location": status_url(job)},
        )

    @app.get(
        "/workspaces/{workspace_id}/jobs/{job_id}/items",
        response_model=ItemPage,
        responses={**ERRORS},
        summary="The job's items in order (each page's id, title, state, code and "
        "message), keyset-paged: pass `next` as `after` for the following page",
    )
    async def job_items(
        jobs: Jobs,
        job_id: uuid.UUID,
        state: Annotated[ItemState | None, Query(description="Only items in this state")] = None,
        after: Annotated[
            int,
            Query(ge=0, le=MAX_ORDINAL, description="The ordinal to start after (a `next`)"),
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_ITEMS_PAGE)] = 100,
    ) -> ItemPage:
        return await jobs.items(job_id, state=state, after=after, limit=limit)

    @app.get(
        "/workspaces/{workspace_id}/jobs/{job_id}/files/{name}",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "A file of a finished export (one page a line), streamed",
                "content": {EXPORT_CONTENT_TYPE: {"schema": {"type": "string"}}},
            },
            **ERRORS,
        },
        summary="Download a file listed in an export's manifest",
    )
    async def job_file(
        jobs: Jobs,
        job_id: uuid.UUID,
        name: Annotated[str, Path(description="A file name from the manifest's output")],
    ) -> StreamingResponse:
        return await stream_file(await jobs.export_file(job_id, name), name)

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


async def stream_file(path: FilePath, name: str) -> StreamingResponse:
    """The file, streamed a chunk at a time. Opened before the answer starts: removed
    after that (its job expired), it is still read whole; removed before, it is gone
    (404, as a job that is)."""
    try:
        handle = await asyncio.to_thread(path.open, "rb")
    except FileNotFoundError:
        raise JobNotFound("no such file of a job in this workspace") from None
    size = os.fstat(handle.fileno()).st_size

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(handle.read, FILE_CHUNK_BYTES):
                yield chunk
        finally:
            handle.close()

    return StreamingResponse(
        chunks(),
        media_type=EXPORT_CONTENT_TYPE,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{name}"',
        },
    )


async def check_health(hub: HubJobsClient) -> Health:
    """Both servers, asked at once, each within its deadline (the database's read budget,
    Temporal's connect and call timeouts): a server that hangs is ``unavailable``."""

    async def database() -> str:
        try:
            with deadline(hub.settings.db_read_timeout_seconds):
                async with hub.engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except Exception as err:
            log.warning("health: database unreachable: %s", type(err).__name__)
            return "unavailable"
        return "ok"

    async def temporal() -> str:
        try:
            client = await hub.temporal_client()
            timeout = timedelta(seconds=hub.settings.temporal_rpc_timeout_seconds)
            await client.service_client.check_health(timeout=timeout)
        except Exception as err:
            log.warning("health: Temporal unreachable: %s", type(err).__name__)
            return "unavailable"
        return "ok"

    db_state, temporal_state = await asyncio.gather(database(), temporal())
    return Health(
        status="ok" if db_state == temporal_state == "ok" else "unavailable",
        database=db_state,
        temporal=temporal_state,
    )
