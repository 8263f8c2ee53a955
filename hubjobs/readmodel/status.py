"""The read model's vocabulary, written once: the schema's CHECK constraints, the
messages, the client, the CLI and the API use these enums."""

from __future__ import annotations

from enum import StrEnum


class SqlLiteral(StrEnum):
    """A member as a SQL literal: a misspelt status fails where the statement is built,
    never matches nothing. CHECK constraints, not an ENUM type: a new value is then an
    ordinary migration, and restores need no type."""

    @property
    def sql(self) -> str:
        return f"'{self.value}'"


class JobStatus(SqlLiteral):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


# The moves a job's row makes, and no others: docs/concepts/states.md draws them, and
# every write of a row guards on them (hubjobs/job_rows/moves.py).
JOB_MOVES: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.queued: frozenset({JobStatus.running, JobStatus.failed, JobStatus.cancelled}),
    JobStatus.running: frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}),
    JobStatus.succeeded: frozenset(),
    JobStatus.failed: frozenset(),
    JobStatus.cancelled: frozenset(),
}
FINAL_STATUSES = frozenset(status for status, moves in JOB_MOVES.items() if not moves)
UNFINISHED_STATUSES = frozenset(status for status, moves in JOB_MOVES.items() if moves)


def status_label(status: str, failed_items: int) -> str:
    """``succeeded (10 failed)``: a job that succeeded with items failed is no plain
    success, wherever its status is shown."""
    return f"{status} ({failed_items} failed)" if failed_items > 0 else str(status)


class ItemState(SqlLiteral):
    pending = "pending"
    succeeded = "succeeded"
    skipped = "skipped"
    failed = "failed"


class NotifyState(SqlLiteral):
    """A completion webhook's delivery: pending until the receiver took it (delivered),
    refused it for good (refused: a redirect, a destination no longer allowed) or the
    retries ran out (failed)."""

    pending = "pending"
    delivered = "delivered"
    failed = "failed"
    refused = "refused"


# A delivery's moves: each try that fails leaves it pending, until one of the ends.
NOTIFY_MOVES: dict[NotifyState, frozenset[NotifyState]] = {
    NotifyState.pending: frozenset(
        {NotifyState.delivered, NotifyState.failed, NotifyState.refused}
    ),
    NotifyState.delivered: frozenset(),
    NotifyState.failed: frozenset(),
    NotifyState.refused: frozenset(),
}


class AuditAction(SqlLiteral):
    """What an operator did, as the audit trail records it."""

    start = "start"
    cancel = "cancel"
    retry = "retry"
    bulk_cancel = "bulk_cancel"
    bulk_retry = "bulk_retry"
    schedule_create = "schedule_create"
    schedule_pause = "schedule_pause"
    schedule_unpause = "schedule_unpause"
    schedule_trigger = "schedule_trigger"
    schedule_delete = "schedule_delete"
    schedule_update = "schedule_update"
    restore = "restore"


class Surface(SqlLiteral):
    """Where an action came from: the HTTP API (``cli`` and ``console`` are its clients
    that say so), or the Python client called directly."""

    api = "api"
    cli = "cli"
    console = "console"
    python = "python"


def sql_list(values: type[StrEnum] | frozenset[JobStatus]) -> str:
    """``('a', 'b')`` for a CHECK constraint or an ``IN`` list."""
    return "(" + ", ".join(f"'{v.value}'" for v in sorted(values, key=lambda v: v.value)) + ")"
