"""An edit of a schedule's definition: the fields given replace its own, the rest stay;
its timing checked as a new schedule's, with the same codes; the audit's detail names
only what changed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from hubjobs.errors import InvalidInput
from hubjobs.schedules.definition import ScheduleDefinition, in_zone
from hubjobs.schedules.edit import ScheduleEdit, changes


def definition(**timing: Any) -> ScheduleDefinition:
    return ScheduleDefinition(
        id=f"backup-schedule-{uuid.uuid4()}",
        kind="backup",
        workspace_id=uuid.uuid4(),
        actor_id=uuid.uuid4(),
        payload={"scope": "workspace"},
        keep=7,
        created_at=datetime.now(UTC),
        **timing,
    )


NIGHTLY = {"cron": "0 3 * * *", "time_zone": "Europe/Amsterdam"}


@pytest.mark.parametrize(
    ("before", "edit", "after"),
    [
        (NIGHTLY, {"cron": "30  6 * * *"}, ("30 6 * * *", None, "Europe/Amsterdam")),
        (NIGHTLY, {"time_zone": "Asia/Tokyo"}, ("0 3 * * *", None, "Asia/Tokyo")),
        (NIGHTLY, {"time_zone": None}, ("0 3 * * *", None, None)),
        (NIGHTLY, {"every": "2h"}, (None, 7200, None)),
        ({"every_seconds": 60}, {"cron": "@daily"}, ("@daily", None, None)),
        (
            {"every_seconds": 60},
            {"cron": "0 4 * * *", "time_zone": "UTC"},
            ("0 4 * * *", None, "UTC"),
        ),
        ({"every_seconds": 60}, {"every": 90}, (None, 90, None)),
        (NIGHTLY, {}, ("0 3 * * *", None, "Europe/Amsterdam")),
    ],
)
def test_the_timing_given_replaces_the_old(
    before: dict[str, Any], edit: dict[str, Any], after: tuple[Any, Any, Any]
) -> None:
    old = definition(**before)
    new = ScheduleEdit(**edit).apply(old)
    assert (new.cron, new.every_seconds, new.time_zone) == after
    assert new.model_dump(exclude={"cron", "every_seconds", "time_zone"}) == old.model_dump(
        exclude={"cron", "every_seconds", "time_zone"}
    )


@pytest.mark.parametrize(
    ("before", "edit", "code"),
    [
        (NIGHTLY, {"cron": "0 3 * * *", "every": "1h"}, "invalid_schedule"),
        ({"every_seconds": 60}, {"time_zone": "UTC"}, "invalid_schedule"),
        (NIGHTLY, {"every": "1h", "time_zone": "UTC"}, "invalid_schedule"),
        (NIGHTLY, {"cron": "every day"}, "invalid_cron"),
        (NIGHTLY, {"every": "0s"}, "invalid_interval"),
        (NIGHTLY, {"time_zone": "Mars/Olympus"}, "invalid_time_zone"),
    ],
)
def test_a_timing_refused_has_the_creates_code(
    before: dict[str, Any], edit: dict[str, Any], code: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        ScheduleEdit(**edit).apply(definition(**before))
    assert refused.value.code == code


def test_the_payload_is_replaced_whole_and_the_detail_names_what_changed() -> None:
    old = definition(**NIGHTLY)
    new = ScheduleEdit(payload={"scope": "hub"}, time_zone="Asia/Tokyo").apply(old)
    assert new.payload == {"scope": "hub"} and new.cron == old.cron
    assert changes(old, new) == {
        "before": {"payload": {"scope": "workspace"}, "time_zone": "Europe/Amsterdam"},
        "after": {"payload": {"scope": "hub"}, "time_zone": "Asia/Tokyo"},
    }
    assert ScheduleEdit(payload=None).apply(old).payload == {}
    assert changes(old, ScheduleEdit().apply(old)) == {"before": {}, "after": {}}


def test_next_firings_are_written_in_the_schedules_zone() -> None:
    at = datetime(2026, 12, 7, 21, 30, tzinfo=UTC)
    [tokyo] = in_zone([at], "Asia/Tokyo")
    assert (tokyo, tokyo.isoformat()) == (at, "2026-12-08T06:30:00+09:00")
    assert in_zone([at], None)[0].isoformat() == "2026-12-07T21:30:00+00:00"
    # A zone this host's data lacks: the same instant, written in UTC rather than refused.
    assert in_zone([at], "Nowhere/Land")[0].isoformat() == "2026-12-07T21:30:00+00:00"
