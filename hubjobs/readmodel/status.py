"""The vocabulary of the read model: a job's status and an item's state. Written once
here; the schema's CHECK constraints, the messages, the client, the CLI and the API all
use these enums (a ``StrEnum`` is its value wherever a string is wanted)."""

from __future__ import annotations

from enum import StrEnum


class SqlLiteral(StrEnum):
    """A member as a SQL string literal, for statements built from the enum: a status
    spelled wrong is an AttributeError where the statement is built, never a comparison
    that quietly matches nothing. (CHECK constraints built from the same enums, rather
    than a PostgreSQL ENUM type: adding a value is then a constraint swap in an ordinary
    migration, restores and COPY need no type, and the enum here stays the one list.)"""

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


# The moves a job's row makes, and no others: docs/concepts/states.md draws them (a unit
# test holds the two together), and every write of a row guards on them
# (hubjobs/job_rows/moves.py).
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
    """A job's status as people read it, with its failed items when it has any
    (``succeeded (10 failed)``): a job that succeeded with items failed is no plain
    success. The list, ``status``, the API's ``has_failed_items`` and the run's details
    and ``JobFailedItems`` in Temporal say the same."""
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


def sql_list(values: type[StrEnum] | frozenset[JobStatus]) -> str:
    """``('a', 'b')`` for a CHECK constraint or an ``IN`` list."""
    return "(" + ", ".join(f"'{v.value}'" for v in sorted(values, key=lambda v: v.value)) + ")"
