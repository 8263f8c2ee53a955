"""A list of jobs kept current from its workspace's event stream (``list --watch``): a
changed job replaces its row, a new one that the filter matches joins the first page in
its place (newest first), one that no longer matches leaves. Plain functions over the
API's JSON: no rich, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

Job = dict[str, Any]
# The list's filters a job's own fields say whether it matches ...
FILTERED = ("status", "kind", "schedule_id")
# ... and a search's, for which the list is read again (the API's to judge), as is one
# in another order than newest first.
SEARCHED = ("actor_id", "id", "since", "until", "field", "sort")


def matches(job: Job, filters: Mapping[str, Any]) -> bool:
    def holds(name: str) -> bool:
        wanted = filters.get(name)
        if isinstance(wanted, list | tuple):
            return job.get(name) in wanted
        return wanted in (None, job.get(name))

    return all(holds(name) for name in FILTERED)


def _order(job: Job) -> tuple[datetime, str]:
    """A list's order, newest first as the API sorts: created, then id."""
    return datetime.fromisoformat(str(job["created_at"])), str(job["id"])


def merged(
    listed: list[Job], job: Job, filters: Mapping[str, Any], *, first_page: bool
) -> list[Job] | None:
    """``listed`` with ``job``'s change; None when it cannot tell (a job left a full
    page, which the next one in order should fill: read the list again)."""
    if any(filters.get(name) for name in SEARCHED):
        return None
    limit = int(filters.get("limit") or len(listed) or 1)
    at = next((n for n, row in enumerate(listed) if row["id"] == job["id"]), None)
    if not matches(job, filters):
        if at is None:
            return listed
        return None if len(listed) >= limit else listed[:at] + listed[at + 1 :]
    if at is not None:
        return [*listed[:at], job, *listed[at + 1 :]]
    if not first_page:
        return listed  # a later page: a job joins only the first one
    grown = sorted([*listed, job], key=_order, reverse=True)
    return grown[:limit]
