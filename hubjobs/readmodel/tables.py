"""The read model's tables: ``jobs`` (one row a job, kept in step with its workflow),
``job_items`` (a job's snapshotted units of work), ``audit_events`` (every operator
action) and ``job_minutes`` (the jobs that ended, counted by the minute). Written only
by ``hubjobs.job_rows``; statuses, states and actions from ``hubjobs.readmodel.status``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from hubjobs.db.metadata import Base, created_now
from hubjobs.readmodel.status import (
    FINAL_STATUSES,
    UNFINISHED_STATUSES,
    AuditAction,
    ItemState,
    JobStatus,
    NotifyState,
    Surface,
    sql_list,
)


class Job(Base):
    """One row per job, kept in step with its workflow: what screens and services read."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(f"status IN {sql_list(JobStatus)}", name="status"),
        CheckConstraint(f"notify_state IN {sql_list(NotifyState)}", name="notify_state"),
        # An idempotency key names one job in a workspace, whatever its kind (0011).
        Index(
            "uq_jobs_idempotency",
            "workspace_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index("ix_jobs_workspace_created", "workspace_id", text("created_at DESC")),
        # A workspace's jobs in one status, newest first (list --status): the page is read
        # off the index, however many jobs of other statuses the workspace holds.
        Index(
            "ix_jobs_workspace_status_created",
            "workspace_id",
            "status",
            text("created_at DESC"),
            "id",
        ),
        # Queue state: queued and running counts and the oldest queued job, from the
        # unfinished rows only (a few thousand entries, not one a job ever run) ...
        Index(
            "ix_jobs_unfinished_status_created",
            "status",
            "created_at",
            postgresql_where=text(f"status IN {sql_list(UNFINISHED_STATUSES)}"),
        ),
        # ... and the jobs that failed lately (its ``failed`` counts the last hour).
        Index(
            "ix_jobs_failed_finished",
            "finished_at",
            postgresql_where=text(f"status = {JobStatus.failed.sql}"),
        ),
        # A workspace's ended jobs by when they ended, with what the overview sums: its
        # window is read off the index alone, and the list's finished sorts page on it (0013).
        Index(
            "ix_jobs_workspace_finished",
            "workspace_id",
            text("finished_at DESC"),
            "id",
            postgresql_include=[
                "kind",
                "status",
                "total",
                "processed",
                "succeeded",
                "skipped",
                "failed",
            ],
            postgresql_where=text("finished_at IS NOT NULL"),
        ),
        # ... and its unfinished jobs: the counts per kind and the oldest queued (0013).
        Index(
            "ix_jobs_workspace_unfinished",
            "workspace_id",
            "status",
            "created_at",
            postgresql_include=["kind", "id", "stuck_since"],
            postgresql_where=text(f"status IN {sql_list(UNFINISHED_STATUSES)}"),
        ),
        Index("ix_jobs_expires_at", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
        # The reconciler's selection: unfinished rows, least recently touched first.
        Index(
            "ix_jobs_unfinished_updated",
            "updated_at",
            postgresql_where=text(f"status IN {sql_list(UNFINISHED_STATUSES)}"),
        ),
        # The stuck jobs, for the queue state's count (0005): a handful, if any.
        Index("ix_jobs_stuck", "stuck_since", postgresql_where=text("stuck_since IS NOT NULL")),
        # A search's filters that a walk of the workspace's jobs would read past for long
        # (0014): one actor's jobs, the finished ones by when they finished, and a payload
        # or result field's value (containment, jsonb_path_ops: the smaller GIN).
        Index(
            "ix_jobs_workspace_actor_created",
            "workspace_id",
            "actor_id",
            text("created_at DESC"),
            "id",
        ),
        Index(
            "ix_jobs_payload",
            "payload",
            postgresql_using="gin",
            postgresql_ops={"payload": "jsonb_path_ops"},
        ),
        Index(
            "ix_jobs_result",
            "result",
            postgresql_using="gin",
            postgresql_ops={"result": "jsonb_path_ops"},
        ),
        # A schedule's runs, newest first: its job listing and its keep step (0003).
        Index(
            "ix_jobs_schedule_created",
            "schedule_id",
            text("created_at DESC"),
            postgresql_where=text("schedule_id IS NOT NULL"),
        ),
    )
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    workspace_id: Mapped[uuid.UUID] = mapped_column(UUID, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default=JobStatus.queued)
    actor_id: Mapped[uuid.UUID] = mapped_column(UUID, nullable=False)
    correlation_id: Mapped[str] = mapped_column(Text, nullable=False)
    idempotency_key: Mapped[str | None] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    summary: Mapped[str | None] = mapped_column(Text)
    total: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    processed: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    succeeded: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    skipped: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    failed: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    progress_message: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    result_content_type: Mapped[str | None] = mapped_column(Text)
    error_code: Mapped[str | None] = mapped_column(Text)
    error_message: Mapped[str | None] = mapped_column(Text)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_requested_by: Mapped[uuid.UUID | None] = mapped_column(UUID)
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    workflow_id: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    run_id: Mapped[str | None] = mapped_column(Text)
    # Attempts of the job's work started, and those that failed without progress (the
    # ones its budget counts; a handover or a death after progress is not one).
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    attempts_failed: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    # The job whose failed items this one retries.
    source_job_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    # The Temporal Schedule whose firing started the job; NULL for a job started by hand.
    schedule_id: Mapped[str | None] = mapped_column(Text)
    # Since when the job's workflow tasks keep failing, and as what (the failure's type):
    # set and cleared by the reconciler (0005).
    stuck_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    stuck_reason: Mapped[str | None] = mapped_column(Text)
    # When the job's first attempt took its items; NULL until then (0006).
    snapshot_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The completion webhook (0007): where it goes (NULL: none), how its delivery stands,
    # the tries so far, the last failure (a code and a short message of ours, never the
    # receiver's answer) and when a receiver took it.
    notify_url: Mapped[str | None] = mapped_column(Text)
    notify_state: Mapped[str | None] = mapped_column(Text)
    notify_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    notify_last_error: Mapped[str | None] = mapped_column(Text)
    notified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = created_now()


class JobItem(Base):
    """One unit of a job's work, snapshotted by its first attempt, its state written with
    the work. Generic, so every kind shares one table: ``ref`` (a page), ``label`` (its
    title then), ``done_at_snapshot`` (its goal held then), ``detail`` (what was frozen)."""

    __tablename__ = "job_items"
    __table_args__ = (
        # Every read and write of a job's items is a range of this key (0010).
        PrimaryKeyConstraint("job_id", "ordinal"),
        CheckConstraint(f"state IN {sql_list(ItemState)}", name="state"),
        # A job's failed items, in order: retries and listings of failures. Partial: an
        # item that succeeds or is skipped never gets an entry.
        Index(
            "ix_job_items_failed",
            "job_id",
            "ordinal",
            postgresql_where=text(f"state = {ItemState.failed.sql}"),
        ),
    )
    # No foreign key to jobs: its check was a large share of a snapshot's INSERT. Items
    # are deleted with their job (store.delete_jobs).
    job_id: Mapped[uuid.UUID] = mapped_column(UUID)
    ordinal: Mapped[int] = mapped_column(Integer)
    ref: Mapped[uuid.UUID | None] = mapped_column(UUID)
    label: Mapped[str | None] = mapped_column(Text)
    done_at_snapshot: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("false")
    )
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default=ItemState.pending)
    error_code: Mapped[str | None] = mapped_column(Text)
    error_message: Mapped[str | None] = mapped_column(Text)
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditEvent(Base):
    """One operator action: when, who, from which surface, what, why, and what it
    touched. Kept like jobs (the retention sweep), never changed once written."""

    __tablename__ = "audit_events"
    __table_args__ = (
        CheckConstraint(f"action IN {sql_list(AuditAction)}", name="action"),
        CheckConstraint(f"surface IN {sql_list(Surface)}", name="surface"),
        # The workspace's activity, newest first, keyset-paged on (at, id).
        Index("ix_audit_events_workspace_at", "workspace_id", text("at DESC"), text("id DESC")),
        # A job's trail: the events whose touched jobs hold it, bulk ones included.
        Index("ix_audit_events_job_ids", "job_ids", postgresql_using="gin"),
        # The retention sweep's selection, oldest first.
        Index("ix_audit_events_at", "at"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = created_now()
    workspace_id: Mapped[uuid.UUID] = mapped_column(UUID, nullable=False)
    # NULL for a hub operator's restore from the shell: no account acted.
    actor_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    surface: Mapped[str] = mapped_column(Text, nullable=False)
    action: Mapped[str] = mapped_column(Text, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    # The jobs it touched (one, a bulk action's, a retry's source and new job); empty
    # for a schedule's or a restore's.
    job_ids: Mapped[list[uuid.UUID]] = mapped_column(
        ARRAY(UUID), nullable=False, server_default=text("'{}'")
    )
    schedule_id: Mapped[str | None] = mapped_column(Text)
    # What else the action says: a bulk action's filter and counts, a restore's backup.
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONB)


class JobMinute(Base):
    """The jobs that ended in a minute, per workspace, kind and final status, their pages
    summed as they stood at the end: what the overview reads of ended jobs. Counted by
    the statement that ends a job (hubjobs/job_rows/minutes.py); a day kept (0016)."""

    __tablename__ = "job_minutes"
    __table_args__ = (
        # A workspace's window is a range of the key, summed off its rows alone.
        PrimaryKeyConstraint("workspace_id", "minute", "kind", "status"),
        CheckConstraint(f"status IN {sql_list(FINAL_STATUSES)}", name="status"),
        # The retention sweep's selection, across workspaces.
        Index("ix_job_minutes_minute", "minute"),
    )
    workspace_id: Mapped[uuid.UUID] = mapped_column(UUID)
    minute: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    kind: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text)
    jobs: Mapped[int] = mapped_column(Integer, nullable=False)
    pages_total: Mapped[int] = mapped_column(Integer, nullable=False)
    pages_processed: Mapped[int] = mapped_column(Integer, nullable=False)
    pages_succeeded: Mapped[int] = mapped_column(Integer, nullable=False)
    pages_skipped: Mapped[int] = mapped_column(Integer, nullable=False)
    pages_failed: Mapped[int] = mapped_column(Integer, nullable=False)
