"""``hubjobs list`` on a narrow terminal leaves columns out, never cuts an id: each id
printed is whole, whatever the width, and the columns that fit are the first of
LIST_COLUMNS."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from starter.cli.jobs import LIST_COLUMNS, JobsTable

WHEN = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)


def a_job(summary: str) -> dict[str, Any]:
    job_id = uuid.uuid4()
    view = JobView.model_validate(
        {
            "id": job_id,
            "workflow_id": f"course_tagging-{job_id}",
            "kind": "course_tagging",
            "status": JobStatus.running,
            "workspace_id": uuid.UUID(int=1),
            "actor_id": uuid.UUID(int=2),
            "correlation_id": "c",
            "idempotency_key": None,
            "payload": {},
            "summary": summary,
            "total": 2000,
            "processed": 150,
            "succeeded": 150,
            "skipped": 0,
            "failed": 0,
            "progress_message": None,
            "result": None,
            "result_content_type": None,
            "error_code": None,
            "error_message": None,
            "cancel_requested_at": None,
            "cancel_requested_by": None,
            "attempts": 1,
            "attempts_failed": 0,
            "source_job_id": None,
            "schedule_id": None,
            "created_at": WHEN,
            "started_at": WHEN,
            "finished_at": None,
            "expires_at": None,
        }
    )
    return view.model_dump(mode="json")  # as the API answers it


def printed(table: JobsTable, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(table)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [44, 60, 80, 120, 200])
def test_every_id_is_whole_and_columns_drop_in_order(width: int) -> None:
    jobs = [a_job("Tag course Onboarding with exam, 2000 pages") for _ in range(3)]
    table = JobsTable(jobs)
    text = printed(table, width)
    for job in jobs:
        assert str(job["id"]) in text, text
    assert "…" not in text.split("summary")[0]
    shown = table.fitting(width)
    assert shown == list(LIST_COLUMNS[: len(shown)])
    header = text.splitlines()[1]
    assert all(name in header for name in shown)
    assert all(name not in header for name in LIST_COLUMNS if name not in shown)
    assert max(len(line) for line in text.splitlines()) <= width


def test_a_wide_terminal_shows_every_column() -> None:
    assert JobsTable([a_job("s")]).fitting(200) == list(LIST_COLUMNS)
