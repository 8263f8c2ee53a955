"""``hubjobs audit``: the workspace's operator actions (or one job's trail), newest first,
through the HTTP API like the other job commands."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer

from hubjobs.domain.text import printable
from starter.cli.common import ActorOpt, JsonOpt, WorkspaceOpt, api, command
from starter.cli.output import FittedTable, err, json_text, moment, show

commands = typer.Typer()

# The columns in the order a narrow terminal keeps them: when, what, who; then the rest.
AUDIT_COLUMNS = ("at", "action", "actor", "surface", "jobs", "reason")


def audit_cells(event: dict[str, Any]) -> dict[str, str]:
    jobs = event.get("job_ids") or []
    touched = str(jobs[0]) if len(jobs) == 1 else f"{len(jobs)} jobs" if jobs else ""
    if event.get("schedule_id"):
        touched = str(event["schedule_id"])
    return {
        "at": moment(event["at"]),
        "action": str(event["action"]),
        "actor": str(event.get("actor_id") or "-"),
        "surface": str(event["surface"]),
        "jobs": touched,
        "reason": printable(event.get("reason") or ""),
    }


class AuditTable(FittedTable):
    """Events as a table as wide as the console: the last of AUDIT_COLUMNS go first."""

    KEPT = AUDIT_COLUMNS
    SHOWN = AUDIT_COLUMNS
    WRAPS = "reason"

    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__([audit_cells(event) for event in events])


@commands.command()
@command
def audit(
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    job: Annotated[
        uuid.UUID | None,
        typer.Option("--job", help="Only the actions that touched this job (its trail)."),
    ] = None,
    action: Annotated[
        str | None, typer.Option(help="Only this action (cancel, bulk_cancel, start, ...).")
    ] = None,
    by: Annotated[
        uuid.UUID | None, typer.Option("--by", help="Only the actions of this actor.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    before: Annotated[
        str | None, typer.Option(help="The events after this cursor (a previous page's next).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the workspace's operator actions, newest first: who did what, when, from
    where and why."""
    with api(workspace, actor) as jobs:
        page = jobs.audit(job_id=job, action=action, actor_id=by, limit=limit, before=before)
    show(json_text(page["events"]) if as_json else AuditTable(page["events"]))
    if page["next"] is not None and not as_json:
        err().print(f"more: --before {page['next']}", markup=False, highlight=False)
