"""``list --watch`` keeps its list from the workspace's stream: a changed job replaces
its row, a new one joins the first page in order, one that leaves the filter leaves the
list (or, from a full page, has the list read again)."""

from __future__ import annotations

from typing import Any

from starter.cli.live_list import merged


def job(n: int, status: str = "running", kind: str = "backup") -> dict[str, Any]:
    return {
        "id": f"00000000-0000-0000-0000-{n:012d}",
        "created_at": f"2026-12-03T08:00:{n:02d}Z",
        "status": status,
        "kind": kind,
        "schedule_id": None,
        "processed": 0,
    }


FILTERS: dict[str, Any] = {"status": None, "kind": None, "schedule_id": None, "limit": 3}


def ids(listed: list[dict[str, Any]] | None) -> list[str] | None:
    return None if listed is None else [row["id"][-2:] for row in listed]


def test_a_change_replaces_its_row_in_place() -> None:
    listed = [job(3), job(2), job(1)]
    moved = {**job(2), "processed": 7}
    after = merged(listed, moved, FILTERS, first_page=True)
    assert after is not None and ids(after) == ["03", "02", "01"] and after[1]["processed"] == 7


def test_a_new_job_joins_the_first_page_in_order_only() -> None:
    listed = [job(5), job(3)]
    assert ids(merged(listed, job(6), FILTERS, first_page=True)) == ["06", "05", "03"]
    # Older than a full page's last row: not on this page.
    full = [job(9), job(8), job(7)]
    assert ids(merged(full, job(4), FILTERS, first_page=True)) == ["09", "08", "07"]
    # Times order as times, not as text: "07.5Z" is after "07Z" (as text, before).
    whole, half = job(7), {**job(11), "created_at": "2026-12-03T08:00:07.5Z"}
    assert ids(
        merged([{**whole, "created_at": "2026-12-03T08:00:07Z"}], half, FILTERS, first_page=True)
    ) == ["11", "07"]
    assert ids(merged(listed, job(6), FILTERS, first_page=False)) == ["05", "03"]


def test_a_job_that_leaves_the_filter_leaves_the_list() -> None:
    running = {**FILTERS, "status": "running"}
    listed = [job(3), job(2)]
    assert ids(merged(listed, job(2, "succeeded"), running, first_page=True)) == ["03"]
    # From a full page the next job in order is not known: read the list again.
    full = [job(3), job(2), job(1)]
    assert merged(full, job(2, "succeeded"), running, first_page=True) is None
    # One that never was in it and does not match: nothing changes.
    assert ids(
        merged(listed, job(4, kind="page_export"), {**FILTERS, "kind": "backup"}, first_page=True)
    ) == ["03", "02"]
