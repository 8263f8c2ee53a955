"""What an operator runs: migrations, the API server, tokens, codec keys, the health
check, restore."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from starter.cli.common import ActorOpt, JsonOpt, actor_of, command, settings_now
from starter.cli.output import out, print_json
from starter.startup import imports_uncollected

commands = typer.Typer()


@commands.command()
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


@commands.command()
@command
def api(
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=1, max=65535, help="The port to serve on (default: HUBJOBS_API_PORT)."
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="The address to serve on (default: HUBJOBS_API_HOST)."),
    ] = None,
) -> None:
    """Serve the HTTP API until interrupted. A port another process holds is refused
    (port_taken, naming its holder)."""
    from hubjobs.extras import require
    from hubjobs.observability.telemetry import require_tracing

    # FastAPI and uvicorn are the api extra: a worker-only install says so in one line.
    require("api", "the HTTP API")
    settings = settings_now()
    require_tracing(settings)

    import uvicorn

    from hubjobs.errors import Unavailable
    from hubjobs.observability.logs import setup_logging
    from hubjobs.secret_checks import refuse_weak_secrets
    from starter.api import create_app
    from starter.api.listen import listening_socket
    from starter.api.receive_deadline import receive_deadline

    refuse_weak_secrets(settings)
    settings.resolved_database_url()
    settings.resolved_temporal_address()
    # Bound first: a taken port is this command's one line of error, before the app is
    # built and the log set up.
    sock = listening_socket(host or settings.api_host, port or settings.api_port)
    setup_logging(json_lines=settings.log_json, level=settings.log_level)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            log_config=None,
            # The app writes its own access line (the route's template, not the path
            # and query as sent: those are the caller's text).
            access_log=False,
            timeout_graceful_shutdown=10,
            # HTTP/1.1 with a deadline on receiving each request; no WebSocket routes.
            http=receive_deadline(settings.api_receive_timeout_seconds),
            ws="none",
        )
    )
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, SystemExit):  # stopped as asked, or uvicorn's start failed
        pass
    finally:
        sock.close()
    if not server.started:
        raise Unavailable("the API did not start; its log above says why")


@commands.command()
@command
def token(
    actor: ActorOpt = None,
    ttl: Annotated[int, typer.Option(help="Seconds the token is valid.", min=1)] = 3600,
    as_json: JsonOpt = False,
) -> None:
    """Mint an API token for an actor, signed with HUBJOBS_API_JWT_SECRET."""
    from hubjobs.home import stack_home
    from starter.api.tokens import mint

    settings = settings_now()
    if settings.api_jwt_secret is None:
        stack_home(instead="HUBJOBS_API_JWT_SECRET")  # the stack's secret, were there one
    value = mint(actor_of(actor), settings, ttl_seconds=ttl)
    if as_json:
        print_json({"token": value})
    else:
        sys.stdout.write(value + "\n")


@commands.command("codec-key")
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


@commands.command()
@command
def health(as_json: JsonOpt = False) -> None:
    """Check that PostgreSQL and Temporal answer and PostgreSQL takes writes (exit 1 if
    not: `database full` or `read_only` when it refuses them): for container health
    checks."""
    from starter.api.health_check import check_health
    from starter.client import HubJobsClient

    settings = settings_now()
    settings.resolved_database_url()  # no stack, nothing configured: said as such
    settings.resolved_temporal_address()

    async def go() -> Any:
        client = await HubJobsClient.connect(settings)
        async with client:
            return await check_health(client)

    report = asyncio.run(go())
    if as_json:
        print_json(report.model_dump())
    else:
        out().print(f"database {report.database}, temporal {report.temporal}")
    if report.status != "ok":
        raise typer.Exit(1)


@commands.command()
@command
def restore(
    archive: Annotated[Path, typer.Argument(metavar="ARCHIVE", help="A backup archive.")],
    database_url: Annotated[
        str,
        typer.Option(
            help="An empty database to restore into (or, with --replace-workspace, a running hub)."
        ),
    ],
    attachments_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where attachment files go (default: HUBJOBS_ATTACHMENTS_DIR when the "
            "database is this hub's own, HUBJOBS_DATABASE_URL; required otherwise)."
        ),
    ] = None,
    replace_workspace: Annotated[
        bool,
        typer.Option(
            "--replace-workspace",
            help="Restore a workspace's archive into a running hub, replacing that "
            "workspace (in one transaction; other workspaces untouched).",
        ),
    ] = False,
    connections: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=32,
            help="Connections that load at once (default: HUBJOBS_RESTORE_CONNECTIONS, "
            "else one per core, at most 4).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild an empty database and its attachment files from an archive (a hub's or a
    workspace's), or replace a workspace of a running hub from its archive."""
    with imports_uncollected():
        from hubjobs.ops.restore import default_attachments_dir
        from hubjobs.ops.restore import restore as restore_archive

    folder = attachments_dir or default_attachments_dir(database_url, settings_now())
    report = restore_archive(
        archive,
        database_url,
        folder,
        connections=connections,
        replace_workspace=replace_workspace,
    )
    if as_json:
        print_json(report.as_dict())
        return
    what = "the hub" if report.workspace_id is None else f"workspace {report.workspace_id}"
    how = "replaced in the running hub" if report.replaced else "restored"
    out().print(f"Backup {report.backup_id} of {report.created_at}: {what}, {how}")
    for table, rows in report.tables.items():
        out().print(f"  {table:24} {rows:>10} rows")
    out().print(
        f"  {'attachments':24} {report.attachments:>10} files ({report.attachment_bytes} bytes)"
    )
    out().print(f"Schema {report.archive_schema_version} -> {report.schema_version}")
