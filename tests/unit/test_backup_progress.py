"""A backup's summary and progress say what is there: no attachments named when the hub
has none."""

from __future__ import annotations

from hubjobs.archive.format import HUB_TABLES
from hubjobs.kinds.backup import progress_line, what_is_backed_up

TABLES = len(HUB_TABLES)


def test_no_attachments_are_not_mentioned() -> None:
    assert what_is_backed_up(TABLES, 0) == f"{TABLES} tables"
    line = progress_line(2, TABLES, 1_500_000, "users")
    assert line == f"2 of {TABLES} tables, 1.5 MB read (users)"
    assert "attachment" not in line


def test_attachments_are_counted_when_there_are_some() -> None:
    assert what_is_backed_up(TABLES, 1) == f"{TABLES} tables and 1 attachment"
    assert what_is_backed_up(TABLES, 3) == f"{TABLES} tables and 3 attachments"
    line = progress_line(TABLES + 1, TABLES + 3, 0, "attachments")
    assert line == f"{TABLES + 1} of {TABLES + 3} tables and attachments, 0.0 MB read (attachments)"
