"""``hubjobs overview`` and ``hubjobs workers``: the queue at a glance and who works it,
as the console's views read them (through the HTTP API like the other job commands)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from starter.cli.common import ActorOpt, JsonOpt, WorkspaceOpt, api, command
from starter.cli.output import FittedTable, err, json_text, moment, show

commands = typer.Typer()

COUNTS = ("queued", "running", "stuck", "succeeded", "failed", "cancelled")
# What a narrow terminal keeps first: the kind, then what waits and runs.
OVERVIEW_COLUMNS = ("kind", *COUNTS, "oldest_queued")
WORKER_COLUMNS = ("identity", "state", "running", "activity_slots", "polls", "last_seen")


def overview_cells(kind: dict[str, Any]) -> dict[str, str]:
    oldest = kind.get("oldest_queued")
    return {
        "kind": str(kind["kind"]),
        **{name: f"{kind[name]:,}" for name in COUNTS},
        "oldest_queued": moment(oldest["since"]) if oldest else "",
    }


def worker_cells(worker: dict[str, Any]) -> dict[str, str]:
    slots = worker.get("activity_slots")
    return {
        "identity": str(worker["identity"]),
        "state": str(worker["state"]),
        "running": f"{len(worker['running']):,}",
        "activity_slots": f"{slots['used']}/{slots['used'] + slots['available']}" if slots else "",
        "polls": ",".join(worker["polls"]),
        "last_seen": moment(worker["last_seen"]),
    }


class OverviewTable(FittedTable):
    KEPT = OVERVIEW_COLUMNS
    SHOWN = OVERVIEW_COLUMNS

    def __init__(self, kinds: list[dict[str, Any]]) -> None:
        super().__init__([overview_cells(kind) for kind in kinds])


class WorkersTable(FittedTable):
    KEPT = WORKER_COLUMNS
    SHOWN = WORKER_COLUMNS

    def __init__(self, workers: list[dict[str, Any]]) -> None:
        super().__init__([worker_cells(worker) for worker in workers])


@commands.command()
@command
def overview(
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    window: Annotated[
        str, typer.Option(help="Ended jobs over the last hour or the last day (hour, day).")
    ] = "hour",
    as_json: JsonOpt = False,
) -> None:
    """Per kind: jobs queued, running and stuck now, and ended in the window."""
    with api(workspace, actor) as jobs:
        found = jobs.overview(window=window)
    if as_json:
        show(json_text(found))
        return
    show(OverviewTable(found["kinds"]))
    oldest = found.get("oldest_queued")
    if oldest:
        err().print(f"oldest waiting: {oldest['job_id']} since {moment(oldest['since'])}")


@commands.command()
@command
def workers(
    workspace: WorkspaceOpt = None, actor: ActorOpt = None, as_json: JsonOpt = False
) -> None:
    """The workers polling the job task queue: live or gone, their slots, and the jobs
    of this workspace each runs."""
    with api(workspace, actor) as jobs:
        found = jobs.workers()
    show(json_text(found) if as_json else WorkersTable(found["workers"]))
