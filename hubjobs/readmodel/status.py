"""The vocabulary of the read model: a job's status and an item's state. Written once
here; the schema's CHECK constraints, the messages, the client, the CLI and the API all
use these enums (a ``StrEnum`` is its value wherever a string is wanted)."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})
UNFINISHED_STATUSES = frozenset({JobStatus.queued, JobStatus.running})


class ItemState(StrEnum):
    pending = "pending"
    succeeded = "succeeded"
    skipped = "skipped"
    failed = "failed"


def sql_list(values: type[StrEnum] | frozenset[JobStatus]) -> str:
    """``('a', 'b')`` for a CHECK constraint or an ``IN`` list."""
    return "(" + ", ".join(f"'{v.value}'" for v in sorted(values, key=lambda v: v.value)) + ")"
