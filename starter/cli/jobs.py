"""The job commands: follow, list, inspect, retry and cancel jobs, each a call of the HTTP
API (starter/cli/remote.py); the start of a job, which each kind's command
(starter/cli/kinds.py) calls."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hubjobs.domain.text import printable
from hubjobs.errors import HubJobsError
from hubjobs.readmodel.status import JobStatus
from starter.cli.common import ActorOpt, JsonOpt, WorkspaceOpt, api, command
from starter.cli.output import (
    FittedTable,
    Job,
    err,
    follow,
    json_text,
    moment,
    out,
    print_job,
    print_json,
    show,
    status_shown,
)

if TYPE_CHECKING:
    from starter.cli.remote import Api

commands = typer.Typer()

JobArg = Annotated[uuid.UUID, typer.Argument(metavar="JOB", help="The job's id.")]
NotifyUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--notify-url",
        help="POST a signed completion webhook here when the job is final (a host the "
        "deployment allows: HUBJOBS_WEBHOOK_ALLOWED_HOSTS).",
    ),
]


def start_job(
    workspace: uuid.UUID | None,
    actor: uuid.UUID | None,
    start: Callable[[Api], Job],
    *,
    wait: bool,
    as_json: bool,
) -> None:
    """Starts a job, follows it with ``--wait`` (a progress bar on a terminal), prints
    it; exit 1 when a followed job did not succeed."""
    with api(workspace, actor) as jobs:
        job = start(jobs)
        if wait:
            job = follow(jobs, job, show_bar=not as_json and err().is_terminal)
    print_job(job, as_json)
    if wait and job["status"] != JobStatus.succeeded:
        raise typer.Exit(1)


@commands.command()
@command
def retry(
    job_id: JobArg,
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the retry to finish.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run a finished job's failed items again, as a new job of the same kind (the same
    one each time for the same JOB, unless that one found none left to take)."""
    start_job(workspace, actor, lambda jobs: jobs.retry(job_id), wait=wait, as_json=as_json)


