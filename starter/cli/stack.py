"""The embedded stack and the demo, for development: up, down, a worker, demo data,
the demo job."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hubjobs.errors import Unavailable
from hubjobs.home import (
    API_FILE,
    DEV_SECRET_FILE,
    DEV_WEBHOOK_SECRET_FILE,
    recorded,
    stack_home,
    update_profile,
)
from hubjobs.readmodel.status import JobStatus
from starter.cli.common import JsonOpt, R, api, command, settings_now
from starter.cli.output import Job, err, follow, out, print_job, print_json

if TYPE_CHECKING:
    from hubjobs.settings import Settings

commands = typer.Typer()


@commands.command()
@command
def up(
    worker: Annotated[
        bool, typer.Option("--worker", help="Start a background worker too (`down` stops it).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start (or find running) the embedded PostgreSQL and Temporal dev server, and their
    supervisor, which starts a server that dies again on its address.

    A stack recorded in HUBJOBS_HOME comes back on its recorded ports, or not at all
    (`port_taken`) when someone else holds one: workers keep the addresses they read."""
    from hubjobs.devstack import embedded
    from hubjobs.devstack.background_api import api_port, start_api

    s = settings_now()
    port = api_port(s.home, s.api_port)
    wanted_codec = codec_endpoint(s, port) if s.payload_codec else None
    before = embedded.read_stack(s.home)
    info = embedded.up(
        s.home,
        postgres_port=s.postgres_port,
        temporal_port=s.temporal_port,
        ui_port=s.temporal_ui_port,
        ui_codec_endpoint=wanted_codec,
        sqlite_pragmas=s.temporal_sqlite_pragmas,
    )
    codec = embedded.EmbeddedTemporal(s.home).ui_codec_endpoint()
    # A stack of an older hubjobs whose database now authenticates: what runs with its
    # old address starts again with the new one.
    worker_ran = False
    if before is not None and before.database_url != info.database_url:
        worker_ran = stop_background(s.home)
    write_dev_secret(s)
    write_dev_webhook_secret(s)
    if s.stack_supervisor:
        from hubjobs.devstack.supervisor import start_supervisor

        start_supervisor(s.home)
    # The job commands' way in (starter/cli/remote.py), and the UI's codec endpoint.
    api_url = start_api(s.home, s.api_host, port)
    from hubjobs.devstack.background_worker import (
        METRICS_START_SECONDS,
        start_worker,
        worker_metrics,
    )

    if worker or worker_ran:
        start_worker(s.home, s.metrics_port)
    # What is true of them: served only once the worker holds their port.
    metrics = worker_metrics(s.home, s.metrics_host, wait=METRICS_START_SECONDS if worker else 0)
    login = login_url(s, api_url)
    if as_json:
        print_json(
            {
                "database_url": info.database_url,
                "temporal_address": info.temporal_address,
                "ui_url": info.ui_url,
                "api_url": api_url,
                "page_url": page_url(api_url),
                "login_url": login,
                "metrics_url": metrics.url,
                "ui_codec_endpoint": codec,
            }
        )
    else:
        out().print(f"PostgreSQL   {info.database_url}")
        out().print(
            f"Temporal     {info.temporal_address}  ({temporal_cli_hint(info.temporal_address)})",
            markup=False,
            highlight=False,
        )
        out().print(f"Temporal UI  {info.ui_url}")
        out().print(
            f"Jobs page    {page_line(login, page_url(api_url))}", markup=False, highlight=False
        )
        out().print(f"API          {api_url}  (the job commands call it)")
        out().print(f"Metrics      {metrics.note}", markup=False, highlight=False)
        if codec:
            out().print(f"UI codec     {codec}  (served by the API)")
    if codec != wanted_codec:
        err().print(
            f"note: the running Temporal UI decodes payloads at {codec or 'no endpoint'}, "
            f"not {wanted_codec or 'none'}: `hubjobs down` then `hubjobs up` to change it",
            markup=False,
            highlight=False,
        )


def stop_background(home: Path) -> bool:
    """Stops the stack's supervisor, API and worker; returns whether a worker ran."""
    from hubjobs.devstack.background_api import stop_api
    from hubjobs.devstack.background_worker import running_worker, stop_worker
    from hubjobs.devstack.supervisor import stop_supervisor

    stop_supervisor(home)
    ran = running_worker(home) is not None
    stop_worker(home)
    stop_api(home)
    return ran


def page_url(api_url: str) -> str:
    """The operator page the API serves (starter/api/operator_page.py)."""
    return f"{api_url}/operator/"


def login_url(settings: Settings, api_url: str, route: str = "/") -> str | None:
    """A sign-in link to the operator page at ``route`` (its code good once, within
    LOGIN_CODE_SECONDS), while the stack's API takes them: it checks tokens with the
    development secret alone."""
    from hubjobs.devstack.login_codes import issue, login_link

    if not settings.uses_dev_token_secret:
        return None
    return login_link(page_url(api_url), issue(settings.home), route)


