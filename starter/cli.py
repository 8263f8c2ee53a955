"""``hubjobs``: the command line over the starter client, plus the embedded stack.

Every command takes ``--json``. Errors are one plain line on stderr,
``error: <message> [<code>]``, and a non-zero exit: 2 for what the caller got wrong
(codes ``invalid_…``, ``unknown_kind``; a usage error is ``invalid_argument``), 1
otherwise. The detail goes to ``<HUBJOBS_HOME>/hubjobs.log``: codes, ids and error
types, never the text a caller passed. Text that is not valid UTF-8 (argv bytes Python
decodes with surrogateescape) is refused as ``invalid_encoding`` before anything runs.

A command imports what it uses when it runs: ``hubjobs status`` starts in a fraction of
the time it would take to import the Temporal SDK, SQLAlchemy, rich and the embedded
servers, none of which it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from hubjobs.domain.text import printable
from hubjobs.errors import (
    INTERNAL_ERROR,
    HubJobsError,
    InvalidInput,
    InvalidPayload,
    UnknownKind,
    describe_validation_errors,
)
from hubjobs.observability.logs import log_failure
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import ItemPage, JobView
from hubjobs.settings import Settings
from hubjobs.temporal.process import run_and_exit
from starter.client import HubJobsClient, WorkspaceJobs

if TYPE_CHECKING:
    from rich.console import Console

    from hubjobs.temporal.job_schedules import ScheduleView
    from starter.schedules import WorkspaceSchedules

app = typer.Typer(
    name="hubjobs",
    help="Durable background jobs for the knowledge hub, on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
log = logging.getLogger("hubjobs.cli")
R = TypeVar("R")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
WorkspaceOpt = Annotated[uuid.UUID, typer.Option("--workspace", help="Workspace id.")]
ActorOpt = Annotated[uuid.UUID, typer.Option("--actor", help="Acting user's id.")]

JOB_KEYS = (
    "id",
    "workflow_id",
    "kind",
    "status",
    "total",
    "processed",
    "succeeded",
    "skipped",
    "failed",
    "progress_message",
    "result",
    "error_code",
    "error_message",
    "created_at",
    "started_at",
    "finished_at",
)


@functools.cache
def _console(stderr: bool) -> Console:
    from rich.console import Console

    return Console(stderr=stderr)


def out() -> Console:
    """The console of what a command prints as text (rich, imported on first use)."""
    return _console(False)


def err() -> Console:
    """The console of progress bars and error lines."""
    return _console(True)


def _setup_logging(settings: Settings) -> None:
    settings.home.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=settings.home / "hubjobs.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


# Refusals of what the caller passed: exit 2 (anything else that fails: exit 1).
CALLER_CODES = frozenset({UnknownKind.code})


def error_line(message: str, code: str) -> None:
    err().print(
        f"error: {message} [{code}]",
        markup=False,
        highlight=False,
        soft_wrap=True,  # one line, however long, whatever the terminal's width
    )


def exit_code_of(code: str) -> int:
    return 2 if code.startswith("invalid") or code in CALLER_CODES else 1


def _check_encoding(kwargs: dict[str, Any]) -> None:
    """Refuses an option whose bytes were not UTF-8: Python hands them over as lone
    surrogates (surrogateescape), which no database or server takes."""
    for name, value in kwargs.items():
        if isinstance(value, str) and any("\ud800" <= ch <= "\udfff" for ch in value):
            raise InvalidInput(
                f"--{name.replace('_', '-')} is not valid UTF-8 text", code="invalid_encoding"
            )


_settings: Settings | None = None


def settings_now() -> Settings:
    """The settings the running command read (once: reading them costs milliseconds)."""
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings


def command(fn: Callable[..., R]) -> Callable[..., R]:
    """Turns errors into one plain line on stderr and exit code 1 (2 for bad input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        global _settings
        try:
            settings = _settings = Settings()
        except ValidationError as invalid:  # a HUBJOBS_* variable that does not parse
            problems = describe_validation_errors(invalid.errors(include_input=False))
            error_line(f"invalid HUBJOBS_* setting: {problems}", "invalid_settings")
            raise typer.Exit(2) from None
        _setup_logging(settings)
        try:
            _check_encoding(kwargs)
            return fn(*args, **kwargs)
        except HubJobsError as error:
            # The code only: a message is plain, but the log keeps to codes and ids.
            log.info("command %s failed: %s", fn.__name__, error.code)
            error_line(error.message, error.code)
            raise typer.Exit(exit_code_of(error.code)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as failure:
            log_failure(log, f"command {fn.__name__} failed", failure)
            error_line(
                f"internal error; the detail is in {settings.home / 'hubjobs.log'}",
                INTERNAL_ERROR,
            )
            raise typer.Exit(1) from None

    return wrapper


def run(coro: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coro)


def job_json(job: JobView) -> dict[str, Any]:
    data = job.model_dump(mode="json")
    return {key: data[key] for key in JOB_KEYS} | {
        "workspace_id": data["workspace_id"],
        "correlation_id": data["correlation_id"],
        "summary": data["summary"],
        "cancel_requested_at": data["cancel_requested_at"],
        "schedule_id": data["schedule_id"],
        # Set while its workflow tasks keep failing: the job is not moving.
        "stuck_since": data["stuck_since"],
        "stuck_reason": data["stuck_reason"],
    }


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def print_job(job: JobView, as_json: bool) -> None:
    if as_json:
        print_json(job_json(job))
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in job_json(job).items():
        if value is not None:
            table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    out().print(table)


async def _scoped(workspace: uuid.UUID, actor: uuid.UUID) -> tuple[HubJobsClient, WorkspaceJobs]:
    client = await HubJobsClient.connect(settings_now())
    return client, client.scope(workspace, actor)


async def follow(jobs: WorkspaceJobs, job: JobView, *, show_bar: bool) -> JobView:
    """Waits for the job, with a progress bar on a terminal."""
    if not show_bar:
        return await jobs.wait(job.id)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(bar_width=32),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err(),
    ) as bar:
        task = bar.add_task(job.kind, total=job.total or None)
        async for current in jobs.watch(job.id, interval=0.25):
            bar.update(
                task,
                total=current.total or None,
                completed=current.processed,
                description=f"{current.kind} ({current.status})",
            )
            job = current
    if job.progress_message:
        err().print(job.progress_message, markup=False, highlight=False)
    return job


# --- the embedded stack --------------------------------------------------------


@app.command()
@command
def up(as_json: JsonOpt = False) -> None:
    """Start (or find running) the embedded PostgreSQL and Temporal dev server.

    A stack recorded in HUBJOBS_HOME comes back on its recorded ports, or not at all
    (`port_taken`) when someone else holds one: workers keep the addresses they read."""
    from hubjobs.devstack import embedded

    s = settings_now()
    wanted_codec = codec_endpoint(s) if s.payload_codec else None
    info = embedded.up(
        s.home,
        postgres_port=s.postgres_port,
        temporal_port=s.temporal_port,
        ui_port=s.temporal_ui_port,
        ui_codec_endpoint=wanted_codec,
    )
    codec = embedded.EmbeddedTemporal(s.home).ui_codec_endpoint()
    metrics_url = f"http://{s.metrics_host}:{s.metrics_port}/metrics" if s.metrics_port else None
    if as_json:
        print_json(
            {
                "database_url": info.database_url,
                "temporal_address": info.temporal_address,
                "ui_url": info.ui_url,
                "metrics_url": metrics_url,
                "ui_codec_endpoint": codec,
            }
        )
    else:
        out().print(f"PostgreSQL   {info.database_url}")
        out().print(f"Temporal     {info.temporal_address}")
        out().print(f"Temporal UI  {info.ui_url}")
        out().print(f"Metrics      {metrics_url}  (served by a running worker)")
        if codec:
            out().print(f"UI codec     {codec}  (served by `hubjobs api`)")
    if codec != wanted_codec:
        err().print(
            f"note: the running Temporal UI decodes payloads at {codec or 'no endpoint'}, "
            f"not {wanted_codec or 'none'}: `hubjobs down` then `hubjobs up` to change it",
            markup=False,
            highlight=False,
        )


def codec_endpoint(settings: Settings) -> str:
    """Where the embedded UI's browser reaches the API's codec endpoint."""
    host = settings.api_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{settings.api_port}/codec"


@app.command()
@command
def down(as_json: JsonOpt = False) -> None:
    """Stop the embedded stack. Its data and addresses stay in the state folder: the
    next `hubjobs up` brings it back on the same ports."""
    from hubjobs.devstack import embedded

    embedded.down(settings_now().home)
    if as_json:
        print_json({"stopped": True})
    else:
        out().print("stopped")


@app.command()
@command
def worker() -> None:
    """Run a worker until interrupted (same as `python worker.py`)."""
    import worker as worker_module
    from hubjobs.observability.logs import setup_logging

    settings = settings_now()
    setup_logging(json_lines=settings.log_json, level=settings.log_level)
    run(worker_module.run(settings))


@app.command()
@command
def migrate(as_json: JsonOpt = False) -> None:
    """Apply the database migrations (HUBJOBS_DATABASE_URL), e.g. before workers start."""
    from hubjobs.db.engine import sync_engine
    from hubjobs.db.migrate import schema_version, upgrade

    url = settings_now().resolved_database_url()
    upgrade(url)
    engine = sync_engine(url)
    with engine.connect() as conn:
        version = schema_version(conn)
    engine.dispose()
    if as_json:
        print_json({"schema_version": version})
    else:
        out().print(f"schema at {version}")


@app.command()
@command
def api() -> None:
    """Serve the HTTP API (HUBJOBS_API_HOST, HUBJOBS_API_PORT) until interrupted."""
    import uvicorn

    from hubjobs.observability.logs import setup_logging
    from starter.api import create_app

    settings = settings_now()
    setup_logging(json_lines=settings.log_json, level=settings.log_level)
    uvicorn.run(
        create_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,
        # The app writes its own access line (the route's template, not the path and
        # query as sent: those are the caller's text).
        access_log=False,
        timeout_graceful_shutdown=10,
    )


@app.command()
@command
def token(
    actor: ActorOpt,
    ttl: Annotated[int, typer.Option(help="Seconds the token is valid.", min=1)] = 3600,
    as_json: JsonOpt = False,
) -> None:
    """Mint an API token for an actor, signed with HUBJOBS_API_JWT_SECRET."""
    from starter.auth import mint

    value = mint(actor, settings_now(), ttl_seconds=ttl)
    if as_json:
        print_json({"token": value})
    else:
        sys.stdout.write(value + "\n")


@app.command("codec-key")
@command
def codec_key(
    key_id: Annotated[str, typer.Option("--id", help="The new key's id, e.g. 2026-05.")],
    as_json: JsonOpt = False,
) -> None:
    """Print a new AES-256 key entry (kid:base64key) to add to HUBJOBS_CODEC_KEYS."""
    from hubjobs.temporal.codec import new_key_entry

    entry = new_key_entry(key_id)
    if as_json:
        print_json({"key_id": key_id, "entry": entry})
    else:
        sys.stdout.write(entry + "\n")


@app.command()
@command
def health(as_json: JsonOpt = False) -> None:
    """Check that PostgreSQL and Temporal answer (exit 1 if not): for container health checks."""
    from starter.api import check_health

    async def go() -> Any:
        client = await HubJobsClient.connect(settings_now())
        async with client:
            return await check_health(client)

    report = run(go())
    if as_json:
        print_json(report.model_dump())
    else:
        out().print(f"database {report.database}, temporal {report.temporal}")
    if report.status != "ok":
        raise typer.Exit(1)


# --- demo data ---------------------------------------------------------------------


@app.command("seed-demo")
@command
def seed_demo(
    pages: Annotated[int, typer.Option(min=1, max=1_000_000, help="Pages in the course.")] = 200,
    as_json: JsonOpt = False,
) -> None:
    """Create a workspace, an administrator and a course of N pages."""
    from hubjobs.db.engine import async_engine
    from hubjobs.devstack.demo_data import seed_demo as seed

    async def go() -> Any:
        engine = async_engine(settings_now().resolved_database_url(), pool_size=1)
        try:
            async with engine.begin() as conn:
                return await seed(conn, pages)
        finally:
            await engine.dispose()

    course = run(go())
    ids = {
        "workspace_id": str(course.workspace_id),
        "actor_id": str(course.actor_id),
        "root_page_id": str(course.root_page_id),
        "pages": pages,
    }
    if as_json:
        print_json(ids)
    else:
        for key, value in ids.items():
            out().print(f"{key:14} {value}")


# --- jobs --------------------------------------------------------------------------------


def start_job(
    workspace: uuid.UUID,
    actor: uuid.UUID,
    start: Callable[[WorkspaceJobs], Awaitable[JobView]],
    *,
    wait: bool,
    as_json: bool,
) -> None:
    """Starts a job, follows it with ``--wait`` (a progress bar on a terminal), prints it;
    exit 1 when a followed job did not succeed."""

    async def go() -> JobView:
        client, jobs = await _scoped(workspace, actor)
        async with client:
            job = await start(jobs)
            if wait:
                job = await follow(jobs, job, show_bar=not as_json and err().is_terminal)
            return job

    job = run(go())
    print_job(job, as_json)
    if wait and job.status != JobStatus.succeeded:
        raise typer.Exit(1)


@app.command("tag-course")
@command
def tag_course(
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    root_page: Annotated[uuid.UUID, typer.Option("--root-page", help="Root page of the course.")],
    tag: Annotated[str, typer.Option(help="The tag to add to every page.")],
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same job.")] = None,
    correlation_id: Annotated[str | None, typer.Option(help="Carried into logs.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to finish.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Tag every page of a course."""
    start_job(
        workspace,
        actor,
        lambda jobs: jobs.start_course_tagging(
            root_page_id=root_page,
            tag=tag,
            idempotency_key=idempotency_key,
            correlation_id=correlation_id,
        ),
        wait=wait,
        as_json=as_json,
    )


@app.command()
@command
def backup(
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same job.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to finish.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Back up every hub table and attachment into one archive (HUBJOBS_BACKUP_DIR)."""
    start_job(
        workspace,
        actor,
        lambda jobs: jobs.start_backup(idempotency_key=idempotency_key),
        wait=wait,
        as_json=as_json,
    )


@app.command()
@command
def export(
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    root_page: Annotated[
        uuid.UUID | None,
        typer.Option("--root-page", help="Root page of a course; the whole workspace without."),
    ] = None,
    pages_per_file: Annotated[
        int | None,
        typer.Option("--pages-per-file", min=1, max=100_000, help="Pages a file (default 1000)."),
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same job.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to finish.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Export a course, or the whole workspace, as NDJSON files of pages; the result is
    a FHIR bulk-data manifest whose files the API serves."""
    start_job(
        workspace,
        actor,
        lambda jobs: jobs.start_page_export(
            root_page_id=root_page,
            pages_per_file=pages_per_file,
            idempotency_key=idempotency_key,
        ),
        wait=wait,
        as_json=as_json,
    )


@app.command()
@command
def retry(
    job_id: Annotated[uuid.UUID, typer.Argument(metavar="JOB")],
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the retry to finish.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run a finished job's failed items again, as a new job of the same kind (the same
    one each time for the same JOB)."""
    start_job(workspace, actor, lambda jobs: jobs.retry(job_id), wait=wait, as_json=as_json)


@app.command()
@command
def restore(
    archive: Annotated[Path, typer.Argument(metavar="ARCHIVE", help="A backup archive.")],
    database_url: Annotated[str, typer.Option(help="An empty database to restore into.")],
    attachments_dir: Annotated[
        Path | None,
        typer.Option(help="Where attachment files go (default: HUBJOBS_ATTACHMENTS_DIR)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild an empty database and its attachment files from an archive."""
    from hubjobs.ops.restore import restore as restore_archive

    folder = attachments_dir or settings_now().resolved_attachments_dir
    report = restore_archive(archive, database_url, folder)
    if as_json:
        print_json(report.as_dict())
        return
    out().print(f"Restored backup {report.backup_id} of {report.created_at}")
    for table, rows in report.tables.items():
        out().print(f"  {table:24} {rows:>10} rows")
    out().print(
        f"  {'attachments':24} {report.attachments:>10} files ({report.attachment_bytes} bytes)"
    )
    out().print(f"Schema {report.archive_schema_version} -> {report.schema_version}")


@app.command()
@command
def status(
    job_id: Annotated[uuid.UUID, typer.Argument(metavar="JOB")],
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    as_json: JsonOpt = False,
) -> None:
    """Show one job."""

    async def go() -> JobView:
        client, jobs = await _scoped(workspace, actor)
        async with client:
            return await jobs.get(job_id)

    print_job(run(go()), as_json)


@app.command("list")
@command
def list_jobs(
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    status: Annotated[str | None, typer.Option(help="Only jobs in this status.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only jobs of this kind.")] = None,
    schedule: Annotated[
        str | None, typer.Option("--schedule", help="Only the runs of this schedule.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """List a workspace's jobs, newest first."""
    statuses = [s.value for s in JobStatus]
    if status is not None and status not in statuses:
        raise HubJobsError(f"unknown status: one of {', '.join(statuses)}", code="invalid_status")

    async def go() -> list[JobView]:
        client, jobs = await _scoped(workspace, actor)
        async with client:
            return await jobs.list(
                status=None if status is None else JobStatus(status),
                kind=kind,
                schedule_id=schedule,
                limit=limit,
            )

    found = run(go())
    if as_json:
        print_json([job_json(job) for job in found])
        return
    from rich.table import Table

    table = Table("id", "kind", "status", "done", "created", "summary")
    for job in found:
        table.add_row(
            str(job.id),
            job.kind,
            job.status,
            f"{job.processed}/{job.total}",
            job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            job.summary or "",
        )
    out().print(table)


@app.command()
@command
def items(
    job_id: Annotated[uuid.UUID, typer.Argument(metavar="JOB")],
    workspace: WorkspaceOpt,
    actor: ActorOpt,
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

    async def go() -> ItemPage:
        client, jobs = await _scoped(workspace, actor)
        async with client:
            return await jobs.items(job_id, state=state, after=after, limit=limit)

    page = run(go())
    if as_json:
        print_json(page.model_dump(mode="json"))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("#", "page", "title", "state", "code", "message")
    for item in page.items:
        # Titles are the hub's users' text: printed as text, never as markup.
        table.add_row(
            str(item.ordinal),
            str(item.ref or ""),
            Text(printable(item.label or "")),
            item.state.value,
            item.error_code or "",
            Text(item.error_message or ""),
        )
    out().print(table)
    if page.next is not None:
        out().print(f"more: --after {page.next}")


@app.command()
@command
def cancel(
    job_id: Annotated[uuid.UUID, typer.Argument(metavar="JOB")],
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    reason: Annotated[str | None, typer.Option(help="Why, for the record.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask a job to stop; work already done stays done."""

    async def go() -> JobView:
        client, jobs = await _scoped(workspace, actor)
        async with client:
            return await jobs.cancel(job_id, reason=reason)

    print_job(run(go()), as_json)


@app.command()
@command
def watch(
    job_id: Annotated[uuid.UUID, typer.Argument(metavar="JOB")],
    workspace: WorkspaceOpt,
    actor: ActorOpt,
    as_json: JsonOpt = False,
) -> None:
    """Follow a job to its end: a progress bar, or one JSON line per change."""

    async def go() -> JobView:
        client, jobs = await _scoped(workspace, actor)
        async with client:
            if not as_json:
                return await follow(jobs, await jobs.get(job_id), show_bar=True)
            last = None
            async for job in jobs.watch(job_id):
                sys.stdout.write(json.dumps(job_json(job)) + "\n")
                sys.stdout.flush()
                last = job
            assert last is not None
            return last

    job = run(go())
    if not as_json:
        print_job(job, False)


@app.command()
@command
def demo(
    pages: Annotated[int, typer.Option(min=1, max=1_000_000)] = 500,
    tag: str = "onboarding-2026",
    as_json: JsonOpt = False,
) -> None:
    """Seed a demo course and tag it with a worker running in this process."""
    import worker as worker_module
    from hubjobs.db.engine import async_engine
    from hubjobs.devstack import embedded
    from hubjobs.devstack.demo_data import seed_demo as seed
    from hubjobs.kinds.course_tagging import COURSE_TAGGING
    from hubjobs.temporal.deployment import explain_current

    # Refused before anything is seeded.
    COURSE_TAGGING.validate({"root_page_id": str(uuid.UUID(int=0)), "tag": tag})
    settings = settings_now()

    async def go() -> JobView:
        client = await HubJobsClient.connect(settings)
        async with client:
            async with client.engine.begin() as conn:
                course = await seed(conn, pages)
            engine = async_engine(settings.resolved_database_url())
            try:
                temporal = await client.temporal_client()
                async with worker_module.build_worker(temporal, engine, settings):
                    # A fresh stack has no current version yet: this worker's build
                    # becomes it (HUBJOBS_DEPLOYMENT_SET_CURRENT), or the job would wait.
                    current = await worker_module.announce_version(temporal, settings)
                    if settings.worker_versioning and current != settings.build_id:
                        err().print(
                            explain_current(settings, current), markup=False, highlight=False
                        )
                    jobs = client.scope(course.workspace_id, course.actor_id)
                    job = await jobs.start_course_tagging(root_page_id=course.root_page_id, tag=tag)
                    if not as_json:
                        out().print(f"Started {job.summary}  (job {job.id})")
                    done = await follow(jobs, job, show_bar=not as_json)
                    # The row is final before the workflow's last task: keep the worker
                    # until the run closes, or the UI shows it running (its task timed
                    # out on a worker that left).
                    handle = temporal.get_workflow_handle(job.workflow_id)
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(handle.result(), timeout=30)
                    return done
            finally:
                await engine.dispose()

    job = run(go())
    stack = embedded.read_stack(settings.home)
    if as_json:
        print_json(job_json(job) | {"ui_url": stack.ui_url if stack else None})
    else:
        print_job(job, False)
        if stack is not None:
            out().print(
                f"\nTrace it in the Temporal UI: {stack.ui_url}/namespaces/"
                f"{settings.temporal_namespace}/workflows/{job.workflow_id}"
            )
        out().print("The stack stays up for the UI; stop it with `hubjobs down` (or `make down`).")
    if job.status != JobStatus.succeeded:
        raise typer.Exit(1)


# --- schedules ---------------------------------------------------------------------------

schedule_app = typer.Typer(
    name="schedule",
    help="Recurring jobs: each schedule is a Temporal Schedule whose every firing is a job.",
    no_args_is_help=True,
)
app.add_typer(schedule_app)
ScheduleArg = Annotated[str, typer.Argument(metavar="SCHEDULE", help="The schedule's id.")]


async def _schedules(
    workspace: uuid.UUID, actor: uuid.UUID
) -> tuple[HubJobsClient, WorkspaceSchedules]:
    client = await HubJobsClient.connect(Settings())
    return client, client.schedules(workspace, actor)


def schedule_json(view: ScheduleView) -> dict[str, Any]:
    return view.model_dump(mode="json") | {"timing": view.timing.describe()}


def print_schedule(view: ScheduleView, as_json: bool) -> None:
    if as_json:
        print_json(schedule_json(view))
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in schedule_json(view).items():
        if key in ("cron", "every_seconds", "time_zone") or value in (None, [], {}):
            continue
        if key == "recent_runs":
            value = ", ".join(str(run["job_id"]) for run in value)
        elif key == "next_runs":
            value = ", ".join(value[:3])
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    out().print(table)


def on_schedules(
    workspace: uuid.UUID,
    actor: uuid.UUID,
    act: Callable[[WorkspaceSchedules], Awaitable[R]],
) -> R:
    async def go() -> R:
        client, schedules = await _schedules(workspace, actor)
        async with client:
            return await act(schedules)

    return run(go())


@schedule_app.command("create")
@command
def schedule_create(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="The job kind (backup, …).")],
    workspace: WorkspaceOpt,
    actor: ActorOpt,
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
    parsed: Any = None
    if payload is not None:
        try:
            parsed = json.loads(payload)
        except ValueError:
            raise InvalidPayload("the payload is not valid JSON") from None
        if not isinstance(parsed, dict):
            raise InvalidPayload("the payload must be a JSON object")
    view = on_schedules(
        workspace,
        actor,
        lambda schedules: schedules.create(
            kind, cron=cron, every=every, time_zone=time_zone, payload=parsed, keep=keep
        ),
    )
    print_schedule(view, as_json)


@schedule_app.command("list")
@command
def schedule_list(workspace: WorkspaceOpt, actor: ActorOpt, as_json: JsonOpt = False) -> None:
    """List a workspace's schedules, newest first."""
    found = on_schedules(workspace, actor, lambda schedules: schedules.list())
    if as_json:
        print_json([schedule_json(view) for view in found])
        return
    from rich.table import Table

    table = Table("kind", "when", "keep", "paused", "next run")
    table.add_column("id", no_wrap=True)
    for view in found:
        table.add_row(
            view.kind,
            view.timing.describe(),
            str(view.keep or ""),
            "yes" if view.paused else "no",
            view.next_runs[0].strftime("%Y-%m-%d %H:%M:%S") if view.next_runs else "",
            view.id,
        )
    out().print(table)


@schedule_app.command("show")
@command
def schedule_show(
    schedule: ScheduleArg, workspace: WorkspaceOpt, actor: ActorOpt, as_json: JsonOpt = False
) -> None:
    """Show one schedule: its definition, next firings and recent runs' jobs."""
    print_schedule(on_schedules(workspace, actor, lambda s: s.get(schedule)), as_json)


@schedule_app.command("pause")
@command
def schedule_pause(
    schedule: ScheduleArg, workspace: WorkspaceOpt, actor: ActorOpt, as_json: JsonOpt = False
) -> None:
    """Stop the firings until unpaused (a run under way goes on)."""
    print_schedule(on_schedules(workspace, actor, lambda s: s.pause(schedule)), as_json)


@schedule_app.command("unpause")
@command
def schedule_unpause(
    schedule: ScheduleArg, workspace: WorkspaceOpt, actor: ActorOpt, as_json: JsonOpt = False
) -> None:
    """Let a paused schedule fire again."""
    print_schedule(on_schedules(workspace, actor, lambda s: s.unpause(schedule)), as_json)


@schedule_app.command("trigger")
@command
def schedule_trigger(
    schedule: ScheduleArg, workspace: WorkspaceOpt, actor: ActorOpt, as_json: JsonOpt = False
) -> None:
    """Fire now (refused with schedule_running while a run of it is still going)."""
    print_schedule(on_schedules(workspace, actor, lambda s: s.trigger(schedule)), as_json)


@schedule_app.command("delete")
@command
def schedule_delete(
    schedule: ScheduleArg, workspace: WorkspaceOpt, actor: ActorOpt, as_json: JsonOpt = False
) -> None:
    """Remove the schedule from Temporal; its jobs stay."""
    on_schedules(workspace, actor, lambda s: s.delete(schedule))
    if as_json:
        print_json({"deleted": schedule})
    else:
        out().print(f"deleted {schedule}")


def _group() -> None:
    """Durable background jobs for the knowledge hub, on Temporal."""


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app that runs ``args``: one holding only the command named first, when one
    is (typer builds the options of every command an app holds, before it runs any:
    ~20 ms a command line), else the whole app (help, an unknown command, a group such
    as ``schedule``). The one command stays a subcommand, so its usage, help and errors
    read the same."""
    for info in app.registered_commands if args else ():
        if info.callback is None:
            continue
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == args[0]:
            single = typer.Typer(
                name="hubjobs", add_completion=False, pretty_exceptions_enable=False
            )
            single.registered_commands = [info]
            single.callback()(_group)
            return single
    return app


def run_cli(args: Sequence[str] | None = None) -> int:
    """Runs one command line (``sys.argv`` by default) and returns its exit code. A usage
    error (an unknown option, a value of the wrong type) is one line as well, with the
    code ``invalid_argument`` and exit code 2, its text made printable."""
    if args is None:
        args = sys.argv[1:]
    try:
        result = app_for(args)(args=args, prog_name="hubjobs", standalone_mode=False)
    except typer.TyperException as usage:  # typer's click exceptions
        exit_code = int(getattr(usage, "exit_code", 2))
        if type(usage).__name__ != "NoArgsIsHelpError":  # its help is printed already
            error_line(printable(usage.format_message()), "invalid_argument")
        return exit_code
    except typer.Abort:
        error_line("aborted", "aborted")
        return 1
    return result if isinstance(result, int) else 0


def main() -> None:
    run_and_exit(lambda: sys.exit(run_cli()))


if __name__ == "__main__":
    main()