@commands.command()
@command
def status(
    job_id: JobArg,
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one job."""
    with api(workspace, actor) as jobs:
        print_job(jobs.get(job_id), as_json)


def list_filters(
    status: list[str] | None,
    kind: str | None,
    schedule: str | None,
    limit: int,
    **search: Any,
) -> dict[str, Any]:
    """The API's job list query for ``list``'s options (``search``: the API's own names,
    None or empty for not given); an unknown status refused."""
    statuses = [s.value for s in JobStatus]
    if any(s not in statuses for s in status or ()):
        raise HubJobsError(f"unknown status: one of {', '.join(statuses)}", code="invalid_status")
    # One status as the API's list has always been asked; several repeated.
    one = status[0] if status and len(status) == 1 else status or None
    given = {name: value for name, value in search.items() if value not in (None, [], ())}
    return {"status": one, "kind": kind, "schedule_id": schedule, "limit": limit, **given}


# A list's columns, in the order a narrow terminal keeps them: ids whole, always (they
# are pasted into other commands), then what tells jobs apart; the summary wraps.
LIST_COLUMNS = ("id", "status", "done", "kind", "created", "summary")


def list_cells(job: Job) -> dict[str, str]:
    created = moment(job["created_at"])
    return {
        "id": str(job["id"]),
        "kind": job["kind"],
        "status": status_shown(job),
        "done": f"{job['processed']}/{job['total']}",
        "created": created,
        "summary": job.get("summary") or "",
    }


class JobsTable(FittedTable):
    """A list of jobs as a table as wide as the console it is printed on: on a narrow
    one, columns are left out (the last of LIST_COLUMNS first), never cut."""

    KEPT = LIST_COLUMNS
    SHOWN = ("id", "kind", "status", "done", "created", "summary")
    WRAPS = "summary"

    def __init__(self, found: list[Job]) -> None:
        super().__init__([list_cells(job) for job in found])


def followed(
    jobs: Api, read: Callable[[], list[Job]], filters: Mapping[str, Any], first_page: bool
) -> Iterator[list[Job]]:
    """The list each time it changes, kept current from the workspace's event stream
    (one stream, not a read every interval): read at each reset, merged at each job."""
    from starter.cli.live_list import merged

    listed: list[Job] = []
    for event, job in jobs.list_events():
        current = None
        if event == "job" and job is not None:
            current = merged(listed, job, filters, first_page=first_page)
        listed = read() if current is None else current
        yield listed


def newest_of(updates: Iterator[list[Job]]) -> Callable[[], list[Job]]:
    """``updates`` read in a thread of their own (a pause between prints never holds
    the stream back): each call waits for one, and returns the newest come by then."""
    waiting: queue.Queue[list[Job] | BaseException] = queue.Queue()

    def pump() -> None:
        try:
            for listed in updates:
                waiting.put(listed)
        except BaseException as error:
            waiting.put(error)

    threading.Thread(target=pump, daemon=True, name="list-events").start()

    def newest() -> list[Job]:
        item = waiting.get()
        while not waiting.empty():
            item = waiting.get()
        if isinstance(item, BaseException):
            raise item
        return item

    return newest


def watch_list(updates: Iterator[list[Job]], interval: float, as_json: bool) -> None:
    """Shows the list as ``updates`` change it, until interrupted, at most once per
    ``interval`` (the newest then): a live table on a terminal, else the list again (a
    JSON array a line with ``--json``) when it changed."""
    newest = newest_of(updates)
    if not as_json and out().is_terminal:
        from rich.live import Live

        with Live(JobsTable(newest()), console=out(), auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(JobsTable(newest()), refresh=True)
    last: list[Job] | None = None
    while True:
        found = newest()
        if found != last:
            if as_json:
                sys.stdout.write(json.dumps(found) + "\n")
            else:
                out().print(JobsTable(found))
            sys.stdout.flush()
            last = found
            time.sleep(interval)


@commands.command("list")
@command
def list_jobs(
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    status: Annotated[
        list[str] | None, typer.Option(help="Only jobs in this status (repeat: in any of them).")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="Only jobs of this kind.")] = None,
    schedule: Annotated[
        str | None, typer.Option("--schedule", help="Only the runs of this schedule.")
    ] = None,
    started_by: Annotated[
        uuid.UUID | None,
        typer.Option("--started-by", help="Only jobs this user started (--actor is who asks)."),
    ] = None,
    job_id: Annotated[
        str | None, typer.Option("--id", help="A job id or its start (hex, dashes or not).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only jobs created at or after this time (ISO 8601).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only jobs created before this time (ISO 8601).")
    ] = None,
    field: Annotated[
        list[str] | None,
        typer.Option(
            help="payload.<field>=<value> or result.<field>=<value> (repeat for more); "
            "needs --kind; the API's GET /kinds lists each kind's fields."
        ),
    ] = None,
    sort: Annotated[
        str | None,
        typer.Option(help="created_desc (default), created_asc, finished_desc, finished_asc."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    before: Annotated[
        str | None, typer.Option(help="The jobs after this cursor (a previous page's next).")
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep the list up to date until interrupted.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option(min=0.0, help="With --watch, at least this many seconds between updates."),
    ] = 0.5,
    as_json: JsonOpt = False,
) -> None:
    """List a workspace's jobs, newest first, or searched."""
    filters = list_filters(
        status,
        kind,
        schedule,
        limit,
        actor_id=None if started_by is None else str(started_by),
        id=job_id,
        since=since,
        until=until,
        field=field,
        sort=sort,
    )
    with api(workspace, actor) as jobs:

        def read() -> list[Job]:
            found: list[Job] = jobs.list(**filters, before=before)["jobs"]
            return found

        if watch:
            try:
                watch_list(followed(jobs, read, filters, before is None), interval, as_json)
            except KeyboardInterrupt:  # the end of --watch
                return
        page = jobs.list(**filters, before=before)
    show(json_text(page["jobs"]) if as_json else JobsTable(page["jobs"]))
    if page["next"] is not None and not as_json:
        err().print(f"more: --before {page['next']}", markup=False, highlight=False)


@commands.command()
@command
def items(
    job_id: JobArg,
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    state: Annotated[
        str | None, typer.Option(help="Only items in this state (e.g. failed).")
    ] = None,
    after: Annotated[
        int, typer.Option(min=0, help="Start after this ordinal (a previous page's next).")
    ] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    as_json: JsonOpt = False,
) -> None:
    """List a job's items (each page's outcome, code and message), in order, a page
    at a time."""

    with api(workspace, actor) as jobs:
        page = jobs.items(job_id, state=state, after=after, limit=limit)
    if as_json:
        print_json(page)
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("#", "page", "title", "state", "code", "message")
    for item in page["items"]:
        # Titles are the hub's users' text: printed as text, never as markup.
        table.add_row(
            str(item["ordinal"]),
            str(item.get("ref") or ""),
            Text(printable(item.get("label") or "")),
            item["state"],
            item.get("error_code") or "",
            Text(item.get("error_message") or ""),
        )
    out().print(table)
    if page["next"] is not None:
        out().print(f"more: --after {page['next']}")


@commands.command()
@command
def cancel(
    job_id: JobArg,
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    reason: Annotated[str | None, typer.Option(help="Why, for the record.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask a job to stop; work already done stays done."""
    with api(workspace, actor) as jobs:
        print_job(jobs.cancel(job_id, reason), as_json)


@commands.command()
@command
def watch(
    job_id: JobArg,
    workspace: WorkspaceOpt = None,
    actor: ActorOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Follow a job to its end: a progress bar, or one JSON line per change."""

    with api(workspace, actor) as jobs:
        if not as_json:
            print_job(follow(jobs, jobs.get(job_id), show_bar=True), False)
            return
        for job in jobs.events(job_id):
            sys.stdout.write(json.dumps(job) + "\n")
            sys.stdout.flush()


@commands.command()
@command
def login(
    token: Annotated[
        str,
        typer.Option(
            "--token", help="An API token (a JWT whose subject is you); - reads it from stdin."
        ),
    ],
    api_url: Annotated[
        str | None, typer.Option("--api-url", help="The API's address (default: as found).")
    ] = None,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Keep an API token (and the API's address, a default workspace) in the profile:
    the job commands then act as the token's subject (HUBJOBS_HOME/profile.json, readable
    by you only; HUBJOBS_API_TOKEN overrides it)."""
    from hubjobs.home import home_now, update_profile
    from starter.cli.remote import subject_of

    if token == "-":
        token = sys.stdin.readline().strip()
    subject = subject_of(token)
    if subject is None:
        raise HubJobsError("the token is not a JWT with a subject", code="invalid_argument")
    values: dict[str, Any] = {"api_token": token, "actor_id": subject}
    if api_url is not None:
        values["api_url"] = api_url
    if workspace is not None:
        values["workspace_id"] = str(workspace)
    path = update_profile(home_now(), values)
    if as_json:
        print_json({"actor_id": subject, "profile": str(path)})
    else:
        out().print(f"logged in as {subject} ({path})", markup=False, highlight=False)
