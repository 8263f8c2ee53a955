"""The API's errors: one JSON shape, ``{"error": {"code", "message"}}``, a status per
error class, the OpenAPI description of each status, and the handlers that turn every
exception into that shape (never a stack trace, SQL or an echo of the caller's
values)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from hubjobs.domain.text import invalid_correlation_id, invalid_idempotency_key
from hubjobs.errors import (
    INTERNAL_ERROR,
    ConfigurationError,
    Forbidden,
    HubJobsError,
    IdempotencyKeyReused,
    InvalidInput,
    NotFound,
    Unavailable,
    UnknownKind,
    describe_validation_errors,
)
from hubjobs.observability.logs import log_failure
from starter.api.tokens import Unauthorized
from starter.client import invalid_action
from starter.schedules import invalid_schedule_id

log = logging.getLogger("starter.api")
# The largest request body taken (a payload is a few hundred bytes).
MAX_BODY_BYTES = 1024 * 1024
INTERNAL_MESSAGE = "internal error; the detail is in the server log"


# Every code an error may carry (the stable part of an answer; the message is for
# people), published as the schema's enum so that a generated client can switch on it.
# A unit test holds it to every code the code base names.
ERROR_CODES: tuple[str, ...] = (
    "actor_not_administrator",
    "archive_conflict",
    "archive_corrupt",
    "archive_path_invalid",
    "archive_too_large",
    "archive_unreadable",
    "attachment_corrupt",
    "attachment_missing",
    "attachments_dir_required",
    "attachments_incomplete",
    "attachments_no_space",
    "attachments_not_empty",
    "attachments_unwritable",
    "codec_not_allowed",
    "concurrency_conflict",
    "contract_file_not_found",
    "database_failed",
    "database_full",
    "database_not_empty",
    "database_not_migrated",
    "database_read_only",
    "database_unavailable",
    "forbidden",
    "http_error",
    "hub_operator_required",
    "idempotency_key_reused",
    "internal_error",
    "invalid_action",
    "invalid_argument",
    "invalid_correlation_id",
    "invalid_cron",
    "invalid_cursor",
    "invalid_data",
    "invalid_database_url",
    "invalid_encoding",
    "invalid_field_filter",
    "invalid_field_value",
    "invalid_idempotency_key",
    "invalid_input",
    "invalid_interval",
    "invalid_job_id",
    "invalid_keep",
    "invalid_key_id",
    "invalid_limit",
    "invalid_notify_url",
    "invalid_payload",
    "invalid_reason",
    "invalid_request",
    "invalid_schedule",
    "invalid_schedule_id",
    "invalid_state",
    "invalid_status",
    "invalid_surface",
    "invalid_tag",
    "invalid_time_zone",
    "invalid_ttl",
    "job_cancelled",
    "job_failed",
    "job_id_conflict",
    "job_not_finished",
    "job_not_found",
    "method_not_allowed",
    "missing_extra",
    "no_stack",
    "not_a_workspace_archive",
    "not_configured",
    "not_found",
    "not_retryable",
    "nothing_to_retry",
    "notify_failed",
    "notify_refused",
    "page_not_found",
    "page_trashed",
    "payload_too_large",
    "port_taken",
    "schedule_not_found",
    "schedule_running",
    "schema_unsupported",
    "tag_limit",
    "unauthorized",
    "unavailable",
    "undecodable_payload",
    "unknown_field",
    "unknown_kind",
    "wait_timeout",
    "webhooks_not_configured",
    "workspace_busy",
    "workspace_not_found",
)


class ErrorDetail(BaseModel):
    code: str = Field(json_schema_extra={"enum": list(ERROR_CODES)})
    message: str
    job_id: uuid.UUID | None = Field(
        None,
        description="The job the error names, when it names one (idempotency_key_reused: "
        "the job the key names); absent otherwise.",
        # Absent rather than null: every other error keeps its two fields.
        exclude_if=lambda job_id: job_id is None,
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


def error(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    job_id: uuid.UUID | None = None,
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, job_id=job_id))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


STATUS_OF: list[tuple[type[HubJobsError], int]] = [
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (IdempotencyKeyReused, 409),
    (InvalidInput, 422),
    (Unavailable, 503),
    (ConfigurationError, 503),
]


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Unreadable request (a body that is not JSON)"},
    401: {"model": ErrorBody, "description": "Missing or invalid bearer token"},
    403: {
        "model": ErrorBody,
        "description": "A member of the workspace who is not its administrator, or an "
        "administrator asking for what is a hub operator's (hub_operator_required)",
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


# A start's own: its idempotency key names a job another request started.
KEY_REUSED: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "The Idempotency-Key names a job started by another request (another "
        "kind, payload or notify_url): idempotency_key_reused, with that job's id as "
        "error.job_id; nothing was started",
    }
}


CODEC_ERRORS: dict[int | str, dict[str, Any]] = {
    **{status: ERRORS[status] for status in (400, 401, 413, 500, 503)},
    403: {"model": ErrorBody, "description": "An actor HUBJOBS_CODEC_ACTORS does not list"},
    422: {
        "model": ErrorBody,
        "description": "Not base64, or a payload that does not decrypt (undecodable_payload)",
    },
}


def invalid_surface() -> InvalidInput:
    return InvalidInput("X-Hubjobs-Surface is one of api, cli, console", code="invalid_surface")


# A field whose refusal has a code of its own, rather than invalid_request.
FIELD_REFUSALS: dict[tuple[str, str], Callable[[], HubJobsError]] = {
    ("header", "idempotency-key"): invalid_idempotency_key,
    ("header", "x-correlation-id"): invalid_correlation_id,
    ("header", "x-hubjobs-surface"): invalid_surface,
    ("path", "kind"): UnknownKind,
    ("query", "kind"): UnknownKind,
    ("path", "schedule_id"): invalid_schedule_id,
    ("query", "action"): invalid_action,
    ("query", "schedule_id"): invalid_schedule_id,
}


def install_error_handlers(app: FastAPI) -> None:
    """Every exception a route can raise, answered in the one shape."""

    @app.exception_handler(HubJobsError)
    async def hubjobs_error(_: Request, exc: HubJobsError) -> JSONResponse:
        status = next((s for t, s in STATUS_OF if isinstance(exc, t)), 500)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status >= 500:
            log.warning("API call failed: %s (%s)", exc.code, exc.message)
        return error(status, exc.code, exc.message, headers, job_id=exc.job_id)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        for e in errors:
            loc = tuple(e.get("loc", ()))
            if loc in FIELD_REFUSALS:
                refusal = FIELD_REFUSALS[loc]()
                return error(422, refusal.code, refusal.message)
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