def page_line(login: str | None, page: str) -> str:
    """The *Jobs page* line: the sign-in link when there is one, else the page."""
    from hubjobs.devstack.login_codes import LOGIN_CODE_SECONDS

    if login is None:
        return page
    return f"{login}  (signs this browser in once, within {LOGIN_CODE_SECONDS / 60:.0f} minutes)"


def temporal_cli_hint(address: str) -> str:
    """How the Temporal CLI reaches this stack; unset, it tries localhost:7233, where
    another stack's server may answer, silently."""
    return f"the temporal CLI: export TEMPORAL_ADDRESS={address}"


def write_dev_secret(settings: Settings) -> None:
    """A token secret for the embedded stack (HUBJOBS_HOME/dev-token-secret, readable by
    its owner only), so `hubjobs token` and `hubjobs api` work as they are; never
    written, nor read, while a token key is configured."""
    if settings.api_jwt_secret or settings.api_jwt_public_key or settings.api_jwks_url:
        return
    from pydantic import SecretStr

    secret = _new_secret(settings.home / DEV_SECRET_FILE)
    # As the settings read it from now on (they were read before it was written).
    settings.api_jwt_secret = SecretStr(secret)


def write_dev_webhook_secret(settings: Settings) -> None:
    """A completion-webhook signing secret for the embedded stack, so that a start with a
    notify_url works as it is; never written, nor read, while HUBJOBS_WEBHOOK_SECRET is set."""
    if settings.webhook_secret is None:
        _new_secret(settings.home / DEV_WEBHOOK_SECRET_FILE)


def _new_secret(path: Path) -> str:
    """A new secret in a new file, readable by its owner only."""
    secret = secrets.token_urlsafe(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(secret + "\n")
    return secret


def codec_endpoint(settings: Settings, port: int) -> str:
    """Where the embedded UI's browser reaches the API's codec endpoint."""
    host = settings.api_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}/codec"


@commands.command()
@command
def down(as_json: JsonOpt = False) -> None:
    """Stop the background worker, the API and the embedded stack, its supervisor first.

    Their data and addresses stay in the state folder: the next `hubjobs up` brings the
    stack back on the same ports."""
    from hubjobs.devstack import embedded

    home = stack_home()  # none found: nothing to stop, and nothing written
    stop_background(home)
    embedded.down(home)
    if as_json:
        print_json({"stopped": True})
    else:
        out().print("stopped")


@commands.command()
@command
def worker() -> None:
    """Run a worker until interrupted (same as `python worker.py`)."""
    import worker as worker_module
    from hubjobs.observability.logs import setup_logging
    from hubjobs.observability.telemetry import require_tracing
    from hubjobs.secret_checks import refuse_weak_secrets

    settings = settings_now()
    # Before the log goes to stderr: a refusal is this command's one line.
    refuse_weak_secrets(settings)
    require_tracing(settings)
    settings.resolved_database_url()
    settings.resolved_temporal_address()
    setup_logging(json_lines=settings.log_json, level=settings.log_level)
    asyncio.run(worker_module.run(settings))


async def _seed(pages: int) -> dict[str, Any]:
    from hubjobs.db.engine import async_engine
    from hubjobs.devstack.demo_data import seed_demo as seed

    engine = async_engine(settings_now().resolved_database_url(), pool_size=1)
    try:
        async with engine.begin() as conn:
            course = await seed(conn, pages)
    finally:
        await engine.dispose()
    return {
        "workspace_id": str(course.workspace_id),
        "actor_id": str(course.actor_id),
        "root_page_id": str(course.root_page_id),
        "pages": pages,
    }


@commands.command("seed-demo")
@command
def seed_demo(
    pages: Annotated[int, typer.Option(min=1, max=1_000_000, help="Pages in the course.")] = 200,
    as_json: JsonOpt = False,
) -> None:
    """Create a workspace, an administrator and a course of N pages; they become the
    CLI's defaults (HUBJOBS_HOME/profile.json)."""
    ids = asyncio.run(_seed(pages))
    update_profile(settings_now().home, ids)
    if as_json:
        print_json(ids)
    else:
        for key, value in ids.items():
            out().print(f"{key:14} {value}")


def _unless_worker_exits(home: Path, pid: int, work: Callable[[], R]) -> R:
    """``work()``, unless the background worker exits first (a job would then wait for
    ever): refused as ``unavailable``, pointing at the worker's log."""
    from hubjobs.devstack.background_worker import LOG_FILE
    from hubjobs.devstack.embedded import pid_alive

    done: list[R] = []
    failed: list[BaseException] = []

    def body() -> None:
        try:
            done.append(work())
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=body, daemon=True)  # left behind if the worker died
    thread.start()
    while thread.is_alive():
        thread.join(timeout=0.5)
        if thread.is_alive() and not pid_alive(pid):
            raise Unavailable(f"the worker exited; its output is in {home / LOG_FILE}")
    if failed:
        raise failed[0]
    return done[0]


