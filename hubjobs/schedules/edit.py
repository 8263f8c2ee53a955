"""An edit of a schedule: the fields given replace the definition's, the rest stay. The
timing is checked as a new schedule's is, with the same codes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from hubjobs.schedules.definition import EDITABLE, ScheduleDefinition
from hubjobs.schedules.timing import timing


class ScheduleEdit(BaseModel):
    """What an edit changes; a field not set stays as it is. ``time_zone`` set to None is
    UTC. A cron given in place of an interval (or the reverse) changes the schedule's kind
    of timing; an interval takes no time zone (``invalid_schedule``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    cron: str | None = None
    every: str | timedelta | int | None = None
    time_zone: str | None = None
    payload: dict[str, Any] | None = None

    def apply(self, before: ScheduleDefinition) -> ScheduleDefinition:
        """The definition after the edit, or a refusal with the create's code."""
        given = self.model_fields_set
        zone_given = "time_zone" in given
        if self.cron is not None or self.every is not None:
            # Both given is invalid_schedule, as at creation.
            zone = self.time_zone if zone_given else before.time_zone if self.cron else None
            when = timing(cron=self.cron, every=self.every, time_zone=zone)
        else:
            zone = self.time_zone if zone_given else before.time_zone
            every = before.every_seconds
            when = timing(cron=before.cron, every=every, time_zone=zone)
        payload = before.payload
        if "payload" in given:
            payload = {} if self.payload is None else self.payload
        return before.model_copy(
            update={
                "cron": when.cron,
                "every_seconds": when.every_seconds,
                "time_zone": when.time_zone,
                "payload": payload,
            }
        )


def changes(before: ScheduleDefinition, after: ScheduleDefinition) -> dict[str, Any]:
    """The audit's detail of an edit: each field it changed, before and after."""
    old = before.model_dump(mode="json", include=EDITABLE)
    new = after.model_dump(mode="json", include=EDITABLE)
    changed = sorted(name for name in EDITABLE if old[name] != new[name])
    return {
        "before": {name: old[name] for name in changed},
        "after": {name: new[name] for name in changed},
    }
