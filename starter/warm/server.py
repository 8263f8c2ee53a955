"""The worker's side of the warm starter: makes the CLI's calls sent to
``<HUBJOBS_HOME>/starts.sock`` (its owner's only) with one ``HubJobsClient``, connected
before the first call comes, until the worker stops; and answers the CLI's quick reads
(starter/warm/quick.py) with what the full command would print."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import logging
import os
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError
from sqlalchemy import text
from typer.core import TyperGroup

from hubjobs.errors import INTERNAL_ERROR, HubJobsError
from hubjobs.observability.logs import log_failure
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.cli import app_for
from starter.cli.common import check_encoding, scope_of
from starter.cli.jobs import jobs_shown, jobs_table, list_filters
from starter.cli.output import console_on, job_shown
from starter.client import HubJobsClient
from starter.warm.protocol import (
    CALLS,
    MAX_LINE,
    QUICK,
    decode,
    encode,
    fingerprint,
    line,
    settings_environ,
    socket_path,
)
from starter.warm.quick import recognised
from starter.warm.relay import NotServed, received

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

log = logging.getLogger(__name__)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Serves the socket until ``stop``; a socket it cannot bind (a path too long for
    one) leaves the CLI calling for itself, as without a worker."""
    path = socket_path(settings)
    async with HubJobsClient(settings=settings) as client:
        await _warm(client)
        path.unlink(missing_ok=True)  # left by a worker that was killed
        try:
            server = await asyncio.start_unix_server(
                functools.partial(_answer, client, fingerprint(settings)),
                path=str(path),
                limit=MAX_LINE,
            )
        except OSError as err:
            log.warning("not serving the CLI's starts on %s: %s", path, type(err).__name__)
            return
        # Whoever may connect may start jobs as anyone: the home's owner only (until
        # this, the umask's mode, which leaves others without the write a connect needs).
        path.chmod(0o600)
        log.info("serving the CLI's starts, cancels and reads on %s", path)
        try:
            async with server:
                await stop.wait()
        finally:
            path.unlink(missing_ok=True)


async def _warm(client: HubJobsClient) -> None:
    """Connects to Temporal and the database (the engine, the read pool) now, not in
    the first call; builds the quick reads' parsers and loads their tables' rich."""
    for name in QUICK:
        _command(name)
    console_on(io.StringIO()).print(jobs_table([]))
    try:
        await client.temporal_client()
        await client.db(lambda conn: conn.execute(text("SELECT 1")))
        await client.read(lambda conn: conn.execute("SELECT 1"))
    except HubJobsError as error:  # the first call tries again, and says why
        log.warning("warm starter not connected yet: %s", error.code)


