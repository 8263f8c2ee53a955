"""What the API answers with: a job, a schedule, the health report, and their URLs."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from hubjobs.errors import InvalidInput
from hubjobs.readmodel.search import JobSort
from hubjobs.readmodel.views import API_JOB_FIELDS, JobView

K = TypeVar("K")

# Where every route of a workspace's jobs and schedules lives: each of their routers
# takes it as its prefix.
WORKSPACE_ROUTES = "/workspaces/{workspace_id}"

if TYPE_CHECKING:
    from hubjobs.schedules.definition import ScheduleView


class JobResourceFields(BaseModel):
    """The base of JobResource: how it is made from a job."""

    @classmethod
    def of(cls, job: JobView) -> JobResourceFields:
        data = job.model_dump(mode="json")
        return cls.model_validate(
            {
                **{k: data[k] for k in API_JOB_FIELDS},
                "has_failed_items": job.has_failed_items,
                "status_url": status_url(job),
            }
        )


# A job as the API shows it: the fields API_JOB_FIELDS names, typed as JobView types them
# (the one declaration), whether some item failed, and the URL its status is read at.
JobResource = create_model(
    "JobResource",
    __base__=JobResourceFields,
    **{name: (JobView.model_fields[name].annotation, ...) for name in API_JOB_FIELDS},  # type: ignore[call-overload]
    has_failed_items=(
        bool,
        Field(
            description="Some item failed (`failed` of them): a job `succeeded` so is no "
            "plain success; `…/items?state=failed` lists them, `…/retry` runs them again"
        ),
    ),
    status_url=(str, ...),
)


class JobRecord(JobResource):
    """A job's record at any status: the resource, with its result once it succeeded
    (what the CLI shows; the status URL answers the result alone, in its content
    type)."""

    result: dict[str, Any] | None = None
    source_job_id: uuid.UUID | None = Field(
        default=None, description="The job whose failed items this one retries"
    )
    retried_by: uuid.UUID | None = Field(
        default=None, description="Its retry's id (`POST …/retry` started it), once there is one"
    )


class JobPage(BaseModel):
    """A page of a workspace's jobs, in the order asked; ``next`` (None on the last page) is
    the ``before`` of the page that follows."""

    jobs: list[JobResource]
    next: str | None = Field(description="Pass as `before` for the following page")


def keyset_cursor(at: datetime, key: object) -> str:
    """A keyset cursor: a time and the key that breaks its ties, opaque to callers."""
    text = f"{at.isoformat()}|{key}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_keyset_cursor(cursor: str, key: Callable[[str], K]) -> tuple[datetime, K]:
    """The time and key a cursor names (``key`` parses the key, ValueError when it is
    none), or ``invalid_cursor``."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, named = text.partition("|")
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("a naive time")
        return when, key(named)
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise InvalidInput(
            "before is not a cursor this API gave (a page's next)", code="invalid_cursor"
        ) from None


def job_cursor(job: JobView, sort: JobSort = JobSort.created_desc) -> str:
    """The keyset cursor after ``job``: its time in ``sort``'s order, and its id."""
    at = job.finished_at if sort.column == "finished_at" else job.created_at
    return keyset_cursor(at or job.created_at, job.id)


def read_job_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    return read_keyset_cursor(cursor, uuid.UUID)


class ScheduleRequest(BaseModel):
    """A schedule to create: exactly one of ``cron`` and ``every`` (else 422
    ``invalid_schedule``)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="The job kind (422 unknown_kind otherwise)")
    cron: str | None = Field(
        default=None,
        description='A cron expression, five fields: "0 3 * * *" is 03:00 every day '
        "(422 invalid_cron otherwise)",
    )
    every: str | None = Field(
        default=None,
        description="An interval instead: 30s, 15m, 1h30m, 7d (422 invalid_interval otherwise)",
    )
    time_zone: str | None = Field(
        default=None,
        description="The cron expression's IANA time zone, UTC by default "
        "(422 invalid_time_zone otherwise)",
    )
    payload: dict[str, Any] = Field(
        default_factory=dict, description="The kind's payload, checked now and at every firing"
    )
    keep: int | None = Field(
        default=None,
        description="Keep the newest N (1 to 1000) successful runs; older ones expire "
        "(422 invalid_keep otherwise)",
    )


class ScheduleChange(BaseModel):
    """A schedule's edit: the fields given replace its own, the rest stay (a paused
    schedule stays paused). Checked as a new schedule is, with the same codes."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(
        default=None,
        description="A new cron expression, five fields; in place of an interval too "
        "(422 invalid_cron otherwise)",
    )
    every: str | None = Field(
        default=None,
        description="A new interval (30s, 15m, 1h30m, 7d); in place of a cron too "
        "(422 invalid_interval otherwise)",
    )
    time_zone: str | None = Field(
        default=None,
        description="The cron expression's new IANA time zone; null is UTC "
        "(422 invalid_time_zone otherwise)",
    )
    payload: dict[str, Any] | None = Field(
        default=None,
        description="The kind's new payload, whole (422 invalid_payload otherwise)",
    )


class ScheduleRunResource(BaseModel):
    scheduled_at: datetime
    started_at: datetime
    job_id: uuid.UUID
    job_url: str


class ScheduleResource(BaseModel):
    id: str
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    payload: dict[str, Any]
    cron: str | None
    every_seconds: int | None
    time_zone: str | None
    timing: str
    keep: int | None
    paused: bool
    note: str | None
    next_runs: list[datetime]
    recent_runs: list[ScheduleRunResource]
    created_at: datetime
    url: str
    jobs_url: str

    @classmethod
    def of(cls, view: ScheduleView) -> ScheduleResource:
        base = f"/workspaces/{view.workspace_id}"
        return cls(
            **view.model_dump(exclude={"recent_runs"}),
            timing=view.timing.describe(),
            recent_runs=[
                ScheduleRunResource(
                    scheduled_at=run.scheduled_at,
                    started_at=run.started_at,
                    job_id=run.job_id,
                    job_url=f"{base}/jobs/{run.job_id}",
                )
                for run in view.recent_runs
            ],
            url=schedule_url(view),
            jobs_url=f"{base}/jobs?schedule_id={view.id}",
        )


class Health(BaseModel):
    status: str
    database: str
    temporal: str


def status_url(job: JobView) -> str:
    return f"/workspaces/{job.workspace_id}/jobs/{job.id}"


def schedule_url(view: ScheduleView) -> str:
    return f"/workspaces/{view.workspace_id}/schedules/{view.id}"
