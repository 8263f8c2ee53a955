"""Job schedules, declared once here. Each is a Temporal Schedule (``<kind>-schedule-<uuid>``)
that starts the ``ScheduledStart`` workflow at every firing with the same input. The
firing's workflow id (the schedule id plus the firing time) gives the job id, so a
firing retried or reset is one job. Temporal holds the schedules, the definition in the
memo: there is no second copy to drift from it. An edit cannot change a schedule's memo
(Temporal refuses it), so the definition as it is now travels in its action's memo too,
replaced with the action by every edit; the schedule's memo keeps what it was created as.
"""

from __future__ import annotations

import re
import uuid
import zoneinfo
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from pydantic import BaseModel
from temporalio.client import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionResult,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleInfo,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from hubjobs.schedules.timing import Timing
from hubjobs.settings import Settings
from hubjobs.temporal import search_attributes as sa
from hubjobs.temporal.messages import ScheduledJob

# The workflow every firing starts (workflows/schedule_firing.py declares it with this name).
SCHEDULED_START_WORKFLOW = "ScheduledStart"
# Where a schedule's definition travels with it (the memo is returned by list and
# describe alike, so a listing needs no call per schedule).
MEMO_KEY = "hubjobs_schedule"

# A firing that finds a run of the same schedule still going is skipped: two backups of
# one hub at once help nobody; the next firing after the run ends takes its place.
OVERLAP = ScheduleOverlapPolicy.SKIP
# A firing missed while Temporal was unreachable runs if it is back within a minute (a
# restart, a failover): a nightly job delayed by hours is better left to its next time.
CATCHUP_WINDOW = timedelta(minutes=1)

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
SCHEDULE_ID_PATTERN = rf"^[a-z][a-z0-9_]{{0,63}}-schedule-{_UUID}$"
SCHEDULE_ID_MAX_LENGTH = 64 + len("-schedule-") + 36
_SCHEDULE_ID = re.compile(SCHEDULE_ID_PATTERN[1:-1])
# Job ids of firings: uuid5 of the firing's workflow id in this namespace.
_FIRINGS = uuid.UUID("6b1d3c52-0f0e-4d8a-9a57-3c2f4d1e9b70")


def new_schedule_id(kind: str) -> str:
    return f"{kind}-schedule-{uuid.uuid4()}"


def is_schedule_id(value: str) -> bool:
    return isinstance(value, str) and _SCHEDULE_ID.fullmatch(value) is not None


def job_id_of_firing(workflow_id: str) -> uuid.UUID:
    """The job a firing creates, from the firing's workflow id (the schedule id and the
    firing time): the same for every retry or reset of that firing."""
    return uuid.uuid5(_FIRINGS, workflow_id)


class ScheduleDefinition(BaseModel):
    """What a schedule was created with (kept in its memo)."""

    id: str
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    payload: dict[str, Any]
    cron: str | None = None
    every_seconds: int | None = None
    time_zone: str | None = None
    keep: int | None = None
    created_at: datetime

    @property
    def timing(self) -> Timing:
        return Timing(cron=self.cron, every_seconds=self.every_seconds, time_zone=self.time_zone)

    def firing_input(self) -> ScheduledJob:
        return ScheduledJob(
            schedule_id=self.id,
            kind=self.kind,
            workspace_id=self.workspace_id,
            actor_id=self.actor_id,
            payload=self.payload,
            keep=self.keep,
        )

    def describe(self) -> str:
        keep = f", keeping the newest {self.keep}" if self.keep else ""
        return f"{self.kind} {self.timing.describe()}{keep}"


# What an edit may change; the rest is the schedule's identity, fixed at its creation.
EDITABLE = {"payload", "cron", "every_seconds", "time_zone"}


class ScheduleRun(BaseModel):
    """One recent firing: when it was due, when it started, and its job."""

    scheduled_at: datetime
    started_at: datetime
    workflow_id: str
    job_id: uuid.UUID


class ScheduleView(ScheduleDefinition):
    """A schedule as callers see it: its definition, whether it is paused, its next
    firings and its recent ones (each with its job's id)."""

    paused: bool
    note: str | None = None
    next_runs: list[datetime]
    recent_runs: list[ScheduleRun]


