"""The messages that cross Temporal: workflow inputs, activity arguments and results,
signals and queries. Plain pydantic models with no I/O, safe inside the workflow
sandbox and carried by the SDK's pydantic data converter."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINAL_STATUSES: tuple[JobStatus, ...] = ("succeeded", "failed", "cancelled")

# Plain messages for the stable error codes a job can end with. The detail of a
# failure goes to the worker's log, never here.
ERROR_MESSAGES: dict[str, str] = {
    "actor_unavailable": "The actor is no longer an enabled administrator of the workspace.",
    "invalid_payload": "The job's input is not valid for its kind.",
    "processing_failed": "The job failed after its retries ran out.",
    "abandoned": "The job was abandoned: its worker stopped responding and no attempts are left.",
    "terminated": "The job was terminated in Temporal.",
    "timed_out": "The job timed out in Temporal.",
}


class JobOptions(BaseModel):
    """How a job's activities run; chosen by the starter, fixed for the job's life so
    that workflow code reads no configuration."""

    heartbeat_timeout_seconds: float = 15.0
    max_attempts: int = 5
    chunk_size: int = 2000


class JobInput(BaseModel):
    """The input of every job workflow, whatever its kind."""

    job_id: uuid.UUID
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    payload: dict[str, Any]
    options: JobOptions = Field(default_factory=JobOptions)
    # Where a run continued as new picks up (kind-defined, e.g. the last ordinal done).
    checkpoint: dict[str, Any] | None = None


class Counters(BaseModel):
    total: int = 0
    processed: int = 0
    succeeded: int = 0
    skipped: int = 0
    failed: int = 0


class JobProgress(BaseModel):
    """What the ``progress`` query returns: the read model's counters and message."""

    status: JobStatus
    counters: Counters
    message: str | None = None
    cancel_requested: bool = False


class JobProgressReport(BaseModel):
    """The ``report_progress`` signal: how far a long activity got, for the progress
    query and the UI's details between its start and its end."""

    counters: Counters
    message: str


class CancelRequest(BaseModel):
    """The ``cancel`` signal: who asked, and why."""

    actor_id: uuid.UUID | None = None
    reason: str | None = None


class OpenedJob(BaseModel):
    counters: Counters
    cancel_requested: bool = False


class FinishJob(BaseModel):
    job_id: uuid.UUID
    status: JobStatus
    error_code: str | None = None
    error_message: str | None = None
    # What the kind's work returned, for its result (a backup's archive, say).
    output: dict[str, Any] | None = None


class JobOutcome(BaseModel):
    """What a job workflow returns: the final row, as the read model holds it."""

    job_id: uuid.UUID
    status: JobStatus
    counters: Counters
    result: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None


# --- maintenance ---------------------------------------------------------------------


class SweepRequest(BaseModel):
    """Remove jobs whose ``expires_at`` is at or before ``cutoff`` (the workflow's clock),
    at most ``limit`` of them."""

    cutoff: datetime
    limit: int = 100


class SweepResult(BaseModel):
    removed: int
    # Rows whose kind's expire hook failed: kept for a later sweep.
    kept: int


class ReconcileRequest(BaseModel):
    # Unfinished rows younger than this are left alone (their start may be under way).
    grace_seconds: float = 30.0
    limit: int = 500


class ReconcileResult(BaseModel):
    checked: int
    # Rows brought into line with a closed workflow.
    finished: int
    # Rows whose workflow had never started, started now.
    restarted: int


# --- backup ---------------------------------------------------------------------------


class BackupRequest(BaseModel):
    job_id: uuid.UUID


class BackupArchive(BaseModel):
    """What a finished backup wrote (the job's result, camelCased by the kind)."""

    backup_id: uuid.UUID
    created_at: datetime
    size_bytes: int
    table_count: int
    attachment_count: int
    schema_version: str
    archive_path: str


class BackupRun(BaseModel):
    # None when the backup stopped on a cancellation request (and left no file).
    archive: BackupArchive | None = None


# --- course tagging ------------------------------------------------------------


class TagChunk(BaseModel):
    """One activity call: tag the pending pages after ``after_ordinal``, at most ``limit``."""

    job_id: uuid.UUID
    after_ordinal: int
    limit: int


class TagChunkResult(BaseModel):
    last_ordinal: int
    counters: Counters
    done: bool
    cancel_requested: bool = False


class TaggingCursor(BaseModel):
    """Heartbeat details of the tagging activity: the last ordinal whose outcome is
    committed. They come back untyped on a retry and are validated into this."""

    last_ordinal: int
