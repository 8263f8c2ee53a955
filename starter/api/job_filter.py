"""What "every job this search matches" is in a bulk action's body: the list's filters
(GET …/jobs), named as its query names them and read by the same code
(``WorkspaceJobs._search``), so the page's search and the API's bulk act on one set."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from hubjobs.domain.text import KIND_PATTERN
from hubjobs.readmodel.status import JobStatus
from hubjobs.schedules.definition import SCHEDULE_ID_MAX_LENGTH, SCHEDULE_ID_PATTERN
from starter.client import JobFilters


class JobFilter(BaseModel):
    """A list's filters (GET …/jobs takes the same, as its query): each left out, not
    filtered. The refusals are the list's (unknown_kind, invalid_job_id,
    invalid_field_filter, unknown_field, invalid_field_value)."""

    model_config = ConfigDict(extra="forbid")

    status: JobStatus | list[JobStatus] | None = Field(
        default=None, description="A status, or several: jobs in any of them"
    )
    kind: str | None = Field(default=None, max_length=64, pattern=KIND_PATTERN)
    schedule_id: str | None = Field(
        default=None, max_length=SCHEDULE_ID_MAX_LENGTH, pattern=SCHEDULE_ID_PATTERN
    )
    actor_id: uuid.UUID | None = Field(default=None, description="Only jobs this user started")
    id: str | None = Field(
        default=None, max_length=200, description="A job id or its start (hexadecimal digits)"
    )
    since: datetime | None = Field(
        default=None, description="Only jobs created at or after this time (UTC without a zone)"
    )
    until: datetime | None = Field(
        default=None, description="Only jobs created before this time (UTC without a zone)"
    )
    field: list[str] | None = Field(
        default=None,
        max_length=20,
        description="`payload.<field>=<value>` or `result.<field>=<value>`, each held; "
        "needs `kind`",
    )

    def filters(self) -> JobFilters:
        """The filters as ``WorkspaceJobs`` takes them."""
        return JobFilters(
            status=self.status,
            kind=self.kind,
            schedule_id=self.schedule_id,
            actor_id=self.actor_id,
            id_prefix=self.id,
            since=self.since,
            until=self.until,
            fields=self.field or (),
        )