def schedule_of(definition: ScheduleDefinition, settings: Settings, title: str) -> Schedule:
    timing = definition.timing
    if timing.cron is not None:
        spec = ScheduleSpec(cron_expressions=[timing.cron], time_zone_name=timing.time_zone)
    else:
        assert timing.every_seconds is not None
        every = timedelta(seconds=timing.every_seconds)
        spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)])
    return Schedule(
        action=ScheduleActionStartWorkflow(
            SCHEDULED_START_WORKFLOW,
            definition.firing_input(),
            id=definition.id,
            task_queue=settings.task_queue,
            typed_search_attributes=search_attributes_of(definition),
            memo={MEMO_KEY: definition},
            static_summary=f"{title}, scheduled {timing.describe()}",
        ),
        spec=spec,
        policy=SchedulePolicy(overlap=OVERLAP, catchup_window=CATCHUP_WINDOW),
        state=ScheduleState(note=definition.describe()),
    )


def search_attributes_of(definition: ScheduleDefinition) -> TypedSearchAttributes:
    """On the schedule (a workspace's listing finds it by ``WorkspaceId``) and on each
    of its firings."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(sa.WORKSPACE_ID, str(definition.workspace_id)),
            SearchAttributePair(sa.JOB_KIND, definition.kind),
            SearchAttributePair(sa.JOB_ACTOR, str(definition.actor_id)),
            SearchAttributePair(sa.JOB_SCHEDULE_ID, definition.id),
        ]
    )


def workspace_query(workspace_id: uuid.UUID) -> str:
    """The visibility query for a workspace's schedules (a UUID: nothing to escape)."""
    return f'{sa.WORKSPACE_ID.name} = "{workspace_id}"'


def paused_note(definition: ScheduleDefinition, actor_id: uuid.UUID) -> str:
    """A paused schedule's note: what it does still, and who paused it (the UI shows
    the note; unpausing puts back ``describe()``)."""
    return f"{definition.describe()}; paused by {actor_id}"


def _runs(actions: Sequence[ScheduleActionResult]) -> list[ScheduleRun]:
    runs = []
    for action in actions:
        if isinstance(action.action, ScheduleActionExecutionStartWorkflow):
            workflow_id = action.action.workflow_id
            runs.append(
                ScheduleRun(
                    scheduled_at=action.scheduled_at,
                    started_at=action.started_at,
                    workflow_id=workflow_id,
                    job_id=job_id_of_firing(workflow_id),
                )
            )
    return runs


async def definition_of(description: ScheduleDescription) -> ScheduleDefinition | None:
    """The schedule's definition as it is now: its action's (an edit replaces the action)
    or, for a schedule made before actions carried one, its memo's; None for a schedule
    hubjobs did not create."""
    created = await description.memo_value(MEMO_KEY, None, type_hint=ScheduleDefinition)
    if created is None:
        return None
    action = description.schedule.action
    raw = action.memo if isinstance(action, ScheduleActionStartWorkflow) else None
    current = None if not raw else raw.get(MEMO_KEY)
    if current is None:
        return created
    [now] = await description.data_converter.decode([current], [ScheduleDefinition])
    # Who owns it and what it is stay as created, whatever the action says.
    return created.model_copy(update=now.model_dump(include=EDITABLE))


async def view_of(description: ScheduleDescription) -> ScheduleView | None:
    """The view of a described schedule; None for a schedule hubjobs did not create
    (no definition in its memo)."""
    definition = await definition_of(description)
    if definition is None:
        return None
    return _view(definition, description.schedule, description.info)


def _view(
    definition: ScheduleDefinition,
    schedule: Schedule,
    info: ScheduleInfo,
) -> ScheduleView:
    paused = schedule.state.paused
    return ScheduleView(
        **definition.model_dump(),
        paused=paused,
        note=schedule.state.note,
        # Temporal keeps a paused schedule's next times, which then go by unfired.
        next_runs=[] if paused else in_zone(info.next_action_times, definition.time_zone),
        recent_runs=_runs(info.recent_actions),
    )


def in_zone(times: Sequence[datetime], time_zone: str | None) -> list[datetime]:
    """Firing times as the schedule's cron reads them: in its own zone (UTC without one,
    or on a host whose time zone data lacks it: the same instants, only written in UTC)."""
    zone: tzinfo = UTC
    if time_zone is not None:
        try:
            zone = zoneinfo.ZoneInfo(time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    return [moment.astimezone(zone) for moment in times]
