"""The embedded stack and the demo, for development: up, down, a worker, demo data,
the demo job."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient

if TYPE_CHECKING:
    pass
from starter.cli.common import (
    JsonOpt,
    command,
    run,
    settings_now,
)
from starter.cli.output import err, follow, job_json, out, print_job, print_json

commands = typer.Typer()


@commands.command()
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


@commands.command()
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


@commands.command()
@command
def worker() -> None:
    """Run a worker until interrupted (same as `python worker.py`)."""
    import worker as worker_module
    from hubjobs.observability.logs import setup_logging

    settings = settings_now()
    setup_logging(json_lines=settings.log_json, level=settings.log_level)
    run(worker_module.run(settings))


@commands.command("seed-demo")
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


@commands.command()
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
