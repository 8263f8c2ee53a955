"""`hubjobs schedule …`: recurring jobs, each a Temporal Schedule whose every firing is a
job."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any
from urllib.parse import quote

import typer

from hubjobs.errors import InvalidPayload
from starter.cli.common import ActorOpt, JsonOpt, WorkspaceOpt, api, command
from starter.cli.output import moment, out, print_json

Schedule = dict[str, Any]

schedule_app = typer.Typer(
    name="schedule",
    help="Recurring jobs: each schedule is a Temporal Schedule whose every firing is a job.",
    no_args_is_help=True,
)


ScheduleArg = Annotated[str, typer.Argument(metavar="SCHEDULE", help="The schedule's id.")]


def print_schedule(view: Schedule, as_json: bool) -> None:
    if as_json:
        print_json(view)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    # On a narrow terminal a long value (an id, a link) folds onto more lines: never cut.
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in view.items():
        if key in ("cron", "every_seconds", "time_zone") or value in (None, [], {}):
            continue
        if key == "recent_runs":
            value = ", ".join(str(run["job_id"]) for run in value)
        elif key == "next_runs":
            value = ", ".join(value[:3])
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    out().print(table)


def parse_payload(payload: str) -> dict[str, Any]:
    """``--payload``'s JSON object, or ``invalid_payload`` before any call."""
    try:
        parsed = json.loads(payload)
    except ValueError:
        raise InvalidPayload("the payload is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidPayload("the payload must be a JSON object")
    return parsed


def on_schedules(
    workspace: uuid.UUID | None,
    actor: uuid.UUID | None,
    method: str,
    path: str = "",
    body: Any = None,
) -> Any:
    """A call of the API's schedules of the workspace (``path`` after /schedules, its
    schedule id quoted: the caller's text)."""
    with api(workspace, actor) as calls:
        return calls.schedules(method, path, body)


@schedule_app.command("create")
@command
def schedule_create(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="The job kind (backup, …).")],
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    cron: Annotated[
        str | None,
        typer.Option(help='When, as a cron expression: "0 3 * * *" is 03:00 every day.'),
    ] = None,
    every: Annotated[
        str | None, typer.Option(help="When, as an interval instead: 30s, 15m, 1h30m, 7d.")
    ] = None,
    time_zone: Annotated[
        str | None,
        typer.Option("--time-zone", help="The cron expression's IANA time zone (default UTC)."),
    ] = None,
    payload: Annotated[
        str | None, typer.Option(help="The kind's payload, a JSON object (default {}).")
    ] = None,
    keep: Annotated[
        int | None,
        typer.Option(help="Keep the newest N successful runs; older ones expire."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run jobs of a kind on a schedule.

    The actor must stay an enabled administrator of the workspace: every firing checks
    it again, and a firing refused is a failed job with the refusal's code."""
    parsed = None if payload is None else parse_payload(payload)
    body = {"kind": kind, "cron": cron, "every": every, "time_zone": time_zone, "keep": keep}
    body = {key: value for key, value in body.items() if value is not None}
    view = on_schedules(workspace, actor, "POST", body=body | {"payload": parsed or {}})
    print_schedule(view, as_json)


@schedule_app.command("update")
@command
def schedule_update(
    schedule: ScheduleArg,
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    cron: Annotated[
        str | None,
        typer.Option(help='A new cron expression: "0 3 * * *" is 03:00 every day.'),
    ] = None,
    every: Annotated[
        str | None, typer.Option(help="A new interval instead: 30s, 15m, 1h30m, 7d.")
    ] = None,
    time_zone: Annotated[
        str | None,
        typer.Option("--time-zone", "--timezone", help="The cron expression's IANA time zone."),
    ] = None,
    payload: Annotated[
        str | None, typer.Option(help="The kind's new payload, a whole JSON object.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Edit a schedule in place: what is not given stays, a paused one stays paused."""
    body: dict[str, Any] = {"cron": cron, "every": every, "time_zone": time_zone}
    body = {key: value for key, value in body.items() if value is not None}
    if payload is not None:
        body["payload"] = parse_payload(payload)
    view = on_schedules(workspace, actor, "PATCH", f"/{quote(schedule, safe='')}", body)
    print_schedule(view, as_json)


@schedule_app.command("list")
@command
def schedule_list(
    workspace: WorkspaceOpt = None, actor: ActorOpt = None, as_json: JsonOpt = False
) -> None:
    """List a workspace's schedules, newest first."""
    found: list[Schedule] = on_schedules(workspace, actor, "GET")
    if as_json:
        print_json(found)
        return
    from rich.table import Table

    table = Table("kind", "when", "keep", "paused", "next run")
    table.add_column("id", no_wrap=True)
    for view in found:
        next_runs = view["next_runs"]
        table.add_row(
            view["kind"],
            view["timing"],
            str(view.get("keep") or ""),
            "yes" if view["paused"] else "no",
            moment(next_runs[0] if next_runs else None),
            view["id"],
        )
    out().print(table)


def _on_one(name: str, method: str, suffix: str, doc: str) -> None:
    """Registers ``hubjobs schedule <name> SCHEDULE``: one call on the schedule, and the
    schedule as it is after it (after a delete, its id)."""

    def on_one(
        schedule: ScheduleArg,
        workspace: WorkspaceOpt = None,
        actor: ActorOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        found = on_schedules(workspace, actor, method, f"/{quote(schedule, safe='')}{suffix}")
        if method != "DELETE":
            print_schedule(found, as_json)
        elif as_json:
            print_json({"deleted": schedule})
        else:
            out().print(f"deleted {schedule}")

    on_one.__doc__ = doc
    on_one.__name__ = f"schedule_{name}"  # as its failures are logged
    schedule_app.command(name)(command(on_one))


for _name, _method, _suffix, _doc in (
    ("show", "GET", "", "Show one schedule: its definition, next firings and recent runs' jobs."),
    ("pause", "POST", "/pause", "Stop the firings until unpaused (a run under way goes on)."),
    ("unpause", "POST", "/unpause", "Let a paused schedule fire again."),
    (
        "trigger",
        "POST",
        "/trigger",
        "Fire now (refused with schedule_running while a run of it is still going).",
    ),
    ("delete", "DELETE", "", "Remove the schedule from Temporal; its jobs stay."),
):
    _on_one(_name, _method, _suffix, _doc)