async def _answer(
    client: HubJobsClient, mine: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        raw = await reader.readline()
        if raw:
            request = json.loads(raw)
            quick = isinstance(request, dict) and "quick" in request
            answer = await (respond_quick if quick else respond)(client, mine, request)
            writer.write(line(answer))
            await writer.drain()
    except (ConnectionError, ValueError) as err:  # a caller gone, a line too long or not JSON
        log.info("warm starter call dropped: %s", type(err).__name__)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def respond(client: HubJobsClient, mine: str, request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request: the job, the error its caller would have seen calling
    itself, or ``fallback`` (nothing done) for a caller with other settings or a call
    this worker does not make."""
    if request.get("fingerprint") != mine:
        return {"fallback": "settings"}
    call = request.get("call")
    if call not in CALLS:
        return {"fallback": "call"}
    try:
        jobs = client.scope(decode(request["workspace_id"]), decode(request["actor_id"]))
        done = await getattr(jobs, call)(*decode(request["args"]), **decode(request["kwargs"]))
    except HubJobsError as error:
        return {"error": {"code": error.code, "message": error.message}}
    except Exception as failure:
        log_failure(log, f"warm starter call {call} failed", failure)
        message = "internal error; the detail is in the worker's log (worker.log in HUBJOBS_HOME)"
        return {"error": {"code": INTERNAL_ERROR, "message": message}}
    if isinstance(done, list):
        return {"jobs": [job.model_dump(mode="json") for job in done]}
    return {"job": done.model_dump(mode="json")}


class NotQuick(Exception):
    """The full CLI answers this command line (the reason, for the fallback)."""


async def respond_quick(
    client: HubJobsClient, mine: str, request: dict[str, Any]
) -> dict[str, Any]:
    """A quick read's answer (starter/warm/quick.py): ``{"stdout": …}``, what the full
    command prints for the caller, made the full command's way (its parser, its
    settings, the same call as its relay sends, its rendering); or ``fallback``, nothing
    printed, whenever the full command might do or print anything else."""
    try:
        settings = _callers_settings(mine, request)
        args = request.get("quick")
        if not isinstance(args, list) or not recognised(args):
            raise NotQuick("call")
        params = _parsed(args)
        workspace_id, actor_id = scope_of(params["workspace"], params["actor"], settings)
        call, call_args, kwargs = _read(args[0], params)
        answer = await respond(
            client,
            mine,
            {
                "call": call,
                "args": encode(call_args),
                "kwargs": encode(kwargs),
                "workspace_id": encode(workspace_id),
                "actor_id": encode(actor_id),
                "fingerprint": mine,
            },
        )
        found = received(answer)  # as the full command's relay takes it
        printed = _printed(args[0], found, params["as_json"], request)
    except NotQuick as why:
        return {"fallback": str(why)}
    except (HubJobsError, NotServed):  # the full command says it, as it would
        return {"fallback": "error"}
    except Exception as failure:
        log_failure(log, "quick read failed", failure)
        return {"fallback": "error"}
    return {"stdout": printed}


def _callers_settings(mine: str, request: dict[str, Any]) -> Settings:
    """The settings the caller's command would read: read here, when the caller's
    ``HUBJOBS_*`` variables and working directory are this process's (then the same
    reading, of the same files, gives the same settings), and served only when they are
    the settings this worker serves with (as a relayed call's fingerprint)."""
    environ = request.get("environ")
    if not isinstance(environ, dict) or request.get("cwd") != os.getcwd():
        raise NotQuick("settings")
    if settings_environ(environ) != settings_environ(os.environ):
        raise NotQuick("settings")
    try:
        settings = Settings()
        same = fingerprint(settings) == mine
    except (ValidationError, HubJobsError):  # the full command reports it
        raise NotQuick("settings") from None
    if not same:
        raise NotQuick("settings")
    return settings


@functools.cache
def _command(name: str) -> Any:
    """The full CLI's parser of command ``name`` (a click command of typer's own copy of
    click), as the full CLI runs it (starter.cli.app_for)."""
    group = typer.main.get_command(app_for([name]))
    assert isinstance(group, TyperGroup)
    return group.commands[name]


def _parsed(args: list[str]) -> dict[str, Any]:
    """The command's parameters as the full CLI parses ``args`` (a usage error: the
    full CLI reports it); text that is not UTF-8 is refused there too."""
    try:
        with _command(args[0]).make_context(args[0], args[1:]) as ctx:
            params = dict(ctx.params)
    except (typer.TyperException, typer.Exit, typer.Abort):  # as starter.cli.run_cli
        raise NotQuick("usage") from None
    check_encoding(params)
    return params


def _read(command: str, params: dict[str, Any]) -> tuple[str, list[Any], dict[str, Any]]:
    """The ``WorkspaceJobs`` call the command makes (starter/cli/jobs.py)."""
    if command == "status":
        return "get", [params["job_id"]], {}
    if params["watch"]:
        raise NotQuick("call")
    return (
        "list",
        [],
        list_filters(params["status"], params["kind"], params["schedule"], params["limit"]),
    )


class _CallersStdout(io.StringIO):
    """Stands in for the caller's stdout: its encoding (rich draws a table's lines in
    ASCII for one that is not UTF) and whether it is a terminal (rich's own detection,
    with the caller's environment, then decides as it does in the full CLI: a terminal
    unless TTY_COMPATIBLE=0, one if FORCE_COLOR is set, …)."""

    def __init__(self, encoding: str | None, terminal: bool) -> None:
        super().__init__()
        self._encoding = encoding
        self._terminal = terminal

    @property
    def encoding(self) -> str | None:  # type: ignore[override]
        return self._encoding

    def isatty(self) -> bool:
        return self._terminal


def _printed(
    command: str, found: JobView | list[JobView], as_json: bool, request: dict[str, Any]
) -> str:
    """What the command prints: its JSON, or its table rendered as rich would on the
    caller's stdout: with the caller's environment, for the caller's terminal if it is
    one (its size, its colours)."""
    shown: str | RenderableType = (
        jobs_shown(found, as_json) if isinstance(found, list) else job_shown(found, as_json)
    )
    if isinstance(shown, str):
        return shown
    if "terminal_size" not in request:  # a caller's CLI from before it was sent
        raise NotQuick("terminal")
    encoding = request.get("encoding")
    stdout = _CallersStdout(
        encoding if isinstance(encoding, str) else None, request.get("terminal") is True
    )
    console = console_on(stdout, environ=request["environ"])
    sized_as_callers(console, request.get("terminal_size"))
    console.print(shown)
    return stdout.getvalue()


# What rich takes when no standard stream is a terminal, or one says 0 (rich.console).
DEFAULT_SIZE = (80, 25)


def sized_as_callers(console: Console, size: object) -> None:
    """Gives ``console`` the size rich finds in the caller's process, where rich asks the
    terminal (the first of stdin, stdout, stderr that is one) for each dimension it was
    not given (by COLUMNS or LINES, or the unbounded width off a terminal); here that
    terminal is the caller's (``size``, sent by starter/warm/quick.py), never this
    worker's own. A dumb terminal is left alone: rich makes it 80×25 without asking."""
    if console.is_dumb_terminal:
        return
    columns, lines = _terminal_size(size)
    # What rich was given (or took from COLUMNS, LINES): Console keeps it privately.
    given = (console._width, console._height)
    console.size = (
        given[0] if given[0] is not None else columns or DEFAULT_SIZE[0],
        given[1] if given[1] is not None else lines or DEFAULT_SIZE[1],
    )


def _terminal_size(size: object) -> tuple[int, int]:
    """The caller's ``[columns, lines]`` (0, 0: no terminal, as rich takes it); a size
    that is not one leaves the table to the full CLI."""
    if size is None:
        return 0, 0
    if isinstance(size, list) and len(size) == 2 and all(type(n) is int and n >= 0 for n in size):
        return size[0], size[1]
    raise NotQuick("terminal")
