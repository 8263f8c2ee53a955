"""How a kind's work ends, and the final write that records it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio.exceptions import ApplicationError

from activities.deps import Deps
from activities.outages import with_outage_retry
from hubjobs import job_rows
from hubjobs.errors import HubJobsError, JobNotFound
from hubjobs.kinds import REGISTRY
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.temporal.failures import ACTOR_UNAVAILABLE
from hubjobs.temporal.messages import (
    JobOutcome,
)

log = logging.getLogger(__name__)


# --- how a kind's work ends -----------------------------------------------------------


@dataclass(frozen=True)
class Done:
    """The work is complete: the job succeeds, its result built from ``output``."""

    output: dict[str, Any] | None = None


@dataclass(frozen=True)
class Stopped:
    """A cancellation request was seen: the job ends cancelled, work done kept."""


@dataclass(frozen=True)
class Paused:
    """The slot goes back; the next attempt carries on from the last beat."""


WorkEnd = Done | Stopped | Paused


class Refused(HubJobsError):
    """The job cannot go on, whatever is retried: it fails at once with this code."""


class ActorUnavailable(Refused):
    """The job's actor is no longer an enabled administrator of its workspace."""

    code = ACTOR_UNAVAILABLE

    def __init__(self) -> None:
        super().__init__("the actor is no longer an enabled administrator")


def job_not_found() -> ApplicationError:
    """A lifecycle write for a job that has no row: nothing a retry could change."""
    return ApplicationError("job not found", type=JobNotFound.code, non_retryable=True)


def outcome_of(job: JobView) -> JobOutcome:
    """The final row as the workflow returns it (a growing result as its summary)."""
    kind = REGISTRY.find(job.kind)
    return JobOutcome(
        job_id=job.id,
        status=job.status,
        counters=job.counters,
        result=job.result if kind is None else kind.carried_result(job),
        error_code=job.error_code,
        error_message=job.error_message,
        notify=job.notify_url is not None,
    )


async def finish(
    deps: Deps,
    job: JobView,
    ending: job_rows.Ending,
    *,
    on_wait: Callable[[], None] | None = None,
    before_retry: Callable[[], Awaitable[None]] | None = None,
) -> JobOutcome:
    """The final write, riding out outages; finishing twice changes nothing."""

    async def write(conn: AsyncConnection) -> job_rows.Finished | None:
        return await job_rows.finish_job(
            conn, job, ending, default_retention=deps.default_retention
        )

    finished = await with_outage_retry(
        deps.engine, deps.settings, write, on_wait=on_wait, before_retry=before_retry
    )
    if finished is None:
        raise job_not_found()
    if finished.changed and finished.job.status == JobStatus.cancelled:
        kind = REGISTRY.find(finished.job.kind)
        if kind is not None and kind.discard is not None:
            await kind.discard(finished.job, deps.settings)
    return after_finish(deps, finished)


def after_finish(deps: Deps, finished: job_rows.Finished) -> JobOutcome:
    """The metrics and log line of the write that moved the row, and the outcome."""
    final = finished.job
    if finished.changed:
        seconds = None
        if final.started_at is not None and final.finished_at is not None:
            seconds = (final.finished_at - final.started_at).total_seconds()
        deps.metrics.job_finished(final.kind, final.status, seconds)
        log.info("job finished: %s %s", final.status, final.error_code or "")
    return outcome_of(final)
