"""``hubjobs audit`` on a narrow terminal leaves columns out, never cuts a value: each
shown column holds its values whole, the columns that fit are the first of
AUDIT_COLUMNS, and a reason is printed as text, never as markup."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from hubjobs.readmodel.audit import AuditEventView
from hubjobs.readmodel.status import AuditAction, Surface
from starter.cli.audit import AUDIT_COLUMNS, AuditTable

WHEN = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)


def an_event(action: AuditAction, job_ids: list[uuid.UUID], reason: str | None) -> dict[str, Any]:
    view = AuditEventView(
        id=1,
        at=WHEN,
        workspace_id=uuid.UUID(int=1),
        actor_id=uuid.uuid4(),
        surface=Surface.cli,
        action=action,
        reason=reason,
        job_ids=job_ids,
        schedule_id=None,
        detail=None,
    )
    return view.model_dump(mode="json")  # as the API answers it


def printed(table: AuditTable, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(table)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_columns_drop_in_order_and_values_stay_whole(width: int) -> None:
    events = [
        an_event(AuditAction.cancel, [uuid.uuid4()], "[bold]wrong[/bold] tag"),
        an_event(AuditAction.bulk_cancel, [uuid.uuid4() for _ in range(3)], None),
    ]
    table = AuditTable(events)
    text = printed(table, width)
    shown = table.fitting(width)
    assert shown == list(AUDIT_COLUMNS[: len(shown)])
    assert "2026-12-06 09:30:00" in text and "bulk_cancel" in text
    if "actor" in shown:
        assert all(str(e["actor_id"]) in text for e in events)
    if "jobs" in shown:
        assert str(events[0]["job_ids"][0]) in text and "3 jobs" in text
    if "reason" in shown and width >= 120:
        assert "[bold]wrong[/bold] tag" in text
    assert max(len(line) for line in text.splitlines()) <= width


def test_a_wide_terminal_shows_every_column() -> None:
    event = an_event(AuditAction.start, [uuid.uuid4()], None)
    assert AuditTable([event]).fitting(200) == list(AUDIT_COLUMNS)
