"""What callers see of the read model: plain pydantic models, no I/O."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from hubjobs.readmodel.status import ItemState, JobStatus, NotifyState


class Counters(BaseModel):
    total: int = 0
    processed: int = 0
    succeeded: int = 0
    skipped: int = 0
    failed: int = 0

    @classmethod
    def of(cls, source: Any) -> Counters:
        """The counts of anything that holds them as attributes: a ``jobs`` row, a job."""
        return cls.model_validate(source, from_attributes=True)

    def __add__(self, other: Counters) -> Counters:
        return Counters.model_validate(
            {name: getattr(self, name) + getattr(other, name) for name in Counters.model_fields}
        )

    def describe(self) -> str:
        """The progress line every kind shows unless it says more."""
        return (
            f"{self.processed} of {self.total} done: {self.succeeded} succeeded, "
            f"{self.skipped} skipped, {self.failed} failed"
        )


class JobView(BaseModel):
    """One job as callers see it (JSON keys snake_case)."""

    id: uuid.UUID
    workflow_id: str
    kind: str
    status: JobStatus
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    idempotency_key: str | None
    payload: dict[str, Any]
    summary: str | None
    total: int
    processed: int
    succeeded: int
    skipped: int
    failed: int
    progress_message: str | None
    result: dict[str, Any] | None
    result_content_type: str | None
    error_code: str | None
    error_message: str | None
    cancel_requested_at: datetime | None
    cancel_requested_by: uuid.UUID | None
    # What the first cancellation request said of why, when it said.
    cancel_reason: str | None = None
    attempts: int
    attempts_failed: int
    source_job_id: uuid.UUID | None
    # The schedule whose firing started the job (None for a job started by hand).
    schedule_id: str | None
    # Set while the job's workflow tasks keep failing (a bug, a non-determinism after a
    # deploy): the job is not moving, whatever its status says.
    stuck_since: datetime | None = None
    stuck_reason: str | None = None
    # When the job's items were taken (by its first attempt, not its start): what a page
    # was then is what "had the tag at snapshot" means. None until then.
    snapshot_at: datetime | None = None
    # The completion webhook, when the start named one (see hubjobs/webhooks/): its URL,
    # its delivery's state, tries, last failure ("code: message") and success time.
    notify_url: str | None = None
    notify_state: NotifyState | None = None
    notify_attempts: int = 0
    notify_last_error: str | None = None
    notified_at: datetime | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None

    @property
    def counters(self) -> Counters:
        return Counters.of(self)

    @property
    def is_final(self) -> bool:
        return self.status.is_final

    @property
    def has_failed_items(self) -> bool:
        """Some item failed: a job that succeeded so is not a plain success."""
        return self.failed > 0

    @property
    def progress(self) -> str:
        """The latest progress message, or one made from the counters."""
        return self.progress_message or self.counters.describe()


# What the API shows of a job, by JobView's field names; the result has its own URL.
API_JOB_FIELDS = (
    "id",
    "workflow_id",
    "kind",
    "status",
    "workspace_id",
    "correlation_id",
    "summary",
    "total",
    "processed",
    "succeeded",
    "skipped",
    "failed",
    "progress_message",
    "error_code",
    "error_message",
    "created_at",
    "started_at",
    "finished_at",
    "cancel_requested_at",
    "cancel_reason",
    "attempts",
    "attempts_failed",
    "schedule_id",
    "stuck_since",
    "stuck_reason",
    "snapshot_at",
    "notify_state",
    "notify_attempts",
    "notify_last_error",
    "notified_at",
)


class ItemView(BaseModel):
    """One item of a job (a page of a course), as listings show it."""

    ordinal: int
    ref: uuid.UUID | None
    label: str | None
    state: ItemState
    error_code: str | None
    error_message: str | None
    processed_at: datetime | None


class ItemPage(BaseModel):
    """One page of a job's items, keyset-paged by ordinal: ``next`` is the ``after`` that
    reads the following page, None when this one is the last."""

    items: list[ItemView]
    next: int | None


class QueueState(BaseModel):
    queued: int
    running: int
    # Failed in the last hour (store.FAILED_WINDOW), not every failure still kept.
    failed: int
    oldest_queued_age_seconds: float | None
    # Unfinished jobs whose workflow tasks keep failing (the reconciler flags them).
    stuck: int = 0
