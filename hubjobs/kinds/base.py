"""What a job kind is: its payload, its workflow, how it is prepared at start, its result,
its retention, and what to remove when it expires. The lifecycle around it (read-model
row, status moves, cancellation, progress, search attributes, retention) is shared."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.readmodel.store import JobView
from hubjobs.temporal.messages import Counters


@dataclass(frozen=True)
class NewJob:
    job_id: uuid.UUID
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str


@dataclass(frozen=True)
class Prepared:
    """What preparing a job found: how many items it has, and a one-line summary for
    the Temporal UI and the job list."""

    total: int
    summary: str


Prepare = Callable[[AsyncConnection, NewJob, Any], Awaitable[Prepared]]
# (payload, final counters, what the work returned) -> the result of a success.
BuildResult = Callable[[Any, Counters, dict[str, Any] | None], dict[str, Any]]
Expire = Callable[[JobView], Awaitable[None]]


@dataclass(frozen=True)
class JobKind:
    name: str
    payload_model: type[BaseModel]
    # The Temporal workflow type that runs jobs of this kind.
    workflow: str
    # Checks the start (raising a typed HubJobsError) and snapshots the job's items, in
    # the transaction that inserts the job row: a refused start leaves nothing behind.
    prepare: Prepare
    build_result: BuildResult
    result_content_type: str = "application/json"
    # None takes the deployment's default (HUBJOBS_RETENTION_HOURS).
    retention: timedelta | None = None
    # Attempts of the kind's work before the job fails; None takes the deployment's
    # default (HUBJOBS_MAX_ACTIVITY_ATTEMPTS). Retries wait 2 s, 10 s, 30 s, 30 s…
    max_attempts: int | None = None
    expire: Expire | None = None
