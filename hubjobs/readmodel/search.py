"""What a search of a workspace's jobs may ask: the filters and the order of the list,
checked and typed, ready for one statement (``reads.jobs_as_member``)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from hubjobs.errors import InvalidInput
from hubjobs.readmodel.status import JobStatus

INVALID_JOB_ID = "invalid_job_id"
# A job id or the start of one: hex digits, dashes anywhere (as an id is written or not).
_HEX = re.compile(r"[0-9a-f]{1,32}", re.ASCII)
ID_PREFIX_MAX_LENGTH = 36
# A retry's idempotency key is this and its source's id: one retry per source job. It
# holds a space, which no caller's key may (hubjobs.domain.text), so no start can take it.
RETRY_KEY_PREFIX = "retry of "


def retry_key(source_id: uuid.UUID) -> str:
    """The idempotency key of a job's retry."""
    return f"{RETRY_KEY_PREFIX}{source_id}"


class JobSort(StrEnum):
    """A list's order; each keyset-paged on (its time, id)."""

    created_desc = "created_desc"
    created_asc = "created_asc"
    # Finished jobs only, by when they finished.
    finished_desc = "finished_desc"
    finished_asc = "finished_asc"

    @property
    def column(self) -> str:
        return "finished_at" if self.name.startswith("finished") else "created_at"

    @property
    def descending(self) -> bool:
        return self.name.endswith("desc")


def id_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The smallest and largest ids starting with ``prefix`` (a range on the id's btree,
    not a text scan), or ``invalid_job_id``."""
    digits = prefix.replace("-", "").lower() if isinstance(prefix, str) else ""
    if len(prefix) > ID_PREFIX_MAX_LENGTH or not _HEX.fullmatch(digits):
        raise InvalidInput(
            "id must be a job id or its start: 1 to 32 hexadecimal digits, dashes allowed",
            code=INVALID_JOB_ID,
        )
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


@dataclass(frozen=True)
class JobSearch:
    """A list's filters (each None or empty: not filtered) and its order. ``payload`` and
    ``result`` are JSON the job's must contain (a list field holding a value matches).
    The one model of a search: the list reads it, and the bulk actions select by it."""

    statuses: tuple[JobStatus, ...] = ()
    kind: str | None = None
    schedule_id: str | None = None
    actor_id: uuid.UUID | None = None
    ids: tuple[uuid.UUID, uuid.UUID] | None = None
    since: datetime | None = None
    until: datetime | None = None
    payload: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    # Only finished jobs with failed items that no retry has taken yet: a retry's work.
    to_retry: bool = False
    sort: JobSort = JobSort.created_desc