def next_steps(settings: Settings, ids: dict[str, Any], job: Job) -> dict[str, Any]:
    """What the demo leaves running and the commands to try next."""
    from hubjobs.devstack import embedded
    from hubjobs.devstack.background_worker import METRICS_START_SECONDS, worker_metrics

    stack = embedded.read_stack(settings.home)
    ui = stack.ui_url if stack else None
    api = recorded(settings.home, API_FILE).get("url")
    route = f"/w/{ids['workspace_id']}/jobs/{job['id']}"
    metrics = worker_metrics(settings.home, settings.metrics_host, wait=METRICS_START_SECONDS)
    return {
        "workspace_id": ids["workspace_id"],
        "actor_id": ids["actor_id"],
        "root_page_id": ids["root_page_id"],
        "temporal_address": settings.resolved_temporal_address(),
        "ui_url": ui
        and f"{ui}/namespaces/{settings.temporal_namespace}/workflows/{job['workflow_id']}",
        "page_url": api and f"{page_url(str(api))}#{route}",
        "login_url": api and login_url(settings, str(api), route),
        "metrics_url": metrics.url,
        "metrics": metrics.note,
        "next": [
            "hubjobs list",
            f"hubjobs tag-course --root-page {ids['root_page_id']} --tag week-2 --wait",
            f"hubjobs items {job['id']}",
        ],
    }


def path_hint() -> str | None:
    """How a shell reaches this ``hubjobs``, when PATH does not (``make run`` installs it
    in the project's venv): None when it does."""
    here = Path(sys.executable).parent
    found = shutil.which("hubjobs")
    if found is not None and Path(found).resolve().parent == here.resolve():
        return None
    return f"`hubjobs` is in {here}: `source {here / 'activate'}` (or add it to PATH) first."


def print_next_steps(steps: dict[str, Any]) -> None:
    rows = [
        ("Workspace", steps["workspace_id"]),
        ("Actor", steps["actor_id"]),
        ("Root page", steps["root_page_id"]),
        ("Temporal", steps["temporal_address"]),
        ("Temporal UI", steps["ui_url"]),
        ("Jobs page", steps["page_url"] and page_line(steps["login_url"], steps["page_url"])),
        ("Metrics", steps["metrics"]),
    ]
    out().print()
    for label, value in rows:
        if value is not None:
            out().print(f"{label:12} {value}", markup=False, highlight=False)
    out().print("\nA worker keeps serving (`hubjobs down` or `make down` stops it).")
    # The docs' `temporal workflow …` commands read it (docs/other-services.md).
    out().print(
        f"For {temporal_cli_hint(steps['temporal_address'])}", markup=False, highlight=False
    )
    hint = path_hint()
    if hint is not None:
        out().print(hint, markup=False, highlight=False)
    out().print("Try:")
    for line in steps["next"]:
        out().print(f"  {line}", markup=False, highlight=False)


@commands.command()
@command
def demo(
    pages: Annotated[int, typer.Option(min=1, max=1_000_000)] = 500,
    tag: str = "onboarding-2026",
    as_json: JsonOpt = False,
) -> None:
    """Seed a demo course (its workspace and actor become the CLI's defaults), start a
    background worker and tag the course with it; the worker keeps serving."""
    from hubjobs.devstack.background_worker import start_worker
    from hubjobs.kinds.course_tagging import COURSE_TAGGING

    # Refused before anything is seeded.
    COURSE_TAGGING.validate({"root_page_id": str(uuid.UUID(int=0)), "tag": tag})
    settings = settings_now()
    ids = asyncio.run(_seed(pages))
    update_profile(settings.home, ids)
    pid = start_worker(settings.home, settings.metrics_port)

    from hubjobs.devstack.background_api import api_port, start_api

    start_api(settings.home, settings.api_host, api_port(settings.home, settings.api_port))
    with api(uuid.UUID(ids["workspace_id"]), uuid.UUID(ids["actor_id"])) as jobs:
        payload = {"root_page_id": ids["root_page_id"], "tag": tag}
        job = jobs.start("course_tagging", payload)
        if not as_json:
            out().print(f"Started {job['summary']}  (job {job['id']})", markup=False)
        job = _unless_worker_exits(
            settings.home, pid, lambda: follow(jobs, job, show_bar=not as_json)
        )
    steps = next_steps(settings, ids, job)
    if as_json:
        print_json(job | {"demo": steps, "ui_url": steps["ui_url"]})
    else:
        print_job(job, False)
        print_next_steps(steps)
    if job["status"] != JobStatus.succeeded:
        raise typer.Exit(1)
